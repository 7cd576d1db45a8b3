"""``deskctl ls`` and ``deskctl cost``'s work, without click: the click commands
(:func:`deskctl.cli.session_cmds.ls`, :func:`deskctl.cli.cost_cmds.cost`) and the click-free path of their plain
forms (:func:`run`) both call :func:`list_sessions` and :func:`cost_report`, so both print the same bytes.

A script polls ``deskctl ls --json`` and a CI job's last step prints ``deskctl cost``: click's import (with typing)
was a third of such a call. :func:`run` takes ``ls`` and ``cost`` with ``--json`` (and ``ls --all``) only; anything
else (another option, ``--help``, ``[defaults]`` in a config file, shell completion) it leaves to click, untouched.
"""

from __future__ import annotations

import os
import time

from deskctl.cli import one_shot_ledger
from deskctl.cli._output import echo, echo_json
from deskctl.lifecycle import SessionStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.ledger import SessionRecord

__all__ = ["cost_report", "list_sessions", "run"]

#: the options of the plain forms :func:`run` takes, per command (flags only)
_PLAIN = {"ls": {"--json", "--all"}, "cost": {"--json"}}


def run(args: list[str]) -> bool:
    """Run ``deskctl ls`` or ``deskctl cost`` (plain forms) without click; False (having done nothing) when click
    is to run it. Errors are raised, for the abort path of :func:`deskctl.cli.main`."""
    if "_DESKCTL_COMPLETE" in os.environ or not args or args[0] not in _PLAIN:
        return False
    if not set(args[1:]) <= _PLAIN[args[0]]:
        return False
    from deskctl.config import load_config

    try:
        config = load_config()
    except Exception:  # click's path reports it, the same way as for any other command
        return False
    if config.defaults:  # [defaults] may set --all or --json: click applies them
        return False
    if args[0] == "ls":
        list_sessions("--all" in args, None, "--json" in args)
    else:
        cost_report(None, "provider", "--json" in args)
    return True


def _note(message: str) -> None:
    echo(message, err=True)


# -- deskctl ls ----------------------------------------------------------------------------------------------


def list_sessions(show_all: bool, since: str | None, as_json: bool) -> None:
    """List sessions that are not ended (or ``show_all``), with their spend so far: the desktop's and, where the
    harness metered it (Desktop.meter), the models'; see ``deskctl ls --help``."""
    from deskctl import metering

    now = time.time()
    since_ts = None
    if since:
        from deskctl.spec import parse_duration  # only --since needs it

        since_ts = now - parse_duration(since, what="--since")
    with one_shot_ledger() as book:
        records = book.sessions(active=None if show_all else True, since=since_ts)
        models = book.model_spend(r.session_id for r in records)
    rows: list[dict[str, Any]] = []
    for r in records:
        model_usd, model_unknown = models.get(r.session_id, (0.0, 0))
        start = r.created_at or r.intent_at
        end = r.ended_at or now
        rows.append({
            "id": r.session_id, "provider": r.provider, "platform": r.platform, "geometry": r.geometry,
            "status": r.status, "detached": r.detached, "owner": r.owner, "started_at": start,
            "seconds": end - start, "cost_usd": metering.spent_so_far(r, now), "expires_at": r.expires_at,
            "reason": r.reason,
            # model spend beside the desktop's (cost_usd): None when every metered call's price is unknown
            "model_usd": None if model_unknown and not model_usd else round(model_usd, 6),
            "model_unknown_calls": model_unknown,
        })
    if as_json:
        echo_json({"sessions": rows})
        return
    if not rows:
        _note("no sessions" + ("" if show_all else " running (deskctl ls --all shows ended ones)"))
        return
    header = f"{'ID':<14} {'PROVIDER':<12} {'PLATFORM':<8} {'GEOMETRY':<10} {'STATUS':<10} {'AGE':>8} {'SPEND':>10}"
    with_models = bool(models)
    echo(header + (f" {'MODEL':>18}" if with_models else ""))
    for row in rows:
        model = ""
        if with_models:
            model = metering.format_cost(row["model_usd"]) + (" + unknown" if row["model_usd"] is not None
                                                                and row["model_unknown_calls"] else "")
            model = f" {model:>18}"
        echo(f"{row['id']:<14} {row['provider']:<12} {row['platform']:<8} {row['geometry']:<10} "
                   f"{row['status']:<10} {_age(row['seconds']):>8} {metering.format_cost(row['cost_usd']):>10}"
                   + model)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


