"""``deskctl-agent``: serves one desktop from inside it over TCP (TLS optional) to the holder of its session token.

It runs in the desktop (the image's entrypoint starts it when ``DESKCTL_SERVE_AGENT=1``), as the desktop's user, on
the desktop's display, and drives that display with the project's own :class:`~deskctl.core.x11.X11Driver`
(MIT-SHM capture: the agent shares the X server's host and IPC namespace) and
:func:`~deskctl.core.png.encode_png`.

Security: the token is read from a file (``--token-file``, default :data:`deskctl.agent.TOKEN_FILE`), never from
the command line or the environment; the first message of every connection must carry it (compared with
:func:`hmac.compare_digest`), else the connection is closed. The token is never printed or logged. Whoever holds
it may run commands as the agent's user and read and write its files: treat it as that user's password.

Imports: the standard library, python-xlib and the deskctl modules
:data:`deskctl.providers.docker.images.AGENT_FILES` lists.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import pwd
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deskctl import actions
from deskctl._fsreplace import replace_file
from deskctl.actions import check_action
from deskctl.agent import DEFAULT_PORT, TOKEN_FILE
from deskctl.agent.protocol import (
    BYTES_PER_PIXEL,
    PROTOCOL_VERSION,
    ProtocolError,
    changed_boxes,
    crop,
    error_to_wire,
    recv_body_to,
    recv_header,
    send_message,
    send_stream,
    splice,
)
from deskctl.core.png import encode_png
from deskctl.core.shell import background_pid, check_exec_options, posix_line, run_here
from deskctl.core.x11 import X11Driver, read_cookie
from deskctl.errors import DeskctlError, ProviderApiError, ProviderUnreachable, SessionLost, UsageError
from deskctl.limits import check_number

__all__ = ["AgentServer", "main", "read_token"]

PROVIDER = "agent"
#: the hosts a stream may name: the desktop's own loopback
_LOOPBACK = ("127.0.0.1", "localhost")

_ACTIONS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (actions.Click, actions.Move, actions.Drag, actions.Scroll, actions.MouseDown, actions.MouseUp,
                actions.TypeText, actions.KeyPress, actions.KeyDown, actions.KeyUp)
}


def read_token(path: str | os.PathLike[str], wait: float) -> bytes:
    """The token in ``path`` (surrounding whitespace dropped), waiting up to ``wait`` seconds for the file to
    appear non-empty: a provider writes it after the desktop was created. Raises :class:`SystemExit` without it."""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError):
            token = Path(path).read_bytes().strip()
            if token:
                return token
        if time.monotonic() >= deadline:
            raise SystemExit(f"deskctl-agent: no token in {path} after {wait:g}s")
        time.sleep(0.05)


#: TCP keepalive of every connection: first probe after 60 s idle, then every 10 s, given up after 6 unanswered
_KEEPALIVE = (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6))

class _Connection:
    """One client: its socket and the last frame it was sent (for changed regions)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frame_id = 0
        self.frame: tuple[bytes, int, int, str] | None = None


