"""The reaper on real xvfb desktops: what it takes, and what it must leave alone."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def test_expiry_exactly_now_is_not_yet_expired() -> None:
    from deskctl.providers.base import LABEL_EXPIRES

    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True, ttl="1h")
    assert desk.handle is not None
    at = float(desk.handle.labels[LABEL_EXPIRES])  # what the reaper reads first (the ledger's, rounded up)
    desk.release()
    try:
        with open_ledger() as book:
            assert reap(book, providers=["xvfb"], dry_run=True, now=at) == []
            planned = reap(book, providers=["xvfb"], dry_run=True, now=at + 0.001)
            assert [(r.session_id, r.action, r.reason) for r in planned] == [(desk.id, "would_destroy", "expired")]
    finally:
        deskctl.attach(desk.id).close()


_OWNER_ELSEWHERE = r"""
import json, socket, sys
import deskctl
with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
    print(json.dumps({"id": desk.id, "host": socket.gethostname()}), flush=True)
    sys.stdin.read()
"""


def test_a_session_whose_owner_is_on_another_host_is_not_reaped_as_dead(tmp_path: Path) -> None:
    """A shared ledger (PostgreSQL) holds sessions of other machines: an owner there cannot be looked at from
    here, so "owner died" never applies to it (only its expiry does). The owner is a real process whose host name
    is another one (its own UTS namespace), holding a real desktop."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a process with another host name)")
    elsewhere = f"{socket.gethostname()[:40]}-elsewhere"
    owner = subprocess.Popen(
        ["unshare", "--uts", "sh", "-c", 'hostname "$1" && exec "$2" -c "$3"', "owner", elsewhere, sys.executable,
         _OWNER_ELSEWHERE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert owner.stdin is not None and owner.stdout is not None
    try:
        opened = json.loads(owner.stdout.readline() or "{}")
        assert opened.get("host") == elsewhere, owner.stderr.read() if owner.stderr else ""
        with open_ledger() as book:
            record = book.get(opened["id"])
            assert record is not None and record.owner is not None
            assert record.owner.startswith(f"{elsewhere}:") and not record.detached
            results = reap(book, providers=["xvfb"])
            assert [r for r in results if r.session_id == opened["id"] and r.action != "skipped"] == []
        assert opened["id"] in {h.session_id for h in XvfbProvider().list_owned()}
    finally:
        owner.stdin.close()
        owner.wait(timeout=120)
    assert opened["id"] not in {h.session_id for h in XvfbProvider().list_owned()}
