"""deskctl for asyncio: the same sessions, with every guarantee, awaited instead of blocked on.

    async with deskctl.aio.open_desktop("xvfb", geometry="1024x768") as desk:
        png = (await desk.screenshot()).png
        await desk.click(10, 20)

This module wraps the one lifecycle implementation, :class:`deskctl.session.Desktop`: preflight, the intent row,
create, readiness, the geometry check, the watchdog and the confirmed destroy all run there, in threads, never
on the event loop. What this module adds is what asyncio needs (docs/async.md):

* **cancellation**: a task cancelled inside ``async with`` destroys its desktop before the
  :class:`asyncio.CancelledError` goes on; the destroy is shielded, so a second cancel neither cuts it short
  nor leaves the desktop. A cancel while the desktop is being made takes effect at the next lifecycle step
  (the provider call in progress, such as a readiness wait, cannot be interrupted from another thread): what
  was made is destroyed and the ledger row ends ``failed`` with reason ``cancelled``.
* **ordering**: the calls on one desktop run one after another on that desktop's own worker thread, in the
  order they were awaited, so ``asyncio.gather`` over one desktop is safe; desktops run in parallel. A call
  cancelled before it started never runs; one that had started finishes in its thread (its result is dropped).
  Closing does not queue behind a running call: the destroy ends it.
* **signals**: while a desktop is open in an event loop running in the main thread, SIGTERM and SIGHUP (and
  SIGINT when nothing else handles it; under :func:`asyncio.run` SIGINT already cancels the main task) cancel
  the tasks that opened desktops; each destroys its desktop and raises :class:`~deskctl.errors.Interrupted`
  (exit code 128 + the signal) in place of the cancellation. A handler the program installed itself is left
  alone. When the last desktop of the loop is closed, the previous handlers are back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import signal
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from deskctl.errors import Interrupted
from deskctl.providers import DEFAULT_PROVIDER
from deskctl.session import Desktop, State, wait_terms

if TYPE_CHECKING:
    from deskctl import actions as act
    from deskctl.browser import BrowserEndpoint, Page
    from deskctl.episodes.store import Snapshot
    from deskctl.ledger import Ledger, ModelUsage
    from deskctl.observe.accessibility import AccessibilityTree, AccessibleNode
    from deskctl.observe.windows import Window
    from deskctl.providers.base import ExecResult, Provider, RawFrame, RemoteHandle, Screenshot
    from deskctl.recording import Recorder
    from deskctl.spec import DesktopSpec

__all__ = ["AsyncDesktop", "attach", "open_desktop"]

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


# --------------------------------------------------------------------------------------------------
class AsyncDesktop:
    """One desktop session, awaited. Made by :func:`open_desktop` or :func:`attach`, never directly.

    Every method of :class:`deskctl.session.Desktop` is here with the same parameters, as a coroutine (a test
    pins that); the properties are the same too. :attr:`sync` is the underlying session.
    """

    def __init__(self, desk: Desktop, owner: _Owner) -> None:
        self._desk = desk
        self._owner = owner
        # one worker per desktop: its calls keep their order and never share an X connection between threads
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"deskctl-aio-{desk.id}")

    # -- the sync session's properties ---------------------------------------------------------------
    @property
    def sync(self) -> Desktop:
        """The :class:`~deskctl.session.Desktop` this wraps (call it only from a thread, not the event loop)."""
        return self._desk

    @property
    def id(self) -> str:
        return self._desk.id

    @property
    def spec(self) -> DesktopSpec:
        return self._desk.spec

    @property
    def state(self) -> State:
        return self._desk.state

    @property
    def handle(self) -> RemoteHandle | None:
        return self._desk.handle

    @property
    def detached(self) -> bool:
        return self._desk.detached

    @property
    def end_reason(self) -> str | None:
        return self._desk.end_reason

    @property
    def provider_name(self) -> str:
        return self._desk.provider_name

    @property
    def provider(self) -> Provider:
        return self._desk.provider

    @property
    def ledger(self) -> Ledger:
        return self._desk.ledger

    @property
    def size(self) -> tuple[int, int]:
        return self._desk.size

    @property
    def expires_at(self) -> float | None:
        return self._desk.expires_at

    @property
    def recording(self) -> Recorder | None:
        return self._desk.recording

    def __repr__(self) -> str:
        return f"<AsyncDesktop {self._desk.id} {self._desk.spec.provider} {self._desk.state.value}>"

    # -- plumbing ------------------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            work = self._worker.submit(fn, *args)
        except RuntimeError:  # closed (the worker is shut down): the session itself says why it cannot be used
            return await asyncio.to_thread(fn, *args)
        # a cancel before the call starts drops it from the queue; one after leaves it to finish in its thread
        return await asyncio.wrap_future(work)

    async def _end(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a closing call (destroy or release) to its end on its own thread, shielded from cancels; it
        does not queue behind a call still running on the worker (destroying the desktop ends that call)."""
        try:
            await _to_the_end(_in_own_thread(fn, *args, name=f"deskctl-aio-close-{self._desk.id}"))
        finally:
            self._owner.done()
            # calls still queued run after it and get the session's own SessionClosed, not a CancelledError
            self._worker.shutdown(wait=False)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncDesktop:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        seen: BaseException | None = exc
        if isinstance(exc, asyncio.CancelledError):
            seen = _Cancelled("the task was cancelled")
        provider = self._desk.spec.provider
        try:
            await self._end(self._desk.__exit__, type(seen) if seen else None, seen, tb)
        except asyncio.CancelledError as cancel:
            raise self._owner.after_cancel(cancel, provider)
        if isinstance(exc, asyncio.CancelledError) and self._owner.signum is not None:
            raise self._owner.after_cancel(exc, provider)

    async def close(self) -> None:
        """Destroy the desktop (confirmed), record the end and the cost. Idempotent; shielded from cancels."""
        await self._end(self._desk.close)

    async def release(self) -> None:
        """Let go of the desktop without destroying it (detached sessions, :func:`attach`)."""
        await self._end(self._desk.release)

    # -- actions: the sync session's, one by one -----------------------------------------------------
    # Written out, not generated from deskctl.action_table: a static signature is what mypy --strict checks a
    # caller against and what an IDE shows. tests/unit/test_action_surfaces.py proves each of the table's aio
    # actions is here, a coroutine with the Desktop method's signature, and that none is here the table lacks.
    async def act(self, action: act.Action) -> None:
        await self._call(self._desk.act, action)

    async def annotate(self, step: int | None = None, /, **fields: Any) -> int:
        return await self._call(lambda: self._desk.annotate(step, **fields))

    async def meter(self, role: str, model: str, input_tokens: int = 0, output_tokens: int = 0,
                    usd: float | None = None) -> ModelUsage:
        """:meth:`deskctl.Desktop.meter`: record a model's token use beside the desktop's cost (``budget.exceeded``
        ends the session when it passes a cap)."""
        return await self._call(lambda: self._desk.meter(role, model, input_tokens, output_tokens, usd))

    async def screenshot(self, *, max_size: Any = None, scale: Any = None, region: Any = None) -> Screenshot:
        return await self._call(lambda: self._desk.screenshot(max_size=max_size, scale=scale, region=region))

    async def raw_frame(self) -> RawFrame:
        return await self._call(self._desk.raw_frame)

    async def click(self, x: int | None = None, y: int | None = None, button: str = "left", count: int = 1, *,
                    space: Any = None) -> None:
        await self._call(lambda: self._desk.click(x, y, button, count, space=space))

    async def double_click(self, x: int | None = None, y: int | None = None, button: str = "left", *,
                           space: Any = None) -> None:
        await self._call(lambda: self._desk.double_click(x, y, button, space=space))

    async def triple_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.triple_click(x, y, space=space))

    async def right_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.right_click(x, y, space=space))

    async def middle_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.middle_click(x, y, space=space))

    async def move(self, x: int, y: int, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.move(x, y, space=space))

    async def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left", *, space: Any = None) -> None:
        await self._call(lambda: self._desk.drag(x1, y1, x2, y2, button, space=space))

    async def scroll(self, x: int | None = None, y: int | None = None, dx: int = 0, dy: int = 0, *,
                     space: Any = None) -> None:
        await self._call(lambda: self._desk.scroll(x, y, dx, dy, space=space))

    async def mouse_down(self, x: int, y: int, button: str = "left", *, space: Any = None) -> None:
        await self._call(lambda: self._desk.mouse_down(x, y, button, space=space))

    async def mouse_up(self, x: int, y: int, button: str = "left", *, space: Any = None) -> None:
        await self._call(lambda: self._desk.mouse_up(x, y, button, space=space))

    async def type(self, text: str) -> None:
        await self._call(self._desk.type, text)

    async def key(self, chord: str) -> None:
        await self._call(self._desk.key, chord)

    async def key_down(self, key: str) -> None:
        await self._call(self._desk.key_down, key)

    async def key_up(self, key: str) -> None:
        await self._call(self._desk.key_up, key)

    async def cursor_position(self) -> tuple[int, int]:
        return await self._call(self._desk.cursor_position)

    async def exec(self, command: str, timeout: float = 60.0, *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, user: str | None = None,
                   background: bool = False, on_output: Callable[[str, str], None] | None = None) -> ExecResult:
        """As :meth:`Desktop.exec`; ``on_output`` is called from the desktop's worker thread (hand the text to
        the event loop with ``loop.call_soon_threadsafe``)."""
        return await self._call(lambda: self._desk.exec(command, timeout, cwd=cwd, env=env, user=user,
                                                        background=background, on_output=on_output))

    async def upload(self, local: str | os.PathLike[str], remote: str) -> None:
        await self._call(self._desk.upload, local, remote)

    async def download(self, remote: str, local: str | os.PathLike[str]) -> None:
        await self._call(self._desk.download, remote, local)

    async def clipboard_get(self) -> str:
        return await self._call(self._desk.clipboard_get)

    async def clipboard_set(self, text: str) -> None:
        await self._call(self._desk.clipboard_set, text)

    async def open_url(self, url: str, browser: str | None = None) -> None:
        await self._call(self._desk.open_url, url, browser)

    async def launch(self, app: str, *args: str) -> int | None:
        return await self._call(self._desk.launch, app, *args)

    async def window_titles(self) -> list[str]:
        return await self._call(self._desk.window_titles)

    async def browser(self) -> BrowserEndpoint:
        return await self._call(self._desk.browser)

    async def browser_pages(self) -> list[Page]:
        return await self._call(self._desk.browser_pages)

    # -- episodes (docs/episodes.md) -------------------------------------------------------------------------
    async def snapshot(self, name: str, ttl: float | None = None, replace: bool = False) -> Snapshot:
        return await self._call(self._desk.snapshot, name, ttl, replace)

    async def restore(self, name: Snapshot | str) -> Snapshot:
        return await self._call(self._desk.restore, name)

    async def request_takeover(self, reason: str, timeout: float | None = None) -> float:
        return await self._call(self._desk.request_takeover, reason, timeout)

    # -- deskctl.observe (docs/observation.md) ------------------------------------------------------------
    async def windows(self) -> list[Window]:
        return await self._call(self._desk.windows)

    async def focus(self, window: Any) -> Window:
        return await self._call(self._desk.focus, window)

    async def move_window(self, window: Any, x: int, y: int, width: int, height: int) -> Window:
        return await self._call(self._desk.move_window, window, x, y, width, height)

    async def wait_until_stable(self, region: Any = None, quiet_ms: int = 500, timeout: float = 30.0) -> float:
        return await self._call(self._desk.wait_until_stable, region, quiet_ms, timeout)

    async def accessibility_tree(self, window: str | None = None, max_depth: int = 40,
                                 max_nodes: int = 5000) -> AccessibilityTree:
        return await self._call(self._desk.accessibility_tree, window, max_depth, max_nodes)

    async def find(self, role: str | None = None, name: str | None = None,
                   window: str | None = None) -> list[AccessibleNode]:
        return await self._call(self._desk.find, role, name, window)

    async def click_element(self, node: Any, button: str = "left") -> None:
        await self._call(self._desk.click_element, node, button)

    async def wait_for(self, what: str | Callable[[AsyncDesktop], Any], timeout: float = 30.0,
                       interval: float = 0.25) -> Any:
        """The sync :meth:`~deskctl.Desktop.wait_for`, polling without a thread: ``what`` is a window title or a
        callable taking this desktop (a coroutine function too); cancellable between polls."""
        late = wait_terms(what, timeout, interval, self._desk.spec.provider)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if isinstance(what, str):
                value: Any = next((t for t in await self.window_titles() if what in t), None)
            else:
                value = what(self)
                if inspect.isawaitable(value):
                    value = await value
            if value:
                return value
            if loop.time() >= deadline:
                raise late
            await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))

    def labels(self) -> dict[str, str]:
        return self._desk.labels()


