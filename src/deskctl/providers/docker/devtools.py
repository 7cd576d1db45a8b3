"""The DevTools of a docker desktop's Chromium, reached from the caller without publishing a port.

Chromium listens on the container's own loopback, ``127.0.0.1:9222`` (:data:`deskctl.browser.DEVTOOLS_PORT`),
where a task verifier inside expects it. The caller gets a loopback listener of its own
(:class:`deskctl.browser.ChannelForwarder`, in this process); each connection it accepts is carried by one Engine
API exec (:class:`ExecChannel`) of a small Python relay in the container (``python3`` is in every deskctl image)
that connects to 127.0.0.1:9222 and copies bytes both ways over the exec's stdin and stdout.

Why an exec per connection rather than the container's address or a published port: the container's loopback is
not reachable from outside its network namespace, a published port would expose DevTools (full control of the
browser) on the host's interfaces, and the Engine API's exec works the same for a local engine, a remote one
(tcp + TLS) and a container without a network. A CDP client opens a handful of connections (``/json/version``,
one websocket), so the cost of an exec per connection does not matter.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import socket

    from deskctl.browser import ChannelForwarder

__all__ = ["RELAY", "ExecChannel", "browser_endpoint", "close"]

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


class ExecChannel:
    """An exec's engine socket seen as a channel for :class:`deskctl.browser.ChannelForwarder`: ``recv`` gives
    the relay's stdout (the engine multiplexes stdout and stderr in frames; the relay's stderr, a traceback, is not
    the caller's), ``sendall`` feeds its stdin, ``close`` shuts the socket down both ways (which wakes a reader in
    another thread and ends the relay) and closes it.

    The frames (an 8-byte header: the stream's number, then the length; then the bytes) are read with plain
    blocking reads of the socket. Not with the docker SDK's frame reader: it waits on the file descriptor before
    each read, which on a remote engine's TLS socket hangs when TLS has already decrypted the rest of a frame
    (nothing more arrives on the wire): ``desk.browser()`` on a remote engine timed out."""

    def __init__(self, stream: Any) -> None:
        import ssl

        self._stream = stream
        self._raw: socket.socket = getattr(stream, "_sock", stream)
        # A remote engine's TLS socket is one OpenSSL object, which two threads must not use at once (the forwarder
        # reads in one and writes in the other: a websocket's frames were seen cut, code 1006). Its calls are made
        # one at a time under a lock, non-blocking, and the wait for the socket is made outside the lock.
        self._tls = isinstance(self._raw, ssl.SSLSocket)
        self._lock = threading.Lock()
        if self._tls:
            self._raw.setblocking(False)

    def _call(self, op: Callable[[], Any]) -> Any:
        """``op()`` (one call into the socket); on TLS under the lock, waiting outside it while OpenSSL wants the
        socket readable or writable."""
        if not self._tls:
            return op()
        import select
        import ssl

        while True:
            with self._lock:
                try:
                    return op()
                except ssl.SSLWantReadError:
                    events = select.POLLIN
                except ssl.SSLWantWriteError:
                    events = select.POLLOUT
            poller = select.poll()
            try:
                poller.register(self._raw.fileno(), events)
            except ValueError:  # closed meanwhile
                return op()
            poller.poll(1000)  # bounded: a close() meanwhile is seen at the next call

    def _exactly(self, size: int) -> bytes | None:
        """The next ``size`` bytes of the socket; None when it ends first."""
        got = bytearray()
        while len(got) < size:
            data = self._call(functools.partial(self._raw.recv, size - len(got)))
            if not data:
                return None
            got += data
        return bytes(got)

    def recv(self, size: int) -> bytes:
        while True:
            header = self._exactly(8)
            if header is None:
                return b""
            length = int.from_bytes(header[4:8], "big")
            data = self._exactly(length) if length else b""
            if data is None:
                return b""
            if header[0] == 1 and data:  # stdout
                return data

    def sendall(self, data: bytes) -> None:
        if not self._tls:
            self._raw.sendall(data)
            return
        view = memoryview(data)
        while view:
            sent = self._call(functools.partial(self._raw.send, view))
            view = view[sent:]

    def close(self) -> None:
        import socket  # here: the provider (every `deskctl down`) imports this module, rarely a channel

        with self._lock, contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            self._stream.close()


# -- the provider's side (DockerProvider delegates here; its forwarders live in ``provider._devtools``) -----------
_LOCK = threading.Lock()


def _forwarders(provider: Any) -> dict[str, ChannelForwarder]:
    with _LOCK:
        found: dict[str, ChannelForwarder] | None = provider.__dict__.get("_devtools")
        if found is None:
            found = provider.__dict__["_devtools"] = {}
        return found


def browser_endpoint(provider: Any, handle: Any) -> Any:
    """The endpoint of the container's DevTools through this process's forwarder (one per desktop, kept until the
    desktop is destroyed or the provider closed)."""
    from deskctl.browser import DEVTOOLS_PORT, ChannelForwarder, endpoint_when_up
    from deskctl.providers.docker.common import DockerHandleData, _exec_user

    container = DockerHandleData.of(handle).container or handle.resource_id
    engine = provider._engine_of(handle)

    def open_stream() -> Any:
        api = provider._client_on(engine).api
        exec_id = str(api.exec_create(container, ["python3", "-c", RELAY, str(DEVTOOLS_PORT)], stdin=True,
                                      stdout=True, stderr=True, user=_exec_user(handle))["Id"])
        return ExecChannel(api.exec_start(exec_id, socket=True))

    forwarders = _forwarders(provider)
    with _LOCK:
        forwarder = forwarders.get(handle.session_id)
        if forwarder is None or forwarder.closed:
            forwarder = forwarders[handle.session_id] = ChannelForwarder(open_stream)
    return endpoint_when_up(forwarder.port, provider.name, DEVTOOLS_PORT,
                            lambda: provider.exec(handle, "pgrep -x chromium", 15).exit_code == 0)


def close(provider: Any, session_id: str | None = None) -> None:
    """Close the forwarder of ``session_id`` (None: every one of ``provider``)."""
    forwarders = _forwarders(provider)
    with _LOCK:
        chosen = [forwarders.pop(s) for s in list(forwarders) if session_id in (None, s)]
    for forwarder in chosen:
        forwarder.close()
