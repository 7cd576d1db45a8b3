"""The steps of a session's life (ARCHITECTURE.md, "Session lifecycle"), as functions of a
:class:`~deskctl.session.Desktop`: open (preflight, budget, intent, create, readiness, geometry), attach to a
running one, and tear down (write-ahead ``destroying``, a confirmed destroy, the end and the cost recorded).

The statuses a session goes through are :class:`deskctl.lifecycle.SessionStatus`'s, in the ledger and on the
``Desktop`` alike; each move this module makes is one of :data:`deskctl.lifecycle.TRANSITIONS`
(:meth:`Desktop._move <deskctl.session.Desktop._move>` checks it). A cleanup step whose failure must not hide the
outcome it follows is logged (:func:`deskctl.supervisor.log_cleanup_failure`), never swallowed.
"""

from __future__ import annotations

import os
import sys
import time

from deskctl import supervisor
from deskctl.errors import (
    CleanupIncomplete,
    DeskctlError,
    GeometryMismatch,
    InfrastructureError,
    ProviderUnreachable,
    SessionClosed,
    UsageError,
)
from deskctl.lifecycle import TERMINAL_STATUSES, SessionStatus
from deskctl.owners import owner_id
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_LEDGER,
    LABEL_OWNER,
    LABEL_SESSION,
    RemoteHandle,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.ledger import Ledger, SessionRecord
    from deskctl.session import Desktop

__all__ = ["ACTION_FLUSH_SECONDS", "DEFAULT_ATTACHED_TTL", "DEFAULT_DETACHED_TTL", "attached", "end_if_gone",
           "flush_actions", "labels", "new_session_id", "open_session", "owner_id", "release", "teardown"]

#: lifetime of a detached session when neither --ttl nor --max-minutes says otherwise
DEFAULT_DETACHED_TTL = 3600.0
#: lifetime label of an attached session without limits (the reaper also removes it when its owner dies)
DEFAULT_ATTACHED_TTL = 24 * 3600.0
#: action counts are written to the ledger at least this often (and at the end)
ACTION_FLUSH_SECONDS = 5.0


def new_session_id() -> str:
    """A client-made session id: ``dk-`` and 10 random hex digits, from the OS's random source (what
    ``secrets.token_hex`` reads, without its import: hmac, hashlib, random)."""
    return "dk-" + os.urandom(5).hex()


# -- open -------------------------------------------------------------------------------------------------
def open_session(desk: Desktop) -> None:
    """Lifecycle steps 1-5. On any failure, whatever was made is destroyed before re-raising."""
    if desk.state is not SessionStatus.NEW:
        raise UsageError(f"session {desk.id} was already opened", code="usage.session_state")
    desk._move(SessionStatus.INTENT)
    try:
        _prepare(desk)
    except BaseException:
        desk._move(SessionStatus.FAILED)  # nothing was created: nothing to destroy
        raise
    provider = desk.provider
    # even a detached session is rolled back when it is interrupted before it is ready
    supervisor.watch(desk)
    try:
        _create_and_verify(desk)
        if desk._recorder is not None:
            desk._recorder.started(desk)
    except BaseException as exc:
        from deskctl._fds import capacity_error, out_of_descriptors, spare_descriptors

        # (what is left behind, CleanupIncomplete, outranks why)
        full = not isinstance(exc, CleanupIncomplete) and _caused_by(exc, out_of_descriptors)
        reason = "capacity.file_descriptors" if full else getattr(exc, "code", None) or type(exc).__name__
        if desk.handle is None and isinstance(exc, CleanupIncomplete):
            desk._create_left = exc
        if full:
            with spare_descriptors():
                teardown(desk, status=SessionStatus.FAILED, reason=str(reason))
        else:
            teardown(desk, status=SessionStatus.FAILED, reason=str(reason))
        if full:  # whichever step ran out (a pipe, a socket, a log file), the cause is the same
            raise capacity_error(f"open {desk.id}", provider=provider.name) from exc
        raise
    supervisor.start_threads(desk)
    if desk.detached:
        supervisor.unwatch(desk)
        provider.detach(desk._require_handle())


