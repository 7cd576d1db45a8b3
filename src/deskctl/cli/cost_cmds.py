"""``deskctl cost`` and ``deskctl budget``: what desktops cost, and caps that stop spending before it happens.

The ledger is ``$DESKCTL_LEDGER_URL`` (``postgresql://...`` for a ledger shared by CI runners), else the SQLite
file under ``$DESKCTL_HOME``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from deskctl.cli._common import Number, echo_json, json_option, note
from deskctl.cli._report import _duration, _table
from deskctl.ledger import open_ledger

if TYPE_CHECKING:
    from deskctl.budget import BudgetStatus

__all__ = ["budget", "cost"]


# -- deskctl cost ----------------------------------------------------------------------------------------


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
    from deskctl.cli._report import cost_report

    cost_report(since, by, as_json)


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
    with open_ledger() as book:
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

    with open_ledger() as book:
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

    with open_ledger() as book:
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
    with open_ledger() as book:
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
