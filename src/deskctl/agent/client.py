"""The provider side of the in-desktop agent: :class:`AgentDriver`, a drop-in for
:class:`~deskctl.core.x11.X11Driver` where a provider reaches its desktop through ``deskctl-agent``
instead of X11, plus ``exec`` and single-file transfer, and :func:`wait_ready`.

Errors (only :mod:`deskctl.errors` classes leave this module): nothing answers or the connection cannot be made
-> :class:`~deskctl.errors.ProviderUnreachable`; the connection drops or stops answering during a call ->
:class:`~deskctl.errors.SessionLost` (the driver is closed then); the agent refuses the token ->
:class:`~deskctl.errors.ProviderApiError` (the message never carries the token); an error of the desktop
itself (a failing X call, a missing file) -> the class and code the agent sent, as
:class:`~deskctl.errors.SessionLost` when its display is gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from deskctl._fsreplace import replace_file
from deskctl.actions import Action, action_values
from deskctl.agent.protocol import (
    BYTES_PER_PIXEL,
    PROTOCOL_VERSION,
    FrameChanges,
    ProtocolError,
    error_from_wire,
    recv_body,
    recv_body_to,
    recv_header,
    regions_from_wire,
    send_message,
    send_stream,
)
from deskctl.core.frames import ExecResult, RawFrame, Screenshot
from deskctl.errors import (
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)

__all__ = ["AgentDriver", "FrameChanges", "wait_ready"]

#: seconds a call may wait for the agent beyond its own work (an exec adds its timeout)
_CALL_TIMEOUT = 60.0


class AgentDriver:
    """One authenticated connection to one desktop's agent. Thread-safe: calls are serialised by one lock."""

    def __init__(self, sock: socket.socket, where: str, *, provider: str, call_timeout: float = _CALL_TIMEOUT
                 ) -> None:
        self._sock = sock
        self.where = where
        self.provider = provider
        self._call_timeout = call_timeout
        self._lock = threading.RLock()
        self._closed = False

    @classmethod
    def connect(cls, host: str, port: int, token: str, *, provider: str, timeout: float = 10.0,
                tls: ssl.SSLContext | None = None) -> AgentDriver:
        """Connect, authenticate with ``token`` and return the driver; ``timeout`` bounds connect and hello."""
        where = f"{host}:{port}"
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ProviderUnreachable(f"cannot reach the desktop agent at {where}: {exc.strerror or exc}",
                                      provider=provider) from exc
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = raw
            if tls is not None:
                sock = tls.wrap_socket(raw, server_hostname=host if tls.check_hostname else None)
            send_message(sock, {"op": "hello", "token": token, "version": PROTOCOL_VERSION})
            header, body_size = recv_header(sock)
            recv_body(sock, body_size)
        except ssl.SSLError as exc:
            raw.close()
            raise ProviderUnreachable(f"TLS with the desktop agent at {where} failed: {exc.reason or exc}",
                                      provider=provider) from exc
        except (OSError, ProtocolError) as exc:
            raw.close()
            raise ProviderUnreachable(f"the desktop agent at {where} did not complete the handshake: {exc}",
                                      provider=provider) from exc
        if not header.get("ok"):
            raw.close()
            error = error_from_wire(header.get("error"), provider)
            if error.code == "provider.api_error":
                raise ProviderApiError(f"the desktop agent at {where} refused the session token", provider=provider,
                                       remedy="the token must be the one the provider wrote into the desktop")
            raise error
        sock.settimeout(None)
        return cls(sock, where, provider=provider)

    def __enter__(self) -> AgentDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------------------------------
    def _lost(self, doing: str, exc: BaseException) -> SessionLost:
        self._shut()
        if isinstance(exc, TimeoutError | socket.timeout):
            return SessionLost(f"the desktop agent at {self.where} did not answer while we tried to {doing}; the "
                               "connection was dropped", provider=self.provider)
        return SessionLost(f"lost the desktop agent at {self.where} while we tried to {doing}", provider=self.provider)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionLost(f"the connection to the desktop agent at {self.where} is closed", provider=self.provider)

    def _reply(self, doing: str, extra_timeout: float) -> tuple[dict[str, Any], int]:
        """Send done: read the reply header (the body is the caller's), raising the agent's error."""
        try:
            self._sock.settimeout(self._call_timeout + extra_timeout)
            reply, body_size = recv_header(self._sock)
        except (OSError, ProtocolError) as exc:
            raise self._lost(doing, exc) from exc
        if not reply.get("ok"):
            try:
                recv_body(self._sock, body_size)
            except (OSError, ProtocolError) as exc:
                raise self._lost(doing, exc) from exc
            raise error_from_wire(reply.get("error"), self.provider)
        return reply, body_size

    def _call(self, doing: str, header: dict[str, Any], body: bytes = b"", *, extra_timeout: float = 0.0
              ) -> tuple[dict[str, Any], bytes]:
        with self._lock:
            self._check_open()
            try:
                send_message(self._sock, header, body)
            except (OSError, ProtocolError) as exc:
                raise self._lost(doing, exc) from exc
            reply, body_size = self._reply(doing, extra_timeout)
            try:
                return reply, recv_body(self._sock, body_size)
            except (OSError, ProtocolError) as exc:
                raise self._lost(doing, exc) from exc

    # -- the X11Driver surface -------------------------------------------------------------------------------------
    def ping(self) -> None:
        self._call("reach the desktop", {"op": "ping"})

    def size(self) -> tuple[int, int]:
        reply, _ = self._call("read the screen size", {"op": "size"})
        return int(reply["width"]), int(reply["height"])

    def screenshot(self, *, compress_level: int = 1) -> Screenshot:
        reply, png = self._call("take a screenshot", {"op": "screenshot", "compress_level": compress_level})
        return Screenshot(png=png, width=int(reply["width"]), height=int(reply["height"]))

    def raw_frame(self) -> RawFrame:
        reply, data = self._call("capture the screen", {"op": "raw_frame"})
        return RawFrame(data, int(reply["width"]), int(reply["height"]), str(reply["mode"]))

    def changes(self, since: int | None) -> FrameChanges:
        """What changed since frame ``since`` (None: the whole screen), as regions to apply to that frame with
        :meth:`FrameChanges.apply`. The agent keeps the last frame it sent on this connection: ``since`` other
        than the id of that frame gives a full frame."""
        reply, body = self._call("read the screen's changes", {"op": "changes", "since": since})
        mode = str(reply["mode"])
        try:
            regions = regions_from_wire(reply["regions"], body, BYTES_PER_PIXEL[mode])
        except (ProtocolError, KeyError, ValueError, TypeError) as exc:
            raise ProviderApiError(f"the desktop agent at {self.where} sent malformed changes",
                                   provider=self.provider) from exc
        return FrameChanges(int(reply["frame_id"]), int(reply["width"]), int(reply["height"]), mode,
                            bool(reply["full"]), regions)

    def act(self, action: Action) -> None:
        self._call("send input", {"op": "act", "kind": type(action).__name__, "values": action_values(action)})

    def cursor_position(self) -> tuple[int, int]:
        reply, _ = self._call("read the pointer position", {"op": "cursor_position"})
        return int(reply["x"]), int(reply["y"])

    def window_titles(self) -> list[str]:
        reply, _ = self._call("list windows", {"op": "window_titles"})
        return [str(title) for title in reply["titles"]]

    # -- commands and files ---------------------------------------------------------------------------------------
    def exec(self, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: dict[str, str] | None = None, user: str | None = None, background: bool = False) -> ExecResult:
        """Run ``command`` with ``sh -c`` in the desktop as the agent's user (or ``user``, when the agent runs as
        root); exit code 124 on timeout; ``background``: detached, its pid in the result."""
        reply, output = self._call("run a command", {
            "op": "exec", "command": command, "timeout": timeout, "cwd": cwd, "env": dict(env or {}), "user": user,
            "background": background}, extra_timeout=timeout + 10.0)
        pid = reply.get("pid")
        split = int(reply["stdout_size"])
        return ExecResult(int(reply["exit_code"]), output[:split].decode(errors="replace"),
                          output[split:].decode(errors="replace"), pid=int(pid) if pid is not None else None)

    def put_file(self, local_path: str | os.PathLike[str], remote: str) -> None:
        """Copy one regular local file to ``remote`` (an absolute path whose folder exists), mode kept,
        streamed in chunks."""
        local = Path(local_path)
        try:
            source = local.open("rb")
        except FileNotFoundError as exc:
            raise UsageError(f"{local}: no such file or directory here", code="usage.no_such_file",
                             provider=self.provider) from exc
        except IsADirectoryError as exc:
            raise UsageError(f"{local} is a directory", code="usage.bad_path", provider=self.provider) from exc
        except OSError as exc:
            raise UsageError(f"cannot read {local}: {exc.strerror or exc}", code="usage.bad_path",
                             provider=self.provider) from exc
        with self._lock, source:
            self._check_open()
            info = os.fstat(source.fileno())
            header = {"op": "put_file", "path": remote, "mode": info.st_mode & 0o7777}
            try:
                send_stream(self._sock, header, info.st_size, source)
            except (OSError, ProtocolError) as exc:
                raise self._lost("send a file", exc) from exc
            self._reply("send a file", 0.0)

    def get_file(self, remote: str, local_path: str | os.PathLike[str]) -> None:
        """Copy the desktop's regular file ``remote`` to ``local_path`` (replaced whole, through a temporary file
        beside it), mode kept, streamed in chunks; ``usage.no_such_file`` when it does not exist."""
        local = Path(local_path)
        with self._lock:
            self._check_open()
            try:
                send_message(self._sock, {"op": "get_file", "path": remote})
            except (OSError, ProtocolError) as exc:
                raise self._lost("fetch a file", exc) from exc
            reply, body_size = self._reply("fetch a file", 0.0)
            tmp = local.with_name(f".{local.name}.{os.getpid()}.deskctl-part")
            try:
                sink = tmp.open("wb")
            except OSError as exc:
                try:
                    recv_body_to(self._sock, body_size, None)  # stay in step with the agent
                except (OSError, ProtocolError) as lost:
                    raise self._lost("fetch a file", lost) from lost
                raise ProviderApiError(f"cannot write {local}: {exc.strerror or exc}",
                                       provider=self.provider) from exc
            try:
                with sink:
                    recv_body_to(self._sock, body_size, sink)
                    os.fchmod(sink.fileno(), int(reply.get("mode", 0o644)) & 0o7777)
                replace_file(tmp, local)
            except (OSError, ProtocolError) as exc:
                # the body is part read: the connection is out of step whatever failed
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise self._lost("fetch a file", exc) from exc

    # -- a byte pipe ------------------------------------------------------------------------------------------------
    def stream(self, port: int) -> socket.socket:
        """Turn this connection into a byte pipe to ``127.0.0.1:port`` inside the desktop (a browser's DevTools)
        and hand its socket over: the driver is closed (not the socket, which the caller now owns and closes).
        The agent's refusals keep their codes (``usage.bad_port``; nothing listening: ``provider.unreachable``);
        the driver is closed after them too."""
        with self._lock:
            try:
                self._call("open a stream", {"op": "stream", "host": "127.0.0.1", "port": port})
            except BaseException:
                self._shut()
                raise
            self._closed = True
            self._sock.settimeout(None)
            return self._sock

    # -- lifetime --------------------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def _shut(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.close()

    def close(self) -> None:
        with self._lock:
            self._shut()


def wait_ready(host: str, port: int, token: str, *, provider: str, deadline: float,
               tls: ssl.SSLContext | None = None) -> None:
    """Return once the agent at ``host:port`` answers an authenticated ping; ``deadline`` is a
    :func:`time.monotonic` instant. Raises :class:`~deskctl.errors.ReadinessTimeout` (with the last failure)
    when it passes, and at once the agent's refusal of the token."""
    last = "nothing tried yet"
    delay = 0.05
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ReadinessTimeout(f"the desktop agent at {host}:{port} was not ready in time: {last}",
                                   provider=provider)
        try:
            with AgentDriver.connect(host, port, token, provider=provider, timeout=max(0.2, min(5.0, left)),
                                     tls=tls) as driver:
                driver.ping()
            return
        except ProviderApiError:
            raise
        except DeskctlError as exc:
            last = exc.message
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
