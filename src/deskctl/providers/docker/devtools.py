"""The DevTools of a docker desktop's Chromium, reached from the caller without publishing a port.

Chromium listens on the container's own loopback, ``127.0.0.1:9222`` (:data:`deskctl.browser.DEVTOOLS_PORT`),
where a task verifier inside expects it. The caller gets a loopback listener of its own (:class:`Forwarder`, in
this process); each connection it accepts is carried by one Engine API exec of a small Python relay in the
container (``python3`` is in every deskctl image) that connects to 127.0.0.1:9222 and copies bytes both ways
over the exec's stdin and stdout.

Why an exec per connection rather than the container's address or a published port: the container's loopback is
not reachable from outside its network namespace, a published port would expose DevTools (full control of the
browser) on the host's interfaces, and the Engine API's exec works the same for a local engine, a remote one
(tcp + TLS) and a container without a network. A CDP client opens a handful of connections (``/json/version``,
one websocket), so the cost of an exec per connection does not matter.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RELAY", "STARTING", "Forwarder", "browser_endpoint", "chromium_args", "close"]

#: seconds a starting Chromium (its process runs) has to open its DevTools port
STARTING = 60.0

# argv[1]: the port in the container. Bytes from stdin go to the port; bytes from the port go to stdout.
RELAY = r"""
import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.settimeout(None)
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    os.write(1, data)
"""


class Forwarder:
    """A listener on the caller's 127.0.0.1 (a port the system picks) whose every connection ``open_stream()``
    carries: ``open_stream`` returns the engine's socket of a started exec (stdin in, multiplexed stdout out)."""

    def __init__(self, open_stream: Callable[[], Any]) -> None:
        self._open_stream = open_stream
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, name=f"deskctl-devtools-{self.port}", daemon=True).start()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(client,), daemon=True).start()

    def _carry(self, client: socket.socket) -> None:
        from docker.utils.socket import frames_iter

        with self._lock:
            self._open.add(client)
        stream: Any = None
        try:
            try:
                stream = self._open_stream()
            except Exception:  # the engine refused the exec (the container is gone): the client sees a close
                return
            raw = getattr(stream, "_sock", stream)

            def down() -> None:
                try:
                    for kind, data in frames_iter(stream, False):  # type: ignore[no-untyped-call]
                        if kind == 1 and data:  # stdout; the relay's stderr (a traceback) is not the client's
                            client.sendall(data)
                except OSError:
                    pass
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_WR)

            reader = threading.Thread(target=down, daemon=True)
            reader.start()
            while True:
                try:
                    data = client.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                raw.sendall(data)
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_WR)  # the relay's stdin ends: it half-closes towards Chromium
            reader.join()
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(client)
            for end in (client, stream):
                with contextlib.suppress(Exception):
                    if end is not None:
                        end.close()

    def close(self) -> None:
        """Stop listening and cut every carried connection (the relays in the container end with them)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone would not)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            open_now = list(self._open)
        for client in open_now:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)


# -- the provider's side (DockerProvider delegates here; its forwarders live in ``provider._devtools``) -----------
_LOCK = threading.Lock()


def _forwarders(provider: Any) -> dict[str, Forwarder]:
    with _LOCK:
        found: dict[str, Forwarder] | None = provider.__dict__.get("_devtools")
        if found is None:
            found = provider.__dict__["_devtools"] = {}
        return found


def browser_endpoint(provider: Any, handle: Any) -> Any:
    """The endpoint of the container's DevTools through this process's :class:`Forwarder` (one per desktop,
    kept until the desktop is destroyed or the provider closed)."""
    from deskctl.browser import DEVTOOLS_PORT, endpoint_at
    from deskctl.errors import UsageError
    from deskctl.providers.docker.common import DockerHandleData, _exec_user

    container = DockerHandleData.of(handle).container or handle.resource_id
    engine = provider._engine_of(handle)

    def open_stream() -> Any:
        api = provider._client_on(engine).api
        exec_id = str(api.exec_create(container, ["python3", "-c", RELAY, str(DEVTOOLS_PORT)], stdin=True,
                                      stdout=True, stderr=True, user=_exec_user(handle))["Id"])
        return api.exec_start(exec_id, socket=True)

    forwarders = _forwarders(provider)
    with _LOCK:
        forwarder = forwarders.get(handle.session_id)
        if forwarder is None or forwarder.closed:
            forwarder = forwarders[handle.session_id] = Forwarder(open_stream)
    # a Chromium that is starting (a start URL's, an open_url's) opens its port a moment later: wait for it while
    # its process runs; none running is usage.no_browser at once
    deadline = time.monotonic() + STARTING
    while True:
        try:
            return endpoint_at(forwarder.port, provider.name, desktop_port=DEVTOOLS_PORT)
        except UsageError:
            if time.monotonic() > deadline or provider.exec(handle, "pgrep -x chromium", 15).exit_code != 0:
                raise
        time.sleep(0.25)


def close(provider: Any, session_id: str | None = None) -> None:
    """Close the forwarder of ``session_id`` (None: every one of ``provider``)."""
    forwarders = _forwarders(provider)
    with _LOCK:
        chosen = [forwarders.pop(s) for s in list(forwarders) if session_id in (None, s)]
    for forwarder in chosen:
        forwarder.close()


#: Chromium in a container, as the image's entrypoint starts it for a start URL (its profile, no sandbox: the
#: container is the sandbox), with DevTools on the container's loopback
def chromium_args(url: str) -> list[str]:
    from deskctl.browser import DEVTOOLS_PORT, chromium_flags

    return [*chromium_flags(DEVTOOLS_PORT), "--no-first-run", "--no-default-browser-check",
            "--disable-dev-shm-usage", "--no-sandbox", "--password-store=basic",
            "--user-data-dir=/home/desk/.chromium", url]