# -- deskctl cost --------------------------------------------------------------------------------------------


def _duration(value: str, what: str) -> float:
    from deskctl.spec import parse_duration

    seconds = parse_duration(value, what=what)
    if seconds <= 0:
        from deskctl.errors import UsageError

        raise UsageError(f"{what} {value!r} must be longer than 0", code="usage.bad_duration")
    return seconds


def _human_duration(value: float) -> str:
    seconds = round(value)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _table(header: list[str], rows: list[list[str]], *, right: set[int]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cost_text(known: float, unknown: int, sessions: int) -> str:
    from deskctl.metering import format_cost

    if unknown and unknown == sessions:
        return "unknown"
    return format_cost(known) + (" + unknown" if unknown else "")



def _group_key(record: SessionRecord, by: str, budgets: dict[str, str]) -> str:
    if by == "provider":
        return record.provider
    if by == "day":
        from datetime import UTC, datetime

        return datetime.fromtimestamp(record.intent_at, UTC).strftime("%Y-%m-%d")
    return budgets.get(record.session_id, "-")



def cost_report(since: str | None, by: str, as_json: bool) -> None:
    """Billable time and cost of sessions per group (``by``), running ones at their cost so far; see ``deskctl
    cost --help``."""
    from deskctl.metering import session_cost

    now = time.time()
    start = None if since is None else now - _duration(since, "--since")
    if by in ("role", "model"):
        _model_cost(start, since, by, as_json)
        return

    def bucket(key: str) -> dict[str, Any]:
        return {"key": key, "sessions": 0, "running": 0, "billable_seconds": 0.0, "cost_usd": 0.0,
                "unknown_sessions": 0}  # fmt: skip

    groups: dict[str, dict[str, Any]] = {}
    total = bucket("total")
    with one_shot_ledger() as book:
        models = book.model_totals(since=start, by=by)
        # Sessions that are over are summed by the database, per group; only the active ones are read.
        for key, sums in book.ended_totals(since=start, by=by, now=now).items():
            group = groups.setdefault(key, bucket(key))
            for target in (group, total):
                target["sessions"] += sums.sessions
                target["billable_seconds"] += sums.billable_seconds
                target["cost_usd"] += sums.cost_usd
                target["unknown_sessions"] += sums.unknown_sessions
        active = [r for r in book.sessions(active=True, since=start)
                  if not (r.status == SessionStatus.INTENT and r.created_at is None)]  # fmt: skip
        budgets = book.budget_of_sessions(r.session_id for r in active) if by == "budget" else {}
    for record in active:
        key = _group_key(record, by, budgets)
        group = groups.setdefault(key, bucket(key))
        spent = session_cost(record, now)
        for target in (group, total):
            target["sessions"] += 1
            target["running"] += 1
            target["billable_seconds"] += record.elapsed_billable(now)
            if spent is None:
                target["unknown_sessions"] += 1
            else:
                target["cost_usd"] += spent
    for key, spent_on_models in models.items():  # a group of model spend only cannot exist: its sessions count
        group = groups.setdefault(key, bucket(key))
        for target in (group, total):
            target["model_usd"] = target.get("model_usd", 0.0) + spent_on_models.usd
            target["model_calls"] = target.get("model_calls", 0) + spent_on_models.calls
            target["model_unknown_calls"] = target.get("model_unknown_calls", 0) + spent_on_models.unknown_calls
    ordered = [groups[k] for k in sorted(groups)]
    if as_json:
        def clean(bucket: dict[str, Any]) -> dict[str, Any]:
            out = dict(bucket)
            out["billable_seconds"] = round(out["billable_seconds"], 3)
            all_unknown = out["unknown_sessions"] and out["unknown_sessions"] == out["sessions"]
            out["cost_usd"] = None if all_unknown else round(out["cost_usd"], 6)  # the desktops'
            calls, unknown_calls = out.pop("model_calls", 0), out.get("model_unknown_calls", 0)
            out["model_unknown_calls"] = unknown_calls
            out["model_usd"] = None if calls and unknown_calls == calls else round(out.get("model_usd", 0.0), 6)
            parts = [x for x in (out["cost_usd"], out["model_usd"] if calls else None) if x is not None]
            out["total_usd"] = round(sum(parts), 6) if parts else None
            return out

        echo_json({"by": by, "since": start, "groups": [clean(g) for g in ordered], "total": clean(total)})
        return
    if not total["sessions"]:
        _note("no sessions in the ledger" + (f" in the last {since}" if since else ""))
        return
    from deskctl.metering import format_cost

    header = [by.upper(), "SESSIONS", "RUNNING", "TIME", "COST"]
    with_models = bool(models)
    if with_models:  # desktop and model spend apart, and their total
        header[-1:] = ["DESKTOP", "MODEL", "TOTAL"]
    rows = []
    for g in [*ordered, total]:
        row = [str(g["key"]), str(g["sessions"]), str(g["running"]), _human_duration(g["billable_seconds"]),
               _cost_text(g["cost_usd"], g["unknown_sessions"], g["sessions"])]
        if with_models:
            calls, unknown_calls = g.get("model_calls", 0), g.get("model_unknown_calls", 0)
            model = _cost_text(g.get("model_usd", 0.0), unknown_calls, calls)
            desktop_unknown = g["unknown_sessions"] == g["sessions"] > 0
            if desktop_unknown and (not calls or unknown_calls == calls):
                total_text = "unknown"
            else:
                total_text = format_cost(g["cost_usd"] + g.get("model_usd", 0.0)) + \
                    (" + unknown" if g["unknown_sessions"] or unknown_calls else "")
            row += [model, total_text]
        rows.append(row)
    echo(_table(header, rows, right={1, 2, 3}))


def _model_cost(start: float | None, since: str | None, by: str, as_json: bool) -> None:
    """``deskctl cost --by role|model``: model spend alone, per role or model, with its tokens."""
    from deskctl.metering import format_cost

    with one_shot_ledger() as book:
        totals = book.model_totals(since=start, by=by)
        overall = book.model_totals(since=start).get("")
    ordered = sorted(totals.items())

    def doc(key: str, t: Any) -> dict[str, Any]:
        return {"key": key, "sessions": t.sessions, "calls": t.calls, "input_tokens": t.input_tokens,
                "output_tokens": t.output_tokens, "unknown_calls": t.unknown_calls,
                "model_usd": None if t.unknown_calls == t.calls else round(t.usd, 6)}  # fmt: skip

    if as_json:
        echo_json({"by": by, "since": start, "groups": [doc(k, t) for k, t in ordered],
                   "total": doc("total", overall) if overall else None})  # fmt: skip
        return
    if overall is None:
        _note("no model spend in the ledger" + (f" in the last {since}" if since else "")
             + " (Desktop.meter records it)")
        return
    rows = [[key, str(t.sessions), str(t.calls), str(t.input_tokens), str(t.output_tokens),
             "unknown" if t.unknown_calls == t.calls else
             format_cost(t.usd) + (" + unknown" if t.unknown_calls else "")]
            for key, t in [*ordered, ("total", overall)]]  # fmt: skip
    echo(_table([by.upper(), "SESSIONS", "CALLS", "TOKENS IN", "TOKENS OUT", "MODEL COST"], rows,
                      right={1, 2, 3, 4}))
