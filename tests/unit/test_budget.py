"""Budgets: session caps, shared budgets with atomic reservations, expiry, unknown prices; on both backends."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from deskctl.budget import (
    RESERVATION_GRACE_SECONDS,
    BudgetStatus,
    overall_status,
    render_markdown,
    reserve,
    settle,
    status,
)
from deskctl.errors import BudgetExceeded, NotFound, UsageError
from deskctl.ledger import Ledger, SessionRecord, open_ledger
from deskctl.metering import Rate
from deskctl.spec import DesktopSpec

SIX_PER_HOUR = Rate(usd_per_hour=6.0, granularity_seconds=1, minimum_seconds=0, source="test", date="2026-11-29")


def _spec(**fields: object) -> DesktopSpec:
    options = dict(fields.pop("provider_options", {}) or {})  # type: ignore[call-overload]
    return DesktopSpec.build(provider="xvfb", provider_options=options, **fields)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DESKCTL_BUDGET", raising=False)
    monkeypatch.delenv("DESKCTL_UNKNOWN_COST", raising=False)


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    book = open_ledger(ledger_url)
    try:
        yield book
    finally:
        book.close()


def _session(book: Ledger, sid: str, *, created_at: float | None, rate: float | None = 6.0,
             detached: bool = False, owner: str = "host:1", spec: dict[str, object] | None = None) -> None:  # fmt: skip
    book.record_intent(SessionRecord(
        sid, "xvfb", "ubuntu", "1024x768", owner, detached, "intent", (created_at or 0.0) - 1,
        rate_usd_per_hour=rate, spec=spec or {},
    ))  # fmt: skip
    if created_at is not None:
        book.record_create_sent(sid, created_at)


def test_no_budget_and_no_cap_reserves_nothing(ledger: Ledger) -> None:
    assert reserve(ledger, session_id="dk-1", spec=_spec(), rate=SIX_PER_HOUR) is None
    assert reserve(ledger, session_id="dk-2", spec=_spec(), rate=None) is None  # no money cap: unknown is fine
    settle(ledger, None, cost_usd=1.0)  # nothing to settle


def test_a_named_budget_must_exist(ledger: Ledger) -> None:
    with pytest.raises(NotFound, match="no budget 'ghost'"):
        reserve(ledger, session_id="dk-1", spec=_spec(budget="ghost"), rate=SIX_PER_HOUR)


def test_reservations_stop_at_the_cap_and_settle_frees_room(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=1.0, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")  # 1 min at $6/h = $0.10
    now = 10_000.0
    ids = [reserve(ledger, session_id=f"dk-{i}", spec=spec, rate=SIX_PER_HOUR, now=now) for i in range(10)]
    assert all(ids) and len(set(ids)) == 10
    with pytest.raises(BudgetExceeded) as info:
        reserve(ledger, session_id="dk-10", spec=spec, rate=SIX_PER_HOUR, now=now)
    assert info.value.exit_code == 4 and info.value.code == "budget.exceeded"
    assert "does not fit" in info.value.message and info.value.details["budget"] == "ci"
    assert status(ledger, "ci", now=now).total_usd == pytest.approx(1.0)

    settle(ledger, ids[0], cost_usd=0.02)
    settle(ledger, ids[0], cost_usd=0.02)  # twice: counted once
    settle(ledger, ids[1], cost_usd=None)  # unknown actual cost
    state = status(ledger, "ci", now=now)
    assert state.spent_usd == pytest.approx(0.02) and state.running_usd == pytest.approx(0.8)
    assert state.unknown_sessions == 1
    assert reserve(ledger, session_id="dk-11", spec=spec, rate=SIX_PER_HOUR, now=now)


def test_budget_default_minutes_when_the_session_states_none(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=1.0, window_seconds=86400, default_minutes=5)
    spec = _spec(budget="ci")  # 5 min at $6/h = $0.50
    assert reserve(ledger, session_id="a", spec=spec, rate=SIX_PER_HOUR, now=1.0)
    assert reserve(ledger, session_id="b", spec=spec, rate=SIX_PER_HOUR, now=1.0)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="c", spec=spec, rate=SIX_PER_HOUR, now=1.0)


def test_a_session_cap_bounds_its_projection(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=1.0, window_seconds=86400)
    capped = _spec(max_minutes=60, max_usd=0.25, budget="ci")  # 60 min would be $6
    for sid in "abcd":
        assert reserve(ledger, session_id=sid, spec=capped, rate=SIX_PER_HOUR, now=1.0)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="e", spec=capped, rate=SIX_PER_HOUR, now=1.0)


def test_budget_from_environment(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger.set_budget("team", max_usd=0.05, window_seconds=3600)
    monkeypatch.setenv("DESKCTL_BUDGET", "team")
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="a", spec=_spec(max_minutes=1), rate=SIX_PER_HOUR)


def test_the_window_forgets_old_spend(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=0.1, window_seconds=3600)
    spec = _spec(max_minutes=1, budget="ci")
    rid = reserve(ledger, session_id="a", spec=spec, rate=SIX_PER_HOUR, now=1000.0)
    ledger.settle_reservation(rid or "", cost_usd=0.1, at=1060.0)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="b", spec=spec, rate=SIX_PER_HOUR, now=2000.0)
    assert reserve(ledger, session_id="c", spec=spec, rate=SIX_PER_HOUR, now=1000.0 + 3600 + 1)


def test_a_hold_expires(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=0.1, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")
    assert reserve(ledger, session_id="a", spec=spec, rate=SIX_PER_HOUR, now=1000.0)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="b", spec=spec, rate=SIX_PER_HOUR, now=1000.0 + 60 + RESERVATION_GRACE_SECONDS - 1)
    later = 1000.0 + 60 + RESERVATION_GRACE_SECONDS + 1
    state = status(ledger, "ci", now=later)
    assert state.total_usd == 0.0 and state.rows[0]["counted_as"] == "released; never created"
    assert reserve(ledger, session_id="b", spec=spec, rate=SIX_PER_HOUR, now=later)


def test_a_hold_counts_until_its_expiry_and_not_at_it(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=0.1, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")
    assert reserve(ledger, session_id="a", spec=spec, rate=SIX_PER_HOUR, now=1000.0)
    expires = 1000.0 + 60 + RESERVATION_GRACE_SECONDS
    assert status(ledger, "ci", now=expires - 0.001).total_usd == pytest.approx(0.1)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="b", spec=spec, rate=SIX_PER_HOUR, now=expires - 0.001)
    assert status(ledger, "ci", now=expires).total_usd == 0.0
    assert reserve(ledger, session_id="b", spec=spec, rate=SIX_PER_HOUR, now=expires)


def test_a_reservation_that_lands_exactly_on_the_cap_fits_and_a_cent_more_does_not(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=0.3, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")  # $0.10 each
    for sid in ("a", "b", "c"):  # the third lands on $0.30 exactly
        assert reserve(ledger, session_id=sid, spec=spec, rate=SIX_PER_HOUR, now=1.0)
    assert status(ledger, "ci", now=1.0).left_usd == pytest.approx(0.0)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="d", spec=_spec(max_minutes=0.1, budget="ci"), rate=SIX_PER_HOUR, now=1.0)


def test_a_desktop_still_running_after_its_hold_keeps_counting(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=10.0, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")
    rid = reserve(ledger, session_id="dk-long", spec=spec, rate=SIX_PER_HOUR, now=1000.0)
    _session(ledger, "dk-long", created_at=1000.0)
    state = status(ledger, "ci", now=1000.0 + 600)  # hold expired; 10 min at $6/h so far
    assert state.running_usd == pytest.approx(1.0) and state.running_sessions == 1
    settle(ledger, rid, cost_usd=0.1)  # e.g. a leak: settled at its cost then, but still alive
    assert status(ledger, "ci", now=1000.0 + 1200).running_usd == pytest.approx(2.0)
    ledger.record_end("dk-long", status="ended", reason="reaped", ended_at=1000.0 + 1200, billable_seconds=1200,
                      cost_usd=2.0)  # fmt: skip
    state = status(ledger, "ci", now=1000.0 + 1300)
    assert state.running_usd == 0.0 and state.spent_usd == pytest.approx(0.1)  # the settled figure
    assert state.ended_sessions == 1


def test_ending_a_session_settles_its_hold_whoever_ends_it(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=1.0, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")
    reserve(ledger, session_id="dk-e", spec=spec, rate=SIX_PER_HOUR, now=1000.0)
    _session(ledger, "dk-e", created_at=1000.0)
    ledger.record_end("dk-e", status="leaked", reason="cleanup.incomplete", ended_at=1010.0, billable_seconds=10,
                      cost_usd=0.0167)  # fmt: skip
    assert [r.status for r in ledger.reservations(session_id="dk-e")] == ["held"]  # a leak still exists
    ledger.record_end("dk-e", status="ended", reason="reaped", ended_at=1030.0, billable_seconds=30, cost_usd=0.05)
    [settled] = ledger.reservations(session_id="dk-e")
    assert (settled.status, settled.cost_usd, settled.settled_at) == ("settled", 0.05, 1030.0)
    assert status(ledger, "ci", now=1040.0).spent_usd == pytest.approx(0.05)


def test_a_killed_process_does_not_hold_its_reservation(ledger: Ledger, ledger_url: str) -> None:
    ledger.set_budget("ci", max_usd=0.1, window_seconds=86400)
    script = r"""
