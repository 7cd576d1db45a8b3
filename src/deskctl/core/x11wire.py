"""Input over the X11 wire without python-xlib: the few requests of one ``deskctl do`` process.

``deskctl do ID click X Y`` is a whole process per action; importing python-xlib and building its ``Display``
was the largest part of it. :class:`WireDriver` speaks the X11 protocol itself for what an input action needs:
the connection setup (MIT-MAGIC-COOKIE-1), ``QueryExtension("XTEST")``, XTEST ``FakeInput``,
``GetKeyboardMapping`` (a key is looked up as :class:`~deskctl.core.x11.X11Driver` does) and
``GetInputFocus`` as the round trip that ends every action (errors of the requests before it come back with it,
and a lost server shows). The requests are byte for byte those python-xlib sends for the same action.

It also reads the screen (GetGeometry, GetImage: what a ``deskctl screenshot`` process needs). Everything else
(window titles, the pointer's position, a key the keymap lacks, which needs a keycode borrowed) goes to a
full :class:`~deskctl.core.x11.X11Driver`, opened on first need; from then on every call goes there and
the wire connection is closed (two connections would not order their requests).

:func:`prefer_wire` (also :func:`deskctl.core.x11.prefer_wire`) turns it on for a process (the CLI's ``do`` and
``screenshot`` paths do); the library keeps the full driver. The flag lives here, not in :mod:`deskctl.core.x11`,
so that a provider can open a driver through :func:`deskctl.core.x11open.open_x11` without importing the full
driver's module (and python-xlib's shims) at all.
"""

from __future__ import annotations

import _socket
import _thread  # threading.RLock's very class (deskctl._threads.RLock), which the image's agent also runs with
import struct

from deskctl.actions import Click, Drag, KeyDown, KeyPress, KeyUp, MouseDown, MouseUp, Move, Scroll, TypeText
from deskctl.errors import DeskctlError, ProviderApiError, ProviderUnreachable, SessionLost

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from deskctl.actions import Action
    from deskctl.core.frames import RawFrame, Screenshot
    from deskctl.core.x11 import X11Address, X11Driver

__all__ = ["WireConnection", "WireDriver", "prefer_wire", "wire_driver", "wire_preferred"]

_KEY_PRESS, _KEY_RELEASE, _BUTTON_PRESS, _BUTTON_RELEASE, _MOTION = 2, 3, 4, 5, 6
_ERROR_NAMES = {1: "BadRequest", 2: "BadValue", 3: "BadWindow", 4: "BadPixmap", 5: "BadAtom", 6: "BadCursor",
                7: "BadFont", 8: "BadMatch", 9: "BadDrawable", 10: "BadAccess", 11: "BadAlloc", 12: "BadColor",
                13: "BadGC", 14: "BadIDChoice", 15: "BadName", 16: "BadLength", 17: "BadImplementation"}


_wire_first = False


def prefer_wire(enabled: bool = True) -> None:
    """Make this process's drivers go over the X11 wire without python-xlib (:class:`WireDriver`; anything else
    opens the full driver on first need). For a process that runs one action (``deskctl do``) or one capture:
    python-xlib's import and setup were most of its cost."""
    global _wire_first
    _wire_first = enabled


def wire_preferred() -> bool:
    return _wire_first


def wire_driver(address: X11Address, cookie: bytes | None, timeout: float, provider: str | None,
                open_full: Callable[[], X11Driver], op_timeout: float) -> X11Driver:
    """A :class:`WireDriver` connected to ``address``, typed as the full driver whose surface it has; what it does
    not take goes to ``open_full()``."""
    wire = WireConnection.connect(address, cookie, timeout=timeout, provider=provider)
    driver: Any = WireDriver(wire, open_full, op_timeout=op_timeout)  # not typing.cast: no typing at run time
    full: X11Driver = driver
    return full


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