class AgentServer:
    """The listener and the desktop's X driver (one, shared by every connection; it is thread-safe)."""

    def __init__(self, token: bytes, *, display: str, cookie: bytes | None, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT, tls: ssl.SSLContext | None = None) -> None:
        self._token = token
        self.display = display
        self._cookie = cookie
        self._tls = tls
        self._driver: X11Driver | None = None
        self._driver_lock = threading.Lock()
        self._listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._closed = threading.Event()
        self._ops: dict[str, Callable[[_Connection, dict[str, Any], int], None]] = {
            "ping": self._ping, "size": self._size, "screenshot": self._screenshot, "raw_frame": self._raw_frame,
            "changes": self._changes, "act": self._act, "cursor_position": self._cursor_position,
            "window_titles": self._window_titles, "exec": self._exec, "put_file": self._put_file,
            "get_file": self._get_file, "stream": self._stream,
        }

    # -- lifetime ------------------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                raise
            threading.Thread(target=self._serve, args=(sock,), daemon=True, name="deskctl-agent-conn").start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._driver_lock:
            if self._driver is not None:
                self._driver.close()

    def _x(self) -> X11Driver:
        """The X driver, (re)opened when there is none or the last one lost its display."""
        with self._driver_lock:
            if self._driver is None or self._driver.closed:
                try:
                    self._driver = X11Driver.open(self.display, cookie=self._cookie, provider=PROVIDER)
                except DeskctlError as exc:
                    raise SessionLost(f"the desktop's X display {self.display} does not answer: {exc.message}",
                                      provider=PROVIDER) from exc
            return self._driver

    # -- one connection ------------------------------------------------------------------------------------------
    def _serve(self, raw: socket.socket) -> None:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # a client gone without a word (its host vanished, the network cut: no FIN) is found in about 2 minutes,
        # so its thread (blocked in a read with no timeout between requests, or in a stream) and socket end
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in _KEEPALIVE:
            if hasattr(socket, option):
                raw.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        sock: socket.socket = raw
        try:
            if self._tls is not None:
                raw.settimeout(30)
                sock = self._tls.wrap_socket(raw, server_side=True)
            sock.settimeout(30)  # the hello must come soon; later requests may be far apart
            if not self._hello(sock):
                return
            sock.settimeout(None)
            conn = _Connection(sock)
            while True:
                header, body_size = recv_header(sock)
                self._dispatch(conn, header, body_size)
        except (ProtocolError, OSError, ssl.SSLError):
            pass  # the client went away or spoke something else: nothing to answer
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _hello(self, sock: socket.socket) -> bool:
        header, body_size = recv_header(sock)
        token = header.get("token")
        accepted = (header.get("op") == "hello" and body_size == 0 and isinstance(token, str)
                    and hmac.compare_digest(token.encode(), self._token))
        if not accepted:
            refusal = ProviderApiError("the agent refused the session token", provider=PROVIDER,
                                       remedy="connect with the token the provider wrote into the desktop")
            with contextlib.suppress(OSError):
                send_message(sock, {"ok": False, "error": error_to_wire(refusal)})
            return False
        send_message(sock, {"ok": True, "version": PROTOCOL_VERSION, "display": self.display})
        return True

    def _dispatch(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        op = self._ops.get(str(header.get("op")))
        try:
            if op is None:
                recv_body_to(conn.sock, body_size, None)
                raise UsageError(f"the agent has no operation {header.get('op')!r}", code="usage.unsupported",
                                 provider=PROVIDER)
            op(conn, header, body_size)
        except DeskctlError as exc:
            send_message(conn.sock, {"ok": False, "error": error_to_wire(exc)})
        except (ProtocolError, ssl.SSLError, ConnectionError):
            raise
        except Exception as exc:  # a bug in the agent: report it as such rather than drop the connection
            send_message(conn.sock, {"ok": False, "error": {
                "class": "DeskctlError", "code": "internal", "message": f"agent error: {type(exc).__name__}: {exc}",
                "remedy": None}})

    # -- screen --------------------------------------------------------------------------------------------------
    def _ping(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        self._x().ping()
        send_message(conn.sock, {"ok": True})

    def _size(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        width, height = self._x().size()
        send_message(conn.sock, {"ok": True, "width": width, "height": height})

    def _screenshot(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        level = check_number("png_level", header.get("compress_level", 1), what="compress_level", strings=False)
        data, width, height, mode = self._x().capture_raw()
        png = encode_png(data, width, height, mode, level=level)
        send_message(conn.sock, {"ok": True, "width": width, "height": height}, png)

    def _raw_frame(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        data, width, height, mode = self._x().capture_raw()
        send_message(conn.sock, {"ok": True, "width": width, "height": height, "mode": mode},
                     memoryview(data)[: width * height * BYTES_PER_PIXEL[mode]])

    def _changes(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        data, width, height, mode = self._x().capture_raw()
        bpp = BYTES_PER_PIXEL[mode]
        frame = bytes(memoryview(data)[: width * height * bpp])  # a copy: the MIT-SHM segment is reused
        since = header.get("since")
        previous = conn.frame
        conn.frame_id += 1
        conn.frame = (frame, width, height, mode)
        full = not (since is not None and since == conn.frame_id - 1 and previous is not None
                    and previous[1:] == (width, height, mode))
        boxes = [(0, 0, width, height)] if full else changed_boxes(previous[0], frame, width, height, bpp)  # type: ignore[index]
        bodies = [crop(frame, width, bpp, box) for box in boxes]
        send_message(conn.sock, {"ok": True, "frame_id": conn.frame_id, "width": width, "height": height,
                                 "mode": mode, "full": full, "regions": [list(box) for box in boxes]},
                     b"".join(bodies))

    def _act(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        cls = _ACTIONS.get(str(header.get("kind")))
        values = header.get("values")
        if cls is None or not isinstance(values, dict):
            raise UsageError(f"the agent cannot run the action {header.get('kind')!r}", code="usage.unsupported",
                             provider=PROVIDER)
        if cls is actions.KeyPress and isinstance(values.get("keys"), list):
            values = {**values, "keys": tuple(values["keys"])}
        try:
            action = cls(**values)
        except TypeError as exc:
            raise UsageError(f"bad arguments for {cls.__name__}: {exc}", code="usage.invalid",
                             provider=PROVIDER) from exc
        check_action(action)  # the bounds the client checked: a peer that skips them gets them here
        self._x().act(action)
        send_message(conn.sock, {"ok": True})

    def _cursor_position(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        x, y = self._x().cursor_position()
        send_message(conn.sock, {"ok": True, "x": x, "y": y})

    def _window_titles(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        send_message(conn.sock, {"ok": True, "titles": self._x().window_titles()})

    # -- commands ------------------------------------------------------------------------------------------------
    def _exec(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        command = header.get("command")
        if not isinstance(command, str):
            raise UsageError("exec needs a command", code="usage.invalid", provider=PROVIDER)
        timeout = check_number("exec_timeout", header.get("timeout", 60.0), what="timeout", strings=False)
        cwd, user = header.get("cwd"), header.get("user")
        background = bool(header.get("background"))
        env = check_exec_options(header.get("env"), user, PROVIDER)
        if user is not None and user == pwd.getpwuid(os.getuid()).pw_name:
            user = None
        if user is not None and os.getuid() != 0:
            raise UsageError(f"the agent runs as {pwd.getpwuid(os.getuid()).pw_name} and cannot run commands as "
                             f"{user}", code="usage.unsupported", provider=PROVIDER)
        line = posix_line(command, cwd=cwd, env=env, user=user, background=background)
        exit_code, out, err = run_here(line, timeout, provider=PROVIDER)
        # the output goes in the body (stdout then stderr), not the JSON header: it may be large and binary
        reply: dict[str, Any] = {"ok": True, "exit_code": exit_code, "stdout_size": len(out)}
        if background and exit_code == 0:
            from deskctl.core.frames import ExecResult

            reply["pid"] = background_pid(ExecResult(0, out.decode(errors="replace")))
        send_message(conn.sock, reply, out + err)

    # -- a byte pipe to a port on the desktop's loopback (a browser's DevTools) ---------------------------------
    def _stream(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        """Connect to ``127.0.0.1:port`` in the desktop, answer ok, then carry bytes both ways between it and this
        connection until either side closes; the connection then ends (it speaks this protocol no more). Only
        the desktop's loopback: another ``host`` is ``usage.not_loopback``. Not over TLS (``usage.unsupported``):
        the pipe reads the connection in one thread and writes it in another, which one OpenSSL connection does
        not allow."""
        recv_body_to(conn.sock, body_size, None)
        if isinstance(conn.sock, ssl.SSLSocket):
            raise UsageError("the agent opens a stream only on a plain TCP connection, not over TLS",
                             code="usage.unsupported", provider=PROVIDER,
                             remedy="serve the agent without --tls-cert where a stream is needed (its transport "
                                    "then secures it, as the cluster network does for kubernetes)")
        host = header.get("host", "127.0.0.1")
        if host not in _LOOPBACK:
            raise UsageError(f"the agent streams only to the desktop's loopback, not to {host!r}",
                             code="usage.not_loopback", provider=PROVIDER, remedy="name a port on 127.0.0.1")
        port = check_number("stream_port", header.get("port"), what="port", strings=False)
        if port == self.address[1]:
            raise UsageError("the agent does not stream to its own port", code="usage.bad_port", provider=PROVIDER)
        try:
            target = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError as exc:
            raise ProviderUnreachable(f"nothing answers on 127.0.0.1:{port} in the desktop: {exc.strerror or exc}",
                                      provider=PROVIDER) from exc
        with target:
            target.settimeout(None)
            target.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send_message(conn.sock, {"ok": True})
            splice(conn.sock, target)
        raise ProtocolError("the stream ended", eof=True)  # the connection is spent: _serve closes it

    # -- files ---------------------------------------------------------------------------------------------------
    def _put_file(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        """Write the body to ``path`` through a temporary file beside it (a reader never sees half a file)."""
        target = Path(str(header.get("path") or ""))
        problem: DeskctlError | None = None
        try:
            mode: int = check_number("file_mode", header.get("mode", 0o644), what="mode", strings=False)
        except UsageError as exc:  # raised below, once the body is read past: the connection stays in step
            mode, problem = 0, exc
        if problem is not None:
            pass
        elif not target.is_absolute():
            problem = UsageError(f"{target}: the agent needs an absolute path", code="usage.bad_path",
                                 provider=PROVIDER)
        elif target.is_dir():
            problem = UsageError(f"{target} is a directory on the desktop", code="usage.bad_path", provider=PROVIDER)
        elif not target.parent.is_dir():
            problem = UsageError(f"{target.parent}: no such directory on the desktop", code="usage.no_such_file",
                                 provider=PROVIDER)
        if problem is not None:
            recv_body_to(conn.sock, body_size, None)
            raise problem
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".deskctl-part", dir=target.parent)
        except OSError as exc:
            recv_body_to(conn.sock, body_size, None)
            raise ProviderApiError(f"cannot write in {target.parent}: {exc.strerror or exc}",
                                   provider=PROVIDER) from exc
        sink = _FileSink(os.fdopen(fd, "wb"))
        replaced = False
        try:
            # a socket error here ends the connection; a file error is kept by the sink, which reads on
            recv_body_to(conn.sock, body_size, sink)  # type: ignore[arg-type]
            sink.finish(mode)
            if sink.error is None:
                try:
                    replace_file(tmp, target)
                    replaced = True
                except OSError as exc:
                    sink.error = exc
        finally:
            sink.close()
            if not replaced:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        if sink.error is not None:
            raise ProviderApiError(f"cannot write {target}: {sink.error.strerror or sink.error}",
                                   provider=PROVIDER) from sink.error
        send_message(conn.sock, {"ok": True, "size": body_size})

    def _get_file(self, conn: _Connection, header: dict[str, Any], body_size: int) -> None:
        recv_body_to(conn.sock, body_size, None)
        path = Path(str(header.get("path") or ""))
        try:
            source = path.open("rb")
        except FileNotFoundError as exc:
            raise UsageError(f"{path}: no such file or directory on the desktop", code="usage.no_such_file",
                             provider=PROVIDER) from exc
        except IsADirectoryError as exc:
            raise UsageError(f"{path} is a directory on the desktop", code="usage.bad_path",
                             provider=PROVIDER) from exc
        except OSError as exc:
            raise ProviderApiError(f"cannot read {path}: {exc.strerror or exc}", provider=PROVIDER) from exc
        with source:
            info = os.fstat(source.fileno())
            if not _is_regular(info.st_mode):
                raise UsageError(f"{path} is not a regular file", code="usage.bad_path", provider=PROVIDER)
            try:
                send_stream(conn.sock, {"ok": True, "size": info.st_size, "mode": info.st_mode & 0o7777},
                            info.st_size, source)
            except OSError as exc:
                # part of the body is out (or the file shrank while it was sent): the connection is out of step
                raise ProtocolError(f"sending {path} failed part-way: {exc}") from exc


class _FileSink:
    """Where a received file goes: keeps the first write error and drops the rest of the data, so the body is
    still read to its end and the connection stays in step."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.error: OSError | None = None

    def write(self, data: memoryview) -> None:
        if self.error is None:
            try:
                self._handle.write(data)
            except OSError as exc:
                self.error = exc

    def finish(self, mode: int) -> None:
        if self.error is None:
            try:
                self._handle.flush()
                os.fchmod(self._handle.fileno(), mode)
            except OSError as exc:
                self.error = exc

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()


def _is_regular(st_mode: int) -> bool:
    import stat

    return stat.S_ISREG(st_mode)


def _tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def _bounded(bound: str) -> Callable[[str], Any]:
    """An argparse type: a flag's value within limits.py's ``bound`` (argparse tells a bad one, exit 2)."""

    def convert(value: str) -> Any:
        try:
            return check_number(bound, value, what="value")
        except UsageError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    return convert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deskctl-agent", description=(
        "Serve this desktop (screen, input, commands, files) to the holder of its session token. "
        "See docs/agent.md."))
    parser.add_argument("--listen", default=os.environ.get("DESKCTL_AGENT_LISTEN", "127.0.0.1"),
                        help="address to listen on (env DESKCTL_AGENT_LISTEN; default 127.0.0.1)")
    parser.add_argument("--port", type=_bounded("port"),
                        default=os.environ.get("DESKCTL_AGENT_PORT") or str(DEFAULT_PORT),
                        help=f"TCP port, 0 for any free one (env DESKCTL_AGENT_PORT; default {DEFAULT_PORT})")
    parser.add_argument("--token-file", default=TOKEN_FILE, help=f"the session token's file (default {TOKEN_FILE})")
    parser.add_argument("--token-wait", type=_bounded("token_wait"), default="300",
                        help="seconds to wait for the token file to appear (default 300)")
    parser.add_argument("--display", default=os.environ.get("DISPLAY") or ":0",
                        help="the X display to serve (env DISPLAY; default :0)")
    parser.add_argument("--xauthority", default=os.environ.get("XAUTHORITY"),
                        help="the X authority file with the display's cookie (env XAUTHORITY)")
    parser.add_argument("--tls-cert", help="serve TLS with this certificate (PEM; needs --tls-key)")
    parser.add_argument("--tls-key", help="the certificate's private key (PEM)")
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    tls = _tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    cookie = None
    if args.xauthority and Path(args.xauthority).is_file():
        number = args.display.rsplit(":", 1)[-1].split(".", 1)[0]
        try:
            cookie = read_cookie(args.xauthority, int(number) if number.isdigit() else None)
        except DeskctlError as exc:
            print(f"deskctl-agent: {exc.message}; connecting without a cookie", file=sys.stderr)
    token = read_token(args.token_file, args.token_wait)
    server = AgentServer(token, display=args.display, cookie=cookie, host=args.listen, port=args.port, tls=tls)
    signal.signal(signal.SIGTERM, lambda *_: server.close())
    host, port = server.address
    print(f"deskctl-agent listening on {host}:{port} ({'TLS' if tls else 'plain TCP'}) for display {args.display}",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