import os, sys
from deskctl.budget import reserve
from deskctl.ledger import open_ledger
from deskctl.metering import Rate
from deskctl.spec import DesktopSpec
book = open_ledger(sys.argv[1])
spec = DesktopSpec.build(provider="xvfb", max_minutes=1, budget="ci")
print(reserve(book, session_id="dk-doomed", spec=spec, rate=Rate(6.0, 1, 0, "t", "d")), flush=True)
os.kill(os.getpid(), 9)
"""
    proc = subprocess.run([sys.executable, "-c", script, ledger_url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout.startswith("rsv-")
    [held] = ledger.reservations(budget="ci")
    assert held.status == "held" and held.owner == f"{os.uname().nodename}:{held.owner.rpartition(':')[2]}"
    state = status(ledger, "ci")  # well before it would expire
    assert state.total_usd == 0.0
    assert reserve(ledger, session_id="dk-next", spec=_spec(max_minutes=1, budget="ci"),
                   rate=SIX_PER_HOUR)  # fmt: skip


def test_a_detached_desktop_keeps_its_hold_when_its_launcher_exits(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=0.1, window_seconds=86400)
    now = time.time()
    spec = _spec(max_minutes=1, budget="ci")
    rid = reserve(ledger, session_id="dk-up", spec=spec, rate=SIX_PER_HOUR, now=now)
    _session(ledger, "dk-up", created_at=now, detached=True)
    with ledger.transaction() as tx:  # as if `deskctl up` (the reserving process) had exited
        tx.run("UPDATE reservations SET owner = ? WHERE id = ?", (f"{os.uname().nodename}:999999999", rid))
    assert status(ledger, "ci", now=now + 1).running_usd == pytest.approx(0.1)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, session_id="dk-2", spec=spec, rate=SIX_PER_HOUR, now=now + 1)


# -- unknown prices --------------------------------------------------------------------------------------


def test_unknown_price_is_refused_under_a_budget_by_default(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger.set_budget("ci", max_usd=5.0, window_seconds=86400)
    spec = _spec(budget="ci")
    with pytest.raises(BudgetExceeded) as info:
        reserve(ledger, session_id="a", spec=spec, rate=None)
    assert info.value.code == "budget.unknown_cost" and "unknown" in info.value.message
    allowed = _spec(budget="ci", unknown_cost="allow")
    rid = reserve(ledger, session_id="b", spec=allowed, rate=None)
    [held] = ledger.reservations(budget="ci")
    assert held.id == rid and held.unknown and held.amount_usd == 0.0
    state = status(ledger, "ci")
    assert state.unknown_sessions == 1 and state.over  # the budget's own policy is refuse
    monkeypatch.setenv("DESKCTL_UNKNOWN_COST", "allow")
    assert reserve(ledger, session_id="c", spec=spec, rate=None)
    assert not status(ledger, "ci").over


def test_budget_with_allow_policy(ledger: Ledger) -> None:
    ledger.set_budget("lab", max_usd=5.0, window_seconds=86400, unknown_cost="allow")
    assert reserve(ledger, session_id="a", spec=_spec(budget="lab"), rate=None)


def test_session_cap_and_unknown_price(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BudgetExceeded, match="unknown"):
        reserve(ledger, session_id="a", spec=_spec(max_usd=1.0), rate=None)
    monkeypatch.setenv("DESKCTL_UNKNOWN_COST", "allow")
    assert reserve(ledger, session_id="a", spec=_spec(max_usd=1.0), rate=None) is None
    monkeypatch.setenv("DESKCTL_UNKNOWN_COST", "sometimes")
    with pytest.raises(UsageError, match="sometimes"):
        reserve(ledger, session_id="a", spec=_spec(max_usd=1.0), rate=None)


def test_session_cap_below_the_minimum_charge(ledger: Ledger) -> None:
    hourly = Rate(usd_per_hour=2.0, granularity_seconds=3600, minimum_seconds=3600, source="t", date="d")
    with pytest.raises(BudgetExceeded, match="minimum charge"):
        reserve(ledger, session_id="a", spec=_spec(max_usd=1.0), rate=hourly)
    assert reserve(ledger, session_id="a", spec=_spec(max_usd=2.0), rate=hourly) is None


# -- the ad-hoc check and its summary ---------------------------------------------------------------------


def test_overall_status_counts_ended_and_projects_running(ledger: Ledger) -> None:
    now = 100_000.0
    _session(ledger, "dk-done", created_at=now - 7200)
    ledger.record_end("dk-done", status="ended", reason="closed", ended_at=now - 3600, billable_seconds=3600,
                      cost_usd=6.0)  # fmt: skip
    _session(ledger, "dk-run", created_at=now - 60, spec={"max_minutes": 30})  # projected: 30 min at $6/h
    _session(ledger, "dk-capped", created_at=now - 60, spec={"max_minutes": 30, "max_usd": 0.5})  # so far $0.10
    _session(ledger, "dk-ssh", created_at=now - 60, rate=None)
    _session(ledger, "dk-intent", created_at=None)
    _session(ledger, "dk-ancient", created_at=1000.0)
    ledger.record_end("dk-ancient", status="ended", reason="closed", ended_at=2000.0, billable_seconds=1000,
                      cost_usd=50.0)  # fmt: skip
    state = overall_status(ledger, max_usd=10.0, window_seconds=86400, now=now, unknown_cost="allow")
    assert (state.spent_usd, state.running_usd) == (pytest.approx(6.0), pytest.approx(3.5))
    assert (state.ended_sessions, state.running_sessions, state.unknown_sessions) == (1, 3, 1)
    assert not state.over
    assert overall_status(ledger, max_usd=9.0, window_seconds=86400, now=now, unknown_cost="allow").over
    assert overall_status(ledger, max_usd=10.0, window_seconds=86400, now=now).over  # refuse: unknown present


def test_markdown_summary_exact() -> None:
    state = BudgetStatus("ci", 5.0, 86400, 0.0, spent_usd=1.2, running_usd=0.4672, ended_sessions=3,
                         running_sessions=2, unknown_sessions=0)  # fmt: skip
    assert render_markdown(state) == (
        "### deskctl budget `ci`: ok\n"
        "\n"
        "| | USD |\n"
        "|---|---:|\n"
        "| cap (24h window) | $5.0000 |\n"
        "| spent (ended sessions) | $1.2000 |\n"
        "| running (projected) | $0.4672 |\n"
        "| total | $1.6672 |\n"
        "| left | $3.3328 |\n"
        "\n"
        "Sessions: 3 ended, 2 running, 0 of unknown cost.\n"
    )


# -- the proof under concurrency -------------------------------------------------------------------------

def _reserver(url: str, worker: int, results: Any, go: Any) -> None:
    """One job: try three reservations, report them, wait for every job to report, then settle each twice."""
    book = open_ledger(url)  # a forked child: its own connection (the parent's is never used here)
    spec = DesktopSpec.build(provider="xvfb", max_minutes=1, budget="shared")
    got, refused = [], 0
    for i in range(3):
        try:
            got.append(reserve(book, session_id=f"dk-{worker}-{i}", spec=spec, rate=SIX_PER_HOUR))
        except BudgetExceeded:
            refused += 1
    results.put({"got": got, "refused": refused})
    if not go.wait(120):
        raise SystemExit(3)
    for rid in got:
        settle(book, rid, cost_usd=0.05)
        settle(book, rid, cost_usd=0.05)
    book.close()


@pytest.mark.slow
def test_sixteen_processes_never_overspend_nor_double_count(ledger: Ledger, ledger_url: str) -> None:
    ledger.set_budget("shared", max_usd=1.0, window_seconds=86400)  # room for exactly ten $0.10 holds
    mp = multiprocessing.get_context("fork")  # real processes, without paying 16 interpreter start-ups
    results, go = mp.Queue(), mp.Event()
    procs = [mp.Process(target=_reserver, args=(ledger_url, w, results, go)) for w in range(16)]
    for p in procs:
        p.start()
    try:
        first = [results.get(timeout=120) for _ in procs]
        granted = [rid for doc in first for rid in doc["got"]]
        assert len(granted) == 10 and len(set(granted)) == 10
        assert sum(doc["refused"] for doc in first) == 16 * 3 - 10
        state = status(ledger, "shared")
        assert state.total_usd == pytest.approx(1.0) and state.total_usd <= 1.0 + 1e-9
        go.set()
        for p in procs:
            p.join(120)
    finally:
        go.set()
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * 16
    rows = ledger.reservations(budget="shared")
    assert len(rows) == 10 and all(r.status == "settled" and r.cost_usd == 0.05 for r in rows)
    state = status(ledger, "shared")
    assert state.spent_usd == pytest.approx(0.5) and state.running_usd == 0.0 and state.ended_sessions == 10


# -- the sums in SQL agree with the sessions counted one by one ----------------------------------------------------


def _mixed_ledger(book: Ledger, seed: int) -> float:
    """Sessions and reservations in every state, at random (seeded); returns the `now` to look at them from."""
    import random

    from deskctl.ledger import Reservation

    rng = random.Random(seed)
    now = 1_000_000.0
    book.set_budget("ci", max_usd=1e6, window_seconds=86400)
    book.set_budget("qa", max_usd=1e6, window_seconds=86400)
    for i in range(120):
        sid = f"dk-mix{i:03d}"
        intent = now - rng.uniform(0, 3 * 86400)
        created = None if rng.random() < 0.15 else intent + rng.uniform(0, 5)
        rate = None if rng.random() < 0.1 else rng.choice([0.0, 6.0, 0.2336])
        book.record_intent(SessionRecord(sid, rng.choice(["xvfb", "docker", "daytona"]), "ubuntu", "1024x768",
                                         "elsewhere:1", rng.random() < 0.3, "intent", intent,
                                         rate_usd_per_hour=rate, spec={"max_minutes": rng.choice([None, 5, 60])}))
        if created is not None:
            book.record_create_sent(sid, created)
        state = rng.choice(["intent", "ready", "destroying", "leaked", "ended", "ended", "ended", "failed"])
        if state == "ready" and created is not None:
            book.record_ready(sid, created + 1, 1024, 768)
        elif state == "destroying" and created is not None:
            book.record_destroying(sid, reason="closed", by="elsewhere:2")
        elif state in ("ended", "failed", "leaked"):
            ended = (created or intent) + rng.uniform(0, 7200)
            cost = None if rng.random() < 0.1 else rng.uniform(0, 2)
            billable = None if rng.random() < 0.2 else rng.uniform(0, 7200)
            book.record_end(sid, status=state, reason="t", ended_at=ended, billable_seconds=billable, cost_usd=cost)
        if rng.random() < 0.8:
            held = rng.random() < 0.3
            made = intent - 1
            with book.transaction() as tx:
                tx.insert_reservation(Reservation(
                    id=f"rsv-{i:03d}", budget=rng.choice(["ci", "qa"]), session_id=sid,
                    amount_usd=rng.uniform(0, 1), unknown=rng.random() < 0.1, created_at=made,
                    expires_at=made + rng.choice([60, 7200, 5 * 86400]), status="held" if held else "settled",
                    settled_at=None if held else made + 10, cost_usd=None if held or rng.random() < 0.1 else
                    rng.uniform(0, 2), owner="elsewhere:3",
                ))  # fmt: skip
    return now


def _one_by_one(book: Ledger, name: str, now: float, window: float) -> BudgetStatus:
    """The budget counted reservation by reservation, every one of the window loaded (the way before SQL sums)."""
    from deskctl.budget import _count_reservation

    result = BudgetStatus(name, 1e6, window, now)
    for r in book.reservations(budget=name):
        if r.created_at >= now - window or r.status == "held":
            _count_reservation(result, r, book.get(r.session_id), now, lambda owner: None)
    return result


@pytest.mark.parametrize("seed", [1, 2])
def test_budget_sums_in_sql_equal_counting_one_by_one(ledger: Ledger, seed: int) -> None:
    now = _mixed_ledger(ledger, seed)
    for name in ("ci", "qa"):
        for window in (3600.0, 86400.0, 10 * 86400.0):
            want = _one_by_one(ledger, name, now, window)
            got = status(ledger, name, now=now, window_seconds=window)
            assert (got.ended_sessions, got.running_sessions, got.unknown_sessions) == (
                want.ended_sessions, want.running_sessions, want.unknown_sessions)  # fmt: skip
            assert got.spent_usd == pytest.approx(want.spent_usd, abs=1e-9)
            assert got.running_usd == pytest.approx(want.running_usd, abs=1e-9)


@pytest.mark.parametrize("seed", [1, 2])
def test_overall_status_in_sql_equals_counting_one_by_one(ledger: Ledger, seed: int) -> None:
    from deskctl.budget import _add, _projected
    from deskctl.metering import session_cost

    now = _mixed_ledger(ledger, seed)
    for window in (3600.0, 86400.0, 10 * 86400.0):
        want = BudgetStatus(None, 5.0, window, now)
        for record in ledger.sessions(since=now - window):
            running = record.active and record.created_at is not None
            if not running and record.status == "intent":
                continue
            cost = _projected(record, now) if running else session_cost(record, now)
            _add(want, session_id=record.session_id, running=running, cost=cost, how="")
        got = overall_status(ledger, max_usd=5.0, window_seconds=window, now=now)
        assert (got.ended_sessions, got.running_sessions, got.unknown_sessions) == (
            want.ended_sessions, want.running_sessions, want.unknown_sessions)  # fmt: skip
        assert got.spent_usd == pytest.approx(want.spent_usd, abs=1e-9)
        assert got.running_usd == pytest.approx(want.running_usd, abs=1e-9)
        assert len(got.rows) == got.running_sessions + sum(1 for r in got.rows if not r["running"])


@pytest.mark.parametrize("seed", [1, 2])
def test_ended_totals_equal_summing_one_by_one(ledger: Ledger, seed: int) -> None:
    from datetime import UTC, datetime

    from deskctl.metering import session_cost

    now = _mixed_ledger(ledger, seed)
    budgets = {r.session_id: r.budget for r in ledger.reservations()}
    for by in ("provider", "day", "budget", None):
        for since in (None, now - 3600, now - 86400):
            want: dict[str, list[float]] = {}
            for record in ledger.sessions(active=False, since=since):
                key = {"provider": record.provider, None: "", "budget": budgets.get(record.session_id, "-"),
                       "day": datetime.fromtimestamp(record.intent_at, UTC).strftime("%Y-%m-%d")}[by]
                row = want.setdefault(key, [0, 0.0, 0.0, 0])
                cost = session_cost(record, now)
                row[0] += 1
                row[1] += record.elapsed_billable(now)
                row[2] += cost or 0.0
                row[3] += cost is None
            got = ledger.ended_totals(since=since, by=by, now=now)
            assert sorted(got) == sorted(want)
            for key, (count, billable, cost, unknown) in want.items():
                assert (got[key].sessions, got[key].unknown_sessions) == (count, unknown)
                assert got[key].billable_seconds == pytest.approx(billable)
                assert got[key].cost_usd == pytest.approx(cost, abs=1e-9)


def test_an_expired_hold_is_released_at_the_next_reservation(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=10.0, window_seconds=86400)
    spec = _spec(max_minutes=1, budget="ci")
    reserve(ledger, session_id="dk-died", spec=spec, rate=SIX_PER_HOUR, now=1000.0)  # its process died: never created
    later = 1000.0 + 60 + RESERVATION_GRACE_SECONDS + 1
    before = status(ledger, "ci", now=later)
    reserve(ledger, session_id="dk-next", spec=spec, rate=SIX_PER_HOUR, now=later)
    [released] = ledger.reservations(session_id="dk-died")
    assert (released.status, released.cost_usd, released.settled_at) == ("settled", 0.0, later)
    after = status(ledger, "ci", now=later)
    assert after.spent_usd == before.spent_usd == 0.0 and after.ended_sessions == before.ended_sessions == 1
    assert [r["session_id"] for r in after.rows] == ["dk-next"]  # no longer looked at one by one


def test_a_dead_owners_hold_is_released_at_the_next_reservation_before_it_expires(ledger: Ledger) -> None:
    ledger.set_budget("ci", max_usd=13.0, window_seconds=86400)
    now = time.time()
    spec = _spec(max_minutes=60, budget="ci")
    rid = reserve(ledger, session_id="dk-dead", spec=spec, rate=SIX_PER_HOUR, now=now)
    with ledger.transaction() as tx:  # its process died before creating anything
        tx.run("UPDATE reservations SET owner = ? WHERE id = ?", (f"{os.uname().nodename}:999999999", rid))
    live = reserve(ledger, session_id="dk-live", spec=spec, rate=SIX_PER_HOUR, now=now + 1)  # this process: alive
    reserve(ledger, session_id="dk-next", spec=spec, rate=SIX_PER_HOUR, now=now + 2)
    by_id = {r.id: r for r in ledger.reservations(budget="ci")}
    assert (by_id[rid].status, by_id[rid].cost_usd, by_id[rid].settled_at) == ("settled", 0.0, now + 1)
    assert by_id[live].status == "held"
