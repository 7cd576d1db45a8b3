"""Snapshot and restore on a real Docker engine, through the library and the CLI (docs/episodes.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import deskctl
from _cli import deskctl as run_cli
from deskctl.episodes import LABEL_SNAPSHOT, delete_snapshot
from deskctl.episodes.store import list_snapshots
from deskctl.ledger import open_ledger

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def _snapshot_images(docker_sdk: Any, snapshot_id: str | None = None) -> list[Any]:
    """Snapshot images of this test's own ledger (another worker's snapshots come and go meanwhile)."""
    from deskctl.ledger import ledger_id

    label = LABEL_SNAPSHOT if snapshot_id is None else f"{LABEL_SNAPSHOT}={snapshot_id}"
    with open_ledger() as book:
        own = f"deskctl.ledger={ledger_id(book.url)}"
    return list(docker_sdk.api.images(filters={"label": [label, own]}))


def _containers(docker_sdk: Any, session_id: str) -> list[Any]:
    return list(docker_sdk.api.containers(all=True, filters={"label": f"deskctl.session={session_id}"}))


def test_restore_brings_back_files_and_windows_and_drops_later_changes(docker_sdk: Any) -> None:
    with deskctl.open_desktop("docker", geometry="800x600") as desk:
        desk.exec("echo kept > /home/desk/kept.txt")
        desk.launch("xmessage", "-title", "keepme", "a dialog")
        desk.wait_for("keepme", 30)
        snap = desk.snapshot("start")
        assert snap.status == "ready" and snap.size_bytes is not None and snap.cost_usd == 0.0
        assert [w["title"] for w in snap.data["relaunch"]] == ["keepme"]
        assert len(_snapshot_images(docker_sdk, snap.snapshot_id)) == 1

        desk.exec("rm /home/desk/kept.txt; echo later > /home/desk/later.txt")
        desk.launch("xmessage", "-title", "later-window", "after the snapshot")
        desk.wait_for("later-window", 30)
        before = desk.handle.resource_id if desk.handle else None

        desk.restore("start")
        assert desk.handle is not None and desk.handle.resource_id != before  # a new container, same session
        assert desk.exec("cat /home/desk/kept.txt").stdout == "kept\n"
        assert desk.exec("test -e /home/desk/later.txt").exit_code == 1
        titles = desk.window_titles()
        assert "keepme" in titles and "later-window" not in titles
        assert desk.size == (800, 600) and desk.screenshot().width == 800
        events = [e.kind for e in desk.ledger.events(desk.id)]
        assert "snapshot" in events and "restore" in events
        session = desk.id
    # the desktop is gone; the snapshot stays until it is deleted
    assert _containers(docker_sdk, session) == []
    with open_ledger() as book:
        [row] = list_snapshots(book)
        assert row.restores == 1 and row.session_id == session
        delete_snapshot(book, "start")
        assert list_snapshots(book) == []
        assert list_snapshots(book, include_deleted=True)[0].status == "deleted"
    assert _snapshot_images(docker_sdk, snap.snapshot_id) == []


def test_twenty_restores_leak_nothing(docker_sdk: Any, deskctl_home: Path) -> None:
    assert _snapshot_images(docker_sdk) == []  # a fresh ledger: none of its snapshots exist yet
    with deskctl.open_desktop("docker", geometry="640x480") as desk:
        desk.exec("echo 0 > /home/desk/counter")
        snap = desk.snapshot("zero")
        for i in range(20):
            desk.exec(f"echo {i + 1} > /home/desk/counter")
            desk.restore(snap)
            assert desk.exec("cat /home/desk/counter").stdout == "0\n"
            assert len(_containers(docker_sdk, desk.id)) == 1
        with open_ledger() as book:
            assert len(book.sessions()) == 1
            assert [s.restores for s in list_snapshots(book)] == [20]
        assert len(_snapshot_images(docker_sdk)) == 1
        session = desk.id
    assert _containers(docker_sdk, session) == []
    with open_ledger() as book:
        delete_snapshot(book, "zero")
    assert _snapshot_images(docker_sdk) == []
    # the host folders of the session are gone too (every restore made new ones under the same path)
    leftovers = [p for p in deskctl_home.rglob(session)] if deskctl_home.exists() else []
    assert leftovers == []


def test_open_desktop_from_snapshot(docker_sdk: Any) -> None:
    with deskctl.open_desktop("docker", geometry="640x480") as first:
        first.exec("echo seeded > /home/desk/seed.txt")
        first.snapshot("seeded")
    with deskctl.open_desktop("docker", geometry="640x480", from_snapshot="seeded") as second:
        assert second.exec("cat /home/desk/seed.txt").stdout == "seeded\n"
        assert second.spec.provider_options["image"].startswith("deskctl-snapshot:")
        # another process may not swap the desktop from under the process that owns it
        other = run_cli("restore", second.id, "seeded", "--json")
        assert other.returncode == 2 and json.loads(other.stdout)["error"]["code"] == "usage.conflict"
        assert second.exec("cat /home/desk/seed.txt").stdout == "seeded\n"
    with open_ledger() as book:
        assert [s.restores for s in list_snapshots(book)] == [1]
        delete_snapshot(book, "seeded")


def test_cli_snapshot_restore_ls_rm(docker_sdk: Any) -> None:
    up = run_cli("up", "--provider", "docker", "--geometry", "640x480", "--json", check=True)
    session = json.loads(up.stdout)["id"]
    try:
        run_cli("exec", session, "echo one > /home/desk/f", check=True)
        made = run_cli("snapshot", session, "one", "--json", check=True)
        snap = json.loads(made.stdout)
        assert snap["name"] == "one" and snap["session_id"] == session and snap["status"] == "ready"
        again = run_cli("snapshot", session, "one", "--json")
        assert again.returncode == 2 and json.loads(again.stdout)["error"]["code"] == "usage.conflict"
        run_cli("exec", session, "echo two > /home/desk/f", check=True)
        back = run_cli("restore", session, "one", "--json", check=True)
        assert json.loads(back.stdout)["snapshot"] == snap["snapshot_id"]
        assert run_cli("exec", session, "cat /home/desk/f", check=True).stdout == "one\n"
        listed = json.loads(run_cli("snapshot", "ls", "--json", check=True).stdout)["snapshots"]
        assert [(s["name"], s["restores"]) for s in listed] == [("one", 1)]
        missing = run_cli("restore", session, "nope", "--json")
        assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["code"] == "usage.not_found"
    finally:
        run_cli("down", session, check=True)
    removed = run_cli("snapshot", "rm", "one", "--json", check=True)
    assert [s["status"] for s in json.loads(removed.stdout)["deleted"]] == ["deleted"]
    assert _snapshot_images(docker_sdk, snap["snapshot_id"]) == []
    assert json.loads(run_cli("snapshot", "ls", "--json", check=True).stdout)["snapshots"] == []


def test_cli_snapshot_of_a_provider_without_snapshots_is_unsupported() -> None:
    up = run_cli("up", "--provider", "xvfb", "--geometry", "320x240", "--json", check=True)
    session = json.loads(up.stdout)["id"]
    try:
        out = run_cli("snapshot", session, "x", "--json")
        assert out.returncode == 2, out.stderr
        assert json.loads(out.stdout)["error"]["code"] == "usage.unsupported"
        with open_ledger() as book:
            assert list_snapshots(book, include_deleted=True) == []
    finally:
        run_cli("down", session, check=True)


def test_expired_snapshots_are_deleted_by_snapshot_rm_expired(docker_sdk: Any) -> None:
    with deskctl.open_desktop("docker", geometry="320x240") as desk:
        short = desk.snapshot("short", ttl=0.001)  # past its expiry by the time the next process looks
        kept = desk.snapshot("kept")
    out = run_cli("snapshot", "rm", "--expired", "--json", check=True)
    assert [s["snapshot_id"] for s in json.loads(out.stdout)["deleted"]] == [short.snapshot_id]
    assert _snapshot_images(docker_sdk, short.snapshot_id) == []
    assert len(_snapshot_images(docker_sdk, kept.snapshot_id)) == 1
    listed = json.loads(run_cli("snapshot", "ls", "--json", check=True).stdout)["snapshots"]
    assert [s["name"] for s in listed] == ["kept"]
    nothing = run_cli("snapshot", "rm", "--json")
    assert nothing.returncode == 2 and json.loads(nothing.stdout)["error"]["code"] == "usage.missing_argument"
    run_cli("snapshot", "rm", "kept", check=True)
    assert _snapshot_images(docker_sdk, kept.snapshot_id) == []


def test_deskctl_reap_deletes_expired_snapshots_like_leftover_desktops(docker_sdk: Any) -> None:
    with deskctl.open_desktop("docker", geometry="320x240") as desk:
        short = desk.snapshot("reap-short", ttl=0.001)
        kept = desk.snapshot("reap-kept")
    assert json.loads(run_cli("reap", "--dry-run", "--json", check=True).stdout)["snapshots"] == []
    assert len(_snapshot_images(docker_sdk, short.snapshot_id)) == 1  # a dry run deletes nothing
    assert json.loads(run_cli("reap", "--provider", "xvfb", "--json", check=True).stdout)["snapshots"] == []
    out = json.loads(run_cli("reap", "--json", check=True).stdout)
    assert [s["snapshot_id"] for s in out["snapshots"]] == [short.snapshot_id]
    assert _snapshot_images(docker_sdk, short.snapshot_id) == []
    assert len(_snapshot_images(docker_sdk, kept.snapshot_id)) == 1
    run_cli("snapshot", "rm", "reap-kept", check=True)


def test_restored_browser_opens_its_committed_profile(docker_sdk: Any) -> None:
    """The start app (Chromium on the start URL) comes back after a restore with the profile it had: Chromium's
    host locks are kept out of the snapshot (committed, they make it refuse the profile), and left in place on the
    running desktop."""
    page = "data:text/html,<title>startpage</title>hello"
    with deskctl.open_desktop("docker", geometry="800x600", start_url=page) as desk:
        desk.wait_for("startpage", 90)
        locks = "ls /home/desk/.chromium | grep -c Singleton"
        before = desk.exec(locks).stdout
        snap = desk.snapshot("browser")
        assert desk.exec(locks).stdout == before != "0\n"  # the running browser keeps its locks
        assert snap.data["relaunch"] == []  # the entrypoint starts the start app itself
        desk.restore(snap)
        assert "startpage" in desk.wait_for("startpage", 90)
        log = desk.exec("cat /tmp/chromium.log").stdout
        assert "in use by another Chromium process" not in log
    with open_ledger() as book:
        delete_snapshot(book, "browser")


def test_a_snapshot_whose_maker_died_mid_way_is_reaped(docker_sdk: Any) -> None:
    """The maker was killed between the commit and the ledger's update: the row says `deleting`, knows no image,
    and its owner is dead. The reaper finds the image by its label and deletes it."""
    import socket

    from deskctl.episodes import reap_snapshots

    with deskctl.open_desktop("docker", geometry="320x240") as desk:
        snap = desk.snapshot("orphan")
    with open_ledger() as book, book.transaction() as tx:
        tx.run("UPDATE snapshots SET status = 'deleting', data = '{}', resource_id = NULL, owner = ? "
               "WHERE snapshot_id = ?", (f"{socket.gethostname()}:999999999", snap.snapshot_id))
    assert len(_snapshot_images(docker_sdk, snap.snapshot_id)) == 1
    with open_ledger() as book:
        assert [s.snapshot_id for s in reap_snapshots(book)] == [snap.snapshot_id]
        assert list_snapshots(book) == []
    assert _snapshot_images(docker_sdk, snap.snapshot_id) == []


def test_the_async_surface_snapshots_restores_and_opens_from_a_snapshot(docker_sdk: Any) -> None:
    import asyncio

    from deskctl import aio

    async def main() -> None:
        async with aio.open_desktop("docker", geometry="320x240") as desk:
            await desk.exec("echo a > /home/desk/f")
            snap = await desk.snapshot("async")
            await desk.exec("echo b > /home/desk/f")
            await desk.restore("async")
            assert (await desk.exec("cat /home/desk/f")).stdout == "a\n"
        async with aio.open_desktop("docker", geometry="320x240", from_snapshot=snap) as again:
            assert (await again.exec("cat /home/desk/f")).stdout == "a\n"

    asyncio.run(main())
    with open_ledger() as book:
        delete_snapshot(book, "async")
