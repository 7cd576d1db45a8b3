"""Opening a python-xlib connection to an X display (through a thread-safe connect shim), waiting for a
display, and the watchdog that ends a blocked X call."""

from __future__ import annotations

import _socket
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from deskctl._fds import capacity_error, out_of_descriptors
from deskctl.errors import ProviderUnreachable

if TYPE_CHECKING:
    from Xlib.display import Display

from deskctl.core.x11auth import COOKIE_PROTOCOL, X11Address


class _PendingConnection(threading.local):
    sock: _socket.socket | None = None
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
