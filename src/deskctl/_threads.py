"""Locks and events for code that a one-shot CLI process loads, without :mod:`threading`.

``threading`` imports ``functools`` and with it ``collections``, ``keyword``, ``operator``, ``reprlib`` and
``types`` (14M instructions, an eighth of a ``deskctl do`` process), yet a ``deskctl do``, ``down`` or
``screenshot`` process starts no thread: it only makes locks and events that nobody waits on. The locks here are
the very objects :mod:`threading` hands out (``threading.Lock`` *is* ``_thread.allocate_lock``; ``threading.RLock()``
returns ``_thread.RLock``; ``threading.local`` *is* ``_thread._local``). :class:`Event` is a
:class:`threading.Event` made on the first :meth:`~Event.wait`: until then a flag under a lock does. Code that
starts a thread imports :mod:`threading` where it does (:func:`start`).

This module imports nothing beyond ``_thread``.
"""

from __future__ import annotations

import _thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

__all__ = ["Event", "Lock", "RLock", "get_ident", "local", "start"]

Lock = _thread.allocate_lock
RLock = _thread.RLock
local = _thread._local
get_ident = _thread.get_ident


class Event:
    """:class:`threading.Event`'s ``set``/``clear``/``is_set``/``wait``; the real one is made on the first ``wait``
    (with the flag as it stands), and from then on every call goes to it."""

    __slots__ = ("_flag", "_guard", "_real")

    def __init__(self) -> None:
        self._guard = _thread.allocate_lock()
        self._flag = False
        self._real: threading.Event | None = None

    def _event(self) -> threading.Event:
        with self._guard:
            if self._real is None:
                import threading

                real = threading.Event()
                if self._flag:
                    real.set()
                self._real = real
            return self._real

    def set(self) -> None:
        with self._guard:
            if self._real is None:
                self._flag = True
                return
        self._real.set()

    def clear(self) -> None:
        with self._guard:
            if self._real is None:
                self._flag = False
                return
        self._real.clear()

    def is_set(self) -> bool:
        with self._guard:
            if self._real is None:
                return self._flag
        return self._real.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event().wait(timeout)


def start(target: Callable[[], object], *, name: str, daemon: bool = True) -> threading.Thread:
    """A started :class:`threading.Thread` running ``target`` (threading is imported here, where a thread is
    wanted)."""
    import threading

    thread = threading.Thread(target=target, name=name, daemon=daemon)
    thread.start()
    return thread
