"""The shared X11 driver: input through XTEST and capture by GetImage (MIT-SHM when possible) over ONE X
connection per desktop, for every X-based provider (``xvfb``, ``docker``, ``ssh`` and the fakes).

How to reach a display (:meth:`X11Driver.open`):

* ``X11Driver.open(":5", cookie=...)``: the local unix socket ``/tmp/.X11-unix/X5``;
* ``X11Driver.open(":5", socket_path="/var/lib/x/X5", cookie=...)``: a unix socket at any path (a Docker
  volume that shares the container's ``/tmp/.X11-unix``);
* ``X11Driver.open(":5", host="127.0.0.1", port=6005, cookie=...)``: TCP (an SSH-forwarded port).

``cookie`` is the raw 16-byte MIT-MAGIC-COOKIE-1 (see :func:`read_cookie`, :func:`new_cookie` and
:func:`write_xauthority`); ``None`` connects without authorisation.

python-xlib only knows ``/tmp/.X11-unix/XN`` for unix sockets and reads cookies from ``$XAUTHORITY``. Rather
than patching its connect functions around each call (a race between threads), this module installs one
permanent, thread-safe shim in front of them once: a connection opened through :meth:`X11Driver.open` hands its
own already-connected socket and cookie to python-xlib through a thread-local slot; every other python-xlib
user in the process goes through the original functions unchanged.

The driver's own connection sets up the XTEST extension only (:func:`connect_display` with ``xtest_only``), and
reads the keymap only when it first looks a key up: a CLI process that opens it for one click pays for neither
the dozen other extensions python-xlib would initialise nor a keymap. Typed text goes out pre-encoded, in
batches each confirmed by a round trip (:meth:`X11Driver.type_text`), so typing is linear in the text's length.

Errors: a connection that cannot be made is :class:`~deskctl.errors.ProviderUnreachable`; a connection that
drops while in use is :class:`~deskctl.errors.SessionLost`; a request the server refuses is
:class:`~deskctl.errors.ProviderApiError`. No Xlib exception leaves this module.

Typing a symbol the keymap lacks (non-ASCII text) binds it to a spare keycode, as xdotool does: an unbound
keycode, else one bound only to vendor XF86 keysyms (Xvfb has about 110 such keycodes in all). Unlike
xdotool, the keycode is not reverted right after the key event, because a client that has not yet translated
the event would then read the wrong symbol. Borrowed keycodes and their original keysyms are recorded on the
root window (``_DESKCTL_BORROWED_KEYCODES``) and reused, least recently bound first, by every driver of that
display; :meth:`X11Driver.restore_keymap` gives them back (call it before leaving a long-lived display such as
a user's own; a throwaway Xvfb needs nothing). Limit: one text with more distinct missing symbols than there
are spare keycodes reuses keycodes within the text, and a client that lags behind may then read a later
symbol for an earlier key.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl._fds import capacity_error, out_of_descriptors
from deskctl.actions import (
    Action,
    Click,
    Drag,
    KeyDown,
    KeyPress,
    KeyUp,
    MouseDown,
    MouseUp,
    Move,
    Scroll,
    TypeText,
    normalize_key,
)
from deskctl.core.frames import RawFrame, Screenshot
from deskctl.core.png import encode_png
from deskctl.errors import DeskctlError, ProviderApiError, ProviderUnreachable, SessionLost, UsageError

if TYPE_CHECKING:
    from Xlib.display import Display

__all__ = [
    "COOKIE_PROTOCOL",
    "X11Address",
    "X11Driver",
    "decode_compound_text",
    "keysym_for_char",
    "keysym_for_key",
    "new_cookie",
    "read_cookie",
    "write_xauthority",
]

COOKIE_PROTOCOL = "MIT-MAGIC-COOKIE-1"
_FAMILY_WILD = 0xFFFF
_FAMILY_LOCAL = 256

_BUTTONS = {"left": 1, "middle": 2, "right": 3}
_SCROLL_UP, _SCROLL_DOWN, _SCROLL_LEFT, _SCROLL_RIGHT = 4, 5, 6, 7

#: canonical key name (deskctl.actions) -> X keysym name
_KEYSYM_NAMES: dict[str, str] = {
    "ctrl": "Control_L",
    "alt": "Alt_L",
    "shift": "Shift_L",
    "super": "Super_L",
    "enter": "Return",
    "escape": "Escape",
    "tab": "Tab",
    "backspace": "BackSpace",
    "delete": "Delete",
    "space": "space",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
    "insert": "Insert",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "capslock": "Caps_Lock",
    "menu": "Menu",
    "printscreen": "Print",
    "pause": "Pause",
    "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    **{f"f{i}": f"F{i}" for i in range(1, 25)},
}

#: keysym values of the names above (the X11 keysymdef.h numbers), so no Xlib import is needed to map keys
_KEYSYM_VALUES: dict[str, int] = {
    "Control_L": 0xFFE3,
    "Alt_L": 0xFFE9,
    "Shift_L": 0xFFE1,
    "Super_L": 0xFFEB,
    "Return": 0xFF0D,
    "Escape": 0xFF1B,
    "Tab": 0xFF09,
    "BackSpace": 0xFF08,
    "Delete": 0xFFFF,
    "space": 0x0020,
    "Home": 0xFF50,
    "End": 0xFF57,
    "Prior": 0xFF55,
    "Next": 0xFF56,
    "Insert": 0xFF63,
    "Up": 0xFF52,
    "Down": 0xFF54,
    "Left": 0xFF51,
    "Right": 0xFF53,
    "Caps_Lock": 0xFFE5,
    "Menu": 0xFF67,
    "Print": 0xFF61,
    "Pause": 0xFF13,
    "Num_Lock": 0xFF7F,
    "Scroll_Lock": 0xFF14,
    **{f"F{i}": 0xFFBE + i - 1 for i in range(1, 25)},
}

_SHIFT = _KEYSYM_VALUES["Shift_L"]
#: bytes of one XTEST FakeInput request (9 words)
_FAKE_INPUT_SIZE = 36
#: characters typed between two round trips. Typed text is encoded here and handed to python-xlib as one
#: pre-encoded block per batch: its own request queue joins queued requests by repeated bytes concatenation
#: (quadratic in the number queued before a round trip). The round trip per batch bounds how far we run ahead of
#: the server, re-arms the watchdog (a long text is many operations, each with its own deadline) and keeps the
#: requests between two replies far below python-xlib's 16-bit sequence window.
_TYPE_BATCH = 4096
_BORROWED_PROPERTY = "_DESKCTL_BORROWED_KEYCODES"
_CONTROL_CHARS = {"\n": "Return", "\r": "Return", "\t": "Tab", "\b": "BackSpace", "\x1b": "Escape"}


def keysym_for_char(char: str) -> int:
    """The X keysym of one character: Latin-1 keysyms equal the code point, the rest are Unicode keysyms."""
    if char in _CONTROL_CHARS:
        return _KEYSYM_VALUES[_CONTROL_CHARS[char]]
    code = ord(char)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x01000000 | code


def keysym_for_key(name: str) -> int:
    """The X keysym of a key name (canonical or any alias :func:`deskctl.actions.normalize_key` accepts)."""
    canonical = normalize_key(name)
    if len(canonical) == 1:
        return keysym_for_char(canonical)
    return _KEYSYM_VALUES[_KEYSYM_NAMES[canonical]]


# -- cookies and Xauthority files ----------------------------------------------------------------------------


def new_cookie() -> bytes:
    """A fresh random 16-byte MIT-MAGIC-COOKIE-1."""
    import secrets  # here, not at the top: a CLI action that needs no new cookie does not pay for it

    return secrets.token_bytes(16)


def _counted(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def write_xauthority(path: str | os.PathLike[str], display_number: int | None, cookie: bytes) -> Path:
    """Write an Xauthority file (the format ``xauth`` and libXau read) holding ``cookie`` for display
    ``display_number`` (None: any display), mode 0600, replaced atomically. It has two entries with the same
    cookie: one for this host name (FamilyLocal, which python-xlib needs) and one for any host (FamilyWild, for
    clients whose host name differs, such as a container's)."""
    target = Path(path)
    number = b"" if display_number is None else str(display_number).encode()
    entry = b"".join(
        struct.pack(">H", family) + _counted(address) + _counted(number) + _counted(COOKIE_PROTOCOL.encode())
        + _counted(cookie)
        for family, address in ((_FAMILY_LOCAL, socket.gethostname().encode()), (_FAMILY_WILD, b""))
    )
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, entry)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def read_cookie(path: str | os.PathLike[str], display_number: int | None = None) -> bytes:
    """The MIT-MAGIC-COOKIE-1 for ``display_number`` (or the first one) in an Xauthority file.

    Raises :class:`~deskctl.errors.ProviderUnreachable` when the file is missing or holds no such cookie.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ProviderUnreachable(f"cannot read the X authority file {path}: {exc.strerror}") from exc
    offset = 0
    try:
        while offset < len(raw):
            (_family,) = struct.unpack_from(">H", raw, offset)
            offset += 2
            fields: list[bytes] = []
            for _ in range(4):
                (length,) = struct.unpack_from(">H", raw, offset)
                offset += 2
                fields.append(raw[offset : offset + length])
                offset += length
            _address, number, name, data = fields
            if name == COOKIE_PROTOCOL.encode() and (
                display_number is None or not number or number == str(display_number).encode()
            ):
                return data
    except struct.error as exc:
        raise ProviderUnreachable(f"the X authority file {path} is malformed") from exc
    raise ProviderUnreachable(f"the X authority file {path} holds no cookie for display {display_number}")


# -- connecting ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class X11Address:
    """Where an X server listens. ``display`` is ``":N"`` (the screen is always 0)."""

    display: str = ":0"
    socket_path: str | None = None
    host: str | None = None
    port: int | None = None

    @property
    def number(self) -> int:
        text = self.display.rsplit(":", 1)[-1].split(".", 1)[0]
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"X display {self.display!r} is not of the form :N", code="usage.bad_display") from None

    def describe(self) -> str:
        if self.host is not None:
            return f"{self.host}:{self.port if self.port is not None else 6000 + self.number}"
        return self.socket_path or f"/tmp/.X11-unix/X{self.number}"

    def connect_socket(self, timeout: float) -> socket.socket:
        """A connected stream socket to the server (no X protocol yet)."""
        if self.host is not None:
            port = self.port if self.port is not None else 6000 + self.number
            sock = socket.create_connection((self.host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(self.describe())
            except OSError:
                sock.close()
                raise
        sock.set_inheritable(False)
        return sock


class _PendingConnection(threading.local):
    sock: socket.socket | None = None
    cookie: bytes | None = None


_pending = _PendingConnection()
_shim_lock = threading.Lock()
_shim_installed = False


class _ConnectShim:
    """Stands in for ``Xlib.support.connect`` inside ``Xlib.protocol.display``: serves the thread's pending
    connection (our socket and cookie) when there is one, and defers to the original module otherwise."""

    def __init__(self, original: Any) -> None:
        self._original = original

    def get_display(self, display: Any) -> Any:
        if _pending.sock is not None:
            return str(display), None, "", 0, 0
        return self._original.get_display(display)

    def get_socket(self, dname: Any, protocol: Any, host: Any, dno: Any) -> Any:
        sock = _pending.sock
        if sock is not None:
            return sock
        return self._original.get_socket(dname, protocol, host, dno)

    def get_auth(self, sock: Any, dname: Any, protocol: Any, host: Any, dno: Any) -> Any:
        if _pending.sock is not None:
            cookie = _pending.cookie
            return (COOKIE_PROTOCOL.encode(), cookie) if cookie else (b"", b"")
        return self._original.get_auth(sock, dname, protocol, host, dno)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def _install_shim() -> None:
    global _shim_installed
    with _shim_lock:
        if _shim_installed:
            return
        import Xlib.protocol.display as protocol_display

        if not isinstance(protocol_display.connect, _ConnectShim):
            protocol_display.connect = _ConnectShim(protocol_display.connect)
        # python-xlib waits in select(), which refuses descriptors >= 1024 (a process with a hundred desktops
        # has them): the same answers through poll() (see deskctl._fds)
        from deskctl._fds import POLL_SELECT

        protocol_display.select = POLL_SELECT
        _shim_installed = True


_xtest_display_class: Any = None


def _xtest_display(name: str) -> Display:
    """A python-xlib ``Display`` that sets up the XTEST extension only. ``Xlib.display.Display()`` imports and
    initialises a module for every extension the server has (a dozen on Xvfb: one QueryExtension round trip and
    one import each) and reads the whole keymap, which a one-action CLI call would pay every time; the driver
    uses XTEST alone (MIT-SHM is queried when first needed) and reads the keymap itself when it types."""
    global _xtest_display_class
    if _xtest_display_class is None:
        import Xlib.display
        from Xlib.protocol import rq

        class XTestDisplay(Xlib.display.Display):  # type: ignore[misc]
            # The steps of Xlib.display.Display.__init__ (python-xlib 0.33), for one extension module.
            def __init__(self, display: str) -> None:
                self.display = Xlib.display._BaseDisplay(display)
                self._keymap_codes = [()] * 256
                self._keymap_syms: dict[int, Any] = {}
                self.keysym_translations: dict[int, str] = {}
                self.extensions: list[str] = []
                self.class_extension_dicts: dict[str, dict[str, Any]] = {}
                self.display_extension_methods: dict[str, Any] = {}
                self.extension_event = rq.DictWrapper({})
                info = self.query_extension("XTEST")
                if info is not None and info.present:
                    from Xlib.ext import xtest

                    self.display.set_extension_major("XTEST", info.major_opcode)
                    xtest.init(self, info)
                    self.extensions.append("XTEST")
                for class_name, dictionary in self.class_extension_dicts.items():
                    original = self.display.resource_classes[class_name]
                    self.display.resource_classes[class_name] = type(original.__name__, (original,), dictionary)
                for screen in self.display.info.roots:
                    screen.root = self.display.resource_classes["window"](self.display, screen.root.id)
                    screen.default_colormap = self.display.resource_classes["colormap"](
                        self.display, screen.default_colormap.id)

        _xtest_display_class = XTestDisplay
    display: Display = _xtest_display_class(name)
    return display


def connect_display(address: X11Address, cookie: bytes | None, *, timeout: float = 10.0,
                    xtest_only: bool = False) -> Display:
    """A python-xlib ``Display`` for ``address`` authorised by ``cookie`` (for the driver and for test probes);
    ``xtest_only``: with the XTEST extension set up and no other (see :func:`_xtest_display`).

    Raises :class:`~deskctl.errors.ProviderUnreachable` when no X server answers there or it refuses us.
    """
    import Xlib.display
    import Xlib.error

    _install_shim()
    where = f"X display {address.display} at {address.describe()}"
    try:
        sock = address.connect_socket(timeout)
    except OSError as exc:
        if out_of_descriptors(exc):
            raise capacity_error(f"connect to {where}") from exc
        raise ProviderUnreachable(f"cannot connect to {where}: {exc.strerror or exc}") from exc
    _pending.sock, _pending.cookie = sock, cookie
    try:
        display = _xtest_display(address.display) if xtest_only else Xlib.display.Display(address.display)
    except Xlib.error.DisplayConnectionError as exc:
        sock.close()
        raise ProviderUnreachable(f"{where} refused the connection: {exc.msg}",
                                  remedy="check the X authority cookie") from exc
    except (OSError, Xlib.error.ConnectionClosedError, Xlib.error.DisplayError) as exc:
        sock.close()
        raise ProviderUnreachable(f"cannot connect to {where}: {exc}") from exc
    finally:
        _pending.sock, _pending.cookie = None, None
    sock.settimeout(None)
    _repair_error_table(display)
    return display


def _repair_error_table(display: Display) -> None:
    """python-xlib 0.33's RANDR and DAMAGE modules register their error classes at codes 0-2 instead of
    first_error + n, in a table shared by every connection, so a core BadValue (2) is parsed as a RANDR error
    and python-xlib crashes on it. Give this connection its own table with the core codes restored and the
    misplaced ones dropped (extension errors are then plain XError)."""
    import Xlib.error

    table = dict(display.display.error_classes)
    for code in [c for c in table if c < 128]:
        core = Xlib.error.xerror_class.get(code)
        if core is None:
            del table[code]
        else:
            table[code] = core
    display.display.error_classes = table


# -- MIT-SHM ---------------------------------------------------------------------------------------------------


def _shm_requests() -> tuple[Any, Any, Any, Any]:
    """The MIT-SHM requests deskctl sends (python-xlib has no MIT-SHM module): Attach (System V id), Detach,
    GetImage and AttachFd (MIT-SHM 1.2: the segment travels as a file descriptor beside the request)."""
    from Xlib.protocol import rq

    class ShmAttach(rq.Request):  # type: ignore[misc]
        _request = rq.Struct(
            rq.Card8("opcode"), rq.Opcode(1), rq.RequestLength(),
            rq.Card32("shmseg"), rq.Card32("shmid"), rq.Bool("read_only"), rq.Pad(3),
        )

    class ShmDetach(rq.Request):  # type: ignore[misc]
        _request = rq.Struct(rq.Card8("opcode"), rq.Opcode(2), rq.RequestLength(), rq.Card32("shmseg"))

    class ShmGetImage(rq.ReplyRequest):  # type: ignore[misc]
        _request = rq.Struct(
            rq.Card8("opcode"), rq.Opcode(4), rq.RequestLength(),
            rq.Card32("drawable"), rq.Int16("x"), rq.Int16("y"), rq.Card16("width"), rq.Card16("height"),
            rq.Card32("plane_mask"), rq.Card8("format"), rq.Pad(3), rq.Card32("shmseg"), rq.Card32("offset"),
        )
        _reply = rq.Struct(
            rq.ReplyCode(), rq.Card8("depth"), rq.Card16("sequence_number"), rq.ReplyLength(),
            rq.Card32("visual"), rq.Card32("size"), rq.Pad(16),
        )

    class ShmAttachFd(rq.Request):  # type: ignore[misc]
        _request = rq.Struct(
            rq.Card8("opcode"), rq.Opcode(6), rq.RequestLength(), rq.Card32("shmseg"), rq.Bool("read_only"),
            rq.Pad(3),
        )

    return ShmAttach, ShmDetach, ShmGetImage, ShmAttachFd


class _FdPassingSocket:
    """python-xlib's socket for the span of one request: its first ``send`` carries ``fd`` (SCM_RIGHTS) with
    the bytes, as MIT-SHM's AttachFd needs; everything else goes to the socket unchanged."""

    def __init__(self, sock: socket.socket, fd: int) -> None:
        self._sock = sock
        self._fd: int | None = fd

    def send(self, data: bytes) -> int:
        if self._fd is None:
            return self._sock.send(data)
        import array

        sent = self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self._fd]))])
        self._fd = None
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Shm:
    """A shared-memory segment attached to the X server for ShmGetImage. Two ways, the first that works:

    * a memfd passed as a file descriptor (MIT-SHM 1.2 AttachFd) over a unix socket: works across IPC
      namespaces, so a Docker desktop whose X socket is shared through a volume gets shared memory too;
    * a System V segment attached by id (same host and IPC namespace; also what a server older than 1.2 takes).

    Raises OSError when the server takes neither (another host, another user's server)."""

    def __init__(self, display: Display, opcode: int, size: int) -> None:
        self.display = display
        self.opcode = opcode
        self.size = size
        self._attach_cls, self._detach_cls, self._get_image_cls, self._attach_fd_cls = _shm_requests()
        self._map: Any = None  # the memfd's mmap
        self._sysv: tuple[Any, int] | None = None  # (libc, address) of a System V segment
        self.seg = display.display.allocate_resource_id()
        sock = display.display.socket
        if isinstance(sock, socket.socket) and sock.family == socket.AF_UNIX and hasattr(os, "memfd_create"):
            try:
                self._attach_memfd()
                return
            except OSError:
                pass
        self._attach_sysv()

    def _attached(self, send: Any) -> None:
        """Send the attach request ``send(onerror)`` and confirm it with a round trip; OSError if refused."""
        from Xlib.error import CatchError

        caught = CatchError()
        send(caught)
        self.display.sync()
        if caught.get_error() is not None:
            raise OSError(f"the X server cannot attach shared memory: {type(caught.get_error()).__name__}")

    def _attach_memfd(self) -> None:
        import mmap

        fd = os.memfd_create("deskctl-capture", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, self.size)
            mapped = mmap.mmap(fd, self.size)
            holder = self.display.display
            self.display.flush()  # what is queued leaves first, without the descriptor
            original = holder.socket
            holder.socket = _FdPassingSocket(original, fd)
            try:
                self._attached(lambda caught: self._attach_fd_cls(
                    display=holder, onerror=caught, opcode=self.opcode, shmseg=self.seg, read_only=False))
            except BaseException:
                mapped.close()
                raise
            finally:
                holder.socket = original
            self._map = mapped
        finally:
            os.close(fd)  # the server holds its own copy; the mapping keeps the memory

    def _attach_sysv(self) -> None:
        # ctypes (and ctypes.util's subprocess, shutil, tempfile) only for this way: a click never needs it
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.shmget.restype = ctypes.c_int
        libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        libc.shmdt.argtypes = [ctypes.c_void_p]
        libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        shmid = libc.shmget(0, self.size, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT | rw owner
        if shmid < 0:
            raise OSError(ctypes.get_errno(), "shmget failed")
        address = libc.shmat(shmid, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            libc.shmctl(shmid, 0, None)
            raise OSError(ctypes.get_errno(), "shmat failed")
        try:
            self._attached(lambda caught: self._attach_cls(
                display=self.display.display, onerror=caught, opcode=self.opcode, shmseg=self.seg, shmid=shmid,
                read_only=False))
        except BaseException:
            # the server cannot see our segment (another host, container or IPC namespace, another user)
            libc.shmdt(ctypes.c_void_p(address))
            raise
        finally:
            # Marked for removal now: the kernel frees it when both we and the server have detached.
            libc.shmctl(shmid, 0, None)  # IPC_RMID
        self._sysv = (libc, address)

    @property
    def by_fd(self) -> bool:
        """Whether the segment was passed as a file descriptor (MIT-SHM 1.2) rather than a System V id."""
        return self._map is not None

    def get_image(self, drawable: int, width: int, height: int) -> bytes:
        reply = self._get_image_cls(
            display=self.display.display, opcode=self.opcode, drawable=drawable, x=0, y=0, width=width,
            height=height, plane_mask=0xFFFFFFFF, format=2, shmseg=self.seg, offset=0,  # format 2 = ZPixmap
        )
        length = min(int(reply.size) or self.size, self.size)
        if self._map is not None:
            return self._map[:length]  # type: ignore[no-any-return]
        import ctypes

        assert self._sysv is not None
        return ctypes.string_at(self._sysv[1], length)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._detach_cls(display=self.display.display, opcode=self.opcode, shmseg=self.seg)
            self.display.flush()
        if self._map is not None:
            self._map.close()
        elif self._sysv is not None:
            import ctypes

            libc, address = self._sysv
            libc.shmdt(ctypes.c_void_p(address))




class _Encoded:
    """Requests already in wire form, in python-xlib's request queue (which only reads ``_binary``)."""

    __slots__ = ("_binary",)

    def __init__(self, binary: bytes) -> None:
        self._binary = binary


class _Watchdog:
    """Ends a blocked X call: python-xlib waits for replies in select() without a timeout, so a server that
    stops answering (SIGSTOP, a dead network path) would hang the caller forever. Armed around each driver
    operation; when one runs past ``timeout`` seconds, ``on_expire`` shuts the socket down, and the blocked
    call fails as a lost connection. One sleeping thread per driver; arming costs a lock and a notify."""

    def __init__(self, timeout: float, on_expire: Any) -> None:
        self.timeout = timeout
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._idle = False
        self.fired = False

    def arm(self) -> None:
        with self._cond:
            self._deadline = time.monotonic() + self.timeout
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="deskctl-x11-watchdog", daemon=True)
                self._thread.start()
            elif self._idle:
                # only an idle watchdog needs waking: one in a timed wait wakes at an earlier deadline anyway
                # and finds this one (so a busy driver does not switch threads on every call)
                self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._deadline is None:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._deadline = None
                self.fired = True
                with contextlib.suppress(Exception):
                    self._on_expire()


_wire_first = False


def prefer_wire(enabled: bool = True) -> None:
    """Make :meth:`X11Driver.open` give this process drivers whose input goes over the X11 wire without python-xlib
    (:class:`~deskctl.core.x11wire.WireDriver`; anything else opens the full driver on first need). For a process
    that runs one action (``deskctl do``) or one capture: python-xlib's import and setup were most of its cost."""
    global _wire_first
    _wire_first = enabled


class X11Driver:
    """One X connection to one desktop: XTEST input, screen capture, keymap handling. Thread-safe.

    Build with :meth:`open`; release with :meth:`close` (also a context manager). Every method raises only
    :mod:`deskctl.errors` classes.
    """

    def __init__(self, display: Display, address: X11Address, *, provider: str | None = None,
                 use_shm: bool = True, op_timeout: float = 60.0) -> None:
        self._display = display
        self.address = address
        self.provider = provider
        self._lock = threading.RLock()
        self._closed = False
        self._released = False
        self._nesting = 0
        self._watchdog = _Watchdog(op_timeout, self._abort)
        self._shm: _Shm | None = None
        self._shm_tried = not use_shm
        # Errors of requests without a reply arrive later; python-xlib would print them. Keep them, and raise
        # the first at the next round trip (every action ends with one).
        self._async_errors: list[Any] = []
        self._atoms: dict[str, int] = {}
        display.set_error_handler(lambda err, request=None: self._async_errors.append(err))
        with self._errors("set up"):
            if not display.has_extension("XTEST"):
                raise ProviderApiError(f"X display {address.display} has no XTEST extension", provider=provider)
            screen = display.screen()
            self._root = screen.root
            self._depth = int(screen.root_depth)
            self._keymap_first = int(display.display.info.min_keycode)
            self._keymap_last = int(display.display.info.max_keycode)
            self._keymap: list[tuple[int, ...]] = []
            #: keysym -> (keycode, index) with the lowest index (0 plain, 1 shifted), from ``_keymap``
            self._keysym_index: dict[int, tuple[int, int]] = {}
            #: character -> its encoded FakeInput requests, valid for the current ``_keymap`` only
            self._tap_cache: dict[str, bytes] = {}
            self._fake_input_cache: dict[tuple[int, int], bytes] = {}
            self._xtest_major = int(display.display.get_extension_major("XTEST"))
            # The keymap is read when a key is first looked up (a miss reloads it): a click never needs it.
            formats = {int(f.depth): int(f.bits_per_pixel) for f in display.display.info.pixmap_formats}
            self._bits_per_pixel = formats.get(self._depth, 32)

    @classmethod
    def open(
        cls,
        display: str = ":0",
        *,
        socket_path: str | None = None,
        host: str | None = None,
        port: int | None = None,
        cookie: bytes | None = None,
        timeout: float = 10.0,
        provider: str | None = None,
        use_shm: bool = True,
        op_timeout: float = 60.0,
    ) -> X11Driver:
        """Connect to ``display`` (see the module docstring for the three ways); ``provider`` names errors;
        an operation the server does not answer within ``op_timeout`` seconds fails as a lost session."""
        address = X11Address(display=display, socket_path=socket_path, host=host, port=port)
        if _wire_first:
            from typing import cast

            from deskctl.core.x11wire import WireConnection, WireDriver

            wire = WireConnection.connect(address, cookie, timeout=timeout, provider=provider)

            def full() -> X11Driver:
                return cls._open(address, cookie, timeout, provider, use_shm and host is None, op_timeout)

            # the input half of this class without python-xlib (see x11wire): what a `deskctl do` process needs
            return cast("X11Driver", WireDriver(wire, full, op_timeout=op_timeout))
        return cls._open(address, cookie, timeout, provider, use_shm and host is None, op_timeout)

    @classmethod
    def _open(cls, address: X11Address, cookie: bytes | None, timeout: float, provider: str | None, use_shm: bool,
              op_timeout: float) -> X11Driver:
        try:
            conn = connect_display(address, cookie, timeout=timeout, xtest_only=True)
        except DeskctlError as err:
            err.provider = err.provider or provider
            raise
        try:
            return cls(conn, address, provider=provider, use_shm=use_shm, op_timeout=op_timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise

    def __enter__(self) -> X11Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        import Xlib.error

        if self._closed:
            raise SessionLost(f"the X connection to {self.address.display} is closed", provider=self.provider)
        if self._nesting == 0:
            self._watchdog.arm()
        self._nesting += 1
        try:
            yield
        except DeskctlError:
            raise
        except Xlib.error.ConnectionClosedError as exc:
            if self._watchdog.fired:
                raise SessionLost(
                    f"X display {self.address.display} did not answer within {self._watchdog.timeout:g}s while we "
                    f"tried to {doing}; the connection was dropped", provider=self.provider,
                ) from exc
            raise SessionLost(
                f"X display {self.address.display} closed the connection while we tried to {doing}",
                provider=self.provider,
            ) from exc
        except Xlib.error.XError as exc:
            raise ProviderApiError(
                f"X display {self.address.display} refused to {doing}: {type(exc).__name__}", provider=self.provider
            ) from exc
        except OSError as exc:
            raise SessionLost(
                f"lost the X display {self.address.display} while we tried to {doing}: {exc.strerror or exc}",
                provider=self.provider,
            ) from exc
        finally:
            self._nesting -= 1
            if self._nesting == 0:
                self._watchdog.disarm()
                if self._closed:  # close() ran in another thread during this call: free what it could not
                    self._release()

    def _abort(self) -> None:
        """Called by the watchdog: wake the blocked call by shutting the socket down under it."""
        self._display.display.socket.shutdown(socket.SHUT_RDWR)

    def _check_alive(self) -> None:
        # python-xlib notices a dropped socket only when it reads; a sync makes every action confirm delivery,
        # and brings back the errors of the requests it sent.
        self._display.sync()
        if self._async_errors:
            first = self._async_errors[0]
            self._async_errors.clear()
            raise ProviderApiError(f"X display {self.address.display} refused a request: {type(first).__name__}",
                                   provider=self.provider)

    # -- geometry and capture ---------------------------------------------------------------------------------
    def size(self) -> tuple[int, int]:
        """The live size of the root window (queried from the server, not cached)."""
        with self._lock, self._errors("read the screen size"):
            geom = self._root.get_geometry()
            return int(geom.width), int(geom.height)

    def capture_raw(self) -> tuple[bytes, int, int, str]:
        """The root window's pixels as (data, width, height, Pillow raw mode)."""
        with self._lock, self._errors("capture the screen"):
            width, height = self.size()
            data = self._capture(width, height)
            mode = {32: "BGRX", 16: "BGR;16", 8: "L"}.get(self._bits_per_pixel)
            if mode is None:
                raise ProviderApiError(f"cannot capture a {self._bits_per_pixel}-bit screen", provider=self.provider)
            return data, width, height, mode

    def _capture(self, width: int, height: int) -> bytes:
        size = width * height * self._bits_per_pixel // 8
        if not self._shm_tried:
            self._shm_tried = True
            self._shm = self._try_shm(size)
        if self._shm is not None and self._shm.size >= size:
            return self._shm.get_image(self._root.id, width, height)
        if self._shm is not None:  # the screen grew: a new segment
            self._shm.close()
            self._shm = self._try_shm(size)
            if self._shm is not None:
                return self._shm.get_image(self._root.id, width, height)
        from Xlib import X

        reply = self._root.get_image(0, 0, width, height, X.ZPixmap, 0xFFFFFFFF)
        data: bytes = reply.data
        return data

    def _try_shm(self, size: int) -> _Shm | None:
        import Xlib.error

        try:
            info = self._display.query_extension("MIT-SHM")
            if info is None or not info.present:
                return None
            return _Shm(self._display, int(info.major_opcode), size)
        except (OSError, Xlib.error.XError, AttributeError):
            return None

    @property
    def uses_shm(self) -> bool:
        """Whether captures go through MIT-SHM (decided at the first capture)."""
        return self._shm is not None

    def raw_frame(self) -> RawFrame:
        """The screen's pixels as captured (MIT-SHM when possible), without encoding: for a live view."""
        data, width, height, mode = self.capture_raw()
        return RawFrame(bytes(data), width, height, mode)

    def screenshot(self, *, compress_level: int = 1) -> Screenshot:
        """The screen as PNG (see :func:`encode_png`); its pixel grid is the action coordinate space."""
        data, width, height, mode = self.capture_raw()
        png = encode_png(data, width, height, mode, level=compress_level)
        return Screenshot(png=png, width=width, height=height)

    # -- pointer -----------------------------------------------------------------------------------------------
    def _fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None:
        from Xlib.ext import xtest

        xtest.fake_input(self._display, event_type, detail, x=x, y=y)

    def _motion(self, x: int, y: int) -> None:
        from Xlib import X

        self._fake(X.MotionNotify, 0, x, y)

    def _button(self, button: int, press: bool) -> None:
        from Xlib import X

        self._fake(X.ButtonPress if press else X.ButtonRelease, button)

    def move(self, x: int, y: int) -> None:
        with self._lock, self._errors("move the pointer"):
            self._motion(x, y)
            self._check_alive()

    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        with self._lock, self._errors("click"):
            number = _button_number(button)
            self._motion(x, y)
            for _ in range(max(1, count)):
                self._stop_if_closed()
                self._button(number, True)
                self._button(number, False)
            self._check_alive()

    def mouse_down(self, x: int, y: int, button: str = "left") -> None:
        with self._lock, self._errors("press a mouse button"):
            self._motion(x, y)
            self._button(_button_number(button), True)
            self._check_alive()

    def mouse_up(self, x: int, y: int, button: str = "left") -> None:
        with self._lock, self._errors("release a mouse button"):
            self._motion(x, y)
            self._button(_button_number(button), False)
            self._check_alive()

    def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left", steps: int = 8) -> None:
        """Press at (x1, y1), move in ``steps`` straight-line steps, release at (x2, y2)."""
        with self._lock, self._errors("drag"):
            number = _button_number(button)
            self._motion(x1, y1)
            self._button(number, True)
            for i in range(1, steps + 1):
                self._motion(x1 + (x2 - x1) * i // steps, y1 + (y2 - y1) * i // steps)
            self._button(number, False)
            self._check_alive()

    def cursor_position(self) -> tuple[int, int]:
        """Where the pointer is on the root window (one QueryPointer round trip)."""
        with self._lock, self._errors("read the pointer position"):
            reply = self._root.query_pointer()
            return int(reply.root_x), int(reply.root_y)

    # -- windows ------------------------------------------------------------------------------------------------
    def _atom(self, name: str) -> int:
        if name not in self._atoms:
            self._atoms[name] = int(self._display.intern_atom(name))
        return self._atoms[name]

    def _window_name(self, window: Any) -> str:
        """``_NET_WM_NAME`` (UTF-8), else ``WM_NAME`` (a Latin-1 STRING, COMPOUND_TEXT as Xt clients such as
        xterm write it, or UTF-8); empty when the window has neither."""
        from Xlib import X, Xatom

        utf8 = self._atom("UTF8_STRING")
        for atom, kind in ((self._atom("_NET_WM_NAME"), utf8), (Xatom.WM_NAME, X.AnyPropertyType)):
            prop = window.get_full_property(atom, kind)
            if prop is None or prop.format != 8 or not prop.value:
                continue
            raw = prop.value if isinstance(prop.value, bytes) else str(prop.value).encode("latin-1", "replace")
            if prop.property_type == Xatom.STRING:
                return raw.decode("latin-1")
            if prop.property_type == self._atom("COMPOUND_TEXT"):
                return decode_compound_text(raw)
            return raw.decode("utf-8", errors="replace")
        return ""

    def window_titles(self) -> list[str]:
        """Titles of the top-level windows, bottom to top (empty names left out; a window that closes meanwhile
        is skipped). With an EWMH window manager: its managed clients (``_NET_CLIENT_LIST``, so minimised
        windows count too); without one: the mapped children of the root, and under a mapped window without a
        name (a frame of a window manager that is not EWMH), the first named mapped windows below it."""
        import Xlib.error
        from Xlib import X, Xatom

        with self._lock, self._errors("list windows"):
            display = self._display
            clients = self._root.get_full_property(self._atom("_NET_CLIENT_LIST"), Xatom.WINDOW)
            titles: list[str] = []
            if clients is not None and clients.format == 32:
                for wid in clients.value:
                    with contextlib.suppress(Xlib.error.BadWindow, Xlib.error.BadMatch):
                        name = self._window_name(display.create_resource_object("window", int(wid)))
                        if name:
                            titles.append(name)
                return titles

            def walk(window: Any, depth: int) -> None:
                try:
                    children = window.query_tree().children
                except (Xlib.error.BadWindow, Xlib.error.BadMatch):
                    return
                for child in children:
                    try:
                        if child.get_attributes().map_state != X.IsViewable:
                            continue
                        name = self._window_name(child)
                    except (Xlib.error.BadWindow, Xlib.error.BadMatch):
                        continue
                    if name:
                        titles.append(name)
                    elif depth < 3:
                        walk(child, depth + 1)

            walk(self._root, 0)
            return titles

    def scroll(self, x: int, y: int, dx: int = 0, dy: int = 0) -> None:
        """Wheel clicks at (x, y): ``dy`` > 0 down (button 5), < 0 up (4); ``dx`` > 0 right (7), < 0 left (6)."""
        with self._lock, self._errors("scroll"):
            self._motion(x, y)
            for amount, negative, positive in ((dy, _SCROLL_UP, _SCROLL_DOWN), (dx, _SCROLL_LEFT, _SCROLL_RIGHT)):
                button = positive if amount > 0 else negative
                for _ in range(abs(amount)):
                    self._stop_if_closed()
                    self._button(button, True)
                    self._button(button, False)
            self._check_alive()

    # -- keyboard ----------------------------------------------------------------------------------------------
    def _load_keymap(self) -> None:
        count = self._keymap_last - self._keymap_first + 1
        self._keymap = [tuple(int(s) for s in row) for row in
                        self._display.get_keyboard_mapping(self._keymap_first, count)]
        self._index_keymap()

    def _index_keymap(self) -> None:
        """Rebuild the keysym index after any change of ``_keymap`` (and forget what was encoded with it)."""
        index: dict[int, tuple[int, int]] = {}
        for offset, row in enumerate(self._keymap):
            for position, sym in enumerate(row[:2]):
                if sym and (sym not in index or position < index[sym][1]):
                    index[sym] = (self._keymap_first + offset, position)
        self._keysym_index = index
        self._tap_cache.clear()

    def _lookup(self, keysym: int) -> tuple[int, int] | None:
        """(keycode, index) for ``keysym`` with the lowest index (0 plain, 1 shifted), or None."""
        return self._keysym_index.get(keysym)

    def _keycode_for(self, keysym: int) -> tuple[int, bool]:
        """(keycode, needs shift) for ``keysym``, binding a spare keycode when the keymap lacks it."""
        found = self._lookup(keysym)
        if found is None:
            self._load_keymap()  # another client may have changed it since
            found = self._lookup(keysym)
        if found is None:
            found = (self._borrow_keycode(keysym), 0)
        keycode, index = found
        return keycode, index == 1

    # The borrowed keycodes, least recently bound first, live on the root window as CARDINALs: for each one
    # [keycode, n, original keysym 1..n], so that any driver of the display can reuse and restore them.
    def _read_borrowed(self, atom: int) -> list[tuple[int, tuple[int, ...]]]:
        from Xlib import Xatom

        prop = self._root.get_property(atom, Xatom.CARDINAL, 0, 65536)
        values = [int(v) for v in prop.value] if prop is not None and prop.format == 32 else []
        records: list[tuple[int, tuple[int, ...]]] = []
        i = 0
        while i + 1 < len(values):
            keycode, count = values[i], values[i + 1]
            records.append((keycode, tuple(values[i + 2 : i + 2 + count])))
            i += 2 + count
        return [(k, o) for k, o in records if self._keymap_first <= k <= self._keymap_last]

    def _write_borrowed(self, atom: int, records: list[tuple[int, tuple[int, ...]]]) -> None:
        from Xlib import Xatom

        if not records:
            self._root.delete_property(atom)
            return
        flat: list[int] = []
        for keycode, original in records:
            flat += [keycode, len(original), *original]
        self._root.change_property(atom, Xatom.CARDINAL, 32, flat)

    def _spare_keycodes(self, taken: set[int]) -> list[int]:
        """Keycodes deskctl may bind: unbound ones first, then those bound only to vendor (XF86) keysyms, which
        no deskctl key name reaches; highest first, as low keycodes are the real keyboard's."""
        empty: list[int] = []
        vendor: list[int] = []
        for offset, row in reversed(list(enumerate(self._keymap))):
            keycode = self._keymap_first + offset
            if keycode in taken:
                continue
            if all(sym == 0 for sym in row):
                empty.append(keycode)
            elif all(sym == 0 or sym & 0xFFFF0000 == 0x10080000 for sym in row):
                vendor.append(keycode)
        return empty + vendor

    def _borrow_keycode(self, keysym: int) -> int:
        """Bind ``keysym`` to a spare keycode (or the least recently bound borrowed one) under a server grab."""
        display = self._display
        atom = display.intern_atom(_BORROWED_PROPERTY)
        display.grab_server()
        try:
            self._load_keymap()
            records = self._read_borrowed(atom)
            spare = self._spare_keycodes({k for k, _ in records})
            if spare:
                keycode = spare[0]
                original = self._keymap[keycode - self._keymap_first]
            elif records:
                keycode, original = records[0]
            else:
                raise ProviderApiError(
                    f"no spare keycode on X display {self.address.display} to type keysym {keysym:#x}",
                    provider=self.provider,
                )
            width = max(2, len(self._keymap[0]) if self._keymap else 2)
            row = (keysym, keysym) + (0,) * (width - 2)
            display.change_keyboard_mapping(keycode, [row])
            self._write_borrowed(atom, [r for r in records if r[0] != keycode] + [(keycode, tuple(original))])
            self._keymap[keycode - self._keymap_first] = row
            self._index_keymap()
            display.sync()
        finally:
            display.ungrab_server()
            display.flush()
        self._drain_events()
        return keycode

    def _drain_events(self) -> None:
        # MappingNotify goes to every client; read them so python-xlib's queue does not grow.
        while self._display.pending_events():
            self._display.next_event()

    def restore_keymap(self) -> None:
        """Give back every keycode deskctl borrowed on this display, with its original keysyms."""
        with self._lock, self._errors("restore the keymap"):
            display = self._display
            atom = display.intern_atom(_BORROWED_PROPERTY)
            display.grab_server()
            try:
                if not self._keymap:
                    self._load_keymap()
                width = max(2, len(self._keymap[0]) if self._keymap else 2)
                for keycode, original in self._read_borrowed(atom):
                    row = tuple(original[:width]) + (0,) * (width - len(original[:width]))
                    display.change_keyboard_mapping(keycode, [row])
                self._write_borrowed(atom, [])
                display.sync()
            finally:
                display.ungrab_server()
                display.flush()
            self._load_keymap()
            self._drain_events()

    def _key_event(self, keycode: int, press: bool) -> None:
        from Xlib import X

        self._fake(X.KeyPress if press else X.KeyRelease, keycode)

    def _encoded_fake_input(self, event_type: int, detail: int) -> bytes:
        """One XTEST FakeInput request as python-xlib would encode it (core device, current time, no motion)."""
        key = (event_type, detail)
        encoded = self._fake_input_cache.get(key)
        if encoded is None:
            from Xlib.ext import xtest

            encoded = bytes(xtest.FakeInput._request.to_binary(
                opcode=self._xtest_major, event_type=event_type, detail=detail, time=0, root=0, x=0, y=0))
            self._fake_input_cache[key] = encoded
        return encoded

    def _encoded_tap(self, keysym: int) -> bytes:
        """The FakeInput requests that tap ``keysym`` (with Shift around it when it is the shifted symbol);
        binds a spare keycode first when the keymap lacks it."""
        from Xlib import X

        keycode, shift = self._keycode_for(keysym)
        press, release = self._encoded_fake_input(X.KeyPress, keycode), self._encoded_fake_input(X.KeyRelease, keycode)
        if not shift:
            return press + release
        shift_code = self._keycode_for(_SHIFT)[0]
        return (self._encoded_fake_input(X.KeyPress, shift_code) + press + release
                + self._encoded_fake_input(X.KeyRelease, shift_code))

    def _queue_encoded(self, chunks: list[bytes]) -> None:
        """Put pre-encoded requests (none with a reply) on python-xlib's request queue as one block, counting
        each in its sequence numbers so that the replies and errors that follow are matched right."""
        if not chunks:
            return
        data = b"".join(chunks)
        conn = self._display.display
        if conn.socket_error:
            raise conn.socket_error
        conn.request_queue_lock.acquire()
        try:
            conn.request_serial = (conn.request_serial + len(data) // _FAKE_INPUT_SIZE) % 65536
            conn.request_queue.append((_Encoded(data), False))
        finally:
            conn.request_queue_lock.release()

    def key(self, *keys: str) -> None:
        """Press a chord (``key("ctrl", "s")``): modifiers down in order, the last key tapped, all released in
        reverse order. A character that needs Shift gets it (``key("ctrl", "S")`` is ctrl+shift+s)."""
        with self._lock, self._errors("press keys"):
            keysyms = [keysym_for_key(k) for k in keys]
            codes: list[int] = []
            need_shift = False
            for keysym in keysyms:
                keycode, shift = self._keycode_for(keysym)
                codes.append(keycode)
                need_shift = need_shift or shift
            if need_shift and _SHIFT not in keysyms:
                codes.insert(len(codes) - 1, self._keycode_for(_SHIFT)[0])
            for keycode in codes:
                self._key_event(keycode, True)
            for keycode in reversed(codes):
                self._key_event(keycode, False)
            self._check_alive()

    def key_down(self, key: str) -> None:
        """Hold a key down; a character that needs Shift (``"A"``) holds Shift with it until :meth:`key_up`."""
        with self._lock, self._errors("press a key"):
            keycode, shift = self._keycode_for(keysym_for_key(key))
            if shift:
                self._key_event(self._keycode_for(_SHIFT)[0], True)
            self._key_event(keycode, True)
            self._check_alive()

    def key_up(self, key: str) -> None:
        with self._lock, self._errors("release a key"):
            keycode, shift = self._keycode_for(keysym_for_key(key))
            self._key_event(keycode, False)
            if shift:
                self._key_event(self._keycode_for(_SHIFT)[0], False)
            self._check_alive()

    def type_text(self, text: str) -> None:
        """Type ``text`` (any Unicode; newline is Return, tab is Tab) as key taps. Linear in the length of the
        text: each distinct character is encoded once, and the taps go out in batches of ``_TYPE_BATCH``
        characters, each confirmed by a round trip (so an error or a lost server is reported by the batch in
        which it happens)."""
        with self._lock, self._errors("type text"):
            taps = self._tap_cache  # cleared in place whenever the keymap changes
            pending: list[bytes] = []
            for char in text:
                if self._closed:
                    self._stop_if_closed()
                encoded = taps.get(char)
                if encoded is None:
                    # Encoding may rebind a keycode: the taps before it must reach the server first.
                    self._queue_encoded(pending)
                    pending = []
                    encoded = self._encoded_tap(keysym_for_char(char))
                    taps[char] = encoded
                pending.append(encoded)
                if len(pending) >= _TYPE_BATCH:
                    self._queue_encoded(pending)
                    pending = []
                    self._watchdog.arm()
                    self._check_alive()
            self._queue_encoded(pending)
            self._check_alive()

    # -- actions -----------------------------------------------------------------------------------------------
    def act(self, action: Action) -> None:
        """Run one :mod:`deskctl.actions` action."""
        match action:
            case Click(x=x, y=y, button=button, count=count):
                self.click(x, y, button, count)
            case Move(x=x, y=y):
                self.move(x, y)
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                self.drag(x1, y1, x2, y2, button)
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                self.scroll(x, y, dx, dy)
            case MouseDown(x=x, y=y, button=button):
                self.mouse_down(x, y, button)
            case MouseUp(x=x, y=y, button=button):
                self.mouse_up(x, y, button)
            case TypeText(text=text):
                self.type_text(text)
            case KeyPress(keys=keys):
                self.key(*keys)
            case KeyDown(key=key):
                self.key_down(key)
            case KeyUp(key=key):
                self.key_up(key)
            case _:
                raise UsageError(f"unsupported action {action!r}", code="usage.unsupported")

    # -- lifetime ----------------------------------------------------------------------------------------------
    def ping(self) -> None:
        """One round trip; raises :class:`~deskctl.errors.SessionLost` when the server is gone."""
        with self._lock, self._errors("reach the display"):
            self._check_alive()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the connection (idempotent); never raises, and never waits for a call in progress: a teardown
        must not wait on an action (a long scroll or typing, a server that stopped answering). With a call
        running in another thread, the connection is shut down under it, the call fails as a lost session at its
        next request, and that thread releases the connection when it leaves."""
        if not self._lock.acquire(blocking=False):
            self._closed = True  # the running call's loops stop at their next step (_stop_if_closed)
            self._watchdog.stop()
            with contextlib.suppress(Exception):
                self._abort()
            return
        try:
            self._closed = True
            self._release()
        finally:
            self._lock.release()

    def _release(self) -> None:
        """Free the connection and the shared memory, once (with the lock held)."""
        if self._released:
            return
        self._released = True
        self._watchdog.stop()
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        with contextlib.suppress(Exception):
            self._display.close()

    def _stop_if_closed(self) -> None:
        """In the loops of long actions: end the action once :meth:`close` was called from another thread."""
        if self._closed:
            raise SessionLost(f"the X connection to {self.address.display} was closed during the action",
                              provider=self.provider)


_CT_ESCAPE = re.compile(rb"(\x1b%G|\x1b%@|\x1b[\x20-\x2f]*[\x30-\x7e])")


def decode_compound_text(raw: bytes) -> str:
    """An X COMPOUND_TEXT string (ISO 2022): Latin-1 by default, UTF-8 between ``ESC % G`` and ``ESC % @`` (how
    Xlib writes characters outside Latin-1 today). Other character set designations are dropped and their bytes
    read as Latin-1: a title in a legacy Asian encoding comes out garbled, never as an error."""
    out: list[str] = []
    utf8 = False
    for part in _CT_ESCAPE.split(raw):
        if part == b"\x1b%G":
            utf8 = True
        elif part == b"\x1b%@":
            utf8 = False
        elif not part.startswith(b"\x1b"):
            out.append(part.decode("utf-8", errors="replace") if utf8 else part.decode("latin-1"))
    return "".join(out)


def _button_number(button: str) -> int:
    try:
        return _BUTTONS[button]
    except KeyError:
        raise UsageError(f"unknown mouse button {button!r}; allowed: left, middle, right",
                         code="usage.bad_button") from None


def wait_for_display(address: X11Address, cookie: bytes | None, deadline: float) -> None:
    """Return once an X server answers at ``address`` (one connection attempt per socket event or retry).

    ``deadline`` is ``time.monotonic()`` based; raises :class:`~deskctl.errors.ReadinessTimeout` with the last
    error seen.
    """
    from deskctl.errors import ReadinessTimeout

    last: str = "no attempt"
    delay = 0.005
    while True:
        try:
            display = connect_display(address, cookie, timeout=max(0.1, deadline - time.monotonic()))
        except ProviderUnreachable as err:
            last = err.message
        else:
            display.close()
            return
        if time.monotonic() >= deadline:
            raise ReadinessTimeout(f"X display {address.display} did not answer in time; last: {last}")
        # Back off between attempts: the server gives no event we could wait on from here.
        threading.Event().wait(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.25)
