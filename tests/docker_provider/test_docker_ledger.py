"""The reaper and `deskctl down` against the ledger, on a real Docker engine shared with other users.

* `deskctl reap` touches only desktops of its own ledger: a container that is not deskctl's, and a deskctl
  desktop of another DESKCTL_HOME (a leftover by every rule: expired, its owner dead), both survive it;
  `--everything` is the opt-in that takes the latter.
* A `deskctl down` killed by SIGKILL after its destroy and before its end record leaves `destroying`, never
  `ready`, and `deskctl reap` finishes it. The kill lands at an observed point: the test holds the SQLite write
  lock once the row says `destroying`, sees the container gone while `down` still runs, and kills it there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from deskctl.ledger import SessionRecord, open_ledger
from deskctl.providers.base import LABEL_EXPIRES, LABEL_OWNER, LABEL_SESSION, RemoteHandle
from deskctl.providers.docker import DockerProvider
from deskctl.spec import DesktopSpec
from docker_provider._docker_target import docker_leftovers

pytestmark = pytest.mark.docker

BASE = os.environ.get("DESKCTL_TEST_DOCKER_BASE", "deskctl-base:bookworm")


def _deskctl(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deskctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})  # fmt: skip


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = _deskctl(*args, env=env)
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def _running(sdk: Any, container: str) -> bool:
    import docker.errors

    try:
        return bool(sdk.api.inspect_container(container)["State"]["Running"])
    except docker.errors.NotFound:
        return False


def _intent(url: str | None, session_id: str, owner: str) -> None:
    """What deskctl writes before it creates a desktop (a session whose owner then died)."""
    with open_ledger(url) as book:
        book.record_intent(SessionRecord(session_id, "docker", "ubuntu", "640x480", owner, False, "intent",
                                         time.time() - 120, spec={"provider": "docker"}))  # fmt: skip
        book.record_create_sent(session_id, time.time() - 120)


def test_reap_touches_only_the_desktops_of_its_own_ledger(docker_sdk: Any, request: pytest.FixtureRequest,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)  # fmt: skip
    dead_owner = f"{socket.gethostname()}:{int(finished.stdout)}"
    suffix = os.urandom(3).hex()
    ours_id, foreign_id = f"dk-ours{suffix}", f"dk-away{suffix}"
    expired = {LABEL_EXPIRES: str(int(time.time()) - 60), LABEL_OWNER: dead_owner}
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    provider = DockerProvider({"reaper": False})  # as if each owner's watcher had died with it
    _intent(None, ours_id, dead_owner)
    ours = provider.create(spec, ours_id, {LABEL_SESSION: ours_id, **expired})
    # short: the desktop's X socket lives under it (a unix socket path holds 107 bytes; xdist's tmp_path is long)
    other_home = Path(tempfile.mkdtemp(prefix="dk-home-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(other_home, ignore_errors=True))
    with monkeypatch.context() as other:  # another DESKCTL_HOME on the same engine, with its own ledger
        other.setenv("DESKCTL_HOME", str(other_home))
        _intent(None, foreign_id, dead_owner)
        foreign = provider.create(spec, foreign_id, {LABEL_SESSION: foreign_id, **expired})
    plain = docker_sdk.api.create_container(BASE, command=["sleep", "600"], labels={"purpose": "not deskctl"})
    docker_sdk.api.start(plain["Id"])
    try:
        code, out, err = _run("reap", "--provider", "docker", "--dry-run", "--json")
        assert code == 0, err
        planned = {r["session_id"]: r["action"] for r in json.loads(out)["reaped"]}
        assert planned.get(ours_id) == "would_destroy"
        assert foreign_id not in planned

        code, out, err = _run("reap", "--provider", "docker", "--json")
        assert code == 0, err
        done = {r["session_id"]: (r["action"], r["reason"]) for r in json.loads(out)["reaped"]}
        assert done == {ours_id: ("destroyed", "expired")}
        assert docker_leftovers(ours) == []
        assert _running(docker_sdk, foreign.resource_id) and _running(docker_sdk, plain["Id"])
        with open_ledger() as book:
            record = book.get(ours_id)
        assert record is not None and record.status == "ended"

        # the documented opt-in: leftovers of any ledger (dry run: the engine is shared with other users' tests)
        code, out, err = _run("reap", "--provider", "docker", "--everything", "--dry-run", "--json")
        assert code == 0, err
        wider = {r["session_id"]: (r["action"], r["reason"]) for r in json.loads(out)["reaped"]}
        assert wider.get(foreign_id) == ("would_destroy", "expired")
        assert ours_id not in wider and _running(docker_sdk, foreign.resource_id)
        assert not [r for r in json.loads(out)["reaped"] if r["resource_id"] == plain["Id"]]
    finally:
        provider.destroy(ours)
        provider.destroy(foreign)
        provider.close()
        with contextlib.suppress(Exception):
            docker_sdk.api.remove_container(plain["Id"], force=True)
    assert docker_leftovers(foreign) == []


def test_down_killed_after_its_destroy_leaves_destroying_and_reap_finishes(docker_sdk: Any,
                                                                          deskctl_home: Path) -> None:  # fmt: skip
    code, out, err = _run("up", "--provider", "docker", "--geometry", "640x480", "--ttl", "10m")
    assert code == 0, err
    sid = out.strip()
    with open_ledger() as book:
        record = book.get(sid)
    assert record is not None and record.handle is not None
    handle = RemoteHandle.from_dict(record.handle)
    try:
        reader = sqlite3.connect(deskctl_home / "ledger.sqlite3", timeout=60, isolation_level=None)

        def status() -> str:
            return str(reader.execute("SELECT status FROM sessions WHERE session_id = ?", (sid,)).fetchone()[0])

        down = _deskctl("down", sid)
        try:
            while status() == "ready" and down.poll() is None:
                time.sleep(0.002)
            reader.execute("BEGIN IMMEDIATE")  # the write lock: the end record now waits for us
            try:
                assert status() == "destroying", "the end was recorded before the test could hold the lock"
                deadline = time.monotonic() + 60
                while _running(docker_sdk, handle.resource_id) or docker_leftovers(handle)[:1]:
                    assert time.monotonic() < deadline, "the container is still there a minute later"
                    assert down.poll() is None, down.communicate()
                    time.sleep(0.02)
                assert down.poll() is None  # destroyed, and its end not written: kill it here
                down.send_signal(signal.SIGKILL)
                assert down.wait(60) == -signal.SIGKILL
            finally:
                reader.execute("ROLLBACK")
        finally:
            if down.poll() is None:
                down.kill()
                down.wait()
        assert status() == "destroying"  # not `ready`: the ledger does not claim a desktop that is gone
        reader.close()

        code, out, err = _run("reap", "--provider", "docker", "--json")
        assert code == 0, err
        assert [(r["session_id"], r["action"], r["reason"]) for r in json.loads(out)["reaped"]] == [
            (sid, "destroyed", "an earlier destroy was not recorded")
        ]
        with open_ledger() as book:
            record = book.get(sid)
        assert record is not None and record.status == "ended"
        assert record.reason == "reaped: an earlier destroy was not recorded"
    finally:
        DockerProvider().destroy(handle)
    assert docker_leftovers(handle) == []
