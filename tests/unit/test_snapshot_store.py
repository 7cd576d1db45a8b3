"""The ledger's snapshots table on both backends (SQLite, PostgreSQL): rows, lookups by name, expiry, restores."""

from __future__ import annotations

from deskctl.episodes.store import Snapshot, find, get, insert, list_snapshots, record_restore, set_status
from deskctl.ledger import open_ledger


def test_snapshot_rows_round_trip(ledger_url: str) -> None:
    with open_ledger(ledger_url) as book:
        for i, name in enumerate(("a", "a", "b")):
            insert(book, Snapshot(snapshot_id=f"sn-{i}", name=name, session_id="dk-1", provider="docker",
                                  owner="host:1", created_at=100.0 + i, expires_at=200.0 + 100 * i,
                                  size_bytes=2**40, data={"relaunch": [{"title": "t", "argv": ["x", "-y"]}]}))
        assert find(book, "a") is not None and find(book, "a").snapshot_id == "sn-1"  # type: ignore[union-attr]
        assert find(book, "sn-0") is not None  # by id too
        record_restore(book, "sn-2")
        record_restore(book, "sn-2")
        b = get(book, "sn-2")
        assert b is not None and b.restores == 2 and b.size_bytes == 2**40
        assert b.data["relaunch"][0]["argv"] == ["x", "-y"]
        assert [s.snapshot_id for s in list_snapshots(book, expired_before=250.0)] == ["sn-0"]
        set_status(book, "sn-1", "deleted", at=150.0, cost_usd=0.0)
        assert find(book, "a") is not None and find(book, "a").snapshot_id == "sn-0"  # type: ignore[union-attr]
        assert [s.snapshot_id for s in list_snapshots(book)] == ["sn-0", "sn-2"]
        assert len(list_snapshots(book, include_deleted=True)) == 3
        assert list_snapshots(book, session_id="dk-2") == []
