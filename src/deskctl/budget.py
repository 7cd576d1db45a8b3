"""Budgets: stop spending before it happens, for one session and for a whole team's CI.

* **Session caps.** ``spec.max_usd`` (and ``max_minutes``) are enforced while the session runs by its watchdog;
  :func:`reserve` refuses up front a session whose minimum charge alone passes ``max_usd``, or whose rate is
  unknown under the ``refuse`` policy.
* **Shared budgets.** A budget (``deskctl budget set NAME --max-usd N --window 24h``) caps spend over a trailing
  window. A session is charged to the budget named by ``spec.budget`` (``--budget``) or ``$DESKCTL_BUDGET``.
  :func:`reserve` holds the session's projected cost (rate x ``max_minutes``, else the budget's
  ``default_minutes``) in the ledger, atomically with the check, so N parallel jobs together never pass the
  cap; :func:`settle` replaces the hold with the actual cost at the end.
* **Expiry.** A hold lasts the projected duration plus :data:`RESERVATION_GRACE_SECONDS`, and is released at
  once when its owner process (on this host) is dead and its desktop is not a detached one. Released or not, a
  desktop that still exists keeps counting at its cost so far: releasing a hold never hides real spend.
* **Unknown prices** (``rate`` None) follow the policy ``refuse`` (the default whenever a money cap applies) or
  ``allow``: from ``spec.unknown_cost`` (``--unknown-cost``), else ``$DESKCTL_UNKNOWN_COST``, else the budget's own
  setting. Unknown never silently means free: it is counted, reported and, by default, refused.
"""

from __future__ import annotations

import os
import time

from deskctl._record import Record, field
from deskctl.errors import BudgetExceeded, NotFound, UsageError
from deskctl.lifecycle import SessionStatus
from deskctl.metering import cost_for, format_cost, session_cost

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.ledger import Budget, Ledger, Reservation, SessionRecord, Transaction
    from deskctl.metering import Rate
    from deskctl.spec import DesktopSpec

__all__ = [
    "BUDGET_ENV",
    "DEFAULT_WINDOW_SECONDS",
    "RESERVATION_GRACE_SECONDS",
    "UNKNOWN_COST_ENV",
    "UNKNOWN_COST_POLICIES",
    "BudgetStatus",
    "budget_name_for",
    "overall_status",
    "render_markdown",
    "reserve",
    "settle",
    "status",
    "unknown_cost_policy",
]

BUDGET_ENV = "DESKCTL_BUDGET"
UNKNOWN_COST_ENV = "DESKCTL_UNKNOWN_COST"
UNKNOWN_COST_POLICIES = ("refuse", "allow")
#: a hold outlives the session's projected duration by this much before it is released
RESERVATION_GRACE_SECONDS = 300.0
DEFAULT_WINDOW_SECONDS = 86400.0
_EPSILON = 1e-9


def budget_name_for(spec: DesktopSpec) -> str | None:
    """The shared budget a session is charged to: ``spec.budget``, else ``$DESKCTL_BUDGET``."""
    name = spec.budget or os.environ.get(BUDGET_ENV, "").strip()
    return str(name) if name else None


def _check_policy(value: str, where: str) -> str:
    policy = value.strip().lower()
    if policy not in UNKNOWN_COST_POLICIES:
        raise UsageError(
            f"{where}: unknown-cost policy {value!r} is not one of {', '.join(UNKNOWN_COST_POLICIES)}",
            code="usage.bad_policy",
        )
    return policy


def unknown_cost_policy(spec: DesktopSpec | None = None, budget: Budget | None = None) -> str:
    """``refuse`` or ``allow``: ``spec.unknown_cost`` (``--unknown-cost``) > ``$DESKCTL_UNKNOWN_COST`` > the
    budget's setting > ``refuse``."""
    if spec is not None and spec.unknown_cost:
        return _check_policy(spec.unknown_cost, "--unknown-cost")
    env = os.environ.get(UNKNOWN_COST_ENV, "").strip()
    if env:
        return _check_policy(env, UNKNOWN_COST_ENV)
    if budget is not None:
        return _check_policy(budget.unknown_cost, f"budget {budget.name}")
    return "refuse"


