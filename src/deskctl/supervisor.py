"""What watches an open session: the process-wide cleanup on SIGINT, SIGTERM, SIGHUP and interpreter exit, the
watchdog that ends a session at its time or money limit, and the keepalive of providers that reap idle desktops.

Every attached :class:`~deskctl.session.Desktop` that is open is in :data:`_open_desktops` (see :func:`watch`), by a
weak reference;
a signal unwinds the main thread (``Interrupted``), so the ``with`` blocks and ``Desktop.__exit__`` run their
cleanup, and a second Ctrl-C while a destroy runs is deferred until it is over (:func:`shield_signals`). What a
cleanup that nobody can raise to (a thread, a signal, interpreter exit) fails at is logged on the
``deskctl.cleanup`` logger (:func:`log_cleanup_failure`), never swallowed.
"""

from __future__ import annotations

import atexit
import sys
import time
from _weakref import ref  # weakref.ref itself, without weakref's import (functools, collections)

from deskctl import _threads
from deskctl.errors import BudgetExceeded, DeskctlError, Interrupted
from deskctl.lifecycle import SessionStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from types import FrameType, TracebackType
    from typing import Any

    from deskctl.session import Desktop
else:
    import _signal  # signal's functions and constants without signal.py's enums (typeshed has no _signal)

__all__ = ["KEEPALIVE_SECONDS", "close_all", "install_signal_handlers", "log_cleanup_failure", "on_signal",
           "shield_signals", "start_threads", "watch", "watchdog_seconds"]

KEEPALIVE_SECONDS = 30.0

#: weak references to the open desktops, each leaving the set when its desktop is collected (what a WeakSet keeps,
#: without _weakrefset and types: a `deskctl do` loads nothing else of theirs)
_open_desktops: set[ref[Desktop]] = set()
_signals_lock = _threads.Lock()
_previous_handlers: dict[int, Any] = {}
_deferred_signals: list[int] = []
_shielded = _threads.local()


def log_cleanup_failure(what: str, exc: BaseException) -> None:
    """Say on the ``deskctl.cleanup`` logger (WARNING) that ``what`` failed with ``exc``, its text redacted: for
    a cleanup step whose failure nobody can be raised to, or that must not hide the outcome it follows."""
    import logging  # here: only a failure pays for it, never a `deskctl do`

    from deskctl._redact import redact

    code = exc.code if isinstance(exc, DeskctlError) else type(exc).__name__
    logging.getLogger("deskctl.cleanup").warning("deskctl: %s failed (%s): %s", what, code, redact(str(exc)))


def watch(desk: Desktop) -> None:
    """Destroy ``desk`` on SIGTERM, SIGINT, SIGHUP and interpreter exit until :func:`unwatch`."""
    _open_desktops.add(ref(desk, _open_desktops.discard))
    install_signal_handlers()


def unwatch(desk: Desktop) -> None:
    _open_desktops.discard(ref(desk))


#: the signals whose handlers :func:`install_signal_handlers` installs, by their names
_HANDLED: dict[int, str] = {_signal.SIGTERM: "SIGTERM", _signal.SIGINT: "SIGINT", _signal.SIGHUP: "SIGHUP"}


def _signal_name(signum: int) -> str:
    """``signal.Signals(signum).name``, without importing :mod:`signal` (its enums) for the signals handled here."""
    name = _HANDLED.get(signum)
    if name is None:
        import signal

        name = str(signal.Signals(signum).name)
    return name


def on_signal(signum: int, frame: FrameType | None) -> None:
    if getattr(_shielded, "active", False):
        # a second Ctrl-C while cleanup runs must not cut the cleanup short
        _deferred_signals.append(signum)
        return
    previous = _previous_handlers.get(signum)
    if callable(previous) and previous not in (_signal.default_int_handler,):
        close_all(reason=f"signal {_signal_name(signum)}")
        previous(signum, frame)
        return
    # Unwind the main thread: `with` blocks and the Desktop.__exit__ of every session run their cleanup.
    name = _signal_name(signum)
    raise Interrupted(f"interrupted by {name}; the desktop was cleaned up", signum=signum)


def _in_main_thread() -> bool:
    """Whether this is the main thread. Until :mod:`threading` is imported no other thread was started by it: a
    one-shot CLI process (which starts none) asks without importing it."""
    threading = sys.modules.get("threading")
    return threading is None or threading.current_thread() is threading.main_thread()


def install_signal_handlers() -> None:
    if not _in_main_thread():
        return
    with _signals_lock:
        for signum in _HANDLED:
            if signum in _previous_handlers:
                continue
            current = _signal.getsignal(signum)
            if current == _signal.SIG_IGN:
                continue
            _previous_handlers[signum] = current
            _signal.signal(signum, on_signal)


