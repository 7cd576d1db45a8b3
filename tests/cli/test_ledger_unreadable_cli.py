"""A ledger that cannot be read (a garbled file): every command says how to move it aside, `deskctl reap` still
finds and destroys this ledger's desktops by label, and `deskctl ledger check [--repair]` reports and repairs it.
All through the real `deskctl` process, on real Xvfb and Docker desktops."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl
from _docker import docker_sdk
from _procs import alive, wait_until

# A library user whose desktop outlives it: its own watchers are off, so only the reaper can end it.
_OWNER = r"""
import json, sys, time
import deskctl
provider = sys.argv[1]
options = {"owner_watch": False} if provider == "xvfb" else {"reaper": False}
desk = deskctl.open_desktop(provider, geometry="320x240", provider_options=options, preflight=False)
print(json.dumps({"id": desk.id, "handle": desk.handle.to_dict()}), flush=True)
time.sleep(3600)
"""


def _leave_a_desktop(provider: str) -> dict[str, object]:
    """A desktop whose owner process was SIGKILLed: a leftover only the reaper can destroy."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, provider], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    assert owner.stdout is not None
    line = owner.stdout.readline()
    owner.kill()
    _, err = owner.communicate(timeout=60)
    assert line, err
    made: dict[str, object] = json.loads(line)
    return made


def _garble(path: Path) -> None:
    """Overwrite the headers of the file and of its WAL (a WAL may hold a good copy of the first page)."""
    for name in (path, Path(f"{path}-wal")):
        if name.exists():
            with open(name, "r+b") as fh:  # the test process holds no connection to it
                fh.write(b"this is no SQLite header at all, it was garbled by hand" * 4)


def _ledger_file(home: Path) -> Path:
    return home / "ledger.sqlite3"


def test_every_command_says_how_to_move_a_garbled_ledger_aside(deskctl_home: Path) -> None:
    assert deskctl("ls").returncode == 0
    _garble(_ledger_file(deskctl_home))
    path = str(_ledger_file(deskctl_home))
    for args in (["ls"], ["cost"], ["budget", "show"], ["down", "dk-nope"], ["do", "dk-nope", "click", "1", "1"],
                 ["up", "--provider", "xvfb", "--geometry", "320x240"]):
        proc = deskctl(*args, "--json")
        assert proc.returncode == 20, (args, proc.stdout, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "ledger.unavailable", args
        assert path in error["remedy"] and "deskctl ledger check --repair" in error["remedy"], args
        assert f"mv {path}" in error["remedy"], args
        assert "Traceback" not in proc.stderr
    # the command in the remedy works as given
    remedy = json.loads(deskctl("ls", "--json").stdout)["error"]["remedy"]
    command = remedy.split("by hand: ", 1)[1].split(" (`deskctl reap", 1)[0]
    subprocess.run(["sh", "-c", command], check=True)
    assert Path(path + ".bad").exists() and not Path(path).exists()
    assert deskctl("ls").returncode == 0


def test_reap_destroys_this_ledgers_xvfb_desktops_without_a_readable_ledger(deskctl_home: Path) -> None:
    made = _leave_a_desktop("xvfb")
    handle = made["handle"]
    assert isinstance(handle, dict)
    pids = [int(p["pid"]) for p in handle["data"]["procs"]]
    assert pids and all(alive(p) for p in pids)
    _garble(_ledger_file(deskctl_home))
    try:
        listed = deskctl("reap", "--provider", "xvfb", "--everything", "--dry-run", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["ledger"] == "unreadable"
        assert "deskctl ledger check --repair" in listed.stderr
        assert all(alive(p) for p in pids)
        done = deskctl("reap", "--provider", "xvfb", "--everything", "--json")
        assert done.returncode == 0, done.stderr
        reaped = json.loads(done.stdout)["reaped"]
        assert [(r["session_id"], r["action"]) for r in reaped] == [(made["id"], "destroyed")]
        wait_until(lambda: not any(alive(p) for p in pids), "the reaped Xvfb to exit")
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.docker
def test_reap_destroys_this_ledgers_docker_desktop_by_its_ledger_label(deskctl_home: Path, docker_sdk: Any) -> None:
    import docker.errors

    made = _leave_a_desktop("docker")
    handle = made["handle"]
    assert isinstance(handle, dict)
    container = str(handle["resource_id"])
    try:
        assert docker_sdk.containers.get(container).status == "running"
        _garble(_ledger_file(deskctl_home))
        # without --everything: only this ledger's desktops (its deskctl.ledger label), never another's
        done = deskctl("reap", "--provider", "docker", "--json")
        assert done.returncode == 0, done.stderr
        reaped = json.loads(done.stdout)["reaped"]
        assert [(r["session_id"], r["action"]) for r in reaped] == [(made["id"], "destroyed")]
        with pytest.raises(docker.errors.NotFound):
            docker_sdk.containers.get(container)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            docker_sdk.api.remove_container(container, force=True)


def test_ledger_check_reports_and_repair_keeps_the_readable_rows(deskctl_home: Path) -> None:
    from deskctl.ledger import SessionRecord, open_ledger

    with open_ledger() as book:
        for i in range(300):
            book.record_intent(SessionRecord(f"dk-{i:04d}-" + "x" * 200, "xvfb", "ubuntu", "1x1", "h:1", False,
                                             "intent", time.time()))  # fmt: skip
    good = deskctl("ledger", "check", "--json")
    assert good.returncode == 0, good.stderr
    report = json.loads(good.stdout)
    assert report["ok"] is True and report["rows"]["sessions"] == 300
    assert {f["name"]: f["status"] for f in report["findings"]}["integrity"] == "ok"

    path = _ledger_file(deskctl_home)
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # garble pages in the middle, keep the header and the first pages
        fh.seek(size // 2)
        fh.write(os.urandom(8192))
    bad = deskctl("ledger", "check", "--json")
    assert bad.returncode == 20
    assert json.loads(bad.stdout)["ok"] is False
    plain = deskctl("ledger", "check")
    assert plain.returncode == 20 and "fail" in plain.stdout and str(path) in plain.stderr

    fixed = deskctl("ledger", "check", "--repair", "--json")
    assert fixed.returncode == 0, fixed.stderr
    repair = json.loads(fixed.stdout)["repair"]
    aside = [Path(p) for p in repair["moved_aside"]]
    assert aside and aside[0].name.startswith("ledger.sqlite3.bad-") and aside[0].exists()
    assert repair["after"]["ok"] is True
    assert 0 < repair["copied"].get("sessions", 0) <= 300
    after = json.loads(deskctl("ledger", "check", "--json").stdout)
    assert after["ok"] is True and after["rows"]["sessions"] == repair["copied"]["sessions"]
    assert deskctl("ls", "--all").returncode == 0


def test_repair_is_refused_while_another_process_has_the_file_open(deskctl_home: Path) -> None:
    assert deskctl("ls").returncode == 0
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); "
                               "c.execute('SELECT 1 FROM sqlite_master').fetchall(); print('open', flush=True); "
                               "time.sleep(3600)", str(_ledger_file(deskctl_home))],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        _garble(_ledger_file(deskctl_home))
        proc = deskctl("ledger", "check", "--repair", "--json")
        assert proc.returncode == 20
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "ledger.unavailable" and str(holder.pid) in error["message"]
        assert _ledger_file(deskctl_home).exists()  # nothing moved
    finally:
        holder.kill()
        holder.wait()


__all__ = ["docker_sdk"]  # the fixture, registered for this module
