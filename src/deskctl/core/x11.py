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
import re
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from deskctl.actions import Action, Click, Drag, KeyDown, KeyPress, KeyUp, MouseDown, MouseUp, Move, Scroll, TypeText
from deskctl.core.frames import RawFrame, Screenshot
from deskctl.core.png import encode_png
from deskctl.core.x11auth import COOKIE_PROTOCOL, X11Address, new_cookie, read_cookie, write_xauthority
from deskctl.core.x11connect import _Watchdog, connect_display, wait_for_display
from deskctl.core.x11keyboard import _Keyboard
from deskctl.core.x11keys import (
    _SCROLL_DOWN,
    _SCROLL_LEFT,
    _SCROLL_RIGHT,
    _SCROLL_UP,
    _button_number,
    keysym_for_char,
    keysym_for_key,
)
from deskctl.core.x11shm import _Shm
from deskctl.errors import DeskctlError, ProviderApiError, SessionLost, UsageError

if TYPE_CHECKING:
    from Xlib.display import Display

__all__ = [
    "COOKIE_PROTOCOL",
    "X11Address",
    "X11Driver",
    "connect_display",
    "decode_compound_text",
    "keysym_for_char",
    "keysym_for_key",
    "new_cookie",
    "prefer_wire",
    "read_cookie",
    "wait_for_display",
    "write_xauthority",
]


def prefer_wire(enabled: bool = True) -> None:
    """Make :meth:`X11Driver.open` give this process drivers whose input goes over the X11 wire without python-xlib
    (:class:`~deskctl.core.x11wire.WireDriver`; anything else opens the full driver on first need). For a process
    that runs one action (``deskctl do``) or one capture: python-xlib's import and setup were most of its cost.
    The flag is :func:`deskctl.core.x11wire.prefer_wire`'s."""
    from deskctl.core import x11wire

    x11wire.prefer_wire(enabled)


class X11Driver(_Keyboard):
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
        from deskctl.core import x11wire

        if x11wire.wire_preferred():
            # the input half of this class without python-xlib (see x11wire): what a `deskctl do` process needs
            return x11wire.wire_driver(address, cookie, timeout, provider, lambda: cls._open(
                address, cookie, timeout, provider, use_shm and host is None, op_timeout), op_timeout)
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
