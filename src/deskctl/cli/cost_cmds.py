"""``deskctl cost`` and ``deskctl budget``: what desktops cost, and caps that stop spending before it happens.

The ledger is ``$DESKCTL_LEDGER_URL`` (``postgresql://...`` for a ledger shared by CI runners), else the SQLite
file under ``$DESKCTL_HOME``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from deskctl.cli._common import Number, echo_json, json_option, note
from deskctl.lifecycle import SessionStatus

if TYPE_CHECKING:
    from deskctl.budget import BudgetStatus
    from deskctl.ledger import Ledger, SessionRecord

__all__ = ["budget", "cost"]



@contextmanager
def _ledger() -> Iterator[Ledger]:
    from deskctl.ledger import open_ledger

    book = open_ledger()
    try:
        yield book
    finally:
        book.close()


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


# -- deskctl cost ----------------------------------------------------------------------------------------


def _group_key(record: SessionRecord, by: str, budgets: dict[str, str]) -> str:
    if by == "provider":
        return record.provider
    if by == "day":
        return datetime.fromtimestamp(record.intent_at, UTC).strftime("%Y-%m-%d")
    return budgets.get(record.session_id, "-")


@click.command("cost")
@click.option("--since", "since", metavar="DURATION", help="Only sessions alive in the last DURATION (90m, 24h, 7d).")
@click.option("--by", "by", type=click.Choice(["provider", "day", "budget", "role", "model"]), default="provider",
              show_default=True,
              help="Group by provider, UTC day of start, the budget the session was charged to, or (model spend "
                   "only) the role or the model that spent it.")  # fmt: skip
@json_option
def cost(since: str | None, by: str, as_json: bool) -> None:
    """Summarise billable time and cost of sessions (running ones at their cost so far).

    Desktop spend and model spend (Desktop.meter) are shown apart, and their total. --by role or model
    groups the model spend alone, with its tokens. An unknown price is shown as "unknown", never as $0. The
    ledger is $DESKCTL_LEDGER_URL, else the SQLite file under $DESKCTL_HOME.
    """
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
    with _ledger() as book:
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
        note("no sessions in the ledger" + (f" in the last {since}" if since else ""))
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
    click.echo(_table(header, rows, right={1, 2, 3}))


def _model_cost(start: float | None, since: str | None, by: str, as_json: bool) -> None:
    """``deskctl cost --by role|model``: model spend alone, per role or model, with its tokens."""
    from deskctl.metering import format_cost

    with _ledger() as book:
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
        note("no model spend in the ledger" + (f" in the last {since}" if since else "")
             + " (Desktop.meter records it)")
        return
    rows = [[key, str(t.sessions), str(t.calls), str(t.input_tokens), str(t.output_tokens),
             "unknown" if t.unknown_calls == t.calls else
             format_cost(t.usd) + (" + unknown" if t.unknown_calls else "")]
            for key, t in [*ordered, ("total", overall)]]  # fmt: skip
    click.echo(_table([by.upper(), "SESSIONS", "CALLS", "TOKENS IN", "TOKENS OUT", "MODEL COST"], rows,
                      right={1, 2, 3, 4}))


# -- deskctl budget --------------------------------------------------------------------------------------


@click.group("budget")
def budget() -> None:
    """Set, show and check shared budgets (caps on spend over a trailing window).

    A session is charged to the budget named by --budget NAME on `deskctl up` (or $DESKCTL_BUDGET); its projected
    cost is held before create, and a session that does not fit is refused (exit 4). The ledger is
    $DESKCTL_LEDGER_URL, else the SQLite file under $DESKCTL_HOME.
    """


_POLICY = click.Choice(["refuse", "allow"])


def _budget_line(b: Any) -> str:
    from deskctl.budget import _human_window
    from deskctl.metering import format_cost

    return (f"{b.name}: {format_cost(b.max_usd)} per {_human_window(b.window_seconds)}; "
            f"sessions without --max-minutes are projected at {b.default_minutes:g} min; "
            f"unknown cost: {b.unknown_cost}")  # fmt: skip


@budget.command("set")
@click.argument("name")
@click.option("--max-usd", type=Number("budget_usd"), required=True, help="The cap, in USD, over the window.")
@click.option("--window", default="24h", show_default=True, help="Trailing window: 24h, 7d, 30d (any duration).")
@click.option("--default-minutes", type=Number("default_minutes"), default=60.0, show_default=True,
              help="Minutes a session without --max-minutes is projected to run.")  # fmt: skip
@click.option("--unknown-cost", type=_POLICY, default="refuse", show_default=True,
              help="Refuse or allow sessions whose price is unknown ($DESKCTL_UNKNOWN_COST overrides).")  # fmt: skip
@json_option
def budget_set(name: str, max_usd: float, window: str, default_minutes: float, unknown_cost: str,
               as_json: bool) -> None:  # fmt: skip
    """Create or change the budget NAME."""
    from deskctl.errors import UsageError

    if max_usd < 0:
        raise UsageError(f"--max-usd {max_usd:g} is negative", code="usage.bad_limit")
    if default_minutes <= 0:
        raise UsageError(f"--default-minutes {default_minutes:g} must be greater than 0", code="usage.bad_limit")
    if not name.strip() or len(name) > 100:
        raise UsageError(f"budget name {name!r} must be 1 to 100 characters", code="usage.bad_name")
    window_seconds = _duration(window, "--window")
    with _ledger() as book:
        saved = book.set_budget(name, max_usd=max_usd, window_seconds=window_seconds,
                                default_minutes=default_minutes, unknown_cost=unknown_cost)  # fmt: skip
    if as_json:
        echo_json(saved.to_dict())
    else:
        click.echo(_budget_line(saved))


@budget.command("show")
@click.argument("name", required=False)
@json_option
def budget_show(name: str | None, as_json: bool) -> None:
    """Show budgets with what is spent and held in their window."""
    from deskctl.budget import _human_window, status
    from deskctl.errors import NotFound
    from deskctl.metering import format_cost

    with _ledger() as book:
        budgets = book.budgets()
        if name is not None:
            budgets = [b for b in budgets if b.name == name]
            if not budgets:
                raise NotFound(f"no budget {name!r} in the ledger", remedy=f"deskctl budget set {name} --max-usd N")
        states = [(b, status(book, b.name)) for b in budgets]
    if as_json:
        echo_json({"budgets": [{**b.to_dict(), "status": s.to_dict()} for b, s in states]})
        return
    if not states:
        note("no budgets; create one with: deskctl budget set NAME --max-usd N --window 24h")
        return
    rows = [
        [b.name, format_cost(b.max_usd), _human_window(b.window_seconds), format_cost(s.spent_usd),
         format_cost(s.running_usd), format_cost(s.left_usd), str(s.unknown_sessions), b.unknown_cost]
        for b, s in states
    ]  # fmt: skip
    header = ["NAME", "CAP", "WINDOW", "SPENT", "RUNNING", "LEFT", "UNKNOWN", "POLICY"]
    click.echo(_table(header, rows, right={1, 2, 3, 4, 5, 6}))


@budget.command("rm")
@click.argument("name")
def budget_rm(name: str) -> None:
    """Delete the budget NAME (its history of reservations stays in the ledger)."""
    from deskctl.errors import NotFound

    with _ledger() as book:
        if not book.delete_budget(name):
            raise NotFound(f"no budget {name!r} in the ledger")
    note(f"deleted budget {name}")


def _append_step_summary(markdown: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    except OSError as exc:
        note(f"warning: cannot append to $GITHUB_STEP_SUMMARY ({path}): {exc}")


@budget.command("check")
@click.argument("name", required=False)
@click.option("--max-usd", type=Number("budget_usd"),
              help="The cap to check against (default: the budget's own).")
@click.option("--window", help="Trailing window (default: the budget's own, else 24h).")
@click.option("--unknown-cost", type=_POLICY,
              help="refuse (default): sessions of unknown cost fail the check; allow: they are left out "
                   "[env var: DESKCTL_UNKNOWN_COST].")  # fmt: skip
@json_option
def budget_check(name: str | None, max_usd: float | None, window: str | None, unknown_cost: str | None,
                 as_json: bool) -> None:  # fmt: skip
    """Exit 4 when spend in the window, including the projected cost of running sessions, passes the cap.

    With NAME: that budget. Without NAME: every session in the ledger against --max-usd, or every budget
    when --max-usd is not given. Prints a Markdown summary, also appended to $GITHUB_STEP_SUMMARY when set.
    """
    from deskctl.budget import DEFAULT_WINDOW_SECONDS, overall_status, render_markdown, status
    from deskctl.errors import BudgetExceeded, UsageError
    from deskctl.metering import format_cost

    if max_usd is not None and max_usd < 0:
        raise UsageError(f"--max-usd {max_usd:g} is negative", code="usage.bad_limit")
    window_seconds = None if window is None else _duration(window, "--window")
    with _ledger() as book:
        if name is not None:
            states = [status(book, name, max_usd=max_usd, window_seconds=window_seconds, unknown_cost=unknown_cost)]
        elif max_usd is not None:
            states = [overall_status(book, max_usd=max_usd, window_seconds=window_seconds or DEFAULT_WINDOW_SECONDS,
                                     unknown_cost=unknown_cost)]  # fmt: skip
        else:
            states = [status(book, b.name, window_seconds=window_seconds, unknown_cost=unknown_cost)
                      for b in book.budgets()]  # fmt: skip
            if not states:
                raise UsageError(
                    "nothing to check: no budgets in the ledger",
                    code="usage.nothing_to_check",
                    remedy="deskctl budget check --max-usd N, or deskctl budget set NAME --max-usd N",
                )
    markdown = "\n".join(render_markdown(s) for s in states)
    _append_step_summary(markdown)
    over = [s for s in states if s.over]
    if not as_json:
        click.echo(markdown, nl=False)
    if not over:
        if as_json:
            echo_json({"over": False, "checks": [s.to_dict() for s in states]})
        return
    first: BudgetStatus = over[0]
    label = f"budget {first.name!r}" if first.name else "spend"
    if first.total_usd > first.max_usd + 1e-9:
        message = (f"{label} is over: {format_cost(first.total_usd)} spent or projected, cap "
                   f"{format_cost(first.max_usd)}")  # fmt: skip
    else:
        message = f"{label}: {first.unknown_sessions} session(s) of unknown cost under the refuse policy"
    raise BudgetExceeded(
        message,
        remedy="wait for running sessions to end or raise the cap; see the summary",
        details={"over": True, "checks": [s.to_dict() for s in states]} if as_json else None,
    )
