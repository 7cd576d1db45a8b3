"""The ledger never says `ready` for a desktop that is gone: through the real `deskctl` entry point, on real Xvfb
desktops, with the desktop killed behind the ledger's back and with the ledger on a real full file system."""

from __future__ import annotations

import contextlib
import errno
import json
import sqlite3
import uuid
from pathlib import Path

from _cli import deskctl
from _small_disk import small_disk
from deskctl.ledger import open_ledger
from deskctl.providers.base import RemoteHandle
from deskctl.providers.xvfb import XvfbProvider


def _up(env: dict[str, str] | None = None) -> str:
    up = deskctl("up", "--geometry", "320x240", "--ttl", "10m", env=env)
    assert up.returncode == 0, up.stderr
    return up.stdout.strip()


def _status(session_id: str, url: str | None = None) -> str:
    with open_ledger(url) as book:
        record = book.get(session_id)
    assert record is not None
    return record.status


def _kill_from_outside(session_id: str) -> RemoteHandle:
    """End the desktop without telling the ledger (as an OOM killer or a reboot would)."""
    with open_ledger() as book:
        record = book.get(session_id)
    assert record is not None and record.handle is not None
    handle = RemoteHandle.from_dict(record.handle)
    provider = XvfbProvider()
    provider.destroy(handle)
    assert not provider.is_alive(handle)
    return handle


def test_an_action_on_a_detached_desktop_that_died_records_it_failed() -> None:
    sid = _up()
    _kill_from_outside(sid)
    assert _status(sid) == "ready"  # the ledger does not know yet
    lost = deskctl("do", sid, "click", "5", "5")
    assert lost.returncode == 20, lost.stderr
    assert "(provider.session_lost)" in lost.stderr
    assert _status(sid) == "failed"
    assert deskctl("ls", "--json").stdout.count(sid) == 0


def test_reap_records_a_ready_session_whose_desktop_is_gone_as_failed() -> None:
    sid = _up()
    live = _up()
    try:
        _kill_from_outside(sid)
        planned = json.loads(deskctl("reap", "--provider", "xvfb", "--dry-run", "--json").stdout)["reaped"]
        assert [(r["session_id"], r["action"], r["reason"]) for r in planned] == [
            (sid, "would_destroy", "the desktop is gone")
        ]
        assert _status(sid) == "ready"
        done = deskctl("reap", "--provider", "xvfb")
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{sid}\txvfb\tdestroyed\tthe desktop is gone\n"
        with open_ledger() as book:
            record = book.get(sid)
        assert record is not None and record.status == "failed"
        assert record.reason == "reaped: the desktop is gone"
        assert _status(live) == "ready"  # a live detached desktop is left alone
    finally:
        deskctl("down", live)


def _fill(directory: Path) -> Path:
    """Write a file until the file system says it is full."""
    filler = directory / f"filler-{uuid.uuid4().hex}"
    block = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        while True:
            try:
                fh.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    while True:  # and the last few bytes
        try:
            with open(filler, "ab", buffering=0) as fh:
                fh.write(b"\0" * 512)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            return filler


def test_down_on_a_full_ledger_disk_leaves_the_desktop_up_and_the_ledger_true(tmp_path: Path) -> None:
    with small_disk(tmp_path / "small-fs", "4m", "0700") as small:
        path = small / "ledger.sqlite3"
        env = {"DESKCTL_LEDGER_URL": f"sqlite://{path}"}
        sid = _up(env)
        with open_ledger(f"sqlite://{path}") as book:
            record = book.get(sid)
        assert record is not None and record.handle is not None
        handle = RemoteHandle.from_dict(record.handle)
        try:
            # An open connection keeps the -wal and -shm files (the last one to close would delete them, and then
            # not even an open could succeed). The log is folded into the file and emptied: the next write must grow
            # it, on a full disk.
            with contextlib.closing(sqlite3.connect(path)) as conn:
                assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
                filler = _fill(small)
                try:
                    down = deskctl("down", sid, "--json", env=env)
                    assert down.returncode == 20, down.stderr
                    error = json.loads(down.stdout)["error"]
                    assert error["code"] == "ledger.unavailable"
                    assert "failed while writing" in error["message"]  # the open went through, the write did not
                    # nothing was destroyed that the ledger could not record: it still says ready, and it is
                    assert XvfbProvider().is_alive(handle)
                    [(status,)] = conn.execute("SELECT status FROM sessions WHERE session_id = ?", (sid,)).fetchall()
                    assert status == "ready"
                finally:
                    filler.unlink()
            down = deskctl("down", sid, env=env)
            assert down.returncode == 0, down.stderr
            assert not XvfbProvider().is_alive(handle)
            assert _status(sid, f"sqlite://{path}") == "ended"
        finally:  # a failed assertion must not leave the desktop up
            XvfbProvider().destroy(handle)