# --------------------------------------------------------------------------------------------------
class _Opening:
    """What :func:`open_desktop` and :func:`attach` return: await it for the desktop, or ``async with`` it to
    have the desktop closed (or, attached, released) at the end of the block."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, AsyncDesktop]]) -> None:
        self._start = start
        self._desk: AsyncDesktop | None = None

    def __await__(self) -> Generator[Any, None, AsyncDesktop]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncDesktop:
        self._desk = await self._start()
        return self._desk

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._desk is not None
        await self._desk.__aexit__(exc_type, exc, tb)


def _read_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _start(make: Callable[[], Desktop], undo: Callable[[Desktop], None], on_cancel: Callable[[], None],
                 provider: str | None) -> AsyncDesktop:
    """Run ``make`` (open or attach a session) on its own thread. When this task is cancelled meanwhile, tell it
    (``on_cancel``), wait (shielded) for it to stop at its next step, ``undo`` what it made if it got through,
    then let the cancel go on."""
    owner = _Owner()
    work = _in_own_thread(make, name="deskctl-aio-open")
    watched = asyncio.wrap_future(work)
    try:
        desk = await asyncio.shield(watched)
    except asyncio.CancelledError as cancel:
        # the shielded future outlives this await: its outcome is read below (through `work`), so mark it read,
        # or asyncio logs "Future exception was never retrieved" when it is collected
        watched.add_done_callback(_read_outcome)
        on_cancel()
        try:
            made = await _to_the_end(work)
        except BaseException:
            pass  # it failed, or stopped at a step: Desktop.open rolled back what it made
        else:
            with contextlib.suppress(asyncio.CancelledError):
                await _to_the_end(_in_own_thread(undo, made, name="deskctl-aio-undo"))
        finally:
            owner.done()
        raise owner.after_cancel(cancel, provider)
    except BaseException:
        owner.done()
        raise
    return AsyncDesktop(desk, owner)


def open_desktop(
    provider: str = DEFAULT_PROVIDER,
    *,
    platform: str = "ubuntu",
    geometry: str | None = "1024x768",
    window_geometry: str | None = None,
    start_url: str | None = None,
    window_manager: bool = False,
    ttl: str | float | None = None,
    max_minutes: float | None = None,
    max_usd: float | None = None,
    budget: str | None = None,
    unknown_cost: str | None = None,
    labels: Mapping[str, str] | None = None,
    provider_options: Mapping[str, Any] | None = None,
    ready_timeout: float = 120.0,
    detached: bool = False,
    preflight: bool = True,
    ledger: Ledger | None = None,
    spec: DesktopSpec | None = None,
    record: str | os.PathLike[str] | None = None,
    record_settle: float = 0.0,
    from_snapshot: Snapshot | str | None = None,
    ready_when: Any = None,
) -> _Opening:
    """:func:`deskctl.open_desktop`, awaited: same parameters, same errors, same guarantees::

        async with deskctl.aio.open_desktop("xvfb", geometry="1280x800") as desk:
            await desk.click(10, 20)

    or ``desk = await deskctl.aio.open_desktop(...)`` and ``await desk.close()``. A bad spec raises here, before
    anything runs.
    """
    if spec is None:
        from deskctl.spec import DesktopSpec

        spec = DesktopSpec.build(
            provider=provider, platform=platform, geometry=geometry if geometry is not None else "native",
            window_geometry=window_geometry, start_url=start_url, window_manager=window_manager,
            ttl_seconds=ttl, max_minutes=max_minutes, max_usd=max_usd, budget=budget, unknown_cost=unknown_cost,
            labels=dict(labels or {}),
            provider_options=dict(provider_options or {}),
        )
    stop = threading.Event()

    def progress(step: str) -> None:
        # the sync session reports each lifecycle step here, from the thread opening it: the place where a
        # cancel can stop it and have Desktop.open roll back what was made
        if stop.is_set():
            raise _Cancelled(f"cancelled before {step}")

    def undo(made: Desktop) -> None:
        # it got through before it saw the cancel: destroy it, detached or not (as a Ctrl-C during open does)
        made._teardown(status="failed", reason=_Cancelled.code)

    if ready_when is not None:
        from deskctl.observe.readiness import condition

        condition(ready_when)  # a malformed condition is refused before anything is created

    def ready(desk: Desktop) -> Desktop:
        if ready_when is not None:
            from deskctl.observe.readiness import ready_or_destroyed

            ready_or_destroyed(desk, ready_when, ready_timeout)  # a sync condition, run in the opening thread
        return desk

    if from_snapshot is not None:
        from deskctl.episodes import open_from_snapshot

        def from_snap() -> Desktop:
            return ready(open_from_snapshot(spec, from_snapshot, ledger=ledger, desktop_class=Desktop,
                                            ready_timeout=ready_timeout,
                                            detached=detached, run_preflight=preflight, progress=progress,
                                            record=record, record_settle=record_settle))

        return _Opening(lambda: _start(from_snap, undo, stop.set, spec.provider))
    desk = Desktop(spec, ledger=ledger, ready_timeout=ready_timeout, detached=detached, run_preflight=preflight,
                   progress=progress, record=record, record_settle=record_settle)

    def make() -> Desktop:
        desk.open()
        return ready(desk)

    return _Opening(lambda: _start(make, undo, stop.set, spec.provider))


def attach(session_id: str, *, ledger: Ledger | None = None) -> _Opening:
    """:func:`deskctl.attach`, awaited: reach a running (usually detached) session by id. Leaving ``async with``
    releases it without destroying it; ``await desk.close()`` destroys it."""
    from deskctl import session

    def reach() -> Desktop:
        return session.attach(session_id, ledger=ledger)

    # attaching makes nothing: a cancel only has to let go of what was reached
    return _Opening(lambda: _start(reach, Desktop.release, lambda: None, None))
