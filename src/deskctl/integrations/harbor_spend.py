"""Model spend of Harbor trials (:func:`meter_trial`, a trial hook): the agent's token use into the ledger row of
the trial's desktop. Needs no Harbor import; :mod:`deskctl.integrations.harbor` re-exports these names."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

__all__ = ["LABEL_HARBOR_SESSION", "agent_usage", "meter_trial", "record_agent_context"]

LABEL_HARBOR_SESSION = "harbor.session"


def _label_value(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", value)[:63] or "-"



# -- model spend -----------------------------------------------------------------------------------------


def agent_usage(context: Any, model: str | None = None) -> list[tuple[str, int, int, float | None]]:
    """``(model, input tokens, output tokens, usd)`` of a Harbor ``AgentContext``: one per model of its
    ``model_usage`` when the agent reported it, else one for its totals under ``model`` (else ``"unknown"``);
    nothing when it reports no tokens. Input tokens include cached ones, as Harbor counts them; a missing cost
    is None (deskctl's catalog or the genai-prices library may price it), never 0."""
    if context is None:
        return []
    out: list[tuple[str, int, int, float | None]] = []
    for name, used in sorted((getattr(context, "model_usage", None) or {}).items()):
        out.append((str(name), int(used.n_input_tokens or 0), int(used.n_output_tokens or 0),
                    None if used.cost_usd is None else float(used.cost_usd)))
    if out:
        return out
    tokens_in, tokens_out = getattr(context, "n_input_tokens", None), getattr(context, "n_output_tokens", None)
    if tokens_in is None and tokens_out is None:
        return []
    cost = getattr(context, "cost_usd", None)
    return [(model or "unknown", int(tokens_in or 0), int(tokens_out or 0), None if cost is None else float(cost))]


def record_agent_context(harbor_session: str, context: Any, *, model: str | None = None, role: str = "agent",
                         ledger_url: str | None = None) -> list[Any]:
    """Add the token use of ``context`` (Harbor's ``AgentContext``) to the ledger row of the desktop whose
    ``harbor.session`` label starts with ``harbor_session`` (a trial name), and return the rows written (none when
    no desktop of that trial is in the ledger). Every number is checked as ``Desktop.meter`` checks it."""
    import time

    from deskctl import metering
    from deskctl.ledger import ModelUsage, open_ledger

    entries = agent_usage(context, model)
    if not entries:
        return []
    wanted = _label_value(harbor_session)
    with open_ledger(ledger_url) as book:
        session = next((r for r in reversed(book.sessions())
                        if str(r.labels.get(LABEL_HARBOR_SESSION, "")).startswith(wanted)
                        or str((r.spec.get("labels") or {}).get(LABEL_HARBOR_SESSION, "")).startswith(wanted)),
                       None)  # fmt: skip
        if session is None:
            return []
        written = []
        for name, tokens_in, tokens_out, usd in entries:
            role_, name, tokens_in, tokens_out, usd = metering.check_model_usage(role, name, tokens_in, tokens_out,
                                                                                 usd)
            price = metering.ModelPrice(usd, "harbor agent context") if usd is not None else \
                metering.model_cost(name, tokens_in, tokens_out)
            usage = ModelUsage(session.session_id, time.time(), role_, name, tokens_in, tokens_out, price.usd,
                               price.source)
            book.record_model_usage(usage)
            written.append(usage)
    return written


async def meter_trial(event: Any) -> None:
    """A Harbor trial hook (``job.on_trial_ended(meter_trial)``): the trial's agent token use into the ledger,
    beside its desktop's cost. Never fails the trial: a problem is left out of the ledger, not raised."""
    result = event.result
    info = getattr(getattr(result, "agent_info", None), "model_info", None)
    model = getattr(info, "name", None)
    contexts = [result.agent_result] if getattr(result, "agent_result", None) is not None else \
        [s.agent_result for s in (getattr(result, "step_results", None) or []) if s.agent_result is not None]
    for context in contexts:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(record_agent_context, str(event.config.trial_name), context, model=model)
