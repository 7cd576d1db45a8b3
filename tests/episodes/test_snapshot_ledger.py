"""The ledger's snapshots table (schema 6) and the window listing a Docker snapshot relaunches from."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from deskctl.episodes._docker import parse_windows
from deskctl.episodes.store import Snapshot, find, get, insert, list_snapshots, record_restore, set_status
from deskctl.ledger import SCHEMA_VERSION, open_ledger


def test_schema_6_adds_snapshots_to_a_version_5_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with open_ledger(f"sqlite:///{path}") as book:
        assert book.schema_version() == SCHEMA_VERSION >= 6
    conn = sqlite3.connect(path)  # back to version 5, as a ledger of the previous deskctl is
    conn.execute("DROP TABLE snapshots")
    conn.execute("UPDATE schema_version SET version = 5")
    conn.commit()
    conn.close()
    with open_ledger(f"sqlite:///{path}") as book:
        assert book.schema_version() == SCHEMA_VERSION
        insert(book, Snapshot(snapshot_id="sn-1", name="start", session_id="dk-1", provider="docker",
                              owner="host:1", created_at=100.0, expires_at=200.0, size_bytes=10,
                              usd_per_gb_month=0.05, data={"image": "x"}))
        record_restore(book, "sn-1")
        snap = find(book, "start")
        assert snap is not None and snap.restores == 1 and snap.data == {"image": "x"}
        assert [s.snapshot_id for s in list_snapshots(book, expired_before=150.0)] == []
        assert [s.snapshot_id for s in list_snapshots(book, expired_before=250.0)] == ["sn-1"]
        set_status(book, "sn-1", "deleted", at=100.0 + 30 * 86400, cost_usd=None)
        gone = get(book, "sn-1")
        assert gone is not None and gone.status == "deleted" and find(book, "start") is None
        # a month of 10 bytes at $0.05 per GB-month
        assert abs((gone.storage_cost() or 0) - 0.05 * 10 / 1e9) < 1e-15


def test_windows_with_wm_command_or_pid_are_relaunched_once() -> None:
    keep = 'WM_COMMAND(STRING) = { "xmessage", "-title", "keep me", "say \\"hi\\"" }'
    output = "\n".join([
        "W 1", 'WM_NAME(STRING) = "keep me"', keep,
        "_NET_WM_PID:  not found.",
        "W 2", 'WM_NAME(UTF8_STRING) = "term"', "WM_COMMAND:  not found.", "_NET_WM_PID(CARDINAL) = 42",
        "P /usr/bin/xterm\x1f-T\x1fterm\x1f",
        "W 3", 'WM_NAME(STRING) = "keep me"', keep,
        "W 4", "WM_NAME:  not found.", 'WM_COMMAND(STRING) = { "nameless" }',
    ])
    assert parse_windows(output) == [
        {"title": "keep me", "argv": ["xmessage", "-title", "keep me", 'say "hi"']},
        {"title": "term", "argv": ["/usr/bin/xterm", "-T", "term"]},
    ]