def _unknown_refused(what: str, provider: str) -> BudgetExceeded:
    return BudgetExceeded(
        f"the price of {provider} is unknown, and {what} is a money cap: refusing rather than counting it as free",
        code="budget.unknown_cost",
        provider=provider,
        remedy=f"add its rate to your prices.json ($DESKCTL_PRICES), or allow it: {UNKNOWN_COST_ENV}=allow "
        "(or --unknown-cost allow)",
    )


def reserve(ledger: Ledger, *, session_id: str, spec: DesktopSpec, rate: Rate | None,
            now: float | None = None) -> str | None:  # fmt: skip
    """Check the session's caps and its shared budget before create; hold its projected cost.

    Raises :class:`~deskctl.errors.BudgetExceeded` (exit 4) when the projected cost does not fit what is left,
    or when the price is unknown and the policy is ``refuse``; :class:`~deskctl.errors.NotFound` when the
    named budget does not exist. Returns the reservation id, or None when no shared budget applies.
    """
    now = time.time() if now is None else now
    if spec.max_usd is not None:
        if rate is None:
            if unknown_cost_policy(spec) == "refuse":
                raise _unknown_refused(f"--max-usd {spec.max_usd:g}", spec.provider)
        else:
            minimum = cost_for(rate, 0.0) or 0.0
            if minimum > spec.max_usd + _EPSILON:
                raise BudgetExceeded(
                    f"the minimum charge of {spec.provider} ({format_cost(minimum)}) is more than the session cap "
                    f"of {format_cost(spec.max_usd)}",
                    provider=spec.provider, remedy="raise --max-usd",
                )  # fmt: skip
    name = budget_name_for(spec)
    if name is None:
        return None
    from deskctl.ledger import Reservation
    from deskctl.owners import owner_alive

    owner = _owner()
    with ledger.transaction(lock=f"budget:{name}") as tx:
        budget = tx.budget(name)
        if budget is None:
            raise NotFound(
                f"no budget {name!r} in the ledger", remedy=f"deskctl budget set {name} --max-usd N --window 24h"
            )
        minutes = spec.max_minutes if spec.max_minutes is not None else budget.default_minutes
        unknown = rate is None
        if rate is None:
            if unknown_cost_policy(spec, budget) == "refuse":
                raise _unknown_refused(f"budget {name!r}", spec.provider)
            amount = 0.0
        else:
            amount = cost_for(rate, minutes * 60.0) or 0.0
            if spec.max_usd is not None:
                amount = min(amount, spec.max_usd)  # the watchdog ends the session at its own cap
        releasable: list[tuple[str, float | None]] = []
        current = _status(tx, budget, now=now, max_usd=budget.max_usd, window_seconds=budget.window_seconds,
                          alive=owner_alive, releasable=releasable)  # fmt: skip
        if current.total_usd + amount > budget.max_usd + _EPSILON:
            raise BudgetExceeded(
                f"budget {name!r}: this session's projected {format_cost(amount)} ({minutes:g} min of "
                f"{spec.provider}) does not fit: {format_cost(current.total_usd)} of "
                f"{format_cost(budget.max_usd)} is spent or held in the last {_human_window(budget.window_seconds)}",
                provider=spec.provider,
                remedy="wait for running sessions to end, lower --max-minutes, or raise the cap (deskctl budget set)",
                details={"budget": name, "projected_usd": amount, "spent_usd": current.total_usd,
                         "max_usd": budget.max_usd},
            )  # fmt: skip
        for held_id, cost in releasable:  # holds that count as released already: settle them for good
            tx.release_reservation(held_id, at=now, cost_usd=cost)
        import secrets  # here: `deskctl down` and `do` load this module and reserve nothing

        reservation_id = "rsv-" + secrets.token_hex(8)
        tx.insert_reservation(
            Reservation(
                id=reservation_id, budget=name, session_id=session_id, amount_usd=amount, unknown=unknown,
                created_at=now, expires_at=now + minutes * 60.0 + RESERVATION_GRACE_SECONDS, status="held",
                rate_usd_per_hour=None if rate is None else rate.usd_per_hour, owner=owner,
            )
        )  # fmt: skip
    return reservation_id


