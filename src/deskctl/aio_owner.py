"""The threads and the signals under :mod:`deskctl.aio`: a sync call run on its own thread and awaited to its
end whatever cancels arrive, and the per-event-loop signal handlers that cancel the tasks owning desktops
(:class:`_Owner`). :mod:`deskctl.aio_desktop` and :mod:`deskctl.aio` build on these; see :mod:`deskctl.aio` for
the guarantees they make.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from deskctl.errors import Interrupted

T = TypeVar("T")


class _Cancelled(BaseException):
    """A task's cancellation as the sync session sees it: raised into the thread running ``Desktop.open`` at its
    next lifecycle step, and handed to ``Desktop.__exit__`` so the ledger row's reason is ``cancelled``."""

    code = "cancelled"


def _in_own_thread(fn: Callable[..., T], *args: Any, name: str) -> concurrent.futures.Future[T]:
    """Run ``fn`` on a new (non-daemon: interpreter exit waits for a destroy) thread."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to the awaiting task, whatever it is
            future.set_exception(exc)

    threading.Thread(target=run, name=name).start()
    return future


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled while it ran: nobody awaits its answer (as asyncio.wrap_future drops it)
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _Worker:
    """One desktop's calls, in order, on one thread of their own: what a one-thread ThreadPoolExecutor awaited
    through asyncio.wrap_future did, with less between a call and its answer (a put on a queue there, one
    ``call_soon_threadsafe`` back; the two futures chained both ways, their locks and callbacks, are gone:
    bench/bench_aio.py). A call cancelled before it starts is skipped; one cancelled while it runs runs to its
    end, its answer dropped. After :meth:`shutdown` the calls already queued still run, in order, and
    :meth:`submit` raises RuntimeError. The thread is a daemon: an abandoned desktop's idle worker must not hold
    the interpreter's exit (closing and destroying run on threads of their own, which it waits for)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._started = False

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args)``; the future the running event loop settles with its result or exception."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if not self._started:
                threading.Thread(target=self._run, name=self._name, daemon=True).start()
                self._started = True
            self._queue.put((loop, future, fn, args))
        return future

    def shutdown(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, future, fn, args = item
            if future.cancelled():  # cancelled before it started: dropped from the queue
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting task, whatever it is
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the event loop is closed: nobody awaits the answer
                pass


async def _to_the_end(work: concurrent.futures.Future[T]) -> T:
    """Await ``work`` until it is done, whatever cancels arrive meanwhile (they cannot stop a thread, and
    leaving early would leave a desktop); a cancel that came is delivered after, unless the work failed."""
    future = asyncio.wrap_future(work)
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))  # unlike shield/await, never cancels `future` itself
        except asyncio.CancelledError:
            cancelled = True
    if future.cancelled():  # it never started
        if cancelled:
            raise asyncio.CancelledError
        raise asyncio.CancelledError("the call was cancelled before it started")
    error = future.exception()
    if error is not None:
        raise error
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


# --------------------------------------------------------------------------------------------------
# signals: per event loop, installed while that loop has desktops open
# --------------------------------------------------------------------------------------------------
_HANDLED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class _LoopSignals:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.owners: set[_Owner] = set()
        self.previous: dict[int, Any] = {}

    def add(self, owner: _Owner) -> None:
        if not self.owners:
            self._install()
        self.owners.add(owner)

    def discard(self, owner: _Owner) -> None:
        if owner not in self.owners:
            return
        self.owners.discard(owner)
        if not self.owners:
            self._restore()

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread receives signals; a loop elsewhere relies on its program
        from deskctl import supervisor

        for signum in _HANDLED:
            current = signal.getsignal(signum)
            # the defaults, and the sync sessions' own handler (it would raise in the loop's thread), are
            # replaced; a handler the program chose (asyncio.run's SIGINT, its own) is left alone
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            if current is not default and current is not supervisor.on_signal:
                continue
            try:
                self.loop.add_signal_handler(signum, self._on_signal, signum)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            self.previous[signum] = current

    def _restore(self) -> None:
        for signum, previous in self.previous.items():
            with contextlib.suppress(Exception):
                self.loop.remove_signal_handler(signum)
                signal.signal(signum, previous)
        self.previous.clear()

    def _on_signal(self, signum: int) -> None:
        if not self.owners:  # nothing of ours left to clean up: what the signal would have done
            self._restore()
            os.kill(os.getpid(), signum)
            return
        for owner in list(self.owners):
            owner.interrupt(signum)


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSignals] = weakref.WeakKeyDictionary()


def _signals_of(loop: asyncio.AbstractEventLoop) -> _LoopSignals:
    found = _loops.get(loop)
    if found is None:
        found = _loops[loop] = _LoopSignals(loop)
    return found


class _Owner:
    """The task that opened (or attached) a desktop, registered for the signals from the start of the open to
    the end of the close: a signal cancels that task, whose exit then destroys the desktop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.signum: int | None = None
        self._registered = True
        _signals_of(self.loop).add(self)

    def interrupt(self, signum: int) -> None:
        self.signum = signum
        if self.task is not None and not self.task.done():
            self.task.cancel(f"deskctl: {signal.Signals(signum).name}")

    def done(self) -> None:
        if self._registered:
            self._registered = False
            _signals_of(self.loop).discard(self)

    def after_cancel(self, cancel: asyncio.CancelledError, provider: str | None) -> BaseException:
        """What a cancellation becomes once the desktop is cleaned up: Interrupted when a signal caused it."""
        if self.signum is None:
            return cancel
        task = asyncio.current_task()
        if task is not None and task is self.task:
            task.uncancel()  # the cancel was ours and is turned into Interrupted: it must not stay pending
        name = signal.Signals(self.signum).name
        error = Interrupted(f"interrupted by {name}; the desktop was cleaned up", signum=self.signum,
                            provider=provider)
        error.__cause__ = cancel
        return error
