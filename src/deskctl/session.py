"""The desktop session: lifecycle, guaranteed cleanup, geometry pinning, watchdog and metering.

A :class:`Desktop` goes through these states::

    new -> opening -> ready -> closing -> closed
                \\-> failed (create or readiness failed; whatever was made is destroyed)
    ready -> ended (the watchdog ended it at its limit, or the provider lost it)

Guarantees (ARCHITECTURE.md, "Session lifecycle"):

1. the spec is validated, the provider's preflight runs, the projected cost is reserved against budgets;
2. an *intent* record is in the ledger, with the client-made session id, before create is sent;
3. the desktop is created with the ``deskctl.*`` labels, so it can be found again after a crash;
4. the live display size must equal the pinned geometry (``geometry.mismatch`` otherwise);
5. a watchdog ends the session at its max minutes or max cost (``budget.exceeded``);
6. destroy runs on return, exception, Ctrl-C (SIGINT), SIGTERM and interpreter exit, and when create or
   readiness failed part-way; the end and the cost are recorded. A destroy that cannot be confirmed raises
   ``cleanup.incomplete`` (exit 5) naming what is left;
7. a *detached* session (``deskctl up``) skips step 6 at exit: ``deskctl down``, its expiry or ``deskctl reap``
   end it.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import socket
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from deskctl import actions as act
from deskctl.errors import (
    BudgetExceeded,
    CleanupIncomplete,
    DeskctlError,
    GeometryMismatch,
    GeometryOutOfBounds,
    InfrastructureError,
    Interrupted,
    NotFound,
    ProviderUnreachable,
    SessionClosed,
    UsageError,
    WaitTimeout,
)
from deskctl.providers import DEFAULT_PROVIDER, get_provider
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_LEDGER,
    LABEL_OWNER,
    LABEL_SESSION,
    ExecResult,
    Provider,
    RawFrame,
    RemoteHandle,
    Screenshot,
)

if TYPE_CHECKING:
    from deskctl.ledger import Ledger, ModelUsage, SessionRecord
    from deskctl.metering import Rate
    from deskctl.recording import Recorder
    from deskctl.spec import DesktopSpec

__all__ = ["Desktop", "State", "attach", "new_session_id", "open_desktop", "owner_id"]

#: lifetime of a detached session when neither --ttl nor --max-minutes says otherwise
DEFAULT_DETACHED_TTL = 3600.0
#: lifetime label of an attached session without limits (the reaper also removes it when its owner dies)
DEFAULT_ATTACHED_TTL = 24 * 3600.0
#: action counts are written to the ledger at least this often (and at the end)
ACTION_FLUSH_SECONDS = 5.0
KEEPALIVE_SECONDS = 30.0


class State(StrEnum):
    NEW = "new"
    OPENING = "opening"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"
    ENDED = "ended"


def new_session_id() -> str:
    """A client-made session id: ``dk-`` and 10 random hex digits."""
    import secrets  # here: its import (hashlib, random) is a cost every `deskctl do` would pay

    return "dk-" + secrets.token_hex(5)


def owner_id() -> str:
    """``host:pid`` of this process, as stored in the ``deskctl.owner`` label."""
    return f"{socket.gethostname()}:{os.getpid()}"


# --------------------------------------------------------------------------------------------------
# process-wide cleanup: every attached desktop that is open is destroyed on SIGTERM, SIGINT and exit
# --------------------------------------------------------------------------------------------------
_open_desktops: weakref.WeakSet[Desktop] = weakref.WeakSet()
_signals_lock = threading.Lock()
_previous_handlers: dict[int, Any] = {}
_deferred_signals: list[int] = []
_shielded = threading.local()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if getattr(_shielded, "active", False):
        # a second Ctrl-C while cleanup runs must not cut the cleanup short
        _deferred_signals.append(signum)
        return
    previous = _previous_handlers.get(signum)
    if callable(previous) and previous not in (signal.default_int_handler,):
        _close_all(reason=f"signal {signal.Signals(signum).name}")
        previous(signum, frame)
        return
    # Unwind the main thread: `with` blocks and the Desktop.__exit__ of every session run their cleanup.
    name = signal.Signals(signum).name
    raise Interrupted(f"interrupted by {name}; the desktop was cleaned up", signum=signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    with _signals_lock:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            if signum in _previous_handlers:
                continue
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN:
                continue
            _previous_handlers[signum] = current
            signal.signal(signum, _on_signal)


@contextlib.contextmanager
def _shield_signals() -> Iterator[None]:
    """Defer SIGINT/SIGTERM while a destroy runs in the main thread, then re-deliver them."""
    if threading.current_thread() is not threading.main_thread() or getattr(_shielded, "active", False):
        yield
        return
    _shielded.active = True
    try:
        yield
    finally:
        _shielded.active = False
        if _deferred_signals:
            signum = _deferred_signals.pop()
            _deferred_signals.clear()
            raise Interrupted(
                f"interrupted by {signal.Signals(signum).name}; the desktop was cleaned up", signum=signum
            )


def _close_all(reason: str) -> None:
    for desk in list(_open_desktops):
        with contextlib.suppress(Exception):
            desk._teardown(status="ended", reason=reason)


@atexit.register
def _close_all_at_exit() -> None:
    _close_all(reason="interpreter exit")


# --------------------------------------------------------------------------------------------------

def _check_url(url: str) -> None:
    """What ``open_url`` accepts: ``scheme://host...``, ``file:`` with an absolute path, or an absolute path
    (``/srv/page.html``, ``C:\\pages\\a.html``). An opener handed anything else (``not a url``) fails on the
    desktop, where nobody sees it, after the call reported success."""
    import re
    from urllib.parse import urlsplit

    problem = None
    if url.startswith("/") or re.match(r"[A-Za-z]:[\\/]", url):
        if "\0" in url or "\n" in url:
            problem = "is a path with a NUL or a line break"
    else:
        parts = urlsplit(url)
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme or "-"):
            problem = "has no scheme (https://...) and is no absolute path"
        elif parts.scheme.lower() == "file":
            if not parts.path.startswith("/"):
                problem = "is a file: URL without an absolute path (file:///dir/page.html)"
        elif not parts.hostname:
            problem = "names no host (scheme://host/...)"
        elif any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
            problem = "holds a space or a control character (percent-encode it: %20)"
    if problem:
        raise UsageError(f"{url!r} is not a URL to open: it {problem}", code="usage.bad_url",
                         remedy="give scheme://host/... (https://example.com), file:///absolute/path, or an "
                                "absolute path")


class Desktop:
    """One desktop session. Build with :func:`open_desktop` (owned: destroyed on exit) or :func:`attach`.

    All coordinates are in the pinned geometry's pixel space, the same space as :meth:`screenshot`.
    Methods raise :class:`~deskctl.errors.SessionClosed` after close, and
    :class:`~deskctl.errors.GeometryOutOfBounds` for points outside the screen.
    """

    _recorder: Recorder | None

    def __init__(
        self,
        spec: DesktopSpec,
        *,
        ledger: Ledger | None = None,
        ready_timeout: float = 120.0,
        detached: bool = False,
        run_preflight: bool = True,
        session_id: str | None = None,
        progress: Callable[[str], None] | None = None,
        record: str | os.PathLike[str] | None = None,
        record_settle: float = 0.0,
    ) -> None:
        self._spec: DesktopSpec | None = spec
        #: an attached session's spec as the ledger stores it, validated into ``spec`` only when that is read:
        #: acting on a running desktop needs none of it but the fields below (and loading pydantic costs time)
        self._stored_spec: Mapping[str, Any] | None = None
        self._init_state(provider=spec.provider, provider_options=spec.provider_options,
                         max_minutes=spec.max_minutes, max_usd=spec.max_usd, ledger=ledger, session_id=session_id,
                         detached=detached)
        from deskctl.limits import check_number

        self._progress = progress
        self.ready_timeout = check_number("ready_timeout", ready_timeout, what="ready_timeout")
        self.run_preflight = run_preflight
        if record is not None:  # checked before anything is created or paid for
            from deskctl.recording import Recorder

            self._recorder = Recorder.create(record, record_settle)

    def _init_state(self, *, provider: str, provider_options: Mapping[str, Any], max_minutes: float | None,
                    max_usd: float | None, ledger: Ledger | None, session_id: str | None, detached: bool) -> None:
        self._provider_name = provider
        self._provider_options = provider_options
        self._max_minutes = max_minutes
        self._max_usd = max_usd
        self._progress = None
        self.id = session_id or new_session_id()
        self.detached = detached
        self.ready_timeout = 120.0
        self.run_preflight = True
        self.state = State.NEW
        self.handle: RemoteHandle | None = None
        self.end_reason: str | None = None
        self._ledger = ledger
        self._owns_ledger = ledger is None
        self._provider: Provider | None = None
        self._owned = True
        self._size: tuple[int, int] | None = None
        self._rate: Rate | None = None
        self._rate_resolved = False
        #: the hourly rate the ledger recorded at the start, for an attached session's money limit
        self._recorded_usd_per_hour: float | None = None
        self._reservation: str | None = None
        self._create_sent_at: float | None = None
        #: the create's own CleanupIncomplete: its answer was lost and what it made may still exist
        self._create_left: CleanupIncomplete | None = None
        self._expires_at: float | None = None
        self._lock = threading.RLock()
        self._teardown_lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ended_error: DeskctlError | None = None
        self._limit_on_use = False
        self._recorder = None
        #: model spend metered for this session (Desktop.meter): known dollars, and calls of unknown price
        self._model_usd = 0.0
        self._model_unknown = 0
        #: set when model spend moved the money limit (and at stop), so the watchdog looks again
        self._limits_changed = threading.Event()

    @classmethod
    def from_record(cls, record: SessionRecord, *, ledger: Ledger, owns_ledger: bool = False) -> Desktop:
        """A session that runs already, as ``ledger`` records it (what :func:`attach` returns): leaving a ``with``
        block releases it, :meth:`close` destroys it. ``owns_ledger``: close ``ledger`` with the session.
        Reads the stored spec as plain data: it was validated when the session was opened. Raises
        :class:`~deskctl.errors.SessionClosed` for a session that ended (or never got a desktop)."""
        if record.handle is None or record.status in ("ended", "failed"):
            raise SessionClosed(f"session {record.session_id} is {record.status}", provider=record.provider)
        stored = record.spec or {}
        desk = cls.__new__(cls)
        desk._spec = None
        desk._stored_spec = stored
        desk._init_state(provider=record.provider, provider_options=dict(stored.get("provider_options") or {}),
                         max_minutes=stored.get("max_minutes"), max_usd=stored.get("max_usd"), ledger=ledger,
                         session_id=record.session_id, detached=record.detached)
        desk._owns_ledger = owns_ledger
        desk._owned = False
        desk._limit_on_use = True
        # `deskctl up --record DIR` keeps recording (its event is recording.LEDGER_EVENT; the module loads only then)
        events = ledger.events(record.session_id)
        if any(event.kind == "recording" for event in events):
            from deskctl.recording import recorder_from_events

            desk._recorder = recorder_from_events(events)
        desk._recorded_usd_per_hour = record.rate_usd_per_hour
        desk._model_usd, desk._model_unknown = ledger.model_spend([record.session_id]).get(record.session_id, (0.0, 0))
        desk._create_sent_at = record.created_at
        desk._expires_at = record.expires_at
        desk.handle = RemoteHandle.from_dict(record.handle)
        geometry = stored.get("geometry")
        if isinstance(geometry, Mapping):
            desk._size = (int(geometry["width"]), int(geometry["height"]))
        elif record.width and record.height:  # native size, as verified when the session became ready
            desk._size = (int(record.width), int(record.height))
        else:  # native size of a session not yet ready: ask the live display
            desk._size = desk.provider.display_size(desk.handle)
        desk.state = State.READY
        return desk

    # -- public properties -----------------------------------------------------------------------
    @property
    def spec(self) -> DesktopSpec:
        """What the session was asked to be."""
        if self._spec is None:
            from deskctl.spec import STORED, DesktopSpec

            stored = self._stored_spec
            self._spec = (DesktopSpec.model_validate(stored, context=STORED) if stored
                          else DesktopSpec.build(provider=self._provider_name))
        return self._spec

    @property
    def provider_name(self) -> str:
        return self._provider_name

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = get_provider(self._provider_name, dict(self._provider_options))
        return self._provider

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            from deskctl.ledger import open_ledger

            self._ledger = open_ledger()
        return self._ledger

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the live display, verified against the pinned geometry at open."""
        self._check_usable()
        assert self._size is not None
        return self._size

    @property
    def expires_at(self) -> float | None:
        return self._expires_at

    @property
    def recording(self) -> Recorder | None:
        """The trajectory recorder (``directory``, ``last_step``), or None when the session is not recorded."""
        return self._recorder

    def __repr__(self) -> str:
        return f"<Desktop {self.id} {self.spec.provider} {self.spec.geometry_label()} {self.state.value}>"

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> Desktop:
        if self.state is State.NEW:
            self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._owned or self.detached:
            self.release()
            return
        reason = "closed"
        if exc is not None:
            reason = getattr(exc, "code", None) or type(exc).__name__
            if isinstance(exc, KeyboardInterrupt):
                reason = "interrupted"
        self._teardown(status="ended" if exc is None else "failed", reason=reason)

    def open(self) -> Desktop:
        """Run lifecycle steps 1-5. On any failure, whatever was made is destroyed before re-raising."""
        if self.state is not State.NEW:
            raise UsageError(f"session {self.id} was already opened", code="usage.session_state")
        self.state = State.OPENING
        from deskctl._fds import raise_open_file_limit

        raise_open_file_limit()  # a process with a hundred desktops needs more than the usual soft limit
        provider = self.provider
        if self.run_preflight:
            from deskctl.checks.runner import raise_for_failures, run_checks

            self._step("preflight")
            raise_for_failures(run_checks(self.spec, provider), provider.name)

        from deskctl import budget, metering

        self._rate = metering.rate_for(self.spec)
        self._rate_resolved = True
        self._reservation = budget.reserve(self.ledger, session_id=self.id, spec=self.spec, rate=self._rate)
        now = time.time()
        self._expires_at = now + self._lifetime()
        try:
            self._record_intent(now)
        except BaseException:
            budget.settle(self.ledger, self._reservation, cost_usd=None)
            raise
        # even a detached session is rolled back when it is interrupted before it is ready
        _open_desktops.add(self)
        _install_signal_handlers()
        try:
            self._create_and_verify()
            if self._recorder is not None:
                self._recorder.started(self)
        except BaseException as exc:
            from deskctl._fds import capacity_error, out_of_descriptors, spare_descriptors

            # (what is left behind, CleanupIncomplete, outranks why)
            full = not isinstance(exc, CleanupIncomplete) and _caused_by(exc, out_of_descriptors)
            reason = "capacity.file_descriptors" if full else getattr(exc, "code", None) or type(exc).__name__
            if self.handle is None and isinstance(exc, CleanupIncomplete):
                self._create_left = exc
            with spare_descriptors() if full else contextlib.nullcontext():
                self._teardown(status="failed", reason=str(reason))
            if full:  # whichever step ran out (a pipe, a socket, a log file), the cause is the same
                raise capacity_error(f"open {self.id}", provider=provider.name) from exc
            raise
        self._start_threads()
        if self.detached:
            _open_desktops.discard(self)
            provider.detach(self._require_handle())
        return self

    def _step(self, what: str) -> None:
        if self._progress is not None:
            self._progress(what)

    def _lifetime(self) -> float:
        limits = [x for x in (self.spec.ttl_seconds,) if x]
        if self.spec.max_minutes:
            limits.append(self.spec.max_minutes * 60)
        if limits:
            return min(limits)
        return DEFAULT_DETACHED_TTL if self.detached else DEFAULT_ATTACHED_TTL

    def labels(self) -> dict[str, str]:
        labels = dict(self.spec.labels)
        labels[LABEL_SESSION] = self.id
        labels[LABEL_OWNER] = owner_id()
        labels[LABEL_CREATED] = str(int(time.time()))
        # rounded up: a provider backstop must never end the desktop before the session's own limit (a label
        # truncated down fired up to a second early, even while `deskctl up` was still verifying the desktop)
        labels[LABEL_EXPIRES] = str(math.ceil(self._expires_at or time.time()))
        if self.detached:
            labels[LABEL_DETACHED] = "1"
        from deskctl.ledger import ledger_id

        labels[LABEL_LEDGER] = ledger_id(self.ledger.url)
        return labels

    def _record_intent(self, now: float) -> None:
        from deskctl.ledger import SessionRecord

        self.ledger.record_intent(
            SessionRecord(
                session_id=self.id,
                provider=self.spec.provider,
                platform=self.spec.platform.value,
                geometry=self.spec.geometry_label(),
                owner=owner_id(),
                detached=self.detached,
                status="intent",
                intent_at=now,
                expires_at=self._expires_at,
                spec=self.spec.model_dump(mode="json"),
                labels=dict(self.spec.labels),
                rate_usd_per_hour=self._rate.usd_per_hour if self._rate else None,
                rate_source=self._rate.source if self._rate else None,
                budget=self._reservation,
            )
        )

    def _create_and_verify(self) -> None:
        provider = self.provider
        self._create_sent_at = time.time()
        self.ledger.record_create_sent(self.id, self._create_sent_at)
        self._step(f"creating {self.id}")
        handle = provider.create(self.spec, self.id, self.labels())
        self.handle = handle
        self.ledger.record_created(self.id, handle.to_dict())
        self._step("waiting until the desktop answers")
        provider.wait_ready(handle, time.monotonic() + self.ready_timeout)
        self._step("verifying the live geometry")
        width, height = provider.display_size(handle)
        wanted = self.spec.geometry
        if wanted is not None and (width, height) != (wanted.width, wanted.height):
            raise GeometryMismatch(
                f"the live display is {width}x{height}, not the pinned {wanted}",
                provider=provider.name,
                remedy="use --geometry native to accept the provider's size, or another provider",
                details={"live": f"{width}x{height}", "pinned": str(wanted)},
            )
        self._size = (width, height)
        self.ledger.record_ready(self.id, time.time(), width, height)
        self.state = State.READY

    def _start_threads(self) -> None:
        if self.detached:
            return
        limit = self._watchdog_seconds()
        if limit is not None:
            self._spawn(self._watchdog, limit, name=f"deskctl-watchdog-{self.id}")
        if self.provider.capabilities.server_ttl or not self.provider.capabilities.local:
            self._spawn(self._keepalive, name=f"deskctl-keepalive-{self.id}")

    def _spawn(self, target: Any, *args: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _watchdog_seconds(self) -> float | None:
        limits: list[float] = []
        if self._max_minutes:
            limits.append(self._max_minutes * 60)
        usd_per_hour = self._hourly_rate()
        if self._max_usd is not None and self._model_usd > self._max_usd + 1e-9:
            limits.append(0.0)  # model spend alone passed the cap
        elif self._max_usd is not None and usd_per_hour is not None and usd_per_hour > 0:
            # what model spend left of the cap, at the desktop's rate
            limits.append(max(0.0, self._max_usd - self._model_usd) / usd_per_hour * 3600)
        if not limits:
            return None
        started = self._create_sent_at or time.time()
        return max(0.0, started + min(limits) - time.time())

    def _session_rate(self) -> Rate | None:
        """The session's rate. An attached session bills at the price recorded when its desktop was made (a
        catalog changed since does not re-price it); the catalog gives only the billing steps and minimum."""
        if not self._rate_resolved:
            import dataclasses

            from deskctl import metering

            if self._spec is not None:
                rate = metering.rate_for(self._spec)
            else:  # an attached session: its stored spec as data (DesktopSpec would import pydantic for a price)
                from deskctl.platforms import Platform

                stored = self._stored_spec or {}
                platform = str(stored.get("platform") or Platform.UBUNTU.value)
                rate = metering.lookup_rate(self._provider_name, platform, dict(self._provider_options))
            recorded = self._recorded_usd_per_hour
            if recorded is not None:  # set for an attached session only
                rate = (dataclasses.replace(rate, usd_per_hour=recorded) if rate is not None else
                        metering.Rate(recorded, 1, 0, source="the ledger (rate recorded at creation)", date=""))
            self._rate = rate
            self._rate_resolved = True
        return self._rate

    def _hourly_rate(self) -> float | None:
        if self._rate_resolved:
            return self._rate.usd_per_hour if self._rate is not None else None
        return self._recorded_usd_per_hour

    def _watchdog(self, seconds: float) -> None:
        while True:
            self._limits_changed.wait(seconds)
            if self._stop.is_set():
                return
            if not self._limits_changed.is_set():
                break  # the limit is reached
            self._limits_changed.clear()  # model spend moved the limit: wait for the new one
            left = self._watchdog_seconds()
            if left is None:
                return
            if left <= 0:
                break
            seconds = left
        self._end_at_limit()

    def _end_at_limit(self) -> BudgetExceeded:
        what = "max minutes" if self._max_minutes else "max cost"
        error = BudgetExceeded(
            f"session {self.id} reached its {what} and was ended", provider=self._provider_name,
            remedy="raise --max-minutes / --max-usd, or split the run",
        )
        self._ended_error = error
        with contextlib.suppress(Exception):
            self._teardown(status="ended", reason="budget.exceeded")
        return error

    def _keepalive(self) -> None:
        while not self._stop.wait(KEEPALIVE_SECONDS):
            handle = self.handle
            if handle is None or self.state is not State.READY:
                return
            try:
                self.provider.keepalive(handle)
            except Exception as exc:  # a daemon thread has nobody to raise to: what failed goes to the ledger
                if self._stop.is_set():
                    return  # the session closed while this keepalive was in flight: its answer is moot
                code = exc.code if isinstance(exc, DeskctlError) else "internal"
                with contextlib.suppress(Exception):
                    self.ledger.record_event(self.id, "keepalive_failed", {"code": code})
                if code == "provider.session_lost" and self._owned:
                    # the desktop is gone (reaped, or ended with its reservation): end the session now, so the
                    # ledger stops counting time nobody is billed for and the next call says why
                    self._ended_error = exc if isinstance(exc, DeskctlError) else None
                    with contextlib.suppress(Exception):
                        self._teardown(status="failed", reason=code)
                    return

    # -- teardown ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the desktop (confirmed), record the end and the cost. Idempotent."""
        self._teardown(status="ended", reason="closed")

    def release(self) -> None:
        """Let go of the desktop without destroying it (detached sessions, :func:`attach`). A recording's steps
        still being written are written first; one that could not be is raised (``recording.write_failed``)
        once the desktop is let go."""
        recording_error = self._finish_recording()
        self._release()
        if recording_error is not None:
            raise recording_error

    def _finish_recording(self) -> DeskctlError | None:
        """Wait for the recorder's background writes (its steps are captured already); their error, if any."""
        if self._recorder is None:
            return None
        try:
            self._recorder.close()
        except DeskctlError as exc:
            return exc
        return None

    def _release(self) -> None:
        self._stop.set()
        self._limits_changed.set()
        self._flush_actions(force=True)
        _open_desktops.discard(self)
        if self._provider is not None:
            with contextlib.suppress(Exception):
                self._provider.close()
        if self._owns_ledger and self._ledger is not None:
            with contextlib.suppress(Exception):
                self._ledger.close()
            self._ledger = None

    def _teardown(self, *, status: str, reason: str) -> None:
        if not self._teardown_lock.acquire(blocking=False):
            # another thread (watchdog, signal) is tearing down: wait for it
            with self._teardown_lock:
                return
        try:
            if self.state in (State.CLOSED, State.FAILED, State.ENDED):
                return
            # the recording's last steps are written before the end is: a write that failed ends the session failed
            recording_error = self._finish_recording()
            if recording_error is not None and status == "failed":
                recording_error = None  # the failure being reported comes first
            elif recording_error is not None:
                status, reason = "failed", recording_error.code
            self._write_ahead(reason)  # before anything stops: a refused destroy leaves the session as it was
            self.state = State.CLOSING
            self._stop.set()
            self._limits_changed.set()
            _open_desktops.discard(self)
            with _shield_signals():
                self._destroy_and_record(status=status, reason=reason)
            if recording_error is not None:
                raise recording_error
        finally:
            self._teardown_lock.release()
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join(timeout=5)

    def _incomplete(self, cause: DeskctlError) -> CleanupIncomplete:
        return CleanupIncomplete(
            f"destroy of {self.id} could not be confirmed: {cause.message}", provider=self._provider_name,
            remedy=f"deskctl reap (or deskctl down {self.id})", details={"left": [self.id], "cause": cause.code},
        )

    def _write_ahead(self, reason: str) -> None:
        """The row says `destroying` before the destroy is sent, so that a process killed between the destroy and
        the end record, or a ledger that cannot take the end, never leaves `ready` for a desktop that is gone;
        `deskctl reap` finishes a `destroying` row."""
        if self._create_sent_at is None:
            return
        try:
            self.ledger.record_destroying(self.id, reason=reason, by=owner_id())
        except DeskctlError:
            if not self._owned:
                # An explicit destroy (`deskctl down`) that the ledger cannot record is not sent: the desktop stays
                # up and usable, as the ledger says, and the ledger error is the answer (exit 20).
                raise
            # Our own desktop is destroyed whatever the ledger says (cleanup comes first); `deskctl reap` finds its
            # `ready` row gone by its liveness check.

    def _destroy_and_record(self, *, status: str, reason: str) -> None:
        from deskctl import budget, metering

        provider = self.provider
        left: CleanupIncomplete | None = None
        try:
            if self.handle is not None:
                provider.destroy(self.handle)
            elif self._create_sent_at is not None:
                # create was sent but no handle came back: find what it made by its label
                orphans = provider.list_owned({LABEL_SESSION: self.id})
                for orphan in orphans:
                    provider.destroy(orphan)
                if not orphans and self._create_left is not None:
                    # the provider said what it made may still exist (and how it is found): the row says leaked
                    left = self._create_left
        except ProviderUnreachable as exc:
            if self.handle is None and reason == ProviderUnreachable.code:
                # create never reached the provider, and the sweep cannot either: the failure to report is
                # the unreachable provider (exit 20); `deskctl reap` sweeps the label once it answers again
                with contextlib.suppress(Exception):
                    self.ledger.record_event(self.id, "orphan_sweep_skipped", {"code": exc.code})
            else:
                left = self._incomplete(exc)
        except CleanupIncomplete as exc:
            left = exc
        except DeskctlError as exc:
            left = self._incomplete(exc)
        ended = time.time()
        # nothing was sent to the provider: nothing can have been billed
        billable = 0.0 if self._create_sent_at is None else max(0.0, ended - self._create_sent_at)
        cost = metering.cost_for(self._session_rate(), billable) if billable else 0.0
        self._flush_actions(force=True)
        final_status = "leaked" if left is not None else status
        self.end_reason = reason
        end_error: DeskctlError | None = None
        try:
            self.ledger.record_end(
                self.id, status=final_status,
                reason=reason if left is None or left is self._create_left else f"{reason}; {left.code}",
                ended_at=ended, billable_seconds=billable, cost_usd=cost,
            )
        except DeskctlError as exc:
            end_error = exc
        except Exception:  # the end record never hides the outcome of the destroy
            pass
        with contextlib.suppress(Exception):
            budget.settle(self.ledger, self._reservation, cost_usd=cost)
        if status == "failed":
            self.state = State.FAILED
        else:
            self.state = State.ENDED if reason == "budget.exceeded" else State.CLOSED
        with contextlib.suppress(Exception):
            provider.close()
        if left is not None:
            raise left
        if end_error is not None and not self._owned:
            raise InfrastructureError(
                f"{self.id} was destroyed, but the ledger could not record its end ({end_error.message}); it stays "
                "`destroying` until `deskctl reap` records it", code="ledger.unavailable", provider=provider.name,
                remedy="make the ledger writable again (disk space, database), then run deskctl reap",
            ) from end_error

    def _end_if_gone(self, code: str) -> None:
        """A desktop this process does not own reported lost: end its session (failed) only when the provider
        confirms it is gone, since a lost connection alone does not mean a lost desktop."""
        handle = self.handle
        if handle is None:
            return
        try:
            if self.provider.is_alive(handle):
                return
        except DeskctlError:
            return  # cannot tell: leave it to `deskctl reap`
        self._teardown(status="failed", reason=code)

    # -- actions -----------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self.state is State.READY:
            if self._limit_on_use and self._watchdog_seconds() == 0:
                # a detached session has no watchdog thread: its limit is enforced when it is next used
                raise self._end_at_limit()
            return
        if self._ended_error is not None:
            raise self._ended_error
        raise SessionClosed(
            f"session {self.id} is {self.state.value}; it cannot be used", provider=self._provider_name
        )

    def _require_handle(self) -> RemoteHandle:
        if self.handle is None:
            raise SessionClosed(f"session {self.id} has no desktop", provider=self._provider_name)
        return self.handle

    def _guard(self, kind: str, *, count: bool = True) -> Any:
        """Checks the session is usable, counts the call in the ledger (``count``), and ends the session in the
        ledger when the provider says the desktop is lost."""
        desk = self

        class _Guard:
            def __enter__(self) -> None:
                desk._check_usable()

            def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
                if exc is None:
                    if count:
                        with desk._counts_lock:
                            desk._counts[kind] += 1
                    desk._flush_actions()
                elif isinstance(exc, InfrastructureError) and exc.code == "provider.session_lost":
                    with contextlib.suppress(Exception):
                        if desk._owned:
                            desk._teardown(status="failed", reason=exc.code)
                        else:  # e.g. `deskctl do` on a detached desktop that died: the ledger must not say ready
                            desk._end_if_gone(exc.code)

        return _Guard()

    def _flush_actions(self, force: bool = False) -> None:
        """Add the counted actions to the ledger (at most every ACTION_FLUSH_SECONDS unless ``force``). Threads
        (a view's requests) count and flush at once: the counter is swapped under a lock, and counts the ledger
        could not take are put back for the next flush, not dropped."""
        with self._counts_lock:
            if not self._counts:
                return
            if not force and time.monotonic() - self._last_flush < ACTION_FLUSH_SECONDS:
                return
            counts, self._counts = self._counts, Counter()
            self._last_flush = time.monotonic()
        # A forced flush (release, teardown) is the last chance: once more after a failure, since a ledger whose
        # connection the server dropped answers the next call on a fresh one. (Only a failure after the commit
        # reached the server could count twice; a dropped idle connection, the common case, fails at BEGIN.)
        for attempt in range(2 if force else 1):
            try:
                self.ledger.add_actions(self.id, dict(counts))
                return
            except Exception:
                if attempt == 0 and force:
                    continue
        with self._counts_lock:
            self._counts.update(counts)

    def _bounds(self, *points: tuple[int, int]) -> None:
        width, height = self.size
        for x, y in points:
            if not (0 <= x < width and 0 <= y < height):
                raise GeometryOutOfBounds(
                    f"point ({x}, {y}) is outside the {width}x{height} screen", provider=self._provider_name,
                    remedy=f"x must be in 0..{width - 1} and y in 0..{height - 1}",
                )

    def _act(self, action: act.Action) -> None:
        from deskctl.limits import check_action

        check_action(action)  # before the screen: a 1e9-click scroll is a usage error, not hours of input
        self._bounds(*act.action_points(action))
        with self._guard(act.action_kind(action)):
            self.provider.act(self._require_handle(), action)

    def act(self, action: act.Action) -> None:
        """Execute one action from :mod:`deskctl.actions` (bounds-checked); recorded when the session is."""
        self._check_usable()
        if self._recorder is not None:
            self._recorder.step(self, action, lambda: self._act(action))
        else:
            self._act(action)

    def meter(self, role: str, model: str, input_tokens: int = 0, output_tokens: int = 0,
              usd: float | None = None) -> ModelUsage:
        """Record a model's token use for this session beside its desktop cost, and return the ledger row.

        ``role``: who spent it (``agent``, ``user`` for a simulated user, ``judge``, ...); ``usd``: what it cost
        when the caller knows, else it is priced from the ``models`` rows of prices.json (yours first), or by the
        ``genai-prices`` library when installed; a price nobody knows stays None (unknown), never 0. Bad numbers are
        ``usage.bad_meter`` (exit 2) and nothing is recorded.

        The spend counts against the session's ``max_usd`` and its shared budget. A call that takes the session
        past either (or, under the ``refuse`` unknown-cost policy, a call of unknown price under a money cap) is
        still recorded, since the tokens are spent, but then ends the session as its watchdog does for desktop
        spend and raises :class:`~deskctl.errors.BudgetExceeded` (exit 4): the next step is refused."""
        from deskctl import metering
        from deskctl.ledger import ModelUsage

        role, model, input_tokens, output_tokens, usd = metering.check_model_usage(
            role, model, input_tokens, output_tokens, usd)
        if self.state is State.NEW:
            raise SessionClosed(f"session {self.id} is not open: nothing to meter against",
                                provider=self._provider_name)
        price = metering.ModelPrice(usd, "given by the caller") if usd is not None else \
            metering.model_cost(model, input_tokens, output_tokens)
        usage = ModelUsage(self.id, time.time(), role, model, input_tokens, output_tokens, price.usd, price.source)
        with self._lock:
            self.ledger.record_model_usage(usage)
            if price.usd is None:
                self._model_unknown += 1
            else:
                self._model_usd += price.usd
        if self.state is State.READY:
            error = self._model_limit_error(usage)
            if error is not None:
                self._ended_error = error
                with contextlib.suppress(Exception):
                    self._teardown(status="ended", reason="budget.exceeded")
                raise error
            self._limits_changed.set()
        return usage

    def _model_limit_error(self, usage: ModelUsage) -> BudgetExceeded | None:
        """Why the model spend just metered ends the session (its cap, its shared budget, an unknown price under
        a money cap with the ``refuse`` policy), or None."""
        from deskctl import budget, metering

        remedy = "raise --max-usd (or the budget's cap), or split the run"
        caps = self._max_usd is not None
        name = next(iter(self.ledger.budget_of_sessions([self.id]).values()), None)
        if usage.usd is None and (caps or name is not None):
            spec = self.spec
            stored = self.ledger.get_budget(name) if name is not None else None
            if budget.unknown_cost_policy(spec, stored) == "refuse":
                return BudgetExceeded(
                    f"session {self.id}: the price of model {usage.model!r} is unknown under a money cap; the "
                    "session was ended rather than counting it as free", code="budget.unknown_cost",
                    provider=self._provider_name,
                    remedy="add a 'models' row for it to your prices.json ($DESKCTL_PRICES), pass usd=, or allow "
                           "unknown costs (--unknown-cost allow)")
        if self._max_usd is not None:
            rate = self._session_rate()
            started = self._create_sent_at
            desktop = metering.cost_for(rate, time.time() - started) if started is not None else 0.0
            spent = (desktop or 0.0) + self._model_usd
            if spent > self._max_usd + 1e-9:
                return BudgetExceeded(
                    f"session {self.id}: {metering.format_cost(spent)} spent (desktop "
                    f"{metering.format_cost(desktop)}, model {metering.format_cost(self._model_usd)}) passes its "
                    f"cap of {metering.format_cost(self._max_usd)}; the session was ended",
                    provider=self._provider_name, remedy=remedy,
                    details={"desktop_usd": desktop, "model_usd": self._model_usd, "max_usd": self._max_usd})
        if name is not None:
            try:
                state = budget.status(self.ledger, name)
            except NotFound:  # the budget was deleted meanwhile: nothing to pass
                return None
            if state.total_usd > state.max_usd + 1e-9:
                return BudgetExceeded(
                    f"budget {name!r}: {metering.format_cost(state.total_usd)} spent or held passes its cap of "
                    f"{metering.format_cost(state.max_usd)} after model spend of session {self.id}; the session "
                    "was ended", provider=self._provider_name, remedy=remedy,
                    details={"budget": name, "spent_usd": state.total_usd, "max_usd": state.max_usd})
        return None

    def annotate(self, step: int | None = None, /, **fields: Any) -> int:
        """Add harness fields (model tokens, reward, ...) to a recorded step (default: this session's last);
        returns the step. ``usage.not_recording`` when the session is not recorded."""
        if self._recorder is None:
            raise UsageError(f"session {self.id} is not recorded", code="usage.not_recording",
                             remedy="open it with record=DIR (deskctl up --record DIR)")
        return self._recorder.annotate(self.id, step, fields)

    def screenshot(self) -> Screenshot:
        """A PNG whose pixel grid is the action coordinate space."""
        return self._screenshot(count=True)

    def _screenshot(self, *, count: bool) -> Screenshot:
        """``count=False``: deskctl's own shots (a recording's before/after) are not the caller's actions."""
        with self._guard("screenshot", count=count):
            shot = self.provider.screenshot(self._require_handle())
        if self._size is not None and (shot.width, shot.height) != self._size:
            raise GeometryMismatch(
                f"screenshot is {shot.width}x{shot.height}, the pinned screen {self._size[0]}x{self._size[1]}",
                provider=self._provider_name,
            )
        return shot

    def raw_frame(self) -> RawFrame:
        """The screen's pixels without PNG encoding (the X11 providers' fast capture), for a live view. Not
        counted as an action in the ledger: a viewer takes many a second."""
        with self._guard("raw_frame", count=False):
            frame = self.provider.raw_frame(self._require_handle())
        if self._size is not None and (frame.width, frame.height) != self._size:
            raise GeometryMismatch(
                f"the screen is {frame.width}x{frame.height}, the pinned screen {self._size[0]}x{self._size[1]}",
                provider=self._provider_name,
            )
        return frame

    def _at(self, x: int | None, y: int | None) -> tuple[int, int]:
        """``(x, y)``, or where the pointer is when both are None (an action "at the current position")."""
        if x is None and y is None:
            return self.cursor_position()
        if x is None or y is None:
            raise UsageError("give both x and y, or neither (the pointer's position)", code="usage.invalid")
        return x, y

    def click(self, x: int | None = None, y: int | None = None, button: str = "left", count: int = 1) -> None:
        """Click at ``(x, y)``, or where the pointer is when both are None."""
        self.act(act.Click(*self._at(x, y), act.validate_button(button), count))

    def double_click(self, x: int | None = None, y: int | None = None, button: str = "left") -> None:
        self.click(x, y, button, 2)

    def triple_click(self, x: int | None = None, y: int | None = None) -> None:
        self.click(x, y, "left", 3)

    def right_click(self, x: int | None = None, y: int | None = None) -> None:
        self.click(x, y, "right")

    def middle_click(self, x: int | None = None, y: int | None = None) -> None:
        self.click(x, y, "middle")

    def move(self, x: int, y: int) -> None:
        self.act(act.Move(x, y))

    def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left") -> None:
        self.act(act.Drag(x1, y1, x2, y2, act.validate_button(button)))

    def scroll(self, x: int | None = None, y: int | None = None, dx: int = 0, dy: int = 0) -> None:
        """Wheel clicks at ``(x, y)`` (or where the pointer is): ``dy`` > 0 down, ``dx`` > 0 right."""
        self.act(act.Scroll(*self._at(x, y), dx, dy))

    def mouse_down(self, x: int, y: int, button: str = "left") -> None:
        self.act(act.MouseDown(x, y, act.validate_button(button)))

    def mouse_up(self, x: int, y: int, button: str = "left") -> None:
        self.act(act.MouseUp(x, y, act.validate_button(button)))

    def type(self, text: str) -> None:
        self.act(act.TypeText(text))

    def key(self, chord: str) -> None:
        self.act(act.KeyPress(act.normalize_chord(chord)))

    def key_down(self, key: str) -> None:
        self.act(act.KeyDown(act.normalize_key(key)))

    def key_up(self, key: str) -> None:
        self.act(act.KeyUp(act.normalize_key(key)))

    def cursor_position(self) -> tuple[int, int]:
        """Where the pointer is, in action coordinates. ``usage.unsupported`` where the provider cannot tell
        (``capabilities.cursor_position``: the X11 providers can)."""
        with self._guard("cursor_position"):
            return self.provider.cursor_position(self._require_handle())

    def exec(self, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None, background: bool = False,
             on_output: Callable[[str, str], None] | None = None) -> ExecResult:
        """Run ``command`` through the desktop's shell (``sh`` on Linux/macOS, the provider's on Windows) in
        ``cwd`` with ``env`` added, as ``user``; ``background`` starts it detached and returns at once (a GUI
        app: ``exec("xterm", background=True)``). A timeout is exit code 124. ``on_output(text, stream)``
        (``stream``: ``"stdout"`` or ``"stderr"``) gets the output as it comes where the provider streams it
        (``docker``), else all of it once the command ended; the result holds all of it either way."""
        from deskctl.limits import check_number
        from deskctl.providers._guest import check_exec_options

        timeout = check_number("exec_timeout", timeout, what="timeout")
        options: dict[str, Any] = {}
        clean_env = check_exec_options(env, user, self._provider_name)
        if cwd is not None:
            options["cwd"] = cwd
        if clean_env:
            options["env"] = clean_env
        if user is not None:
            options["user"] = user
        if background:
            options["background"] = True
        streams = on_output is not None and getattr(type(self.provider), "exec_streams_output", False)
        if streams:
            options["on_output"] = on_output
        with self._guard("exec"):
            result = self.provider.exec(self._require_handle(), command, timeout, **options)
        if on_output is not None and not streams:
            for text, stream in ((result.stdout, "stdout"), (result.stderr, "stderr")):
                if text:
                    on_output(text, stream)
        return result

    # -- files -----------------------------------------------------------------------------------------------
    def upload(self, local: str | os.PathLike[str], remote: str) -> None:
        """Make ``remote`` (a path on the desktop) a copy of the local file or directory ``local``."""
        with self._guard("upload"):
            self.provider.upload(self._require_handle(), os.fspath(local), remote)

    def download(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Make ``local`` a copy of the file or directory ``remote`` on the desktop."""
        with self._guard("download"):
            self.provider.download(self._require_handle(), remote, os.fspath(local))

    # -- harness actions -------------------------------------------------------------------------------------
    def clipboard_get(self) -> str:
        with self._guard("clipboard"):
            return self.provider.clipboard_get(self._require_handle())

    def clipboard_set(self, text: str) -> None:
        with self._guard("clipboard"):
            self.provider.clipboard_set(self._require_handle(), text)

    def open_url(self, url: str, browser: str | None = None) -> None:
        """Open ``url`` with the desktop's default opener (``xdg-open`` on Linux), or with the program
        ``browser`` (``"chromium"``). ``url`` is a URL with a scheme and a host (``https://example.com/x``), a
        ``file:`` URL of an absolute path, or an absolute path on the desktop; anything else is
        ``usage.bad_url`` (exit 2), before the desktop is reached."""
        if not url:
            raise UsageError("open_url needs a URL", code="usage.invalid")
        _check_url(url)
        with self._guard("open_url"):
            self.provider.open_url(self._require_handle(), url, browser)

    def launch(self, app: str, *args: str) -> int | None:
        """Start ``app`` with ``args`` detached; returns its process id on the desktop where known."""
        with self._guard("launch"):
            return self.provider.launch(self._require_handle(), app, [str(a) for a in args])

    def window_titles(self) -> list[str]:
        with self._guard("window_titles", count=False):
            return self.provider.window_titles(self._require_handle())

    def wait_for(self, what: str | Callable[[Desktop], Any], timeout: float = 30.0, interval: float = 0.25) -> Any:
        """Wait until a window whose title contains ``what`` exists (returns that title), or until
        ``what(desktop)`` is truthy (returns its value). ``wait.timeout`` (exit 6) when ``timeout`` passes."""
        late = wait_terms(what, timeout, interval, self._provider_name)
        deadline = time.monotonic() + timeout
        while True:
            value = (next((t for t in self.window_titles() if what in t), None) if isinstance(what, str)
                     else what(self))
            if value:
                return value
            if time.monotonic() >= deadline:
                raise late
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def wait_terms(what: object, timeout: float, interval: float, provider: str) -> WaitTimeout:
    """Check ``wait_for``'s arguments (sync and async alike) and return the error its timeout raises."""
    if isinstance(what, str):
        if not what:
            raise UsageError("wait_for needs a non-empty window title", code="usage.invalid")
        described = f"a window titled {what!r}"
    elif callable(what):
        described = getattr(what, "__name__", "the condition")
    else:
        raise UsageError("wait_for takes a window title or a callable", code="usage.invalid")
    from deskctl.limits import check_number

    check_number("wait_timeout", timeout, what="timeout")
    check_number("wait_interval", interval, what="interval")
    return WaitTimeout(f"{described} did not appear within {timeout:g}s", provider=provider)


# --------------------------------------------------------------------------------------------------
def _caused_by(exc: BaseException, test: Any) -> bool:
    """Whether ``exc`` or an exception in its chain of causes and contexts passes ``test``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if test(current):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


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
) -> Desktop:
    """Open a desktop and return it, ready and verified. Use it as a context manager::

        with deskctl.open_desktop("xvfb", geometry="1280x800") as desk:
            desk.click(10, 20)

    ``geometry=None`` or ``"native"`` accepts the provider's own size. Raises the deskctl error of the step that
    failed (preflight: exit 3, budget: 4, infrastructure: 20); nothing is left behind when it raises.

    ``record=DIR`` writes a trajectory there (docs/recording.md): a JSONL row per action with the screen before
    and after it; ``record_settle`` is how long the after shot may wait for the screen to change.
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
    desk = Desktop(spec, ledger=ledger, ready_timeout=ready_timeout, detached=detached, run_preflight=preflight,
                   record=record, record_settle=record_settle)
    return desk.open()


def attach(session_id: str, *, ledger: Ledger | None = None) -> Desktop:
    """Reach a running session (usually a detached one) by id. Leaving a ``with`` block releases it without
    destroying it; :meth:`Desktop.close` destroys it."""
    from deskctl.ledger import open_ledger

    book = ledger or open_ledger()
    record = book.get(session_id)
    if record is None:
        raise NotFound(f"no session {session_id!r} in the ledger", remedy="deskctl ls --all")
    return Desktop.from_record(record, ledger=book, owns_ledger=ledger is None)