def _prepare(desk: Desktop) -> None:
    """Steps 1-2: preflight, the budget's reservation, the intent record (the hold is released if that fails)."""
    from deskctl._fds import raise_open_file_limit

    raise_open_file_limit()  # a process with a hundred desktops needs more than the usual soft limit
    provider = desk.provider
    if desk.run_preflight:
        from deskctl.checks.runner import default_timeout, raise_for_failures, run_checks

        desk._step("preflight")
        raise_for_failures(run_checks(desk.spec, provider, default_timeout()), provider.name)

    from deskctl import budget, metering

    desk._rate = metering.rate_for(desk.spec)
    desk._rate_resolved = True
    desk._reservation = budget.reserve(desk.ledger, session_id=desk.id, spec=desk.spec, rate=desk._rate)
    now = time.time()
    desk._expires_at = now + _lifetime(desk)
    try:
        _record_intent(desk, now)
    except BaseException:
        budget.settle(desk.ledger, desk._reservation, cost_usd=None)
        raise


def _lifetime(desk: Desktop) -> float:
    limits = [x for x in (desk.spec.ttl_seconds,) if x]
    if desk.spec.max_minutes:
        limits.append(desk.spec.max_minutes * 60)
    if limits:
        return min(limits)
    return DEFAULT_DETACHED_TTL if desk.detached else DEFAULT_ATTACHED_TTL


