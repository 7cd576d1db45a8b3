"""Opening a display driver without importing the full driver's module when the process prefers the wire.

:func:`open_x11` is :meth:`X11Driver.open <deskctl.core.x11.X11Driver.open>` for a provider: with
:func:`~deskctl.core.x11wire.prefer_wire` on (a ``deskctl do`` or ``deskctl screenshot`` process) it connects a
:class:`~deskctl.core.x11wire.WireDriver` and loads :mod:`deskctl.core.x11` (python-xlib's shims, MIT-SHM, the
keymap code, the PNG encoder) only if a call needs the full driver; otherwise it is ``X11Driver.open`` itself.
"""

from __future__ import annotations

from deskctl.core.x11auth import X11Address
from deskctl.core.x11wire import wire_driver, wire_preferred

TYPE_CHECKING = False
if TYPE_CHECKING:
    from deskctl.core.x11 import X11Driver

__all__ = ["open_x11"]


def open_x11(display: str = ":0", *, socket_path: str | None = None, host: str | None = None,
             port: int | None = None, cookie: bytes | None = None, timeout: float = 10.0,
             provider: str | None = None, use_shm: bool = True, op_timeout: float = 60.0) -> X11Driver:
    """``X11Driver.open`` with the same arguments; see the module docstring."""
    if not wire_preferred():
        from deskctl.core.x11 import X11Driver

        return X11Driver.open(display, socket_path=socket_path, host=host, port=port, cookie=cookie,
                              timeout=timeout, provider=provider, use_shm=use_shm, op_timeout=op_timeout)
    address = X11Address(display=display, socket_path=socket_path, host=host, port=port)

    def full() -> X11Driver:
        from deskctl.core.x11 import X11Driver

        return X11Driver._open(address, cookie, timeout, provider, use_shm and host is None, op_timeout)

    return wire_driver(address, cookie, timeout, provider, full, op_timeout)