def settle(ledger: Ledger, reservation_id: str | None, *, cost_usd: float | None) -> None:
    """Replace the hold by the session's actual cost (None: unknown). Idempotent; None id: nothing to do."""
    if reservation_id is None:
        return
    ledger.settle_reservation(reservation_id, cost_usd=cost_usd)


def _owner() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _human_window(seconds: float) -> str:
    """``24h``, ``7d``, ``30d``, ``90m``: days from two days up, else hours, else minutes."""
    for unit, size, least in (("d", 86400, 2 * 86400), ("h", 3600, 3600), ("m", 60, 60)):
        if seconds >= least and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class BudgetStatus(Record):
    """Spend against a cap over a trailing window, as of ``now``.

    ``spent_usd``: sessions that are over (settled costs). ``running_usd``: sessions still running, at their
    projected cost (the hold, or more if they already cost more). ``unknown_sessions``: sessions whose cost is
    unknown, not included in the figures. ``rows`` lists the sessions counted one by one (running, held, or
    released since the last check); the sessions that are over are only summed, so that a window of 100k
    sessions costs no more memory than an empty one.
    """

    name: str | None
    max_usd: float
    window_seconds: float
    now: float
    spent_usd: float = 0.0
    running_usd: float = 0.0
    ended_sessions: int = 0
    running_sessions: int = 0
    unknown_sessions: int = 0
    unknown_cost: str = "refuse"
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_usd(self) -> float:
        return self.spent_usd + self.running_usd

    @property
    def left_usd(self) -> float:
        return self.max_usd - self.total_usd

    @property
    def over(self) -> bool:
        """The cap is passed, or unknown costs are present under the ``refuse`` policy."""
        return self.total_usd > self.max_usd + _EPSILON or (self.unknown_sessions > 0 and self.unknown_cost == "refuse")

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.name, "max_usd": self.max_usd, "window_seconds": self.window_seconds, "now": self.now,
            "spent_usd": round(self.spent_usd, 6), "running_usd": round(self.running_usd, 6),
            "total_usd": round(self.total_usd, 6), "left_usd": round(self.left_usd, 6),
            "ended_sessions": self.ended_sessions, "running_sessions": self.running_sessions,
            "unknown_sessions": self.unknown_sessions, "unknown_cost": self.unknown_cost, "over": self.over,
            "sessions": self.rows,
        }  # fmt: skip


def _projected(record: SessionRecord, now: float) -> float | None:
    """A running session's projected cost: its rate over max(time so far, its max_minutes)."""
    so_far = session_cost(record, now)
    if so_far is None or record.rate_usd_per_hour is None:
        return so_far
    spec = record.spec or {}
    projected = so_far
    max_minutes = spec.get("max_minutes")
    if isinstance(max_minutes, int | float):
        projected = max(so_far, record.rate_usd_per_hour * float(max_minutes) / 60.0)
    max_usd = spec.get("max_usd")
    if isinstance(max_usd, int | float):
        projected = max(so_far, min(projected, float(max_usd)))  # the watchdog ends it at its own cap
    return projected


def _add(status: BudgetStatus, *, session_id: str, running: bool, cost: float | None, how: str) -> None:
    if running:
        status.running_sessions += 1
    else:
        status.ended_sessions += 1
    if cost is None:
        status.unknown_sessions += 1
    elif running:
        status.running_usd += cost
    else:
        status.spent_usd += cost
    status.rows.append({"session_id": session_id, "running": running, "cost_usd": cost, "counted_as": how})