class WireConnection:
    """One X11 connection: the setup, requests written as bytes, replies and errors read in order."""

    def __init__(self, sock: _socket.socket, display: str, provider: str | None) -> None:
        self.sock = sock
        self.display = display
        self.provider = provider
        self._sent = 0  # requests sent (the sequence number of the last one, mod 2**16)
        self._out: list[bytes] = []
        self._buffer = bytearray()
        self.lsb_first = True
        self.depth = self.bits_per_pixel = 0
        self.root = 0
        self.min_keycode = self.max_keycode = 0

    @classmethod
    def connect(cls, address: X11Address, cookie: bytes | None, *, timeout: float = 10.0,
                provider: str | None = None) -> WireConnection:
        """Connect and authorise; :class:`~deskctl.errors.ProviderUnreachable` when no server answers or it refuses
        us (as :func:`~deskctl.core.x11.connect_display` says it)."""
        where = f"X display {address.display} at {address.describe()}"
        try:
            sock = address.connect_socket(timeout)
        except OSError as exc:
            from deskctl._fds import capacity_error, out_of_descriptors  # here: with select, errno and math

            if out_of_descriptors(exc):
                raise capacity_error(f"connect to {where}") from exc
            raise ProviderUnreachable(f"cannot connect to {where}: {exc.strerror or exc}", provider=provider) from exc
        conn = cls(sock, address.display, provider)
        try:
            conn._setup(cookie, where)
        except BaseException:
            sock.close()
            raise
        return conn

    def _setup(self, cookie: bytes | None, where: str) -> None:
        name = b"MIT-MAGIC-COOKIE-1" if cookie else b""
        data = cookie or b""
        try:
            self.sock.sendall(struct.pack("<BxHHHHxx", 0x6C, 11, 0, len(name), len(data)) + _pad(name) + _pad(data))
            head = self._read(8)
            status, _, _, _, length = struct.unpack("<BBHHH", head)
            body = self._read(length * 4)
        except (OSError, SessionLost) as exc:
            raise ProviderUnreachable(f"cannot connect to {where}: {exc}", provider=self.provider) from exc
        if status != 1:
            reason = body[: head[1]].decode(errors="replace") if status == 0 else "more authentication wanted"
            raise ProviderUnreachable(f"{where} refused the connection: {reason.strip()}", provider=self.provider,
                                      remedy="check the X authority cookie")
        vendor_length = struct.unpack_from("<H", body, 16)[0]
        formats = body[21]
        self.lsb_first = body[22] == 0  # image byte order
        self.min_keycode, self.max_keycode = body[26], body[27]
        start = 32 + vendor_length + (-vendor_length % 4)
        bits = {body[start + 8 * i]: body[start + 8 * i + 1] for i in range(formats)}  # depth -> bits per pixel
        screen = start + 8 * formats
        self.root = struct.unpack_from("<I", body, screen)[0]
        self.depth = body[screen + 38]
        self.bits_per_pixel = bits.get(self.depth, 0)
        self.sock.settimeout(None)

    # -- bytes ---------------------------------------------------------------------------------------------
    def _read(self, size: int) -> bytes:
        buffer = self._buffer
        if len(buffer) < size:
            buffer += self._read_new(size - len(buffer))
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _read_new(self, size: int) -> bytearray:
        """``size`` bytes from the socket (none of them buffered yet), received in place: a large reply (an image)
        is never copied after it arrives."""
        data = bytearray(size)
        view = memoryview(data)
        filled = 0
        while filled < size:
            count = self.sock.recv_into(view[filled:])
            if not count:
                raise SessionLost(f"X display {self.display} closed the connection", provider=self.provider)
            filled += count
        return data

    def _read_body(self, size: int) -> bytes | bytearray:
        """A reply's body of ``size`` bytes: what is buffered, then the rest straight from the socket."""
        if size <= len(self._buffer) or size < 65536:
            return self._read(size)
        head = bytes(self._buffer)
        self._buffer.clear()
        if not head:
            return self._read_new(size)
        body = bytearray(head)
        body += self._read_new(size - len(head))
        return body

    def queue(self, request: bytes) -> None:
        self._out.append(request)
        self._sent += 1

    def flush(self) -> None:
        if self._out:
            data, self._out = b"".join(self._out), []
            self.sock.sendall(data)

    def round_trip(self, request: bytes) -> bytes:
        """Send the queued requests and ``request`` (one with a reply); its reply (header included). An error of
        any request before it is raised as :class:`~deskctl.errors.ProviderApiError`."""
        packet, body = self.exchange(request)
        return packet + body if body else packet

    def exchange(self, request: bytes) -> tuple[bytes, bytes | bytearray]:
        """As :meth:`round_trip`, the reply as (its 32-byte header, the rest): a large rest (an image) as it was
        received, without a copy."""
        self.queue(request)
        wanted = self._sent & 0xFFFF
        self.flush()
        error: int | None = None
        while True:
            packet = self._read(32)
            kind = packet[0]
            sequence = struct.unpack_from("<H", packet, 2)[0]
            if kind == 0:  # an error: of an earlier request, or of this one
                error = error if error is not None else packet[1]
                if sequence == wanted:
                    break
                continue
            if kind == 1:
                extra = struct.unpack_from("<I", packet, 4)[0]
                body = self._read_body(extra * 4) if extra else b""
                if sequence == wanted:
                    if error is not None:
                        break
                    return packet, body
                continue
            # an event (none is selected; a server may still send some): skipped
        name = _ERROR_NAMES.get(error or 0, f"error {error}")
        raise ProviderApiError(f"X display {self.display} refused a request: {name}", provider=self.provider)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- requests ------------------------------------------------------------------------------------------
    def query_extension(self, name: bytes) -> int | None:
        """The major opcode of extension ``name``, or None."""
        request = struct.pack("<BxHHxx", 98, 2 + (len(name) + 3) // 4, len(name)) + _pad(name)
        reply = self.round_trip(request)
        present, major = reply[8], reply[9]
        return major if present else None

    def keyboard_mapping(self) -> list[tuple[int, ...]]:
        first, count = self.min_keycode, self.max_keycode - self.min_keycode + 1
        reply = self.round_trip(struct.pack("<BxHBBxx", 101, 2, first, count))
        per = reply[1]
        syms = struct.unpack_from(f"<{count * per}I", reply, 32)
        return [tuple(syms[i * per:(i + 1) * per]) for i in range(count)]

    def sync(self) -> None:
        self.round_trip(struct.pack("<BxH", 43, 1))  # GetInputFocus

    def geometry(self) -> tuple[int, int]:
        reply = self.round_trip(struct.pack("<BxHI", 14, 2, self.root))  # GetGeometry of the root window
        width, height = struct.unpack_from("<HH", reply, 16)
        return int(width), int(height)

    def get_image(self, width: int, height: int) -> bytes | bytearray:
        """The root window's pixels, ZPixmap, all planes (GetImage, as python-xlib's ``get_image``), as received."""
        _, pixels = self.exchange(struct.pack("<BBHIhhHHI", 73, 2, 5, self.root, 0, 0, width, height, 0xFFFFFFFF))
        return pixels


class _WireErrors:
    """:meth:`WireDriver._errors`'s ``with`` block (a class: a one-shot CLI process imports no contextlib)."""

    __slots__ = ("_doing", "_op_timeout", "_wire")

    def __init__(self, wire: WireConnection, doing: str, op_timeout: float) -> None:
        self._wire = wire
        self._doing = doing
        self._op_timeout = op_timeout

    def __enter__(self) -> WireConnection:
        self._wire.sock.settimeout(self._op_timeout)
        return self._wire

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, DeskctlError) or not isinstance(exc, OSError):
            return
        wire, doing = self._wire, self._doing
        if isinstance(exc, TimeoutError):
            raise SessionLost(f"X display {wire.display} did not answer within {self._op_timeout:g}s while we "
                              f"tried to {doing}; the connection was dropped", provider=wire.provider) from exc
        raise SessionLost(f"lost the X display {wire.display} while we tried to {doing}: "
                          f"{exc.strerror or exc}", provider=wire.provider) from exc


