"""File descriptors for a process that holds many desktops: waiting on descriptors of any number, the open-file
limit, and running out of descriptors.

``select()`` cannot watch a descriptor numbered 1024 or more (it raises ``ValueError: filedescriptor out of
range in select()``), and a process with a hundred desktops (each an X connection, a Docker API socket, pidfds,
pipes, log files) passes that number. Everything deskctl waits on goes through :func:`wait_readable`
(``poll()``, no such limit), and python-xlib's own waiting is routed through :data:`POLL_SELECT` (see
:func:`deskctl.core.x11.connect_display`).

:func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard one (once per process, when a
desktop is first opened) and holds a few descriptors in reserve; :func:`out_of_descriptors` tells an
``OSError`` of a full descriptor table apart, which callers turn into :func:`capacity_error`
(``capacity.file_descriptors``) after cleaning up with the reserve released (:func:`spare_descriptors`):
removing a half-made desktop needs descriptors too (a directory listing, a pidfd, the ledger).
"""

from __future__ import annotations

import errno
import math
import os
import select

# threading.Lock itself (deskctl._threads.Lock is the same), without threading's import (functools, collections) and
# without deskctl._threads, which the desktop image's agent does not carry (AGENT_FILES)
from _thread import allocate_lock as Lock

from deskctl.errors import CapacityUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = [
    "POLL_SELECT",
    "capacity_error",
    "out_of_descriptors",
    "raise_open_file_limit",
    "spare_descriptors",
    "wait_readable",
]

_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


def _fileno(obj: Any) -> int:
    return obj if isinstance(obj, int) else int(obj.fileno())


def _poll_ms(timeout: float | None) -> int | None:
    """``poll()``'s timeout in whole milliseconds, rounded up (a wait never ends early); None blocks."""
    if timeout is None:
        return None
    return max(0, math.ceil(timeout * 1000))


def wait_readable(fds: Iterable[int], timeout: float | None) -> list[int]:
    """The descriptors of ``fds`` that are readable (or hung up, or in error) within ``timeout`` seconds
    (None: wait as long as it takes); empty when the time ran out. Any descriptor number works."""
    poller = select.poll()
    wanted = list(fds)
    for fd in wanted:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    ready = {fd for fd, events in poller.poll(_poll_ms(timeout)) if events & _READABLE}
    return [fd for fd in wanted if fd in ready]


class _PollSelect:
    """Stands in for the ``select`` module inside ``Xlib.protocol.display``: the same ``select(r, w, x,
    timeout)`` answer, computed with ``poll()``, so python-xlib's waits work on descriptors >= 1024.
    ``error`` is what ``select.error`` is (``OSError``): python-xlib catches it for EINTR."""

    error = OSError

    def __getattr__(self, name: str) -> Any:
        return getattr(select, name)

    @staticmethod
    def select(readers: Sequence[Any], writers: Sequence[Any], errors: Sequence[Any],
               timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
        poller = select.poll()
        masks: dict[int, int] = {}
        for obj in readers:
            masks[_fileno(obj)] = masks.get(_fileno(obj), 0) | select.POLLIN | select.POLLPRI
        for obj in writers:
            masks[_fileno(obj)] = masks.get(_fileno(obj), 0) | select.POLLOUT
        for obj in errors:
            masks[_fileno(obj)] = masks.get(_fileno(obj), 0) | select.POLLPRI
        for fd, mask in masks.items():
            poller.register(fd, mask)
        events = dict(poller.poll(_poll_ms(timeout)))
        return ([obj for obj in readers if events.get(_fileno(obj), 0) & _READABLE],
                [obj for obj in writers if events.get(_fileno(obj), 0) & _WRITABLE],
                [obj for obj in errors if events.get(_fileno(obj), 0) & select.POLLPRI])


#: the ``select`` stand-in installed into python-xlib (see :class:`_PollSelect`)
POLL_SELECT = _PollSelect()

_limit_lock = Lock()
_limit_raised = False
#: descriptors held back for cleaning up after the table filled (see :func:`spare_descriptors`)
_RESERVE = 8
_reserve: list[int] = []


def _hold_reserve() -> None:
    while len(_reserve) < _RESERVE:
        try:
            _reserve.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            return


def spare_descriptors() -> _SpareDescriptors:
    """Release the reserve for the ``with`` block (cleaning up after :func:`out_of_descriptors`), then take
    back what is free again."""
    return _SpareDescriptors()


class _SpareDescriptors:
    """:func:`spare_descriptors`'s ``with`` block (a class: contextlib is not imported where a desktop opens)."""

    __slots__ = ()

    def __enter__(self) -> None:
        with _limit_lock:
            while _reserve:
                os.close(_reserve.pop())

    def __exit__(self, *exc: object) -> None:
        with _limit_lock:
            _hold_reserve()


def raise_open_file_limit() -> None:
    """Lift the soft open-file limit to the hard one, once per process (where the OS allows; else nothing),
    and hold the reserve of :func:`spare_descriptors`."""
    global _limit_raised
    with _limit_lock:
        if _limit_raised:
            return
        _limit_raised = True
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft != hard:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ImportError, OSError, ValueError):
            pass  # the limit stays; running out is reported as capacity.file_descriptors
        _hold_reserve()


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc`` says the process (EMFILE) or the system (ENFILE) has no file descriptor left."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def capacity_error(doing: str, *, provider: str | None = None) -> CapacityUnavailable:
    """The coded error for running out of file descriptors while ``doing`` something."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = f" (the open-file limit is {soft})"
    except (ImportError, OSError, ValueError):
        limit = ""
    return CapacityUnavailable(
        f"no file descriptor left to {doing}{limit}", code="capacity.file_descriptors", provider=provider,
        remedy="close desktops this process no longer needs, or raise the hard open-file limit (ulimit -Hn)",
    )