def labels(desk: Desktop) -> dict[str, str]:
    """The labels ``desk``'s desktop is created with (its own, and the ``deskctl.*`` ones)."""
    out = dict(desk.spec.labels)
    out[LABEL_SESSION] = desk.id
    out[LABEL_OWNER] = owner_id()
    out[LABEL_CREATED] = str(int(time.time()))
    # rounded up: a provider backstop must never end the desktop before the session's own limit (a label
    # truncated down fired up to a second early, even while `deskctl up` was still verifying the desktop)
    out[LABEL_EXPIRES] = str(-int(-(desk._expires_at or time.time()) // 1))  # math.ceil, without math's import
    if desk.detached:
        out[LABEL_DETACHED] = "1"
    from deskctl.ledger import ledger_id

    out[LABEL_LEDGER] = ledger_id(desk.ledger.url)
    return out


def _record_intent(desk: Desktop, now: float) -> None:
    from deskctl.ledger import SessionRecord

    rate = desk._rate
    desk.ledger.record_intent(
        SessionRecord(
            session_id=desk.id,
            provider=desk.spec.provider,
            platform=desk.spec.platform.value,
            geometry=desk.spec.geometry_label(),
            owner=owner_id(),
            detached=desk.detached,
            status=SessionStatus.INTENT.value,
            intent_at=now,
            expires_at=desk._expires_at,
            spec=desk.spec.model_dump(mode="json"),
            labels=dict(desk.spec.labels),
            rate_usd_per_hour=rate.usd_per_hour if rate else None,
            rate_source=rate.source if rate else None,
            budget=desk._reservation,
        )
    )


def _create_and_verify(desk: Desktop) -> None:
    provider = desk.provider
    desk._create_sent_at = time.time()
    desk.ledger.record_create_sent(desk.id, desk._create_sent_at)
    desk._move(SessionStatus.CREATING)
    desk._step(f"creating {desk.id}")
    handle = provider.create(desk.spec, desk.id, labels(desk))
    desk.handle = handle
    desk.ledger.record_created(desk.id, handle.to_dict())
    desk._step("waiting until the desktop answers")
    provider.wait_ready(handle, time.monotonic() + desk.ready_timeout)
    desk._step("verifying the live geometry")
    width, height = provider.display_size(handle)
    wanted = desk.spec.geometry
    if wanted is not None and (width, height) != (wanted.width, wanted.height):
        raise GeometryMismatch(
            f"the live display is {width}x{height}, not the pinned {wanted}",
            provider=provider.name,
            remedy="use --geometry native to accept the provider's size, or another provider",
            details={"live": f"{width}x{height}", "pinned": str(wanted)},
        )
    desk._size = (width, height)
    desk.ledger.record_ready(desk.id, time.time(), width, height)
    desk._move(SessionStatus.READY)


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


# -- attach -----------------------------------------------------------------------------------------------
def attached(desk: Desktop, record: SessionRecord, *, ledger: Ledger, owns_ledger: bool) -> None:
    """Fill ``desk`` (made with ``Desktop.__new__``) as the running session ``record`` (see
    :meth:`Desktop.from_record <deskctl.session.Desktop.from_record>`)."""
    if record.handle is None or record.status in TERMINAL_STATUSES:
        raise SessionClosed(f"session {record.session_id} is {record.status}", provider=record.provider)
    stored = record.spec or {}
    desk._spec = None
    desk._stored_spec = stored
    desk._init_state(provider=record.provider, provider_options=dict(stored.get("provider_options") or {}),
                     max_minutes=stored.get("max_minutes"), max_usd=stored.get("max_usd"), ledger=ledger,
                     session_id=record.session_id, detached=record.detached)
    desk._owns_ledger = owns_ledger
    desk._owned = False
    desk._limit_on_use = True
    # `deskctl up --record DIR` keeps recording (its event is recording.LEDGER_EVENT; the module loads only then)
    # (only its `recording` events, and the model spend, in one read of the ledger)
    events, (desk._model_usd, desk._model_unknown) = ledger.attach_state(record.session_id, event_kind="recording")
    if events:
        from deskctl.recording import recorder_from_events

        desk._recorder = recorder_from_events(events)
    desk._recorded_usd_per_hour = record.rate_usd_per_hour
    desk._create_sent_at = record.created_at
    desk._expires_at = record.expires_at
    desk.handle = RemoteHandle.from_dict(record.handle)
    geometry = stored.get("geometry")
    if isinstance(geometry, dict):  # the stored spec is the ledger's JSON: its objects are dicts
        desk._size = (int(geometry["width"]), int(geometry["height"]))
    elif record.width and record.height:  # native size, as verified when the session became ready
        desk._size = (int(record.width), int(record.height))
    else:  # native size of a session not yet ready: ask the live display
        desk._size = desk.provider.display_size(desk.handle)
    # what this process may do with it: act on it, release it, destroy it (whatever its row says until then)
    desk.state = SessionStatus.READY


# -- action counts and teardown ---------------------------------------------------------------------------
def flush_actions(desk: Desktop, *, force: bool) -> None:
    """Add the counted actions to the ledger (at most every ACTION_FLUSH_SECONDS unless ``force``). Threads (a
    view's requests) count and flush at once: the counter is swapped under a lock, and counts the ledger could
    not take are put back for the next flush, not dropped."""
    with desk._counts_lock:
        if not desk._counts:
            return
        if not force and time.monotonic() - desk._last_flush < ACTION_FLUSH_SECONDS:
            return
        counts, desk._counts = desk._counts, {}
        desk._last_flush = time.monotonic()
    # A forced flush (release, teardown) is the last chance: once more after a failure, since a ledger whose
    # connection the server dropped answers the next call on a fresh one. (Only a failure after the commit
    # reached the server could count twice; a dropped idle connection, the common case, fails at BEGIN.)
    for attempt in range(2 if force else 1):
        try:
            desk.ledger.add_actions(desk.id, dict(counts))
            return
        except Exception:
            if attempt == 0 and force:
                continue
    with desk._counts_lock:
        for kind, count in counts.items():
            desk._counts[kind] = desk._counts.get(kind, 0) + count


def finish_recording(desk: Desktop, *, ending: bool = False) -> DeskctlError | None:
    """Wait for the recorder's background writes (its steps are captured already); their error, if any.
    ``ending``: the desktop is about to go, its video ends first."""
    if desk._recorder is None:
        return None
    try:
        if ending:
            desk._recorder.stop_video()
        desk._recorder.close()
    except DeskctlError as exc:
        return exc
    return None


def release(desk: Desktop) -> None:
    """Let go of the desktop without destroying it (detached sessions, :func:`deskctl.session.attach`). A
    recording's steps still being written are written first; one that could not be is raised
    (``recording.write_failed``) once the desktop is let go."""
    recording_error = finish_recording(desk)
    _release(desk)
    if recording_error is not None:
        raise recording_error


def _release(desk: Desktop) -> None:
    desk._stop.set()
    desk._limits_changed.set()
    desk._flush_actions(force=True)
    supervisor.unwatch(desk)
    if desk._provider is not None:
        try:
            desk._provider.close()
        except Exception as exc:
            supervisor.log_cleanup_failure(f"closing the {desk.provider_name} connection of {desk.id}", exc)
    if desk._owns_ledger and desk._ledger is not None:
        try:
            desk._ledger.close()
        except Exception as exc:
            supervisor.log_cleanup_failure(f"closing the ledger of {desk.id}", exc)
        desk._ledger = None


def teardown(desk: Desktop, *, status: str, reason: str) -> None:
    """Destroy ``desk``'s desktop (confirmed) and record its end (``status``: ``ended`` or ``failed``; ``leaked``
    when the destroy cannot be confirmed, which raises :class:`~deskctl.errors.CleanupIncomplete`). Idempotent,
    and safe from several threads: the others wait for the first."""
    wanted = SessionStatus(status)
    if not desk._teardown_lock.acquire(blocking=False):
        # another thread (watchdog, signal) is tearing down: wait for it
        with desk._teardown_lock:
            return
    try:
        if desk.state.settled:
            return
        # the recording's last steps are written before the end is: a write that failed ends the session failed
        recording_error = finish_recording(desk, ending=True)
        if recording_error is not None and wanted is SessionStatus.FAILED:
            recording_error = None  # the failure being reported comes first
        elif recording_error is not None:
            wanted, reason = SessionStatus.FAILED, recording_error.code
        _write_ahead(desk, reason)  # before anything stops: a refused destroy leaves the session as it was
        desk._move(SessionStatus.DESTROYING)
        desk._stop.set()
        desk._limits_changed.set()
        supervisor.unwatch(desk)
        with supervisor.shield_signals():
            _destroy_and_record(desk, status=wanted, reason=reason)
        if recording_error is not None:
            raise recording_error
    finally:
        desk._teardown_lock.release()
        if desk._threads:  # started by threading (supervisor.start_threads), so it is loaded
            import threading

            current = threading.current_thread()
            for thread in desk._threads:
                if thread is not current:
                    thread.join(timeout=5)


def _incomplete(desk: Desktop, cause: DeskctlError) -> CleanupIncomplete:
    return CleanupIncomplete(
        f"destroy of {desk.id} could not be confirmed: {cause.message}", provider=desk.provider_name,
        remedy=f"deskctl reap (or deskctl down {desk.id})", details={"left": [desk.id], "cause": cause.code},
    )


def _write_ahead(desk: Desktop, reason: str) -> None:
    """The row says `destroying` before the destroy is sent, so that a process killed between the destroy and the
    end record, or a ledger that cannot take the end, never leaves `ready` for a desktop that is gone;
    `deskctl reap` finishes a `destroying` row."""
    if desk._create_sent_at is None:
        return
    try:
        desk.ledger.record_destroying(desk.id, reason=reason, by=owner_id())
    except DeskctlError as exc:
        if not desk._owned:
            # An explicit destroy (`deskctl down`) that the ledger cannot record is not sent: the desktop stays
            # up and usable, as the ledger says, and the ledger error is the answer (exit 20).
            raise
        # Our own desktop is destroyed whatever the ledger says (cleanup comes first); `deskctl reap` finds its
        # `ready` row gone by its liveness check.
        supervisor.log_cleanup_failure(f"recording that {desk.id} is being destroyed", exc)


def _destroy_and_record(desk: Desktop, *, status: SessionStatus, reason: str) -> None:
    from deskctl import budget, metering

    provider = desk.provider
    left: CleanupIncomplete | None = None
    try:
        if desk.handle is not None:
            provider.destroy(desk.handle)
        elif desk._create_sent_at is not None:
            # create was sent but no handle came back: find what it made by its label
            orphans = provider.list_owned({LABEL_SESSION: desk.id})
            for orphan in orphans:
                provider.destroy(orphan)
            if not orphans and desk._create_left is not None:
                # the provider said what it made may still exist (and how it is found): the row says leaked
                left = desk._create_left
    except ProviderUnreachable as exc:
        if desk.handle is None and reason == ProviderUnreachable.code:
            # create never reached the provider, and the sweep cannot either: the failure to report is
            # the unreachable provider (exit 20); `deskctl reap` sweeps the label once it answers again
            try:
                desk.ledger.record_event(desk.id, "orphan_sweep_skipped", {"code": exc.code})
            except Exception as failure:
                supervisor.log_cleanup_failure(f"recording the skipped orphan sweep of {desk.id}", failure)
        else:
            left = _incomplete(desk, exc)
    except CleanupIncomplete as exc:
        left = exc
    except DeskctlError as exc:
        left = _incomplete(desk, exc)
    ended = time.time()
    # nothing was sent to the provider: nothing can have been billed
    billable = 0.0 if desk._create_sent_at is None else max(0.0, ended - desk._create_sent_at)
    from deskctl import session_spend

    cost = metering.cost_for(session_spend.session_rate(desk), billable) if billable else 0.0
    desk._flush_actions(force=True)
    final = SessionStatus.LEAKED if left is not None else status
    desk.end_reason = reason
    end_error: DeskctlError | None = None
    try:
        desk.ledger.record_end(
            desk.id, status=final.value,
            reason=reason if left is None or left is desk._create_left else f"{reason}; {left.code}",
            ended_at=ended, billable_seconds=billable, cost_usd=cost,
        )
    except DeskctlError as exc:
        end_error = exc
    except Exception as exc:  # the end record never hides the outcome of the destroy
        supervisor.log_cleanup_failure(f"recording the end of {desk.id}", exc)
    try:
        budget.settle(desk.ledger, desk._reservation, cost_usd=cost)
    except Exception as exc:
        supervisor.log_cleanup_failure(f"settling the budget hold of {desk.id}", exc)
    desk._move(final)
    try:
        provider.close()
    except Exception as exc:
        supervisor.log_cleanup_failure(f"closing the {provider.name} connection of {desk.id}", exc)
    if left is not None:
        raise left
    if end_error is not None and not desk._owned:
        raise InfrastructureError(
            f"{desk.id} was destroyed, but the ledger could not record its end ({end_error.message}); it stays "
            "`destroying` until `deskctl reap` records it", code="ledger.unavailable", provider=provider.name,
            remedy="make the ledger writable again (disk space, database), then run deskctl reap",
        ) from end_error
    if end_error is not None:
        supervisor.log_cleanup_failure(f"recording the end of {desk.id}", end_error)


def end_if_gone(desk: Desktop, code: str) -> None:
    """A desktop this process does not own reported lost: end its session (failed) only when the provider
    confirms it is gone, since a lost connection alone does not mean a lost desktop."""
    handle = desk.handle
    if handle is None:
        return
    try:
        if desk.provider.is_alive(handle):
            return
    except DeskctlError:
        return  # cannot tell: leave it to `deskctl reap`
    teardown(desk, status=SessionStatus.FAILED, reason=code)


def person_gate(desk: Desktop) -> None:
    """Before an agent's action: wait while a person holds ``desk``, or fail (:func:`deskctl.episodes.takeover.gate`).
    Without the takeover lock file nobody holds it, and the takeover code is not imported (a `deskctl do`)."""
    if desk._takeover_lock is None:
        if desk.on_takeover not in ("wait", "fail"):
            raise UsageError(f"on_takeover must be 'wait' or 'fail', not {desk.on_takeover!r}",
                             code="usage.bad_option", remedy="DESKCTL_ON_TAKEOVER=wait or fail")
        from deskctl.paths import takeover_lock

        desk._takeover_lock = takeover_lock(desk.id)
    if "deskctl.episodes.takeover" not in sys.modules and not os.path.exists(desk._takeover_lock):
        return  # not imported: nothing in this process made its actor a person, so only a held lock file counts
    from deskctl.episodes import takeover

    takeover.gate(desk, desk._takeover_lock)