class WireDriver:
    """The input half of :class:`~deskctl.core.x11.X11Driver` over a :class:`WireConnection`; every other
    call (and an action the wire path does not take) goes to the full driver from ``open_full``."""

    def __init__(self, wire: WireConnection, open_full: Callable[[], X11Driver], *, op_timeout: float = 60.0) -> None:
        self._wire: WireConnection | None = wire
        self._open_full = open_full
        self._full: X11Driver | None = None
        self._lock = _thread.RLock()
        self._closed = False
        self._op_timeout = op_timeout
        self._xtest: int | None = None
        self._index: dict[int, tuple[int, int]] | None = None

    # -- the full driver -----------------------------------------------------------------------------------
    def _to_full(self) -> X11Driver:
        with self._lock:
            if self._full is None:
                if self._closed:
                    raise SessionLost("the X connection is closed")
                if self._wire is not None:  # everything it sent was confirmed by its last round trip
                    self._wire.close()
                    self._wire = None
                self._full = self._open_full()
            return self._full

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._to_full(), name)

    @property
    def closed(self) -> bool:
        return self._closed or (self._full is not None and self._full.closed)

    def close(self) -> None:
        self._closed = True
        if self._wire is not None:
            self._wire.close()
        if self._full is not None:
            self._full.close()

    def size(self) -> tuple[int, int]:
        if self._full is not None or self._wire is None:
            return self._to_full().size()
        with self._lock, self._errors("read the screen size") as wire:
            return wire.geometry()

    def capture_raw(self) -> tuple[bytes, int, int, str]:
        """As the full driver's, by GetImage over the wire (no MIT-SHM: one capture per process); a screen that
        is not 32 bits a pixel, least significant byte first, goes to the full driver."""
        data, width, height, mode = self._capture()
        return bytes(data), width, height, mode

    def _capture(self) -> tuple[bytes | bytearray, int, int, str]:
        """:meth:`capture_raw`'s pixels as received (a screenshot encodes them without copying them first)."""
        wire = self._wire
        if self._full is not None or wire is None or wire.bits_per_pixel != 32 or not wire.lsb_first:
            return self._to_full().capture_raw()
        with self._lock, self._errors("capture the screen"):
            width, height = wire.geometry()
            return wire.get_image(width, height), width, height, "BGRX"

    def raw_frame(self) -> RawFrame:
        from deskctl.core.frames import RawFrame

        data, width, height, mode = self.capture_raw()
        return RawFrame(data, width, height, mode)

    def screenshot(self, *, compress_level: int = 1) -> Screenshot:
        from deskctl.core.frames import Screenshot
        from deskctl.core.png import encode_png

        data, width, height, mode = self._capture()
        return Screenshot(png=encode_png(data, width, height, mode, level=compress_level), width=width,
                          height=height)

    def ping(self) -> None:
        if self._full is not None or self._wire is None:
            self._to_full().ping()
            return
        with self._lock, self._errors("reach the display") as wire:
            wire.sync()

    # -- the wire path -------------------------------------------------------------------------------------
    def _errors(self, doing: str) -> _WireErrors:
        """A ``with`` block on the wire (given as its target), with ``op_timeout`` on each call; a timeout or a
        socket error in it is :class:`~deskctl.errors.SessionLost`."""
        wire = self._wire
        if wire is None or self._closed:
            raise SessionLost("the X connection is closed")
        return _WireErrors(wire, doing, self._op_timeout)

    def _fake(self, wire: WireConnection, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None:
        if self._xtest is None:
            self._xtest = wire.query_extension(b"XTEST")
            if self._xtest is None:
                raise ProviderApiError(f"X display {wire.display} has no XTEST extension", provider=wire.provider)
        # python-xlib's xtest.fake_input: type, detail, time 0 (now), root 0 (the pointer's screen), x, y
        wire.queue(struct.pack("<BBHBBxxIIxxxxxxxxhhxxxxxxxx", self._xtest, 2, 9, event_type, detail, 0, 0, x, y))

    def _keycode(self, wire: WireConnection, keysym: int) -> tuple[int, bool] | None:
        """(keycode, needs shift) as the full driver finds it, or None when the keymap lacks ``keysym``."""
        if self._index is None:
            index: dict[int, tuple[int, int]] = {}
            for offset, row in enumerate(wire.keyboard_mapping()):
                for position, sym in enumerate(row[:2]):
                    if sym and (sym not in index or position < index[sym][1]):
                        index[sym] = (wire.min_keycode + offset, position)
            self._index = index
        found = self._index.get(keysym)
        return None if found is None else (found[0], found[1] == 1)

    def _key_events(self, wire: WireConnection, action: Action) -> list[tuple[int, int]] | None:
        """The (event type, keycode) sequence of a keyboard action, or None when a key needs a borrowed
        keycode (the full driver binds one)."""
        from deskctl.core.x11keys import _SHIFT, keysym_for_char, keysym_for_key

        def code(keysym: int) -> tuple[int, bool] | None:
            return self._keycode(wire, keysym)

        shift = code(_SHIFT)
        if shift is None:
            return None
        match action:
            case KeyPress(keys=keys):
                keysyms = [keysym_for_key(k) for k in keys]
                found = [code(s) for s in keysyms]
                if any(f is None for f in found):
                    return None
                codes = [f[0] for f in found if f is not None]
                if any(f[1] for f in found if f is not None) and _SHIFT not in keysyms:
                    codes.insert(len(codes) - 1, shift[0])
                return [(_KEY_PRESS, c) for c in codes] + [(_KEY_RELEASE, c) for c in reversed(codes)]
            case KeyDown(key=key) | KeyUp(key=key):
                one = code(keysym_for_key(key))
                if one is None:
                    return None
                if isinstance(action, KeyDown):
                    return ([(_KEY_PRESS, shift[0])] if one[1] else []) + [(_KEY_PRESS, one[0])]
                return [(_KEY_RELEASE, one[0])] + ([(_KEY_RELEASE, shift[0])] if one[1] else [])
            case TypeText(text=text):
                events: list[tuple[int, int]] = []
                for char in text:
                    one = code(keysym_for_char(char))
                    if one is None:
                        return None
                    tap = [(_KEY_PRESS, one[0]), (_KEY_RELEASE, one[0])]
                    events += [(_KEY_PRESS, shift[0]), *tap, (_KEY_RELEASE, shift[0])] if one[1] else tap
                return events
        return None

    def act(self, action: Action) -> None:
        """Run one action over the wire, or through the full driver when it needs more than input."""
        if self._full is not None or self._wire is None:
            self._to_full().act(action)
            return
        with self._lock, self._errors(f"send {type(action).__name__}") as wire:
            sent = self._send(wire, action)
            if sent:
                wire.sync()  # every action ends with a round trip: delivered, or its error raised
        if not sent:
            self._to_full().act(action)

    def _send(self, wire: WireConnection, action: Action) -> bool:
        """Queue the requests of ``action``; False (nothing queued) when the full driver is to run it."""
        from deskctl.core.x11keys import _SCROLL_DOWN, _SCROLL_LEFT, _SCROLL_RIGHT, _SCROLL_UP, _button_number

        match action:
            case Move(x=x, y=y):
                self._fake(wire, _MOTION, 0, x, y)
            case Click(x=x, y=y, button=button, count=count):
                number = _button_number(button)
                self._fake(wire, _MOTION, 0, x, y)
                for _ in range(max(1, count)):
                    self._fake(wire, _BUTTON_PRESS, number)
                    self._fake(wire, _BUTTON_RELEASE, number)
            case MouseDown(x=x, y=y, button=button) | MouseUp(x=x, y=y, button=button):
                number = _button_number(button)
                self._fake(wire, _MOTION, 0, x, y)
                self._fake(wire, _BUTTON_PRESS if isinstance(action, MouseDown) else _BUTTON_RELEASE, number)
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                number, steps = _button_number(button), 8
                self._fake(wire, _MOTION, 0, x1, y1)
                self._fake(wire, _BUTTON_PRESS, number)
                for i in range(1, steps + 1):
                    self._fake(wire, _MOTION, 0, x1 + (x2 - x1) * i // steps, y1 + (y2 - y1) * i // steps)
                self._fake(wire, _BUTTON_RELEASE, number)
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                self._fake(wire, _MOTION, 0, x, y)
                for amount, negative, positive in ((dy, _SCROLL_UP, _SCROLL_DOWN), (dx, _SCROLL_LEFT, _SCROLL_RIGHT)):
                    wheel = positive if amount > 0 else negative
                    for _ in range(abs(amount)):
                        self._fake(wire, _BUTTON_PRESS, wheel)
                        self._fake(wire, _BUTTON_RELEASE, wheel)
            case KeyPress() | KeyDown() | KeyUp() | TypeText():
                events = self._key_events(wire, action)
                if events is None:
                    return False
                for number, (event_type, keycode) in enumerate(events, start=1):
                    self._fake(wire, event_type, keycode)
                    if number % 8192 == 0:  # a bounded run-ahead, as the full driver's batches
                        wire.sync()
            case _:
                return False
        return True
