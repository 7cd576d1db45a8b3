"""The desktop's Chromium, through its DevTools (Chrome DevTools Protocol) endpoint.

A provider that can (``capabilities.browser``) starts Chromium with ``--remote-debugging-address=127.0.0.1`` and a
``--remote-debugging-port`` (the desktop's loopback only: never a published interface) and gives the caller an
endpoint it can reach (:meth:`deskctl.Desktop.browser`): on ``xvfb`` the loopback port itself; elsewhere a
forwarded channel. A CDP client (Playwright's ``connect_over_cdp``, or raw CDP over a websocket) connects to it.

This module holds what every provider shares: the Chromium flags, the reading of Chromium's
``DevToolsActivePort`` file, the endpoint object and the reading of the target list (``/json/list``), so a task
verifier's view (inside the desktop) and the caller's view are parsed by the same code
(:func:`parse_pages`). Only the standard library: nothing here is imported until a browser is asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

__all__ = ["DEVTOOLS_PORT", "NO_BROWSER", "STARTING", "BrowserEndpoint", "ChannelForwarder", "Page", "active_port",
           "chromium_flags", "container_chromium_args", "endpoint_at", "endpoint_when_up", "is_chromium", "no_browser",
           "pages", "parse_pages"]

#: where the DevTools endpoint answers inside a desktop of its own (a container): task verifiers expect it there
DEVTOOLS_PORT = 9222
#: the error code when the desktop runs no browser with DevTools
NO_BROWSER = "usage.no_browser"
_REMEDY = "start one: deskctl up --start-url URL, or desk.open_url(url, browser='chromium')"
_CHROMIUM_NAMES = ("chromium", "chrome", "google-chrome")


def is_chromium(program: str) -> bool:
    """Whether ``program`` (a name or path) is a Chromium-family browser (it speaks CDP)."""
    name = Path(program).name.lower()
    return any(name.startswith(n) for n in _CHROMIUM_NAMES)


def chromium_flags(port: int) -> list[str]:
    """The flags that open DevTools on the desktop's loopback only (``port`` 0: Chromium picks a free one and
    writes it to ``DevToolsActivePort`` in its profile)."""
    return ["--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={port}"]


def active_port(profile: Path) -> int | None:
    """The DevTools port Chromium wrote to ``profile``/DevToolsActivePort (None: not (yet) written)."""
    try:
        first = (profile / "DevToolsActivePort").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() and 0 < int(first) < 65536 else None


class Page(NamedTuple):
    """One page of the browser: ``(url, title)`` (JSON: ``[url, title]``; printed: ``url<TAB>title``)."""

    url: str
    title: str

    def __str__(self) -> str:
        return f"{self.url}\t{self.title}"


class BrowserEndpoint:
    """Where the caller reaches the desktop's Chromium DevTools: ``http_url`` (``http://127.0.0.1:PORT``, the
    ``/json/*`` documents) and ``ws_url`` (the browser's websocket, for ``connect_over_cdp`` or raw CDP).
    ``port`` is the caller's port; the desktop's own is ``desktop_port``."""

    __slots__ = ("desktop_port", "http_url", "port", "ws_url")

    def __init__(self, port: int, ws_url: str, desktop_port: int) -> None:
        self.port = port
        self.http_url = f"http://127.0.0.1:{port}"
        self.ws_url = ws_url
        self.desktop_port = desktop_port

    def to_dict(self) -> dict[str, Any]:
        return {"http_url": self.http_url, "ws_url": self.ws_url, "port": self.port,
                "desktop_port": self.desktop_port}

    def __repr__(self) -> str:
        return f"BrowserEndpoint({self.http_url!r}, ws_url={self.ws_url!r})"


def _get(port: int, path: str, provider: str, timeout: float = 10.0) -> Any:
    import urllib.error
    import urllib.request

    from deskctl.errors import UsageError

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the loopback, never a proxy
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return json.loads(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"the desktop's browser does not answer on its DevTools port ({reason})", code=NO_BROWSER,
                         provider=provider, remedy=_REMEDY) from None


def endpoint_at(port: int, provider: str, desktop_port: int | None = None) -> BrowserEndpoint:
    """The endpoint of the DevTools answering on the caller's loopback ``port`` (its websocket URL names the
    caller's port, whatever port Chromium thinks it has)."""
    version = _get(port, "/json/version", provider)
    ws = str(version.get("webSocketDebuggerUrl") or "") if isinstance(version, dict) else ""
    path = urlsplit(ws).path
    if not path.startswith("/devtools/"):
        from deskctl.errors import ProviderApiError

        raise ProviderApiError("the browser's DevTools gave no websocket URL", provider=provider)
    return BrowserEndpoint(port, f"ws://127.0.0.1:{port}{path}", desktop_port or port)


#: seconds a starting Chromium (its process runs) has to open its DevTools port
STARTING = 60.0


def endpoint_when_up(port: int, provider: str, desktop_port: int,
                     chromium_runs: Callable[[], bool]) -> BrowserEndpoint:
    """:func:`endpoint_at`, waiting while a Chromium that is starting (a start URL's, an open_url's) has not opened
    its port yet: for up to :data:`STARTING` seconds while ``chromium_runs()``; none running is
    ``usage.no_browser`` at once."""
    import time

    from deskctl.errors import UsageError

    deadline = time.monotonic() + STARTING
    while True:
        try:
            return endpoint_at(port, provider, desktop_port=desktop_port)
        except UsageError:
            if time.monotonic() > deadline or not chromium_runs():
                raise
        time.sleep(0.25)


def no_browser(provider: str, why: str = "the desktop runs no browser with DevTools") -> Exception:
    from deskctl.errors import UsageError

    return UsageError(why, code=NO_BROWSER, provider=provider, remedy=_REMEDY)


def parse_pages(document: Any) -> list[Page]:
    """``[(url, title)]`` of the pages in a ``/json/list`` document (parsed JSON), in Chromium's order (the most
    recently active first); workers, iframes and extensions' targets left out."""
    if not isinstance(document, list):
        return []
    return [Page(str(t.get("url", "")), str(t.get("title", ""))) for t in document
            if isinstance(t, dict) and t.get("type") == "page"]


def pages(endpoint: BrowserEndpoint, provider: str) -> list[Page]:
    """The browser's pages as ``[(url, title)]``, read from the endpoint's ``/json/list``."""
    return parse_pages(_get(endpoint.port, "/json/list", provider))


class ChannelForwarder:
    """A listener on the caller's 127.0.0.1 (a port the system picks) whose every connection is carried, both
    ways, over a stream ``open_channel()`` opens to the desktop's loopback DevTools port (an ssh ``direct-tcpip``
    channel, an agent's stream socket: anything with ``recv``, ``sendall`` and ``close``). Either end of a carried
    connection ending ends both (:func:`_end`), so the desktop's side is told when the caller hangs up. Closed
    with the desktop (:meth:`close`).
    ``target``: what the channels reach (the desktop's port), for the owner to tell a stale forwarder."""

    def __init__(self, open_channel: Callable[[], Any], target: Any = None) -> None:
        import socket
        import threading

        self._open_channel = open_channel
        self.target = target
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        threading.Thread(target=self._accept, name=f"deskctl-devtools-{self.port}", daemon=True).start()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def _accept(self) -> None:
        import threading

        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(client,), daemon=True).start()

    def _carry(self, client: Any) -> None:
        import threading

        try:
            channel = self._open_channel()
        except Exception:  # the desktop's port does not answer: the client sees its connection closed
            client.close()
            return
        with self._lock:
            late = self._closed.is_set()  # close() ran while the channel opened: it could not see this pair
            if not late:
                self._open.update((client, channel))
        if not late:
            back = threading.Thread(target=self._pump, args=(channel, client), daemon=True)
            back.start()
            self._pump(client, channel)
            back.join()
            with self._lock:
                self._open.difference_update((client, channel))
        for end in (client, channel):  # closed only once no pump uses them
            _end(end, final=True)

    @staticmethod
    def _pump(source: Any, target: Any) -> None:
        """Copy until either end closes or fails, then end both (:func:`_end`): that wakes the other pump and
        tells both peers; :meth:`_carry` closes them once both pumps are done."""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except Exception:  # either end went away
            pass
        for end in (source, target):
            _end(end)

    def close(self) -> None:
        """Stop listening and end every carried connection both ways (the desktop's side sees its stream end;
        the pumps' threads close the ends as they finish)."""
        import socket

        self._closed.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone leaves it listening)
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            ends, self._open = list(self._open), set()
        for end in ends:
            _end(end)


def _end(end: Any, *, final: bool = False) -> None:
    """End a carried connection both ways. A socket is shut down, not only closed: a socket that another thread
    is reading stays open through a close (the kernel keeps it for that read, which waits on), so its peer is
    never told, and that read (the other pump) never ends: the desktop's side of the stream would stay open for
    good behind a peer that keeps its side open (an HTTP keep-alive, a websocket). ``final``: close it too.
    Another kind of channel (an ssh channel) is closed, which wakes its readers."""
    import socket

    if isinstance(end, socket.socket):
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:  # already shut down, or the peer went away
            pass
        if not final:
            return
    try:
        end.close()
    except Exception:  # already closed
        pass


def container_chromium_args(url: str) -> list[str]:
    """Chromium in a container (docker, kubernetes), as the image's entrypoint starts it for a start URL: its
    profile in the desktop user's home, no sandbox (the container is the sandbox), DevTools on the container's
    loopback."""
    return [*chromium_flags(DEVTOOLS_PORT), "--no-first-run", "--no-default-browser-check",
            "--disable-dev-shm-usage", "--no-sandbox", "--password-store=basic",
            "--user-data-dir=/home/desk/.chromium", url]
