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

The parts: :mod:`deskctl.aio_owner` (threads, signals), :mod:`deskctl.aio_desktop` (:class:`AsyncDesktop`, the
method mirror) and this module (opening and attaching); every name stays importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine, Generator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from deskctl.aio_desktop import AsyncDesktop
from deskctl.aio_owner import _Cancelled, _in_own_thread, _Owner, _to_the_end
from deskctl.providers import DEFAULT_PROVIDER
from deskctl.session import Desktop

if TYPE_CHECKING:
    from deskctl.episodes.store import Snapshot
    from deskctl.ledger import Ledger
    from deskctl.spec import DesktopSpec

__all__ = ["AsyncDesktop", "attach", "open_desktop"]


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
    video: Any = False,
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

        if video:
            from deskctl.errors import UsageError

            raise UsageError("a video of a session started from a snapshot is not supported",
                             code="usage.unsupported")

        def from_snap() -> Desktop:
            return ready(open_from_snapshot(spec, from_snapshot, ledger=ledger, desktop_class=Desktop,
                                            ready_timeout=ready_timeout,
                                            detached=detached, run_preflight=preflight, progress=progress,
                                            record=record, record_settle=record_settle))

        return _Opening(lambda: _start(from_snap, undo, stop.set, spec.provider))
    desk = Desktop(spec, ledger=ledger, ready_timeout=ready_timeout, detached=detached, run_preflight=preflight,
                   progress=progress, record=record, record_settle=record_settle, video=video)

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
