"""The ledger's records: what a session, an event, a budget, a reservation and the sums over them look like to
the caller, independent of the database that stores them."""

from __future__ import annotations

import time

from deskctl._record import Record, field, record_fields
from deskctl.lifecycle import TERMINAL_STATUSES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Budget", "Event", "ModelTotals", "ModelUsage", "Reservation", "SessionRecord", "Totals"]


class SessionRecord(Record):
    """One session as the ledger knows it. Times are Unix epoch seconds (``time.time()``).

    ``created_at`` is the time the create *request* was sent: billable time starts there, because a
    provider may bill for a sandbox whose create response never arrived.
    """

    session_id: str
    provider: str
    platform: str
    geometry: str
    owner: str  # "host:pid" of the process that opened the session
    detached: bool
    status: str  # intent | creating | ready | destroying | ended | failed | leaked
    intent_at: float
    created_at: float | None = None
    ready_at: float | None = None
    ended_at: float | None = None
    expires_at: float | None = None
    handle: dict[str, Any] | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    billable_seconds: float | None = None
    cost_usd: float | None = None
    rate_usd_per_hour: float | None = None
    rate_source: str | None = None
    action_counts: dict[str, int] = field(default_factory=dict)
    budget: str | None = None
    #: the live display size seen when the session became ready
    width: int | None = None
    height: int | None = None

    @property
    def active(self) -> bool:
        """Not ended and not failed: the desktop may still exist (and bill)."""
        return self.status not in TERMINAL_STATUSES

    def elapsed_billable(self, now: float | None = None) -> float:
        """Billable seconds so far: recorded ones when ended, else from the create request until ``now``."""
        if self.billable_seconds is not None:
            return self.billable_seconds
        if self.created_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else (time.time() if now is None else now)
        return max(0.0, end - self.created_at)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in record_fields(self)}


class Event(Record, frozen=True):
    """Something that happened to a session: ``kind`` (``intent``, ``create_sent``, ``created``, ``ready``,
    ``ended``, or any kind the caller records) at ``at`` with JSON ``data``."""

    session_id: str
    at: float
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "at": self.at, "kind": self.kind, "data": dict(self.data)}


class Budget(Record, frozen=True):
    """A shared spending cap: at most ``max_usd`` over any trailing ``window_seconds``."""

    name: str
    max_usd: float
    window_seconds: float
    #: minutes assumed for a session that states no ``max_minutes`` when its cost is projected
    default_minutes: float
    #: ``refuse`` or ``allow`` a session whose rate is unknown
    unknown_cost: str
    created_at: float
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in record_fields(self)}


class Reservation(Record, frozen=True):
    """Money held against a budget for one session until it is settled (``cost_usd`` known) or expires."""

    id: str
    budget: str
    session_id: str
    amount_usd: float
    unknown: bool  # the session's rate was unknown (allowed by policy): its amount is not a real figure
    created_at: float
    expires_at: float
    status: str  # held | settled
    settled_at: float | None = None
    cost_usd: float | None = None
    rate_usd_per_hour: float | None = None
    owner: str | None = None  # host:pid of the process that made it

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in record_fields(self)}


class Totals(Record, frozen=True):
    """Sums over a group of sessions: how many, their billable seconds, their known cost and how many of them
    have an unknown one (not included in ``cost_usd``)."""

    sessions: int
    billable_seconds: float
    cost_usd: float
    unknown_sessions: int


class ModelUsage(Record, frozen=True):
    """Tokens a model spent for a session (``Desktop.meter``): ``role`` (``agent``, ``user``, ...), ``model``, the
    token counts and ``usd`` (None: the price is unknown, never 0); ``price_source`` says where ``usd`` came from."""

    session_id: str
    at: float
    role: str
    model: str
    input_tokens: int
    output_tokens: int
    usd: float | None
    price_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in record_fields(self)}


class ModelTotals(Record, frozen=True):
    """Model spend summed over a group: distinct sessions, metered calls, tokens, the known cost and how many
    calls have an unknown price (not included in ``usd``)."""

    sessions: int
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float
    unknown_calls: int

