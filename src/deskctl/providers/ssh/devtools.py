"""The ``ssh`` provider's browser: Chromium started on the host's display with DevTools on the host's loopback
(``--remote-debugging-address=127.0.0.1``, a port Chromium picks: the host may hold several desktops), its
profile in the session directory; :meth:`browser_endpoint` reads the port from the profile's
``DevToolsActivePort`` and carries a loopback listener of the caller's over ssh ``direct-tcpip`` channels of the
desktop's connection (:class:`deskctl.browser.ChannelForwarder`): nothing listens on a published interface."""

from __future__ import annotations

import re
import shlex
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from deskctl.errors import UsageError
from deskctl.providers.ssh.handle_data import SshHandleData

if TYPE_CHECKING:
    from deskctl.browser import ChannelForwarder
    from deskctl.providers.base import RemoteHandle
    from deskctl.providers.ssh.connection import _Connection
    from deskctl.providers.ssh.options import Options

__all__ = ["SshBrowser"]

#: seconds a starting Chromium (its process runs) has to open its DevTools port
STARTING = 60.0
_CHROMIUMS = ("chromium", "chromium-browser", "google-chrome")
_LOCK = threading.Lock()


class SshBrowser:
    """``open_url`` with Chromium, and ``browser_endpoint``, for :class:`~deskctl.providers.ssh.SSHProvider`."""

    if TYPE_CHECKING:
        name: ClassVar[str]
        opts: Options

        def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, **kwargs: Any) -> Any: ...
        def _conn_for(self, handle: RemoteHandle) -> _Connection: ...
        def _launch_detached(self, handle: RemoteHandle, app: str, args: Any) -> int | None: ...

    def _browsers(self) -> str:
        """The Chromium commands a start URL may open in on the host, the first found wins (the ``browser``
        option, else the usual names)."""
        return self.opts.browser or " ".join(_CHROMIUMS)

    @staticmethod
    def _profile(handle: RemoteHandle) -> str:
        return f"{SshHandleData.of(handle).dir}/browser-profile"

    def _remote(self, handle: RemoteHandle, command: str) -> str:
        result = self.exec(handle, command, 30.0)
        return str(result.stdout) if result.exit_code == 0 else ""

    def _active_port(self, handle: RemoteHandle) -> int:
        first = self._remote(handle, f"head -n 1 {shlex.quote(self._profile(handle))}/DevToolsActivePort "
                                     "2>/dev/null").strip()
        return int(first) if first.isdigit() and 0 < int(first) < 65536 else 0

    def _chromium_runs(self, handle: RemoteHandle) -> bool:
        # "[-]-user-data-dir=..." matches Chromium's argument but not the text of the pattern itself: pgrep skips
        # its own process, not the shell that runs it, whose command line carries the pattern too
        profile = re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", self._profile(handle))
        pattern = f"[-]-user-data-dir={profile}( |$)"
        return bool(self._remote(handle, f"pgrep -f -- {shlex.quote(pattern)} || true").strip())

    def open_url(self, handle: RemoteHandle, url: str, browser: str | None = None) -> None:
        """Chromium (``browser="chromium"``, or no ``browser`` while this desktop's Chromium runs) opens ``url``
        in the session's profile with DevTools on the host's loopback; anything else is the host's opener."""
        from deskctl.browser import chromium_flags, is_chromium

        program = browser
        if browser is None and self._chromium_runs(handle):
            found = self._remote(handle, "command -v " + " || command -v ".join(_CHROMIUMS)).strip().splitlines()
            program = found[0] if found else None
        if program is None or not is_chromium(program):
            super().open_url(handle, url, browser)  # type: ignore[misc]
            return
        profile = self._profile(handle)
        args = [*chromium_flags(0), f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-dev-shm-usage", "--new-window", url]
        if self._remote(handle, "id -u").strip() == "0":
            args.insert(0, "--no-sandbox")  # Chromium refuses root without it
        self._require_program(handle, program)  # type: ignore[attr-defined]
        self._launch_detached(handle, program, args)
        deadline = time.monotonic() + 30.0
        while not self._active_port(handle) and time.monotonic() < deadline and self._chromium_runs(handle):
            time.sleep(0.2)

    def _open_start_url(self, handle: RemoteHandle, url: str) -> None:
        """A start URL: the host's Chromium opens it, and the desktop is ready once its DevTools port is open. No
        Chromium there is ``provider.unreachable``; one that exits or never opens the port, ``provider.api_error``
        (the caller destroys the desktop)."""
        from deskctl.errors import ProviderApiError, ProviderUnreachable

        names = self._browsers().split()
        found = self._remote(handle, " || ".join(f"command -v {shlex.quote(n)}" for n in names)).strip().splitlines()
        if not found:
            raise ProviderUnreachable(f"a start URL needs Chromium, and the host has no {' or '.join(names)}",
                                      provider=self.name, remedy="on the host: apt-get install chromium, or set the "
                                                                 "browser provider option")
        self.open_url(handle, url, browser=found[0])
        deadline = time.monotonic() + STARTING
        while not self._active_port(handle):
            if time.monotonic() > deadline or not self._chromium_runs(handle):
                raise ProviderApiError(f"the host's Chromium ({found[0]}) did not open its DevTools port for the "
                                       "start URL", provider=self.name)
            time.sleep(0.25)

    def browser_endpoint(self, handle: RemoteHandle) -> Any:
        """This desktop's Chromium DevTools through a loopback listener here, each connection an ssh channel to
        the host's 127.0.0.1:PORT. A Chromium still starting has a while; none is ``usage.no_browser``."""
        from deskctl.browser import ChannelForwarder, endpoint_at, no_browser

        deadline = time.monotonic() + STARTING
        while True:
            port = self._active_port(handle)
            if port:
                break
            if time.monotonic() > deadline or not self._chromium_runs(handle):
                raise no_browser(self.name)
            time.sleep(0.25)
        conn = self._conn_for(handle)

        def open_channel() -> Any:
            return conn.transport.open_channel("direct-tcpip", ("127.0.0.1", port), ("127.0.0.1", 0), timeout=30)

        forwarders = self._forwarders()
        with _LOCK:
            forwarder = forwarders.get(handle.session_id)
            if forwarder is not None and (forwarder.closed or forwarder.target != port):
                forwarder.close()
                forwarder = None
            if forwarder is None:
                forwarder = forwarders[handle.session_id] = ChannelForwarder(open_channel, target=port)
        try:
            return endpoint_at(forwarder.port, self.name, desktop_port=port)
        except UsageError:
            self.close_browser(handle.session_id)
            raise

    def _forwarders(self) -> dict[str, ChannelForwarder]:
        found: dict[str, ChannelForwarder] | None = self.__dict__.get("_devtools_forwarders")
        if found is None:
            found = self.__dict__["_devtools_forwarders"] = {}
        return found

    def close(self) -> None:
        """The DevTools forwarders, then the provider's connections."""
        self.close_browser()
        super().close()  # type: ignore[misc]

    def close_browser(self, session_id: str | None = None) -> None:
        """Close the forwarder of ``session_id`` (None: every one): at destroy and at the provider's close."""
        forwarders = self._forwarders()
        with _LOCK:
            chosen = [forwarders.pop(s) for s in list(forwarders) if session_id in (None, s)]
        for forwarder in chosen:
            forwarder.close()
