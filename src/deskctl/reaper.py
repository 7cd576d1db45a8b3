"""Find and destroy leftovers: desktops whose owner died, that expired, that are gone behind the ledger's back,
or whose session already ended.

Two sources are swept, so that nothing escapes:

* every provider's :meth:`~deskctl.providers.base.Provider.list_owned` (labelled resources, including those made
  between "create sent" and "handle returned", which the ledger has no handle for);
* the ledger's sessions that are not ended (a provider that cannot list still has its handles there). A
  ``ready`` row whose desktop the provider says is gone is recorded ``failed`` (and whatever is left of it
  destroyed); a ``destroying`` row (a destroy whose end was never recorded) is finished.

A row without a handle whose create was sent (``creating``, or ``leaked`` after a create whose answer was lost)
is closed only when the provider confirms that nothing of it exists: it labels its resources
(``capabilities.labels``) and its listing in this sweep succeeded without it. Otherwise (use.computer cannot list
sandboxes; a listing that failed) the row stays as it is and is reported ``unconfirmed`` with the provider's
remedy (:meth:`~deskctl.providers.base.Provider.unlisted_remedy`: where a person finds it); once that person has
deleted it, :func:`confirm_gone` (``deskctl reap --confirmed-gone ID``) closes the row.

Only desktops of this ledger are touched: a labelled desktop whose session is not in it belongs to another
``DESKCTL_HOME``, another user or another team's ledger, and is left alone unless ``everything`` (``deskctl
reap --everything``) is asked for; even then only a leftover (expired, or its owner dead) is destroyed. A
desktop whose ``deskctl.ledger`` label names this ledger is this ledger's even when its row is missing.

Without a readable ledger (``ledger=None``: a damaged file) the sweep goes by label alone: this ledger's
desktops (by ``deskctl.ledger``), or every labelled leftover with ``everything``; nothing is recorded.

A session is never reaped while its owner process is alive on this host, unless it expired. A detached session
(``deskctl up``) has no living owner by design: only its expiry, ``deskctl down`` or the reaper end it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from deskctl.errors import DeskctlError
from deskctl.lifecycle import TERMINAL_STATUSES, SessionStatus
from deskctl.owners import owner_alive
from deskctl.providers import get_provider, known_provider_names, resolve_name
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_LEDGER,
    LABEL_OWNER,
    LABEL_SESSION,
    Provider,
    RemoteHandle,
)

if TYPE_CHECKING:
    from deskctl.ledger import Ledger, SessionRecord

__all__ = ["ReapResult", "confirm_gone", "owner_alive", "reap"]


@dataclass
class ReapResult:
    session_id: str
    provider: str
    resource_id: str | None
    action: str  # destroyed | would_destroy | recorded_gone | would_record | unconfirmed | failed | skipped
    reason: str
    error: str | None = None
    #: what a person does about it (an ``unconfirmed`` row: where to find the desktop, and how to close the row)
    remedy: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _why(labels: dict[str, str], record: SessionRecord | None, now: float, ledger: Ledger | None = None) -> str | None:
    """The reason to reap, or None to leave it alone."""
    if record is not None and record.status in TERMINAL_STATUSES:
        return f"session already {record.status}"
    if record is not None and record.status == SessionStatus.LEAKED:
        return "an earlier destroy could not be confirmed"
    if record is not None and record.status == SessionStatus.DESTROYING and ledger is not None:
        by = next((e.data.get("by") for e in reversed(ledger.events(record.session_id)) if e.kind == "destroying"),
                  None)  # fmt: skip
        if owner_alive(str(by) if by else None) is not True:  # else: that process is at it right now
            return "an earlier destroy was not recorded"
    expires = labels.get(LABEL_EXPIRES) or (str(record.expires_at) if record and record.expires_at else None)
    if expires:
        with contextlib.suppress(ValueError):
            if float(expires) < now:
                return "expired"
    detached = labels.get(LABEL_DETACHED) == "1" or (record is not None and record.detached)
    # a detached session whose `deskctl up` died before it was ready was never handed to anyone
    never_ready = record is not None and record.status in (SessionStatus.INTENT, SessionStatus.CREATING)
    if not detached or never_ready:
        owner = labels.get(LABEL_OWNER) or (record.owner if record else None)
        if owner_alive(owner) is False:
            return f"owner {owner} is gone"
    return None


def reap(
    ledger: Ledger | None,
    *,
    providers: list[str] | None = None,
    dry_run: bool = False,
    everything: bool = False,
    now: float | None = None,
    provider_options: Mapping[str, Mapping[str, Any]] | None = None,
    ledger_label: str | None = None,
) -> list[ReapResult]:
    """Sweep every provider (or those named) and the ledger; destroy what should not exist any more.

    ``everything``: also consider labelled desktops whose session is not in this ledger (by default they are
    someone else's and are never touched). ``provider_options`` (provider name -> options, e.g. the
    configuration's ``[providers.NAME]``) builds the providers that are swept, so an ssh host or a base URL from
    the configuration is reached too."""
    options = provider_options or {}
    now = time.time() if now is None else now
    results: list[ReapResult] = []
    seen: set[str] = set()
    listed: set[str] = set()  # providers whose listing succeeded in this sweep
    names = providers or known_provider_names()
    instances: dict[str, Provider] = {}
    try:
        for asked in names:
            name = asked
            try:
                name = resolve_name(asked)  # `--provider cua` sweeps cua-cloud with [providers.cua-cloud]
                provider = instances.setdefault(name, get_provider(name, dict(options.get(name) or {})))
                owned = provider.list_owned()
                listed.add(name)
            except DeskctlError as exc:
                if providers:  # asked for by name: say why it was skipped
                    results.append(ReapResult("-", name, None, "skipped", "cannot list", exc.code))
                continue
            for handle in owned:
                session_id = handle.labels.get(LABEL_SESSION) or handle.session_id
                record = ledger.get(session_id) if session_id and ledger is not None else None
                ours = ledger_label is not None and handle.labels.get(LABEL_LEDGER) == ledger_label
                if record is None and not everything and not ours:
                    continue  # not a session of this ledger: another home's, user's or team's desktop
                reason = _why(handle.labels, record, now, ledger)
                seen.add(session_id)
                status = SessionStatus.ENDED
                if reason is None:
                    if record is None or record.status != SessionStatus.READY or not _gone(provider, handle.to_dict()):
                        continue
                    # listed, but no longer running (a stopped container, a dead display): failed
                    reason, status = "the desktop is gone", SessionStatus.FAILED
                results.append(_destroy(ledger, provider, handle, session_id, reason, dry_run, now, status))
        for record in ledger.sessions(active=True) if ledger is not None else ():
            if record.session_id in seen:
                continue
            if providers and record.provider not in providers:
                continue
            reason = _why({}, record, now, ledger)
            try:
                provider = instances.setdefault(record.provider,
                                                get_provider(record.provider, dict(options.get(record.provider) or {})))
            except DeskctlError as exc:
                if reason is not None:
                    results.append(ReapResult(record.session_id, record.provider, None, "skipped", reason, exc.code))
                continue
            status = SessionStatus.ENDED
            if reason is None:
                if record.status != SessionStatus.READY or not record.handle or not _gone(provider, record.handle):
                    continue
                # the ledger says ready, the provider says it is gone: it failed behind the ledger's back
                reason, status = "the desktop is gone", SessionStatus.FAILED
            if record.handle:
                handle = RemoteHandle.from_dict(record.handle)
                results.append(_destroy(ledger, provider, handle, record.session_id, reason, dry_run, now, status))
            elif record.created_at is not None and not (provider.capabilities.labels and provider.name in listed):
                # the create was sent and its answer lost: something may run that nothing here can see
                results.append(ReapResult(record.session_id, record.provider, None, "unconfirmed", reason,
                                          "cleanup.incomplete", provider.unlisted_remedy(record)))
            else:
                # never sent a create, or the provider lists nothing under its label: nothing exists
                if not dry_run and ledger is not None:
                    ledger.record_end(record.session_id, status=SessionStatus.FAILED.value, reason=f"reaped: {reason}",
                                      ended_at=now, billable_seconds=None, cost_usd=None, only_active=True)
                results.append(ReapResult(record.session_id, record.provider, None,
                                          "would_record" if dry_run else "recorded_gone", reason))
    finally:
        for provider in instances.values():
            with contextlib.suppress(Exception):
                provider.close()
    return results


def confirm_gone(ledger: Ledger, session_id: str, *, now: float | None = None) -> ReapResult:
    """Close the row of a session whose desktop the provider cannot confirm gone (no handle, and no listing that
    could show it), because a person checked where :meth:`~deskctl.providers.base.Provider.unlisted_remedy` says
    and deleted it: ``failed``, cost unknown. A session that is over already is left as it is (``skipped``);
    one with a handle is refused (the reaper and ``deskctl down`` confirm those themselves)."""
    from deskctl.errors import NotFound, UsageError

    record = ledger.get(session_id)
    if record is None:
        raise NotFound(f"no session {session_id!r} in the ledger", remedy="deskctl ls --all")
    if not record.active:
        return ReapResult(session_id, record.provider, None, "skipped", f"session already {record.status}")
    if record.handle:
        raise UsageError(
            f"session {session_id} has a handle: deskctl confirms itself whether its desktop is gone",
            code="usage.has_handle", provider=record.provider, remedy=f"deskctl down {session_id}, or deskctl reap")
    now = time.time() if now is None else now
    ledger.record_end(session_id, status=SessionStatus.FAILED.value, reason="reaped: confirmed gone by hand",
                      ended_at=now, billable_seconds=None, cost_usd=None, only_active=True)
    return ReapResult(session_id, record.provider, None, "recorded_gone", "confirmed gone by hand")


def _gone(provider: Provider, raw_handle: dict[str, Any]) -> bool:
    """The provider confirms the desktop no longer runs (False when it cannot tell)."""
    try:
        return not provider.is_alive(RemoteHandle.from_dict(raw_handle))
    except (DeskctlError, KeyError, TypeError, ValueError):
        return False


def _destroy(
    ledger: Ledger | None, provider: Provider, handle: RemoteHandle, session_id: str, reason: str, dry_run: bool,
    now: float, status: SessionStatus = SessionStatus.ENDED,
) -> ReapResult:
    if dry_run:
        return ReapResult(session_id, provider.name, handle.resource_id, "would_destroy", reason)
    try:
        provider.destroy(handle)
    except DeskctlError as exc:
        return ReapResult(session_id, provider.name, handle.resource_id, "failed", reason, exc.code)
    record = ledger.get(session_id) if ledger is not None else None
    if ledger is not None and record is not None and record.status not in TERMINAL_STATUSES:
        from deskctl import metering

        start = record.created_at or record.intent_at
        # a leak bills until it was last seen alive: now, when the reaper found it
        billable = max(0.0, now - start) if start else None
        cost = None
        if billable is not None and record.spec:
            with contextlib.suppress(Exception):
                from deskctl.spec import STORED, DesktopSpec

                spec = DesktopSpec.model_validate(record.spec, context=STORED)
                cost = metering.cost_for(metering.rate_for(spec), billable)
        ledger.record_end(session_id, status=status.value, reason=f"reaped: {reason}", ended_at=time.time(),
                          billable_seconds=billable, cost_usd=cost, only_active=True)
    return ReapResult(session_id, provider.name, handle.resource_id, "destroyed", reason)
