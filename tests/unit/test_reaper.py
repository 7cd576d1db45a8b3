"""The reaper on real xvfb desktops: what it takes, and what it must leave alone."""

from __future__ import annotations

import time

import deskctl
from deskctl.ledger import open_ledger
from deskctl.providers.xvfb import XvfbProvider
from deskctl.reaper import reap


def test_a_leaked_session_is_destroyed_by_reap_and_a_live_detached_one_is_left_alone() -> None:
    leaked = deskctl.open_desktop("xvfb", geometry="320x240", detached=True)
    leaked.release()
    live = deskctl.open_desktop("xvfb", geometry="320x240", detached=True)
    live.release()
    try:
        with open_ledger() as book:
            # as if `deskctl down` had failed to confirm the destroy
            book.record_end(leaked.id, status="leaked", reason="cleanup.incomplete", ended_at=time.time(),
                            billable_seconds=None, cost_usd=None)
            results = reap(book, providers=["xvfb"])
            assert [(r.session_id, r.action) for r in results] == [(leaked.id, "destroyed")]
            assert results[0].reason == "an earlier destroy could not be confirmed"
            record = book.get(leaked.id)
            assert record is not None and record.status == "ended" and record.reason is not None
            assert record.reason.startswith("reaped:")
        alive = {h.session_id for h in XvfbProvider().list_owned()}
        assert live.id in alive and leaked.id not in alive
    finally:
        deskctl.attach(live.id).close()


def test_an_expired_detached_session_is_reaped_and_dry_run_touches_nothing() -> None:
    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True, ttl="1h")
    desk.release()
    later = time.time() + 7200
    with open_ledger() as book:
        planned = reap(book, providers=["xvfb"], dry_run=True, now=later)
        assert [(r.session_id, r.action, r.reason) for r in planned] == [(desk.id, "would_destroy", "expired")]
        assert desk.id in {h.session_id for h in XvfbProvider().list_owned()}
        done = reap(book, providers=["xvfb"], now=later)
        assert [(r.session_id, r.action) for r in done] == [(desk.id, "destroyed")]
    assert desk.id not in {h.session_id for h in XvfbProvider().list_owned()}