def _status(tx: Transaction, budget: Budget, *, now: float, max_usd: float, window_seconds: float,
            alive: Any, unknown_cost: str | None = None,
            releasable: list[tuple[str, float | None]] | None = None) -> BudgetStatus:  # fmt: skip
    """Where ``budget`` stands: the reservations whose desktop may still exist or that are still held are
    looked at one by one (``rows``); the settled rest of the window is summed by the database. Time and memory
    follow what is running, not how many sessions the window holds.

    ``releasable`` (when given) receives ``(reservation id, cost)`` of every hold counted as over although still
    open - expired, or its owner process died - and whose desktop is not running, in the same single pass, so
    that a reserve can settle them and they do not pile up."""
    policy = _check_policy(unknown_cost, "--unknown-cost") if unknown_cost else unknown_cost_policy(budget=budget)
    result = BudgetStatus(budget.name, max_usd, window_seconds, now, unknown_cost=policy)
    since = now - window_seconds
    known: dict[str | None, bool | None] = {}

    def alive_once(owner: str | None) -> bool | None:  # one look per owner process, not per reservation
        if owner not in known:
            known[owner] = alive(owner)
        return known[owner]

    pairs = tx.open_reservations(budget.name, since=since)
    models = tx.model_spend(r.session_id for r, _ in pairs)
    for r, record in pairs:
        _count_reservation(result, r, record, now, alive_once, models.get(r.session_id))
        if releasable is not None and r.status == "held":
            running = record is not None and record.active and record.created_at is not None
            if not running and (now >= r.expires_at or alive_once(r.owner) is False):
                created = record is not None and record.created_at is not None
                releasable.append((r.id, record.cost_usd if created and record else 0.0))
    count, known_usd, unknown = tx.settled_totals(budget.name, since=since)
    result.ended_sessions += count
    result.spent_usd += known_usd
    result.unknown_sessions += unknown
    model_known, model_unknown = tx.settled_model_totals(budget.name, since=since)
    result.spent_usd += model_known
    result.unknown_sessions += model_unknown
    return result


def _count_reservation(result: BudgetStatus, r: Reservation, record: SessionRecord | None, now: float,
                       alive: Any, model: tuple[float, int] | None = None) -> None:  # fmt: skip
    """Count one reservation; ``model`` (known dollars, calls of unknown price) of its session's model spend is
    added on top of its desktop figure (a hold is desktop spend only)."""
    model_usd, model_unknown = model or (0.0, 0)

    def _count(status: BudgetStatus, *, session_id: str, running: bool, cost: float | None, how: str) -> None:
        _add(status, session_id=session_id, running=running,
                     cost=None if cost is None else cost + model_usd, how=how)
        if model_unknown and cost is not None:
            status.unknown_sessions += 1  # its known part is counted; its model calls of unknown price are not

    so_far = session_cost(record, now) if record is not None else 0.0
    running = record is not None and record.active and record.created_at is not None
    detached = record is not None and record.detached
    held = r.status == "held" and now < r.expires_at
    if held and not (running and detached) and alive(r.owner) is False:
        held = False  # its owner died: release the hold (a desktop that exists still counts below)
    if held:
        if r.unknown:
            _count(result, session_id=r.session_id, running=True, cost=None, how="held, unknown rate")
        else:
            _count(result, session_id=r.session_id, running=True, cost=max(r.amount_usd, so_far or 0.0), how="held")
        return
    if running:
        # the hold is over (settled, expired or its owner died) but the desktop still exists: it keeps costing
        base = r.cost_usd if r.status == "settled" else None
        cost = None if so_far is None else max(so_far, base or 0.0)
        _count(result, session_id=r.session_id, running=True, cost=cost, how="still running after its hold")
        return
    if r.status == "settled":
        _count(result, session_id=r.session_id, running=False, cost=r.cost_usd, how="settled")
    elif record is not None and record.created_at is not None:
        _count(result, session_id=r.session_id, running=False, cost=record.cost_usd, how="expired; ledger cost")
    else:
        # the process died before anything was created: nothing was billed, the hold is released
        _count(result, session_id=r.session_id, running=False, cost=0.0, how="released; never created")


