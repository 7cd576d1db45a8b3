"""What a session spends, as the session sees it: the rate its desktop bills at, and the model spend metered
against it (:meth:`Desktop.meter <deskctl.session.Desktop.meter>`), which ends the session when it passes the
session's money cap or its shared budget, as the watchdog does for desktop spend."""

from __future__ import annotations

import time

from deskctl import supervisor
from deskctl.errors import BudgetExceeded, NotFound, SessionClosed
from deskctl.lifecycle import SessionStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from deskctl.ledger import ModelUsage
    from deskctl.metering import Rate
    from deskctl.session import Desktop

__all__ = ["meter", "session_rate"]


def session_rate(desk: Desktop) -> Rate | None:
    """The session's rate. An attached session bills at the price recorded when its desktop was made (a catalog
    changed since does not re-price it); the catalog gives only the billing steps and minimum."""
    if not desk._rate_resolved:
        from deskctl import metering
        from deskctl._record import replace

        if desk._spec is not None:
            rate = metering.rate_for(desk._spec)
        else:  # an attached session: its stored spec as data (no spec to check for a price)
            from deskctl.platforms import Platform

            stored = desk._stored_spec or {}
            platform = str(stored.get("platform") or Platform.UBUNTU.value)
            rate = metering.lookup_rate(desk.provider_name, platform, dict(desk._provider_options))
        recorded = desk._recorded_usd_per_hour
        if recorded is not None:  # set for an attached session only
            rate = (replace(rate, usd_per_hour=recorded) if rate is not None else
                    metering.Rate(recorded, 1, 0, source="the ledger (rate recorded at creation)", date=""))
        desk._rate = rate
        desk._rate_resolved = True
    return desk._rate


def meter(desk: Desktop, role: str, model: str, input_tokens: int, output_tokens: int,
          usd: float | None) -> ModelUsage:
    """:meth:`Desktop.meter <deskctl.session.Desktop.meter>`."""
    from deskctl import metering
    from deskctl.ledger import ModelUsage

    role, model, input_tokens, output_tokens, usd = metering.check_model_usage(
        role, model, input_tokens, output_tokens, usd)
    if desk.state is SessionStatus.NEW:
        raise SessionClosed(f"session {desk.id} is not open: nothing to meter against",
                            provider=desk.provider_name)
    price = metering.ModelPrice(usd, "given by the caller") if usd is not None else \
        metering.model_cost(model, input_tokens, output_tokens)
    usage = ModelUsage(desk.id, time.time(), role, model, input_tokens, output_tokens, price.usd, price.source)
    with desk._lock:
        desk.ledger.record_model_usage(usage)
        if price.usd is None:
            desk._model_unknown += 1
        else:
            desk._model_usd += price.usd
    if desk.state is SessionStatus.READY:
        error = _model_limit_error(desk, usage)
        if error is not None:
            desk._ended_error = error
            try:
                desk._teardown(status=SessionStatus.ENDED, reason="budget.exceeded")
            except Exception as exc:
                supervisor.log_cleanup_failure(f"the end of {desk.id} at its model spend limit", exc)
            raise error
        desk._limits_changed.set()
    return usage


def _model_limit_error(desk: Desktop, usage: ModelUsage) -> BudgetExceeded | None:
    """Why the model spend just metered ends the session (its cap, its shared budget, an unknown price under a
    money cap with the ``refuse`` policy), or None."""
    from deskctl import budget, metering

    remedy = "raise --max-usd (or the budget's cap), or split the run"
    caps = desk._max_usd is not None
    name = next(iter(desk.ledger.budget_of_sessions([desk.id]).values()), None)
    if usage.usd is None and (caps or name is not None):
        spec = desk.spec
        stored = desk.ledger.get_budget(name) if name is not None else None
        if budget.unknown_cost_policy(spec, stored) == "refuse":
            return BudgetExceeded(
                f"session {desk.id}: the price of model {usage.model!r} is unknown under a money cap; the "
                "session was ended rather than counting it as free", code="budget.unknown_cost",
                provider=desk.provider_name,
                remedy="add a 'models' row for it to your prices.json ($DESKCTL_PRICES), pass usd=, or allow "
                       "unknown costs (--unknown-cost allow)")
    if desk._max_usd is not None:
        rate = session_rate(desk)
        started = desk._create_sent_at
        desktop = metering.cost_for(rate, time.time() - started) if started is not None else 0.0
        spent = (desktop or 0.0) + desk._model_usd
        if spent > desk._max_usd + 1e-9:
            return BudgetExceeded(
                f"session {desk.id}: {metering.format_cost(spent)} spent (desktop "
                f"{metering.format_cost(desktop)}, model {metering.format_cost(desk._model_usd)}) passes its "
                f"cap of {metering.format_cost(desk._max_usd)}; the session was ended",
                provider=desk.provider_name, remedy=remedy,
                details={"desktop_usd": desktop, "model_usd": desk._model_usd, "max_usd": desk._max_usd})
    if name is not None:
        try:
            state = budget.status(desk.ledger, name)
        except NotFound:  # the budget was deleted meanwhile: nothing to pass
            return None
        if state.total_usd > state.max_usd + 1e-9:
            return BudgetExceeded(
                f"budget {name!r}: {metering.format_cost(state.total_usd)} spent or held passes its cap of "
                f"{metering.format_cost(state.max_usd)} after model spend of session {desk.id}; the session "
                "was ended", provider=desk.provider_name, remedy=remedy,
                details={"budget": name, "spent_usd": state.total_usd, "max_usd": state.max_usd})
    return None
