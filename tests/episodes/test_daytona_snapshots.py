"""Snapshot and restore on Daytona, through the library and the CLI, over real HTTP to the loopback fake
(tests/fakes/daytona/snapshots.py; docs/episodes.md). Everything counted is this test's own fake's."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import deskctl
from daytona._daytona_target import FAST_OPTIONS
from deskctl.episodes import delete_snapshot, reap_snapshots
from deskctl.episodes.store import list_snapshots
from deskctl.errors import DeskctlError
from deskctl.ledger import open_ledger
from deskctl.providers.daytona import DaytonaProvider
from fakes._cloud import cloud_fixtures, run_deskctl
from fakes.daytona import FakeDaytona

fake, daytona_env, provider = cloud_fixtures(FakeDaytona, DaytonaProvider, FAST_OPTIONS, env="daytona_env")

pytestmark = pytest.mark.timeout(300)


def _open(platform: str = "ubuntu", **kwargs: Any) -> deskctl.Desktop:
    return deskctl.open_desktop("daytona", platform=platform, geometry="1024x768",
                                provider_options=dict(FAST_OPTIONS), **kwargs)


def _of_session(fake: FakeDaytona, session_id: str) -> list[dict[str, Any]]:
    return [s for s in fake.live() if s["name"] == session_id]


def _folders_left(fake: FakeDaytona) -> list[str]:
    return [p for p in [*fake.roots.values(), *fake.snapshot_roots.values()] if os.path.exists(p)]


def test_restore_brings_back_files_and_drops_later_changes(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    with _open() as desk:
        assert desk.exec("echo kept > kept.txt").exit_code == 0
        snap = desk.snapshot("start")
        assert snap.status == "ready" and snap.size_bytes is not None and snap.size_bytes > 0
        assert snap.data["include_memory"] is False and snap.data["sandbox_class"] == "container"
        [made] = fake.live_snapshots()
        assert made["state"] == "active" and made["name"] == snap.data["daytona_snapshot"]
        assert made["id"] == snap.resource_id
        desk.exec("rm kept.txt; echo later > later.txt")
        before = desk.handle.resource_id if desk.handle else None

        desk.restore("start")
        assert desk.handle is not None and desk.handle.resource_id != before  # a new sandbox, same session
        assert desk.exec("cat kept.txt").stdout == "kept\n"
        assert desk.exec("test -e later.txt").exit_code == 1
        assert desk.size == (1024, 768) and desk.screenshot().width == 1024
        [sandbox] = _of_session(fake, desk.id)
        assert sandbox["snapshot"] == made["name"] and sandbox["id"] == desk.handle.resource_id
        session = desk.id
    assert _of_session(fake, session) == []
    assert len(fake.live_snapshots()) == 1  # the snapshot outlives the desktop until it is deleted
    with open_ledger() as book:
        [row] = list_snapshots(book)
        assert row.restores == 1 and row.session_id == session
        delete_snapshot(book, "start")
        assert list_snapshots(book) == []
    assert fake.live_snapshots() == [] and _folders_left(fake) == []
    sent = [r for r in fake.log if r.path.endswith("/snapshot") and r.method == "POST"]
    assert [r.body for r in sent] == [{"name": made["name"], "includeMemory": False}]


def test_windows_snapshot_is_made_from_the_sandbox_with_its_memory(daytona_env: FakeDaytona) -> None:
    """Windows snapshots exist only as snapshots of a sandbox (spec section 3): deskctl makes them that way, with
    ``includeMemory`` (the sandbox is started), and a restore makes a windows sandbox from it in region us."""
    fake = daytona_env
    with _open("windows") as desk:
        assert desk.handle is not None
        with open(fake.host_path(desk.handle.resource_id, "C:\\Users\\daytona\\kept.txt"), "w") as fh:
            fh.write("kept")
        snap = desk.snapshot("win")
        assert snap.data["include_memory"] is True and snap.data["sandbox_class"] == "windows"
        with open(fake.host_path(desk.handle.resource_id, "C:\\Users\\daytona\\later.txt"), "w") as fh:
            fh.write("later")
        desk.restore(snap)
        new = desk.handle.resource_id
        with open(fake.host_path(new, "C:\\Users\\daytona\\kept.txt")) as fh:
            assert fh.read() == "kept"
        assert not os.path.exists(fake.host_path(new, "C:\\Users\\daytona\\later.txt"))
        [sandbox] = _of_session(fake, desk.id)
        assert sandbox["sandboxClass"] == "windows" and sandbox["target"] == "us"
        assert desk.screenshot().width == 1024
    assert [r for r in fake.log if r.path == "/api/snapshots" and r.method == "POST"] == []
    [request] = [r.body for r in fake.log if r.path.endswith("/snapshot") and r.method == "POST"]
    assert request["includeMemory"] is True
    with open_ledger() as book:
        delete_snapshot(book, snap)
    assert fake.live_snapshots() == [] and fake.live() == []


def test_the_fake_refuses_a_windows_snapshot_that_is_not_of_a_sandbox(daytona_env: FakeDaytona) -> None:
    import httpx

    answer = httpx.post(f"{daytona_env.api_url}/snapshots", json={"name": "w", "sandboxClass": "windows"},
                        headers={"Authorization": f"Bearer {daytona_env.api_key}"})
    assert answer.status_code == 400 and "existing sandbox" in answer.json()["message"]


@pytest.mark.slow
def test_twenty_restores_leak_nothing(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    with _open() as desk:
        desk.exec("echo 0 > counter")
        snap = desk.snapshot("zero")
        for i in range(20):
            desk.exec(f"echo {i + 1} > counter")
            desk.restore(snap)
            assert desk.exec("cat counter").stdout == "0\n"
            assert len(_of_session(fake, desk.id)) == 1 and len(fake.live()) == 1
            assert len(fake.live_snapshots()) == 1
        with open_ledger() as book:
            assert len(book.sessions()) == 1
            assert [s.restores for s in list_snapshots(book)] == [20]
        assert len(fake.roots) == 21  # every restore made one sandbox
    assert fake.live() == []
    with open_ledger() as book:
        delete_snapshot(book, "zero")
    assert fake.live_snapshots() == [] and _folders_left(fake) == []


def test_a_restore_that_fails_half_way_destroys_what_it_made(daytona_env: FakeDaytona) -> None:
    """The new sandbox exists, then its computer use fails: the session ends (failed), no sandbox is left, and
    the snapshot stays for the next try."""
    fake = daytona_env
    with _open() as desk:
        snap = desk.snapshot("half")
        made_before = len(fake.roots)
        fake.inject("GET", r"/computeruse/status$", 500, {"message": "plugin crashed"}, times=100)
        with pytest.raises(DeskctlError) as caught:
            desk.restore(snap)
        assert caught.value.exit_code == 20
        assert len(fake.roots) == made_before + 1  # the restore did make its sandbox ...
        assert fake.live() == []  # ... and destroyed it, as the old one
        session = desk.id
    with open_ledger() as book:
        assert book.get(session).status == "failed"
        assert [s.status for s in list_snapshots(book)] == ["ready"]
        delete_snapshot(book, snap)
    assert fake.live_snapshots() == [] and _folders_left(fake) == []


def test_a_restore_whose_sandbox_fails_to_start_leaves_nothing(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    with _open() as desk:
        snap = desk.snapshot("broken")
        fake.create_failure = "failed_to_start"
        with pytest.raises(DeskctlError):
            desk.restore(snap)
        assert fake.live() == []
    with open_ledger() as book:
        delete_snapshot(book, snap)
    assert fake.live_snapshots() == []


def test_a_failed_snapshot_is_deleted_and_leaves_no_row(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    with _open() as desk:
        fake.snapshot_failure = "error"
        with pytest.raises(DeskctlError) as caught:
            desk.snapshot("bad")
        assert caught.value.code == "provider.api_error" and "runner failed" in caught.value.message
        assert fake.live_snapshots() == []
        with open_ledger() as book:
            assert list_snapshots(book, include_deleted=True) == []
        assert desk.exec("echo still here").stdout == "still here\n"  # the desktop is as it was


def test_snapshot_quota_and_a_state_change_in_progress(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    with _open() as desk:
        fake.snapshot_quota = 0
        with pytest.raises(DeskctlError) as caught:
            desk.snapshot("over")
        assert (caught.value.code, caught.value.exit_code) == ("quota.exceeded", 3)
        fake.snapshot_quota = 10
        fake.conflict_snapshots = 2  # 409 "Sandbox state change in progress" twice: waited out
        snap = desk.snapshot("after-409")
        statuses = [r.status for r in fake.log if r.path.endswith("/snapshot") and r.method == "POST"]
        assert statuses == [400, 409, 409, 200]
        with open_ledger() as book:
            assert [s.name for s in list_snapshots(book, include_deleted=True)] == ["after-409"]
            delete_snapshot(book, snap)
    assert fake.live_snapshots() == []


def test_open_desktop_from_snapshot(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    with _open() as first:
        first.exec("echo seeded > seed.txt")
        first.snapshot("seeded")
    with _open(from_snapshot="seeded") as second:
        assert second.exec("cat seed.txt").stdout == "seeded\n"
        assert str(second.spec.provider_options["snapshot"]).startswith("deskctl-sn-")
    with open_ledger() as book:
        assert [s.restores for s in list_snapshots(book)] == [1]
        delete_snapshot(book, "seeded")
    assert fake.live() == [] and fake.live_snapshots() == []


def test_cli_snapshot_restore_rm_and_reap(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    options = [arg for key, value in FAST_OPTIONS.items() for arg in ("-o", f"{key}={value}")]
    up = run_deskctl(fake, "up", "--provider", "daytona", "--geometry", "1024x768", *options, "--json")
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    try:
        assert run_deskctl(fake, "exec", session, "echo one > f").returncode == 0
        made = run_deskctl(fake, "snapshot", session, "one", "--json")
        assert made.returncode == 0, made.stderr
        snap = json.loads(made.stdout)
        assert snap["provider"] == "daytona" and snap["status"] == "ready"
        short = run_deskctl(fake, "snapshot", session, "short", "--ttl", "0.001", "--json")
        assert short.returncode == 0, short.stderr
        run_deskctl(fake, "exec", session, "echo two > f")
        back = run_deskctl(fake, "restore", session, "one", "--json")
        assert back.returncode == 0, back.stderr
        assert run_deskctl(fake, "exec", session, "cat f").stdout == "one\n"
        assert len(fake.live()) == 1 and len(fake.live_snapshots()) == 2
        reaped = run_deskctl(fake, "reap", "--json")
        assert reaped.returncode == 0, reaped.stderr
        assert [s["name"] for s in json.loads(reaped.stdout)["snapshots"]] == ["short"]
        assert [s["name"] for s in fake.live_snapshots()] == ["deskctl-" + snap["snapshot_id"]]
    finally:
        run_deskctl(fake, "down", session)
    removed = run_deskctl(fake, "snapshot", "rm", "one", "--json")
    assert removed.returncode == 0, removed.stderr
    assert fake.live() == [] and fake.live_snapshots() == []


def test_a_snapshot_whose_maker_died_is_found_by_name_and_reaped(daytona_env: FakeDaytona) -> None:
    """The maker died after the service made the snapshot and before the ledger learnt it: the row says
    ``deleting``, has no resource id and a dead owner. Daytona keeps no labels on a snapshot; its name does it."""
    import socket

    fake = daytona_env
    with _open() as desk:
        snap = desk.snapshot("orphan")
    with open_ledger() as book, book.transaction() as tx:
        tx.run("UPDATE snapshots SET status = 'deleting', resource_id = NULL, owner = ? WHERE snapshot_id = ?",
               (f"{socket.gethostname()}:999999999", snap.snapshot_id))
    assert len(fake.live_snapshots()) == 1
    with open_ledger() as book:
        assert [s.snapshot_id for s in reap_snapshots(book)] == [snap.snapshot_id]
    assert fake.live_snapshots() == []


def test_the_fake_is_strict_about_snapshots_forks_and_pauses(daytona_env: FakeDaytona,
                                                            provider: DaytonaProvider) -> None:
    """What the fake refuses, as the service does (daytona-api-client 0.231's descriptions): memory snapshots of
    a container, filesystem snapshots of a started VM, pause of a container, a duplicate snapshot name; and what
    fork and pause do."""
    import time

    import httpx

    from deskctl.spec import DesktopSpec

    fake = daytona_env
    fake.quota = (100, 100, 1000)  # a windows and a linux sandbox at once
    api = fake.api_url
    auth = {"Authorization": f"Bearer {fake.api_key}"}
    spec = DesktopSpec(provider="daytona", platform="ubuntu", geometry="640x480")
    win = DesktopSpec(provider="daytona", platform="windows", geometry="1024x768")
    made = []
    try:
        for one, session in ((spec, "dk-strict1"), (win, "dk-strict2")):
            made.append(provider.create(one, session, {}))
            provider.wait_ready(made[-1], time.monotonic() + 30)
        linux, windows = made
        def post(path: str, body: Any = None) -> httpx.Response:
            return httpx.post(f"{api}{path}", json=body, headers=auth)

        memory = post(f"/sandbox/{linux.resource_id}/snapshot", {"name": "m", "includeMemory": True})
        assert memory.status_code == 400 and "memory" in memory.json()["message"]
        files_only = post(f"/sandbox/{windows.resource_id}/snapshot", {"name": "w"})
        assert files_only.status_code == 400 and "stopped" in files_only.json()["message"]
        assert post(f"/sandbox/{linux.resource_id}/pause").status_code == 400
        assert post(f"/sandbox/{linux.resource_id}/snapshot", {"name": "dup"}).status_code == 200
        assert post(f"/sandbox/{linux.resource_id}/snapshot", {"name": "dup"}).status_code == 409  # snapshotting
        assert httpx.get(f"{api}/snapshots/dup", headers=auth).json()["state"] in ("snapshotting", "active")
        assert httpx.get(f"{api}/snapshots/dup", headers=auth).json()["state"] == "active"
        assert httpx.get(f"{api}/sandbox/{linux.resource_id}", headers=auth).json()["state"] == "started"
        again = post(f"/sandbox/{linux.resource_id}/snapshot", {"name": "dup"})
        assert again.status_code == 409 and "already exists" in again.json()["message"]

        with open(os.path.join(fake.root_of(linux.resource_id), "home", "daytona", "f.txt"), "w") as fh:
            fh.write("forked")
        forked = post(f"/sandbox/{linux.resource_id}/fork", {"name": "dk-fork"}).json()
        assert forked["name"] == "dk-fork" and forked["id"] != linux.resource_id
        with open(os.path.join(fake.root_of(forked["id"]), "home", "daytona", "f.txt")) as fh:
            assert fh.read() == "forked"
        assert httpx.delete(f"{api}/sandbox/{forked['id']}", headers=auth).status_code == 200

        paused = post(f"/sandbox/{windows.resource_id}/pause").json()
        assert paused["state"] == "paused"
        toolbox = httpx.get(f"{fake.toolbox_url}/{windows.resource_id}/computeruse/status", headers=auth)
        assert toolbox.status_code == 400
        assert post(f"/sandbox/{windows.resource_id}/start").json()["state"] == "started"
        dup = httpx.get(f"{api}/snapshots/dup", headers=auth).json()
        assert httpx.delete(f"{api}/snapshots/{dup['id']}", headers=auth).status_code == 200
    finally:
        for handle in made:
            provider.destroy(handle)
    assert httpx.get(f"{api}/snapshots/dup", headers=auth).status_code in (200, 404)  # removing, then gone
    assert httpx.get(f"{api}/snapshots/dup", headers=auth).status_code == 404
    assert fake.live_snapshots() == []
    assert [s["name"] for s in fake.live() if s["state"] != "destroying"] == []
