"""`deskctl cost` and `deskctl budget`: exit codes and exact output (DESKCTL_HOME is a temp dir per test)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from _cli import deskctl as _deskctl
from deskctl.cli import main
from deskctl.ledger import SessionRecord, open_ledger


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def _ended(sid: str, *, provider: str, start: float, seconds: float, cost: float | None,
           budget_name: str | None = None) -> None:  # fmt: skip
    book = open_ledger()
    try:
        book.record_intent(SessionRecord(sid, provider, "ubuntu", "1024x768", "host:1", False, "intent", start))
        book.record_create_sent(sid, start)
        book.record_end(sid, status="ended", reason="closed", ended_at=start + seconds, billable_seconds=seconds,
                        cost_usd=cost)  # fmt: skip
        if budget_name:
            with book.transaction() as tx:
                tx.run("INSERT INTO reservations (id, budget, session_id, amount_usd, unknown, created_at, "
                       "expires_at, status, settled_at, cost_usd) VALUES (?, ?, ?, 0, 0, ?, ?, 'settled', ?, ?)",
                       (f"rsv-{sid}", budget_name, sid, start, start + 1, start + seconds, cost))  # fmt: skip
    finally:
        book.close()


def _running(sid: str, *, provider: str, created: float, rate: float | None, max_minutes: float | None = None) -> None:
    book = open_ledger()
    try:
        book.record_intent(SessionRecord(sid, provider, "windows", "1024x768", "host:1", False, "intent", created,
                                         rate_usd_per_hour=rate, spec={"max_minutes": max_minutes}))  # fmt: skip
        book.record_create_sent(sid, created)
    finally:
        book.close()


# -- cost ------------------------------------------------------------------------------------------------


def test_cost_with_no_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "cost") == (0, "", "no sessions in the ledger\n")
    assert run(capsys, "cost", "--since", "2h") == (0, "", "no sessions in the ledger in the last 2h\n")


def test_cost_by_provider_day_and_budget(capsys: pytest.CaptureFixture[str]) -> None:
    day = 1_795_000_000.0  # 2026-11-18 UTC
    _ended("dk-a", provider="daytona", start=day, seconds=3600, cost=0.2336, budget_name="ci")
    _ended("dk-b", provider="daytona", start=day + 86400, seconds=1800, cost=0.1168)
    _ended("dk-c", provider="ssh", start=day, seconds=90, cost=None, budget_name="ci")
    _ended("dk-d", provider="xvfb", start=day, seconds=5, cost=0.0)
    assert run(capsys, "cost") == (0, (
        "PROVIDER  SESSIONS  RUNNING   TIME  COST\n"
        "daytona          2        0  1h30m  $0.3504\n"
        "ssh              1        0  1m30s  unknown\n"
        "xvfb             1        0     5s  $0.0000\n"
        "total            4        0  1h31m  $0.3504 + unknown\n"
    ), "")  # fmt: skip
    assert run(capsys, "cost", "--by", "day")[1] == (
        "DAY         SESSIONS  RUNNING    TIME  COST\n"
        "2026-11-18         3        0   1h01m  $0.2336 + unknown\n"
        "2026-11-19         1        0  30m00s  $0.1168\n"
        "total              4        0   1h31m  $0.3504 + unknown\n"
    )
    assert run(capsys, "cost", "--by", "budget")[1] == (
        "BUDGET  SESSIONS  RUNNING    TIME  COST\n"
        "-              2        0  30m05s  $0.1168\n"
        "ci             2        0   1h01m  $0.2336 + unknown\n"
        "total          4        0   1h31m  $0.3504 + unknown\n"
    )
    code, out, _ = run(capsys, "cost", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["by"] == "provider" and doc["since"] is None
    assert doc["groups"][1] == {"key": "ssh", "sessions": 1, "running": 0, "billable_seconds": 90.0,
                                "cost_usd": None, "unknown_sessions": 1, "model_usd": 0.0,
                                "model_unknown_calls": 0, "total_usd": None}  # fmt: skip
    assert doc["total"]["cost_usd"] == pytest.approx(0.3504) and doc["total"]["unknown_sessions"] == 1
    assert run(capsys, "cost", "--since", "1h") == (0, "", "no sessions in the ledger in the last 1h\n")


def test_cost_shows_running_sessions_so_far(capsys: pytest.CaptureFixture[str]) -> None:
    _running("dk-r", provider="daytona", created=time.time() - 3600, rate=0.36)
    code, out, _ = run(capsys, "cost", "--json")
    (group,) = json.loads(out)["groups"]
    assert code == 0 and group["running"] == 1 and group["cost_usd"] == pytest.approx(0.36, rel=1e-3)


def test_cost_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "cost", "--since", "soon")
    assert (code, out) == (2, "")
    assert err == "error: --since 'soon' is not a duration such as 90s, 15m, 2h or 7d (usage.bad_duration)\n"
    assert run(capsys, "cost", "--by", "colour")[0] == 2


# -- budget set / show / rm ------------------------------------------------------------------------------


def test_budget_set_show_rm(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "budget", "set", "ci", "--max-usd", "5", "--window", "7d") == (0, (
        "ci: $5.0000 per 7d; sessions without --max-minutes are projected at 60 min; unknown cost: refuse\n"
    ), "")  # fmt: skip
    code, out, _ = run(capsys, "budget", "set", "nightly", "--max-usd", "0.5", "--window", "24h",
                       "--default-minutes", "20", "--unknown-cost", "allow", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["unknown_cost"] == "allow" and json.loads(out)["window_seconds"] == 86400
    assert run(capsys, "budget", "show") == (0, (
        "NAME         CAP  WINDOW    SPENT  RUNNING     LEFT  UNKNOWN  POLICY\n"
        "ci       $5.0000      7d  $0.0000  $0.0000  $5.0000        0  refuse\n"
        "nightly  $0.5000     24h  $0.0000  $0.0000  $0.5000        0  allow\n"
    ), "")  # fmt: skip
    code, out, _ = run(capsys, "budget", "show", "ci", "--json")
    (doc,) = json.loads(out)["budgets"]
    assert code == 0 and doc["name"] == "ci" and doc["status"]["left_usd"] == 5.0
    assert run(capsys, "budget", "rm", "ci") == (0, "", "deleted budget ci\n")
    assert run(capsys, "budget", "rm", "ci") == (2, "", "error: no budget 'ci' in the ledger (usage.not_found)\n")
    code, _, err = run(capsys, "budget", "show", "ci")
    assert code == 2 and err.startswith("error: no budget 'ci' in the ledger (usage.not_found)\n")


def test_budget_set_rejects_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "budget", "set", "ci", "--max-usd", "-1")[0:2] == (2, "")
    code, _, err = run(capsys, "budget", "set", "ci", "--max-usd", "1", "--window", "0h")
    assert code == 2 and "--window '0h' must be longer than 0" in err
    assert run(capsys, "budget", "set", "ci")[0] == 2  # --max-usd is required
    assert run(capsys, "budget", "set", "ci", "--max-usd", "1", "--unknown-cost", "maybe")[0] == 2


# -- budget check ----------------------------------------------------------------------------------------


def test_budget_check_passes_and_writes_the_step_summary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    _ended("dk-a", provider="daytona", start=time.time() - 600, seconds=300, cost=1.5)
    code, out, err = run(capsys, "budget", "check", "--max-usd", "5")
    expected = (
        "### deskctl spend: ok\n"
        "\n"
        "| | USD |\n"
        "|---|---:|\n"
        "| cap (24h window) | $5.0000 |\n"
        "| spent (ended sessions) | $1.5000 |\n"
        "| running (projected) | $0.0000 |\n"
        "| total | $1.5000 |\n"
        "| left | $3.5000 |\n"
        "\n"
        "Sessions: 1 ended, 0 running, 0 of unknown cost.\n"
    )
    assert (code, out, err) == (0, expected, "")
    assert summary.read_text() == "earlier step\n" + expected + "\n"


def test_budget_check_counts_running_sessions_at_their_projection(capsys: pytest.CaptureFixture[str]) -> None:
    _ended("dk-a", provider="daytona", start=time.time() - 600, seconds=300, cost=1.5)
    _running("dk-r", provider="daytona", created=time.time() - 60, rate=6.0, max_minutes=60)  # projected $6
    code, out, err = run(capsys, "budget", "check", "--max-usd", "5")
    assert code == 4
    assert "| running (projected) | $6.0000 |" in out and "### deskctl spend: OVER" in out
    assert "Spend passes the cap by $2.5000." in out
    assert err == ("error: spend is over: $7.5000 spent or projected, cap $5.0000 (budget.exceeded)\n"
                   "  remedy: wait for running sessions to end or raise the cap; see the summary\n")  # fmt: skip
    code, out, _ = run(capsys, "budget", "check", "--max-usd", "8", "--window", "1h")
    assert code == 0 and "| cap (1h window) | $8.0000 |" in out


def test_budget_check_json_failure_is_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    _ended("dk-a", provider="daytona", start=time.time() - 600, seconds=300, cost=1.5)
    code, out, err = run(capsys, "budget", "check", "--max-usd", "1", "--json")
    doc = json.loads(out)
    assert code == 4 and err == ""
    assert doc["error"]["code"] == "budget.exceeded"
    assert doc["error"]["details"]["checks"][0]["total_usd"] == 1.5


def test_budget_check_unknown_cost_policy(capsys: pytest.CaptureFixture[str]) -> None:
    _ended("dk-s", provider="ssh", start=time.time() - 600, seconds=300, cost=None)
    code, out, err = run(capsys, "budget", "check", "--max-usd", "5")
    assert code == 4 and "1 of unknown cost" in out
    assert err.startswith("error: spend: 1 session(s) of unknown cost under the refuse policy (budget.exceeded)\n")
    code, out, _ = run(capsys, "budget", "check", "--max-usd", "5", "--unknown-cost", "allow")
    assert code == 0 and "Unknown costs are not included in the figures above" in out


def test_budget_check_named_and_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "budget", "check")[0:2] == (2, "")
    run(capsys, "budget", "set", "ci", "--max-usd", "1")
    _ended("dk-a", provider="daytona", start=time.time() - 60, seconds=30, cost=0.75, budget_name="ci")
    code, out, _ = run(capsys, "budget", "check", "ci")
    assert code == 0 and "### deskctl budget `ci`: ok" in out and "| left | $0.2500 |" in out
    assert run(capsys, "budget", "check", "ci", "--max-usd", "0.5")[0] == 4
    assert run(capsys, "budget", "check")[0] == 0  # every budget
    assert run(capsys, "budget", "check", "nope")[0] == 2


# -- end to end: a real desktop charged to a budget ------------------------------------------------------


def test_a_session_that_does_not_fit_is_refused_before_create(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "*", "size": "*", "usd_per_hour": 600,
                                             "source": "test: pretend xvfb is expensive", "date": "2026-11-29"}]}))
    env = {"DESKCTL_PRICES": str(prices), "DESKCTL_BUDGET": "ci"}
    assert _deskctl("budget", "set", "ci", "--max-usd", "1", env=env).returncode == 0
    refused = _deskctl("up", "--geometry", "320x240", env=env)
    assert refused.returncode == 4, refused.stderr
    assert "budget 'ci': this session's projected $600.0000 (60 min of xvfb) does not fit" in refused.stderr
    with open_ledger() as book:
        assert book.sessions() == []  # nothing was created, not even an intent

    up = _deskctl("up", "--geometry", "320x240", "--max-minutes", "0.05", env=env)  # 3 s: $0.50
    assert up.returncode == 0, up.stderr
    sid = up.stdout.strip()
    try:
        check = _deskctl("budget", "check", "ci", env=env)
        assert check.returncode == 0, check.stderr
        assert "| running (projected) | $0.5000 |" in check.stdout
        assert _deskctl("up", "--geometry", "320x240", "--max-minutes", "0.06", env=env).returncode == 4
    finally:
        down = _deskctl("down", sid, env=env)
    assert down.returncode == 0, down.stderr
    with open_ledger() as book:
        (held,) = book.reservations(budget="ci")
        record = book.get(sid)
    assert held.status == "settled" and held.session_id == sid
    assert record is not None and held.cost_usd == record.cost_usd and record.cost_usd is not None


# -- the CI example uses only commands and options that exist --------------------------------------------


def _parse_cli(args: list[str]) -> None:
    import warnings

    import click

    from deskctl.cli import cli

    command: click.Command = cli
    ctx: click.Context | None = None
    name = "deskctl"
    while True:
        ctx = command.make_context(name, list(args), parent=ctx)
        if not isinstance(command, click.Group):
            return
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args, which 8.1 still needs
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*ctx.protected_args, *ctx.args]
        name, sub, args = command.resolve_command(ctx, rest)  # type: ignore[assignment]
        assert sub is not None, rest
        command = sub


def test_the_ci_example_workflow_uses_real_commands() -> None:
    import re
    import shlex

    workflow = (Path(__file__).parents[2] / "examples" / "ci-budget-guard.yml").read_text()
    # one-line `run: deskctl ...` steps, and deskctl lines of `run: |` blocks
    calls = re.findall(r"(?m)^\s*(?:- )?(?:run: )?(deskctl [^|\n]+)", workflow)
    assert {c.split()[1] for c in calls} >= {"budget", "preflight", "cost", "reap"}
    for call in calls:
        args = shlex.split(re.sub(r'"?\$\{?\w+\}?"?', "x", call))[1:]
        _parse_cli(args)
    with pytest.raises(Exception, match="No such option"):
        _parse_cli(["budget", "check", "--max-dollars", "5"])
