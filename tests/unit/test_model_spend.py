"""Model spend beside desktop spend (issue 21 section 3): ``Desktop.meter`` rows in the ledger (SQLite and
PostgreSQL), priced from the user's prices.json, unknown kept unknown; the session cap, its watchdog and a shared
budget count it; ``deskctl cost``/``ls`` show it apart from the desktop's. Real xvfb desktops, real ledgers, the
CLI in child processes."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import pytest

import deskctl
from _cli import deskctl as run_deskctl
from deskctl.errors import BudgetExceeded, UsageError
from deskctl.ledger import SCHEMA_VERSION, SessionRecord, open_ledger
from deskctl.session import State

SECRET = "sk-test-Zq81mmPLd0"


@pytest.fixture
def prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user price catalog with model rows (and a priced xvfb, for the watchdog test to override)."""
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": [
        {"model": "model-a", "input_usd_per_mtok": 10.0, "output_usd_per_mtok": 30.0, "source": "test table",
         "date": "2026-12-01"},
        {"model": "sim-*", "input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0, "source": "test table",
         "date": "2026-12-01"},
    ]}))
    monkeypatch.setenv("DESKCTL_PRICES", str(path))
    return path


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both backends: this process and the CLI children use ``ledger_url``."""
    monkeypatch.setenv("DESKCTL_LEDGER_URL", ledger_url)
    return ledger_url


def cli(*args: str) -> tuple[int, str, str]:
    done = run_deskctl(*args)
    return done.returncode, done.stdout, done.stderr


def test_the_ledger_keeps_model_usage_on_both_backends(ledger_url: str) -> None:
    book = open_ledger(ledger_url)
    try:
        assert book.schema_version() == SCHEMA_VERSION
        book.record_intent(SessionRecord("dk-m", "xvfb", "ubuntu", "320x240", "host:1", False, "intent", 1000.0))
        from deskctl.ledger import ModelUsage

        book.record_model_usage(ModelUsage("dk-m", 1001.0, "agent", "model-a", 1000, 200, 0.016, "test"))
        book.record_model_usage(ModelUsage("dk-m", 1002.0, "user", "sim-1", 50, 5, None, None))
        assert [(u.role, u.usd) for u in book.model_usage("dk-m")] == [("agent", 0.016), ("user", None)]
        assert book.model_spend(["dk-m", "dk-none"]) == {"dk-m": (pytest.approx(0.016), 1)}
        by_role = book.model_totals(by="role")
        assert (by_role["agent"].input_tokens, by_role["agent"].usd, by_role["user"].unknown_calls) == (1000, 0.016, 1)
        assert set(book.model_totals(by="model")) == {"model-a", "sim-1"}
        assert book.model_totals(active=False) == {}  # the session is not over
        with pytest.raises(UsageError):  # a row of no session is refused
            book.record_model_usage(ModelUsage("dk-nosuch", 1.0, "agent", "m", 1, 1, 0.0, None))
    finally:
        book.close()


def test_a_schema_4_ledger_gets_the_model_usage_table_and_keeps_its_records(ledger_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import deskctl.ledger._schema as ledger_module  # where the migrations read it

    monkeypatch.setattr(ledger_module, "SCHEMA_VERSION", 4)
    old = open_ledger(ledger_url)
    old.record_intent(SessionRecord("dk-four", "xvfb", "ubuntu", "320x240", "host:1", False, "intent", 1000.0))
    old.close()
    monkeypatch.undo()
    new = open_ledger(ledger_url)
    try:
        assert new.schema_version() == SCHEMA_VERSION and new.get("dk-four") is not None
        assert new.model_spend(["dk-four"]) == {}
    finally:
        new.close()


@pytest.mark.parametrize("bad", [
    {"role": ""}, {"role": "Agent!"}, {"model": ""}, {"model": "x" * 201}, {"input_tokens": -1},
    {"output_tokens": 10**12 + 1}, {"input_tokens": True}, {"input_tokens": 1.5}, {"usd": -0.01},
    {"usd": math.nan}, {"usd": math.inf}, {"usd": 1e10}, {"usd": "1"},
])
def test_bad_numbers_are_usage_errors_and_record_nothing(ledger_env: str, bad: dict[str, object]) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        arguments: dict[str, object] = {"role": "agent", "model": "model-a", "input_tokens": 1, "output_tokens": 1,
                                        "usd": None} | bad
        with pytest.raises(UsageError) as info:
            desk.meter(**arguments)  # type: ignore[arg-type]
        assert info.value.code == "usage.bad_meter" and info.value.exit_code == 2
        assert desk.ledger.model_usage(desk.id) == []
        assert desk.state is State.READY


def test_a_max_usd_session_ends_when_a_loop_meters_model_spend_past_it(ledger_env: str, prices: Path) -> None:
    """xvfb is free: only the model spend can pass the cap, and the call that passes it ends the session."""
    desk = deskctl.open_desktop("xvfb", geometry="320x240", max_usd=0.05)
    steps = 0
    with pytest.raises(BudgetExceeded) as info:
        while steps < 100:
            desk.screenshot()  # a step of the agent loop
            desk.meter("agent", "model-a", input_tokens=1000, output_tokens=100)  # $0.013 a call
            steps += 1
    assert steps == 3 and info.value.code == "budget.exceeded" and info.value.exit_code == 4
    assert "model $0.0520" in info.value.message
    assert desk.state is State.ENDED
    with pytest.raises(BudgetExceeded):  # the next step is refused
        desk.screenshot()
    rows = json.loads(cli("ls", "--all", "--json")[1])["sessions"]
    assert [(r["status"], r["reason"], r["cost_usd"], r["model_usd"]) for r in rows] == [
        ("ended", "budget.exceeded", 0.0, pytest.approx(0.052))]
    code, out, _ = cli("cost", "--json")
    total = json.loads(out)["total"]
    assert code == 0 and (total["cost_usd"], total["model_usd"], total["total_usd"]) == (
        0.0, pytest.approx(0.052), pytest.approx(0.052))


def test_model_spend_brings_the_watchdog_of_a_billed_desktop_forward(ledger_env: str, prices: Path) -> None:
    """A desktop at $36/h under a $100 cap has hours to go; $99.99 of model spend leaves it a second, and its
    watchdog (not the next call) ends it."""
    doc = json.loads(prices.read_text())
    doc["rates"] = [{"provider": "xvfb", "usd_per_hour": 36.0, "source": "test", "date": "2026-12-01"}]
    prices.write_text(json.dumps(doc))
    desk = deskctl.open_desktop("xvfb", geometry="320x240", max_usd=100.0)
    try:
        desk.meter("agent", "model-a", usd=99.99)
        assert desk.state is State.READY  # not over yet: the desktop has about a second left
        deadline = time.monotonic() + 120  # a bound for a loaded machine, not a timing claim
        while desk.state is not State.ENDED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert desk.state is State.ENDED and desk.end_reason == "budget.exceeded"
    finally:
        desk.close()


def test_a_shared_budget_counts_model_spend(ledger_env: str, prices: Path) -> None:
    assert cli("budget", "set", "ci", "--max-usd", "1")[0] == 0
    first = deskctl.open_desktop("xvfb", geometry="320x240", budget="ci")
    first.meter("agent", "model-a", usd=0.6)
    first.close()
    code, out, _ = cli("budget", "check", "ci", "--json")
    assert code == 0 and json.loads(out)["checks"][0]["spent_usd"] == pytest.approx(0.6)
    second = deskctl.open_desktop("xvfb", geometry="320x240", budget="ci")
    with pytest.raises(BudgetExceeded) as info:
        second.meter("user", "sim-1", usd=0.5)
    assert "budget 'ci'" in info.value.message and second.state is State.ENDED
    code, out, _ = cli("budget", "check", "ci", "--json")
    assert code == 4 and json.loads(out)["error"]["code"] == "budget.exceeded"
    code, out, _ = cli("budget", "check", "--max-usd", "1", "--json")  # every session against an ad-hoc cap
    assert code == 4


def test_an_unknown_model_price_stays_unknown_and_is_refused_under_a_cap(ledger_env: str, prices: Path) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        usage = desk.meter("agent", "no-such-model", input_tokens=10, output_tokens=1)
        assert usage.usd is None and desk.state is State.READY  # no cap: recorded as unknown, never 0
    code, out, _ = cli("cost", "--by", "model", "--json")
    (group,) = json.loads(out)["groups"]
    assert code == 0 and group["key"] == "no-such-model" and group["model_usd"] is None
    desk = deskctl.open_desktop("xvfb", geometry="320x240", max_usd=1.0)
    with pytest.raises(BudgetExceeded) as info:
        desk.meter("agent", "no-such-model", input_tokens=10, output_tokens=1)
    assert info.value.code == "budget.unknown_cost" and desk.state is State.ENDED
    allowed = deskctl.open_desktop("xvfb", geometry="320x240", max_usd=1.0, unknown_cost="allow")
    try:
        assert allowed.meter("agent", "no-such-model", input_tokens=10).usd is None
        assert allowed.state is State.READY
    finally:
        allowed.close()


def test_cost_splits_desktop_and_model_spend_and_groups_by_role_and_model(ledger_env: str, prices: Path) -> None:
    assert cli("cost", "--by", "role") == (0, "", "no model spend in the ledger (Desktop.meter records it)\n")
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        desk.meter("agent", "model-a", input_tokens=1000, output_tokens=100)  # 0.013
        desk.meter("agent", "model-a", input_tokens=2000, output_tokens=0)  # 0.02
        desk.meter("user", "sim-2", input_tokens=1000, output_tokens=500)  # 0.002
        desk.meter("judge", "mystery", input_tokens=5, output_tokens=5)  # unknown
    assert cli("cost", "--by", "role") == (0, (
        "ROLE   SESSIONS  CALLS  TOKENS IN  TOKENS OUT  MODEL COST\n"
        "agent         1      2       3000         100  $0.0330\n"
        "judge         1      1          5           5  unknown\n"
        "user          1      1       1000         500  $0.0020\n"
        "total         1      4       4005         605  $0.0350 + unknown\n"
    ), "")
    code, out, _ = cli("cost", "--by", "model", "--json")
    groups = {g["key"]: g for g in json.loads(out)["groups"]}
    assert code == 0 and set(groups) == {"model-a", "sim-2", "mystery"}
    assert groups["model-a"] == {"key": "model-a", "sessions": 1, "calls": 2, "input_tokens": 3000,
                                 "output_tokens": 100, "unknown_calls": 0, "model_usd": 0.033}
    code, out, _ = cli("cost")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["PROVIDER", "SESSIONS", "RUNNING", "TIME", "DESKTOP", "MODEL", "TOTAL"]
    assert lines[1].split()[:3] == ["xvfb", "1", "0"]
    assert lines[1].split()[4:] == ["$0.0000", "$0.0350", "+", "unknown", "$0.0350", "+", "unknown"]
    code, out, _ = cli("ls", "--all")
    assert code == 0 and out.splitlines()[0].split()[-2:] == ["SPEND", "MODEL"]
    assert "$0.0350 + unknown" in out.splitlines()[1]


def test_secrets_never_reach_the_ledger_or_the_output(ledger_env: str, prices: Path) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        desk.meter("agent", f"proxy/model-a?api_key={SECRET}", input_tokens=1, usd=0.001)
    outputs = [cli(*args) for args in (("cost", "--by", "model", "--json"), ("cost", "--by", "model"),
                                       ("ls", "--all", "--json"), ("cost", "--json"))]
    assert all(code == 0 for code, _, _ in outputs)
    assert not [o for o in outputs if SECRET in o[1] + o[2]]
    assert "api_key=***" in outputs[0][1]
    book = open_ledger(ledger_env)
    try:
        rows = book._read("SELECT model, price_source FROM model_usage")
    finally:
        book.close()
    assert rows and SECRET not in json.dumps(rows)


def test_the_async_desktop_meters_too(ledger_env: str, prices: Path) -> None:
    from deskctl import aio

    async def main() -> float | None:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            return (await desk.meter("agent", "model-a", input_tokens=1000, output_tokens=0)).usd

    assert asyncio.run(main()) == pytest.approx(0.01)