class shield_signals:  # lower case: called as the function it was, `with shield_signals():`
    """Defer SIGINT/SIGTERM while a destroy runs in the main thread, then re-deliver them (a context manager; a
    nested one, or one in another thread, does nothing)."""

    __slots__ = ("_shielding",)

    def __enter__(self) -> None:
        self._shielding = _in_main_thread() and not getattr(_shielded, "active", False)
        if self._shielding:
            _shielded.active = True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._shielding:
            return
        _shielded.active = False
        if _deferred_signals:
            signum = _deferred_signals.pop()
            _deferred_signals.clear()
            raise Interrupted(
                f"interrupted by {_signal_name(signum)}; the desktop was cleaned up", signum=signum
            )


def close_all(reason: str) -> None:
    """Tear down every open attached desktop of this process (``ended``, ``reason``); failures are logged."""
    for each in list(_open_desktops):
        desk = each()
        if desk is None:
            continue
        try:
            desk._teardown(status=SessionStatus.ENDED, reason=reason)
        except Exception as exc:
            log_cleanup_failure(f"cleanup of {desk.id} at {reason}", exc)


@atexit.register
def _close_all_at_exit() -> None:
    close_all(reason="interpreter exit")


# -- threads of an attached session -------------------------------------------------------------------------
def start_threads(desk: Desktop) -> None:
    """The watchdog (when the session has a limit) and the keepalive (for providers that reap idle desktops)."""
    if desk.detached:
        return
    limit = watchdog_seconds(desk)
    if limit is not None:
        _spawn(desk, _watchdog, limit, name=f"deskctl-watchdog-{desk.id}")
    if desk.provider.capabilities.server_ttl or not desk.provider.capabilities.local:
        _spawn(desk, _keepalive, name=f"deskctl-keepalive-{desk.id}")


def _spawn(desk: Desktop, target: Any, *args: Any, name: str) -> None:
    desk._threads.append(_threads.start(lambda: target(desk, *args), name=name, daemon=True))


def watchdog_seconds(desk: Desktop) -> float | None:
    """Seconds until ``desk`` reaches its time or money limit (0: reached), or None when it has none."""
    limits: list[float] = []
    if desk._max_minutes:
        limits.append(desk._max_minutes * 60)
    usd_per_hour = _hourly_rate(desk)
    if desk._max_usd is not None and desk._model_usd > desk._max_usd + 1e-9:
        limits.append(0.0)  # model spend alone passed the cap
    elif desk._max_usd is not None and usd_per_hour is not None and usd_per_hour > 0:
        # what model spend left of the cap, at the desktop's rate
        limits.append(max(0.0, desk._max_usd - desk._model_usd) / usd_per_hour * 3600)
    if not limits:
        return None
    started = desk._create_sent_at or time.time()
    return max(0.0, started + min(limits) - time.time())


def _hourly_rate(desk: Desktop) -> float | None:
    """The desktop's dollars per hour without resolving a rate (the recorded one of an attached session)."""
    if desk._rate_resolved:
        return desk._rate.usd_per_hour if desk._rate is not None else None
    return desk._recorded_usd_per_hour


def _watchdog(desk: Desktop, seconds: float) -> None:
    while True:
        desk._limits_changed.wait(seconds)
        if desk._stop.is_set():
            return
        if not desk._limits_changed.is_set():
            break  # the limit is reached
        desk._limits_changed.clear()  # model spend moved the limit: wait for the new one
        left = watchdog_seconds(desk)
        if left is None:
            return
        if left <= 0:
            break
        seconds = left
    end_at_limit(desk)


def end_at_limit(desk: Desktop) -> BudgetExceeded:
    """End ``desk`` at its limit (``budget.exceeded``); returns the error its next call raises."""
    what = "max minutes" if desk._max_minutes else "max cost"
    error = BudgetExceeded(
        f"session {desk.id} reached its {what} and was ended", provider=desk.provider_name,
        remedy="raise --max-minutes / --max-usd, or split the run",
    )
    desk._ended_error = error
    try:
        desk._teardown(status=SessionStatus.ENDED, reason="budget.exceeded")
    except Exception as exc:
        log_cleanup_failure(f"the end of {desk.id} at its limit", exc)
    return error


def _keepalive(desk: Desktop) -> None:
    while not desk._stop.wait(KEEPALIVE_SECONDS):
        handle = desk.handle
        if handle is None or desk.state is not SessionStatus.READY:
            return
        try:
            desk.provider.keepalive(handle)
        except Exception as exc:  # a daemon thread has nobody to raise to: what failed goes to the ledger
            if desk._stop.is_set():
                return  # the session closed while this keepalive was in flight: its answer is moot
            code = exc.code if isinstance(exc, DeskctlError) else "internal"
            try:
                desk.ledger.record_event(desk.id, "keepalive_failed", {"code": code})
            except Exception as failure:
                log_cleanup_failure(f"recording the failed keepalive of {desk.id}", failure)
            if code == "provider.session_lost" and desk._owned:
                # the desktop is gone (reaped, or ended with its reservation): end the session now, so the
                # ledger stops counting time nobody is billed for and the next call says why
                desk._ended_error = exc if isinstance(exc, DeskctlError) else None
                try:
                    desk._teardown(status=SessionStatus.FAILED, reason=code)
                except Exception as failure:
                    log_cleanup_failure(f"the end of {desk.id}, whose desktop was lost", failure)
                return
