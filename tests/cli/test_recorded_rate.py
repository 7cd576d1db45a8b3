"""An attached session (``deskctl down`` of a desktop ``deskctl up`` made) bills at the rate recorded when its
desktop was made, not at whatever the price catalog says when it ends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _cli import deskctl
from deskctl.ledger import open_ledger


def _prices(path: Path, usd_per_hour: float) -> None:
    path.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "*", "size": "*",
                                           "usd_per_hour": usd_per_hour, "source": "test", "date": "2026-12-01"}]}))


@pytest.mark.parametrize("later", [600.0, None], ids=["repriced", "dropped-from-catalog"])
def test_down_bills_at_the_rate_recorded_at_up(tmp_path: Path, later: float | None) -> None:
    prices = tmp_path / "prices.json"
    _prices(prices, 6.0)
    env = {"DESKCTL_PRICES": str(prices)}
    session_id = deskctl("up", "--geometry", "320x240", env=env, check=True).stdout.strip()
    try:
        if later is None:
            prices.write_text(json.dumps({"rates": []}))
        else:
            _prices(prices, later)
    finally:
        deskctl("down", session_id, env=env, check=True)
    with open_ledger() as book:
        record = book.get(session_id)
    assert record is not None and record.status == "ended"
    assert record.rate_usd_per_hour == 6.0
    assert record.billable_seconds is not None and record.billable_seconds > 0
    assert record.cost_usd == pytest.approx(6.0 * record.billable_seconds / 3600.0, rel=1e-6)