def status(ledger: Ledger, name: str, *, now: float | None = None, max_usd: float | None = None,
           window_seconds: float | None = None, unknown_cost: str | None = None) -> BudgetStatus:  # fmt: skip
    """Where the budget ``name`` stands (``max_usd``, ``window_seconds`` and the ``unknown_cost`` policy
    override its own, for a what-if or a stricter check)."""
    from deskctl.owners import owner_alive

    now = time.time() if now is None else now
    with ledger.transaction(readonly=True) as tx:
        budget = tx.budget(name)
        if budget is None:
            raise NotFound(f"no budget {name!r} in the ledger", remedy=f"deskctl budget set {name} --max-usd N")
        return _status(
            tx, budget, now=now, max_usd=budget.max_usd if max_usd is None else max_usd,
            window_seconds=budget.window_seconds if window_seconds is None else window_seconds, alive=owner_alive,
            unknown_cost=unknown_cost,
        )  # fmt: skip


def overall_status(ledger: Ledger, *, max_usd: float, window_seconds: float = DEFAULT_WINDOW_SECONDS,
                   now: float | None = None, unknown_cost: str | None = None) -> BudgetStatus:  # fmt: skip
    """Every session in the ledger against an ad-hoc cap: ended ones at their cost, running ones at their
    projected cost (rate over the longer of their time so far and their ``max_minutes``)."""
    now = time.time() if now is None else now
    policy = _check_policy(unknown_cost, "--unknown-cost") if unknown_cost else unknown_cost_policy()
    result = BudgetStatus(None, max_usd, window_seconds, now, unknown_cost=policy)
    since = now - window_seconds
    # the active sessions one by one (``rows``); the ended ones summed by the database
    active = ledger.sessions(active=True, since=since)
    models = ledger.model_spend(r.session_id for r in active)
    for record in active:
        running = record.created_at is not None
        if not running and record.status == SessionStatus.INTENT:
            continue  # an intent that never went further is nothing
        cost = _projected(record, now) if running else session_cost(record, now)
        model_usd, model_unknown = models.get(record.session_id, (0.0, 0))
        _add(result, session_id=record.session_id, running=running,
                     cost=None if cost is None else cost + model_usd, how="projected" if running else "ended")
        if model_unknown and cost is not None:
            result.unknown_sessions += 1
    ended = ledger.ended_totals(since=since, now=now).get("")
    if ended is not None:
        result.ended_sessions += ended.sessions
        result.spent_usd += ended.cost_usd
        result.unknown_sessions += ended.unknown_sessions
    ended_models = ledger.model_totals(since=since, active=False).get("")
    if ended_models is not None:
        result.spent_usd += ended_models.usd
        result.unknown_sessions += ended_models.unknown_calls
    return result


def render_markdown(state: BudgetStatus) -> str:
    """A Markdown summary for a terminal or ``$GITHUB_STEP_SUMMARY``."""
    title = f"budget `{state.name}`" if state.name else "spend"
    verdict = "OVER" if state.over else "ok"
    lines = [
        f"### deskctl {title}: {verdict}",
        "",
        "| | USD |",
        "|---|---:|",
        f"| cap ({_human_window(state.window_seconds)} window) | {format_cost(state.max_usd)} |",
        f"| spent (ended sessions) | {format_cost(state.spent_usd)} |",
        f"| running (projected) | {format_cost(state.running_usd)} |",
        f"| total | {format_cost(state.total_usd)} |",
        f"| left | {format_cost(state.left_usd)} |",
        "",
        f"Sessions: {state.ended_sessions} ended, {state.running_sessions} running, "
        f"{state.unknown_sessions} of unknown cost.",
    ]
    if state.unknown_sessions:
        if state.unknown_cost == "refuse":
            lines.append(
                "Unknown costs are not counted as free: the check fails under the `refuse` policy "
                "(set their rate in prices.json, or use `--unknown-cost allow`)."
            )
        else:
            lines.append("Unknown costs are not included in the figures above (`--unknown-cost allow`).")
    if state.total_usd > state.max_usd + _EPSILON:
        lines.append(f"Spend passes the cap by {format_cost(state.total_usd - state.max_usd)}.")
    return "\n".join(lines) + "\n"
