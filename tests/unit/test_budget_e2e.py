"""End to end, on both ledger backends: parallel `deskctl up` runs of real xvfb desktops against one budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.ledger import open_ledger


def _deskctl(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deskctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **env})  # fmt: skip


@pytest.mark.slow
def test_parallel_ups_against_one_budget(ledger_url: str, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "*", "size": "*", "usd_per_hour": 6,
                                             "source": "test: a priced xvfb", "date": "2026-11-29"}]}))
    env = {"DESKCTL_LEDGER_URL": ledger_url, "DESKCTL_PRICES": str(prices), "DESKCTL_BUDGET": "ci"}
    setup = _deskctl("budget", "set", "ci", "--max-usd", "0.2", "--window", "24h", env=env)
    assert setup.wait(60) == 0, setup.communicate()
    ups = [_deskctl("up", "--geometry", "320x240", "--max-minutes", "1", env=env) for _ in range(4)]  # $0.10 each
    outcomes = [(p.wait(120), *p.communicate()) for p in ups]
    started = [out.strip() for code, out, _ in outcomes if code == 0]
    try:
        assert sorted(code for code, _, _ in outcomes) == [0, 0, 4, 4], outcomes
        for code, _, err in outcomes:
            if code == 4:
                assert "budget 'ci': this session's projected $0.1000 (1 min of xvfb) does not fit" in err
        with open_ledger(ledger_url) as book:
            assert sorted(s.session_id for s in book.sessions()) == sorted(started)  # refused: never recorded
            assert sorted(r.session_id for r in book.reservations(budget="ci")) == sorted(started)
        check = _deskctl("budget", "check", "ci", env=env)
        out, _ = check.communicate(timeout=60)
        assert check.returncode == 0 and "| running (projected) | $0.2000 |" in out and "| left | $0.0000 |" in out
    finally:
        downs = [_deskctl("down", sid, env=env) for sid in started]
        failed = [p.communicate(timeout=120) for p in downs if p.wait(120) != 0]
        if failed:  # leave nothing behind, then say why
            _deskctl("down", "--all", env=env).communicate(timeout=120)
    assert not failed, failed
    with open_ledger(ledger_url) as book:
        held = book.reservations(budget="ci")
        assert [r.status for r in held] == ["settled", "settled"]
        assert all(r.cost_usd is not None and r.cost_usd < 0.1 for r in held)  # a few seconds, not the hold
        assert all(s.status == "ended" for s in book.sessions())
