"""The ssh provider while a desktop is open: its connections (one per session, one control connection per host),
a desktop's state in this process, the X11 driver over the tunnel, screenshots, exec and the harness actions."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import socket
import struct
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from deskctl.errors import (
    DeskctlError,
    ProviderApiError,
    SessionLost,
)
from deskctl.providers._option_values import OptionValues
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import (
    ExecResult,
    RawFrame,
    RemoteHandle,
    Screenshot,
)
from deskctl.providers.ssh._option_table import TABLE
from deskctl.providers.ssh.channels import _bridge
from deskctl.providers.ssh.connection import _Connection
from deskctl.providers.ssh.frames import _FrameCache
from deskctl.providers.ssh.handle_data import SshHandleData
from deskctl.providers.ssh.scripts import (
    _STATE_SCRIPT,
    _sh,
)
from deskctl.providers.ssh.target import (
    PROVIDER,
    _Settings,
)

if TYPE_CHECKING:
    from deskctl.providers._x11 import X11Driver
    from deskctl.providers._x11provider import DisplayDriver
    from deskctl.providers.ssh.options import Options
    from deskctl.spec import Geometry


def _default_geometry() -> Geometry:
    from deskctl.spec import Geometry

    return Geometry(width=1024, height=768)
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_EXEC_GRACE = 10.0
#: bytes per SFTP read or write request: OpenSSH's sftp-server takes messages up to 256 KiB, 8 times paramiko's
#: 32 KiB default (the minimum every server must take, used for any other server): 8 times fewer requests and
#: answers, each a Python round of paramiko's machinery
_SFTP_REQUEST_OPENSSH = 255 * 1024
_SFTP_REQUEST_ANY = 32768
#: SFTP reads in flight while downloading a file, and writes while uploading one: enough that the host always
#: has one to answer (8 reads in flight measured 5 times slower). A download holds at most their answers and the
#: channel's window (:func:`deskctl.providers.ssh.sftp.download_to` asks for no more; paramiko's own read-ahead,
#: once its reader fell behind on a loaded machine, held the rest of the file: 64 MiB of 64)
_SFTP_READ_AHEAD = 32

T = TypeVar("T")


def _home_relative(remote: str) -> str:
    """A path on the host as SFTP and a command in the home directory both read it: ``~`` and ``~/x`` become
    relative to the home directory (where both start); anything else is as given."""
    if remote == "~":
        return "."
    if remote.startswith("~/"):
        return remote[2:] or "."
    return remote


def _sftp_request_size(conn: _Connection) -> int:
    version = str(getattr(conn.transport, "remote_version", "") or "")
    return _SFTP_REQUEST_OPENSSH if "OpenSSH" in version else _SFTP_REQUEST_ANY


def _pack(source: Path, into: BinaryIO) -> None:
    """The folder's entries as one tar stream for ``tar -x`` on the host: :func:`~deskctl.providers._tar.write_tree`
    (a fraction of tarfile.add's time, which looks up the owner's names for every entry), each entry owned by
    uid 0: a root login's tar keeps that (root, the login user, as scp would make it), any other's cannot chown,
    so the login user owns what arrives either way."""
    from deskctl.providers._tar import write_tree

    write_tree(into, source, "", 0, 0, contents=True)


def _xauthority_bytes(cookie: bytes) -> bytes:
    """One Xauthority entry: FamilyWild, any display number, MIT-MAGIC-COOKIE-1 (the format libXau reads)."""
    def counted(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    return struct.pack(">H", 0xFFFF) + counted(b"") + counted(b"") + counted(b"MIT-MAGIC-COOKIE-1") + counted(cookie)


def _cookie_from_xauthority(raw: bytes) -> bytes | None:
    offset = 0
    try:
        while offset < len(raw):
            offset += 2
            fields: list[bytes] = []
            for _ in range(4):
                (length,) = struct.unpack_from(">H", raw, offset)
                offset += 2
                fields.append(raw[offset:offset + length])
                offset += length
            if fields[2] == b"MIT-MAGIC-COOKIE-1":
                return fields[3]
    except struct.error:
        return None
    return None


def _printf_escaped(data: bytes) -> str:
    return "".join(f"\\{byte:03o}" for byte in data)


# -- one desktop as seen from this process --------------------------------------------------------------------


@dataclass
class _Desktop:
    conn: _Connection
    display: int
    dir: str
    cookie: bytes
    owner: Any = None  # the watcher's channel (attached desktops made by this process)
    frames: _FrameCache | None = None
    frames_tried: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: the SFTP session for uploads and downloads (a channel on ``conn``), opened on first use, one user at a time
    sftp: Any = None
    sftp_lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self, *, keep_owner: bool = False) -> None:
        if self.sftp is not None:
            with contextlib.suppress(Exception):
                self.sftp.close()
            self.sftp = None
        if self.frames is not None:
            self.frames.close()
            self.frames = None
        self.frames_tried = False
        if self.owner is not None and not keep_owner:
            with contextlib.suppress(Exception):
                self.owner.close()
            self.owner = None


class SshDesktops(X11Provider):
    """The connections of :class:`~deskctl.providers.ssh.SSHProvider` and what it does with an open desktop
    (display, input, exec, harness actions)."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        #: the options, read through the one declaration (:mod:`.options`) without loading pydantic
        self.opts = cast("Options", OptionValues(PROVIDER, TABLE, self.options, os.environ.get))
        self._lock = threading.RLock()
        self._desktops: dict[str, _Desktop] = {}
        self._spare: _Connection | None = None  # the preflight's connection, handed to the next create
        # a provider dropped without close() must not keep its connections (and their threads) alive
        self._connections: list[_Connection] = []
        weakref.finalize(self, _close_connections, self._connections)
        # one connection per host for list_owned, is_alive and destroy of desktops this process did not open
        self._controls: dict[tuple[Any, ...], _Connection] = {}

    def _track(self, conn: _Connection) -> _Connection:
        with self._lock:
            self._connections[:] = [c for c in self._connections if c.alive]
            self._connections.append(conn)
        return conn

    # -- connections ------------------------------------------------------------------------------------------
    def _settings(self) -> _Settings:
        return _Settings.from_options(self.opts)

    def _connect(self, settings: _Settings, *, record_new_host_key: bool = True) -> _Connection:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            if spare.alive and spare.settings.key == settings.key:
                if record_new_host_key:
                    spare.record_host_key()  # preflight never writes known_hosts; the desktop's create does
                return spare
            spare.close()
        return self._track(_Connection(settings, record_new_host_key=record_new_host_key))

    def _control(self, settings: _Settings) -> _Connection:
        with self._lock:
            conn = self._controls.get(settings.key)
            if conn is not None and conn.alive:
                return conn
        conn = self._track(_Connection(settings, record_new_host_key=False))
        with self._lock:
            self._controls[settings.key] = conn
        return conn


    # -- while open -------------------------------------------------------------------------------------------
    def _conn_for(self, handle: RemoteHandle) -> _Connection:
        with self._lock:
            desk = self._desktops.get(handle.session_id)
        if desk is not None:
            if desk.conn.alive:
                return desk.conn
            raise desk.conn.lost("reach the desktop")
        return self._connect(_Settings.from_handle(handle, self.opts), record_new_host_key=False)

    def _forget(self, handle: RemoteHandle, desk: _Desktop) -> None:
        with self._lock:
            if self._desktops.get(handle.session_id) is desk:
                del self._desktops[handle.session_id]
        self._drop_driver(handle.session_id)
        desk.close()
        desk.conn.close()

    def _idempotent(self, handle: RemoteHandle, fn: Callable[[], T]) -> T:
        """Run a read-only ``fn``; when the connection drops under it and the desktop is one this process does not
        own, run it once more on a new connection (an action or a command is never run twice)."""
        try:
            return fn()
        except SessionLost:
            with self._lock:
                desk = self._desktops.get(handle.session_id)
            if desk is None or desk.owner is not None or desk.conn.alive:
                raise
            return fn()

    def _remote_state(self, handle: RemoteHandle, conn: _Connection) -> dict[str, str]:
        remote_path = SshHandleData.of(handle).dir
        status, out, _err = conn.call(_sh(_STATE_SCRIPT, remote_path), timeout=conn.settings.connect_timeout)
        text = out.decode(errors="replace")
        if status != 0 or text.strip() == "missing":
            return {"alive": "no"}
        return next(iter(_blocks("dir " + remote_path + "\n" + text + "end\n")), {"alive": "no"})

    def _desktop(self, handle: RemoteHandle) -> _Desktop:
        """This process's view of the desktop: the one create made, or one rebuilt from ``handle.data``
        (another process: ``deskctl do``, ``attach``) by reading the host's state and cookie over SSH."""
        with self._lock:
            desk = self._desktops.get(handle.session_id)
            if desk is not None and (desk.conn.alive or desk.owner is not None):
                return desk
        if desk is not None:
            # The connection dropped, but this process never owned the desktop (detached, or another process's
            # watcher holds it): it outlived the connection, so reach it again on a new one.
            self._forget(handle, desk)
        conn = self._conn_for(handle)
        try:
            state = self._remote_state(handle, conn)
            cookie = _cookie_from_xauthority(bytes.fromhex(state.get("auth", "")))
            if state.get("alive") != "yes" or cookie is None:
                raise SessionLost(f"desktop {handle.session_id} is no longer running on {conn.settings.target.host}",
                                  provider=PROVIDER, remedy="deskctl reap removes what is left of it")
            from deskctl._redact import register_secret

            register_secret(cookie.hex())
            desk = _Desktop(conn=conn, display=int(state.get("display", "0")), dir=SshHandleData.of(handle).dir,
                            cookie=cookie)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            existing = self._desktops.setdefault(handle.session_id, desk)
        if existing is not desk:
            conn.close()
        return existing

    def _address(self, desk: _Desktop) -> Any:
        from deskctl.providers._x11 import X11Address

        socket_path = f"/tmp/.X11-unix/X{desk.display}"
        conn = desk.conn

        class ChannelAddress(X11Address, frozen=True):  # a record (deskctl._record), as X11Address is
            def describe(self) -> str:
                return f"{conn.settings.target}{socket_path}"

            def connect_socket(self, timeout: float) -> socket.socket:
                try:
                    chan = conn.streamlocal(socket_path)
                except DeskctlError as err:
                    raise OSError(err.message) from err
                return _bridge(chan, f"deskctl-ssh-x{desk.display}")

        return ChannelAddress(display=f":{desk.display}")

    def _driver(self, handle: RemoteHandle) -> DisplayDriver:
        # _desktop first: a desktop this process does not own whose connection dropped is reached again on a new
        # connection (forgetting the old one and its driver) before a cached driver is trusted
        self._desktop(handle)
        return super()._driver(handle)

    def _open_driver(self, handle: RemoteHandle) -> X11Driver:
        from deskctl.providers._x11 import X11Driver, connect_display

        desk = self._desktop(handle)
        if not desk.conn.alive:
            raise desk.conn.lost("reach the display")
        address = self._address(desk)
        try:
            display = connect_display(address, desk.cookie, timeout=desk.conn.settings.connect_timeout)
        except DeskctlError as err:
            err.provider = PROVIDER
            if not desk.conn.alive:
                raise desk.conn.lost("reach the display") from err
            raise
        try:
            return X11Driver(display, address, provider=PROVIDER, use_shm=False)
        except BaseException:
            with contextlib.suppress(Exception):
                display.close()
            raise

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        desk = self._desktops.get(handle.session_id)
        if desk is not None and not desk.conn.alive:
            return desk.conn.lost(doing)
        return super()._lost(handle, doing, cause)

    def _read(self, handle: RemoteHandle, doing: str, work: Callable[[DisplayDriver], T]) -> T:
        return self._idempotent(handle, lambda: self._call(handle, doing, work))

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        """PNG of the screen. With the DAMAGE extension (Xvfb has it) only what changed since the last
        screenshot crosses SSH (:class:`_FrameCache`); otherwise the shared driver captures the whole screen."""
        return self._idempotent(handle, lambda: self._screenshot(handle))

    def raw_frame(self, handle: RemoteHandle) -> RawFrame:
        """The screen's pixels; like :meth:`screenshot`, only what DAMAGE says changed crosses SSH."""
        return self._idempotent(handle, lambda: self._captured(
            handle, lambda d: d.raw_frame(), lambda frames: frames.raw_frame))

    def _screenshot(self, handle: RemoteHandle) -> Screenshot:
        return self._captured(handle, lambda d: d.screenshot(), lambda frames: frames.screenshot)

    def _captured(self, handle: RemoteHandle, by_driver: Callable[[DisplayDriver], T],
                  by_frames: Callable[[_FrameCache], Callable[[], T]]) -> T:
        frames = self._frames(handle) if self.opts.incremental_capture else None
        if frames is None:
            return self._call(handle, "capture the screen", by_driver)
        desk = self._desktop(handle)
        try:
            return self._x_errors(desk, "capture the screen", by_frames(frames))
        except SessionLost:
            with desk.lock:
                if desk.frames is frames:
                    desk.frames = None
                    desk.frames_tried = False
            frames.close()
            raise

    def _frames(self, handle: RemoteHandle) -> _FrameCache | None:
        desk = self._desktop(handle)
        with desk.lock:
            if desk.frames is not None or desk.frames_tried:
                return desk.frames
            desk.frames_tried = True
            from deskctl.providers._x11 import connect_display

            if not desk.conn.alive:
                raise desk.conn.lost("capture the screen")
            try:
                display = connect_display(self._address(desk), desk.cookie,
                                          timeout=desk.conn.settings.connect_timeout)
            except DeskctlError as err:
                desk.frames_tried = False
                if not desk.conn.alive:
                    raise desk.conn.lost("capture the screen") from err
                raise
            try:
                if _FrameCache.supported(display):
                    desk.frames = _FrameCache(display)
            except Exception:  # no usable DAMAGE (or an unusual depth): the driver's full capture serves
                desk.frames = None
            if desk.frames is None:
                with contextlib.suppress(Exception):
                    display.close()
            return desk.frames

    @staticmethod
    def _x_errors(desk: _Desktop, doing: str, fn: Callable[[], T]) -> T:
        import Xlib.error

        try:
            return fn()
        except Xlib.error.ConnectionClosedError as exc:
            if not desk.conn.alive:
                raise desk.conn.lost(doing) from exc
            raise SessionLost(f"X display :{desk.display} closed the connection while we tried to {doing}",
                              provider=PROVIDER) from exc
        except OSError as exc:
            if not desk.conn.alive:
                raise desk.conn.lost(doing) from exc
            raise SessionLost(f"lost X display :{desk.display} while we tried to {doing}: {exc}",
                              provider=PROVIDER) from exc
        except Xlib.error.XError as exc:
            raise ProviderApiError(f"X display :{desk.display} refused to {doing}: {type(exc).__name__}",
                                   provider=PROVIDER) from exc

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Run ``command`` with ``sh -c`` on the host over the session's connection, in ``cwd`` (default: the
        home directory) with DISPLAY and XAUTHORITY of the desktop and ``env`` added, as ``user`` (``sudo -n``).
        On timeout the command's process group is ended by ``timeout(1)`` on the host and the exit code is 124.
        ``background``: started in a session of its own with its output to /dev/null, so the channel closes at
        once; the result carries its ``pid``, and it still ends with the desktop (its marker)."""
        from deskctl.providers._guest import background_pid, check_exec_options, posix_line

        clean = check_exec_options(env, user, PROVIDER)
        desk = self._desktop(handle)
        auth = f"{desk.dir}/Xauthority"
        # DESKCTL_SSH_DESKTOP marks everything the command starts: destroy (or the watcher) ends it all
        inner = (f"DISPLAY=:{desk.display} XAUTHORITY={shlex.quote(auth)} DESKCTL_SSH_DESKTOP={shlex.quote(desk.dir)};"
                 " export DISPLAY XAUTHORITY DESKCTL_SSH_DESKTOP; cd; ")
        if user:
            # sudo resets the environment: the marker goes in explicitly, and the user is listed so that destroy
            # ends that user's marked processes as that user (others_kill)
            clean = {"DESKCTL_SSH_DESKTOP": desk.dir, **clean}
            users, quoted = shlex.quote(f"{desk.dir}/users"), shlex.quote(user)
            inner += f"grep -qxF -- {quoted} {users} 2>/dev/null || printf '%s\\n' {quoted} >> {users}; "
        line = posix_line(command, cwd=cwd, env=clean, user=user, background=background)
        seconds = max(1, int(timeout + 0.999))
        inner += (f"if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 {seconds} /bin/sh -c "
                  f"{shlex.quote(line)}; else exec /bin/sh -c {shlex.quote(line)}; fi")
        try:
            status, out, err = desk.conn.run(_sh(inner), timeout=timeout + _EXEC_GRACE)
        except TimeoutError:
            return ExecResult(124, "", f"deskctl: command timed out after {timeout:g}s\n")
        stderr = err.decode(errors="replace")
        if status == 124:
            stderr += f"deskctl: command timed out after {timeout:g}s\n"
        result = ExecResult(status, out.decode(errors="replace"), stderr)
        if background and status == 0:
            result = dataclasses.replace(result, pid=background_pid(result))
        return result


    # -- harness actions: clipboard, launch and open_url through exec (GuestActions), window titles over X -------
    def _guest_dialect(self, handle: RemoteHandle) -> str:
        return "posix"

    def keepalive(self, handle: RemoteHandle) -> None:
        """One X round trip over the connection: proves the connection, sshd and Xvfb are all still there."""
        self._idempotent(handle, lambda: self._call(handle, "reach the display", lambda d: d.ping()))

    def close(self) -> None:
        """Close every connection. An attached desktop made by this provider ends with its connection (its
        watcher sees EOF): call :meth:`destroy` first for a confirmed end, or :meth:`detach` to keep it."""
        super().close()
        with self._lock:
            desktops, self._desktops = list(self._desktops.values()), {}
            spare, self._spare = self._spare, None
        for desk in desktops:
            desk.close()
            desk.conn.close()
        if spare is not None:
            spare.close()
        _close_connections(self._connections)


def _close_connections(connections: list[_Connection]) -> None:
    for conn in list(connections):
        conn.close()
    connections.clear()


def _new_cookie() -> bytes:
    from deskctl._redact import register_secret
    from deskctl.providers._x11 import new_cookie

    cookie = new_cookie()
    register_secret(cookie.hex())
    return cookie


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _blocks(text: str) -> list[dict[str, str]]:
    """``dir``..``end`` blocks of ``key value`` lines (``state k=v`` lines become ``k``)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "dir":
            current = {"dir": rest}
        elif current is None:
            continue
        elif word == "end":
            blocks.append(current)
            current = None
        elif word == "state":
            key, _, value = rest.partition("=")
            current[key] = value
        else:
            current[word] = rest
    return blocks
