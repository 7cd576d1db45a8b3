"""Issue 24 section 5 on Daytona, through the loopback fake over real HTTP: "the sandbox is gone" is decided by
the sandbox's own state, never by the words of a toolbox message; a create whose answer is lost is looked for
over a bounded window, what appears is destroyed, and what may still come is recorded ``leaked`` with how
``deskctl reap`` finds it; a ``cwd`` that is no folder is exit 2 as on the other providers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daytona._daytona_target import FAST_OPTIONS
from deskctl.errors import CleanupIncomplete, ProviderApiError, ProviderUnreachable, SessionLost, UsageError
from deskctl.providers.daytona import DaytonaProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import run_deskctl
from fakes.daytona import FakeDaytona

UBUNTU = DesktopSpec.build(provider="daytona", platform="ubuntu", geometry="1024x768")
WINDOWS = DesktopSpec.build(provider="daytona", platform="windows")
#: the daemon's generic 404 (spec section 4, "Toolbox errors") for a route an older daemon does not have
NO_ROUTE = {"statusCode": 404, "message": "Not Found", "code": "NOT_FOUND", "source": "DAYTONA_DAEMON",
            "path": "/files/folder", "method": "POST"}


def test_a_missing_file_whose_path_says_sandbox_is_no_such_file_and_the_sandbox_lives(
        daytona_env: FakeDaytona, tmp_path: Path) -> None:
    import deskctl

    fake = daytona_env
    desk = deskctl.open_desktop("daytona", platform="ubuntu", geometry="1024x768",
                                provider_options=dict(FAST_OPTIONS))
    try:
        assert desk.handle is not None
        sandbox_id = desk.handle.resource_id
        missing = tmp_path / "x" / "my-sandbox" / "missing.txt"  # the daemon's 404 names the path: "sandbox"
        with pytest.raises(UsageError) as info:
            desk.download(str(missing), tmp_path / "here.txt")
        assert info.value.code == "usage.no_such_file"
        assert [s["id"] for s in fake.live()] == [sandbox_id]  # not torn down, not deleted
        assert desk.exec("echo alive").stdout == "alive\n"
    finally:
        desk.close()
    assert fake.live() == []


def test_a_route_the_daemon_lacks_is_a_provider_error_and_the_session_goes_on(
        daytona_env: FakeDaytona, tmp_path: Path) -> None:
    import deskctl

    fake = daytona_env
    local = tmp_path / "f.txt"
    local.write_text("data")
    desk = deskctl.open_desktop("daytona", platform="ubuntu", geometry="1024x768",
                                provider_options=dict(FAST_OPTIONS))
    try:
        assert desk.handle is not None
        fake.inject("POST", r"/files/folder$", 404, NO_ROUTE, times=5)
        with pytest.raises(ProviderApiError) as info:
            desk.upload(local, str(tmp_path / "new" / "f.txt"))
        assert info.value.status == 404 and "no such route" in info.value.message
        assert "started" in info.value.message
        assert len(fake.live()) == 1
        assert desk.exec("echo alive").stdout == "alive\n"
    finally:
        desk.close()
    assert fake.live() == []


def test_a_sandbox_that_is_archived_stopped_or_gone_is_session_lost_by_its_state(
        provider: DaytonaProvider, fake: FakeDaytona, tmp_path: Path) -> None:
    handle = provider.create(UBUNTU, "dk-state1", {})
    provider.wait_ready(handle, 1e18)
    fake.archive(handle.resource_id)  # toolbox: 404 "sandbox container not found"
    with pytest.raises(SessionLost) as info:
        provider.screenshot(handle)
    assert "archived" in info.value.message
    with pytest.raises(SessionLost):
        provider.download(handle, str(tmp_path / "f"), str(tmp_path / "g"))
    with fake._lock:
        fake._remove(handle.resource_id)
    with pytest.raises(SessionLost) as info:
        provider.screenshot(handle)
    assert "gone" in info.value.message


def test_a_missing_cwd_is_exit_2_as_on_the_other_providers(daytona_env: FakeDaytona, tmp_path: Path) -> None:
    fake = daytona_env
    up = run_deskctl(fake, "up", "--provider", "daytona", "--platform", "ubuntu", "--geometry", "1024x768",
                     "--json", "-o", "poll_interval=0.005", "-o", "poll_max_interval=0.05")
    assert up.returncode == 0, up.stdout + up.stderr
    session_id = json.loads(up.stdout)["id"]
    try:
        ran = run_deskctl(fake, "exec", session_id, "--cwd", str(tmp_path / "missing"), "--", "touch", "ran")
        assert ran.returncode == 2, ran.stdout + ran.stderr
        assert "no such file or directory" in ran.stderr.lower()
        assert not (tmp_path / "missing" / "ran").exists()
        ok = run_deskctl(fake, "exec", session_id, "--cwd", str(tmp_path), "--", "pwd")
        assert ok.returncode == 0 and ok.stdout.strip() == str(tmp_path)
    finally:
        down = run_deskctl(fake, "down", session_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert fake.live() == []


def test_a_create_answered_too_late_is_found_over_the_window_and_destroyed(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    fake.delay_create(after_lookups=3)  # made while the client looks for it: not at once
    prov = DaytonaProvider({**FAST_OPTIONS, "create_timeout": 0.3, "create_lookup_seconds": 120})
    try:
        with pytest.raises(ProviderUnreachable) as info:
            prov.create(WINDOWS, "dk-late1", {})
    finally:
        prov.close()
    message = info.value.message
    assert "answer to the create of dk-late1 was lost" in message and "found and destroyed" in message
    assert "check the network" not in (info.value.remedy or "")
    assert not fake.create_pending
    assert fake.live() == []
    assert len([r for r in fake.log if r.method == "POST" and r.path == "/api/sandbox"]) == 1  # never re-sent


def test_a_create_that_may_still_come_is_leaked_until_reap_finds_it(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    fake.delay_create(after_lookups=None)  # made only at finish_create: after the window
    up = run_deskctl(fake, "up", "--provider", "daytona", "--platform", "windows", "--json",
                     "-o", "poll_interval=0.005", "-o", "poll_max_interval=0.05", "-o", "create_timeout=0.3",
                     "-o", "create_lookup_seconds=0.2")
    assert up.returncode == 5, up.stdout + up.stderr
    error = json.loads(up.stdout)["error"]
    assert error["code"] == "cleanup.incomplete"
    assert "was lost" in error["message"] and "deskctl.session=" in error["message"]
    assert "deskctl reap --provider daytona" in error["remedy"]
    listed = run_deskctl(fake, "ls", "--json")
    rows = json.loads(listed.stdout)["sessions"]
    assert [(r["provider"], r["status"]) for r in rows] == [("daytona", "leaked")], listed.stdout
    session_id = rows[0]["id"]

    fake.finish_create()  # the service made it after all
    assert [s["name"] for s in fake.live()] == [session_id]
    reaped = run_deskctl(fake, "reap", "--provider", "daytona", "--json")
    assert reaped.returncode == 0, reaped.stdout + reaped.stderr
    assert fake.live() == []
    after = run_deskctl(fake, "ls", "--json", "--all")
    statuses = {r["id"]: r["status"] for r in json.loads(after.stdout)["sessions"]}
    assert statuses == {session_id: "ended"}


def test_the_lookup_window_is_bounded(daytona_env: FakeDaytona) -> None:
    from deskctl.errors import ConfigInvalid

    with pytest.raises(ConfigInvalid):
        DaytonaProvider({"create_lookup_seconds": 100000})
    for bad in ({"create_lookup_seconds": float("nan")}, {"poll_interval": float("inf")}, {"poll_interval": "soon"},
                {"create_lookup_seconds": "1e308"}):  # NaN and infinities passed the old "not negative" check
        with pytest.raises(ConfigInvalid):
            DaytonaProvider(bad)
    refused = run_deskctl(daytona_env, "up", "--provider", "daytona", "--platform", "windows", "--json",
                          "-o", "create_lookup_seconds=-1")
    # from the command line the declaration refuses it first, as every provider's bad option (usage.bad_option)
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "usage.bad_option"
    assert daytona_env.sandboxes == {}


def test_a_create_that_never_came_leaves_nothing_to_find_once_the_window_closes(daytona_env: FakeDaytona) -> None:
    fake = daytona_env
    fake.inject("POST", r"^/api/sandbox$", 504, raw=b"")  # a gateway gave up; nothing was made
    prov = DaytonaProvider({**FAST_OPTIONS, "create_lookup_seconds": 0.2})
    try:
        with pytest.raises(CleanupIncomplete) as info:
            prov.create(WINDOWS, "dk-never1", {})
    finally:
        prov.close()
    assert info.value.details["answer_lost"] is True
    assert len([r for r in fake.log if r.method == "GET" and r.path == "/api/sandbox/dk-never1"]) >= 2


def test_a_keepalive_404_from_an_api_without_the_route_does_not_end_a_live_sandbox(
        provider: DaytonaProvider, fake: FakeDaytona) -> None:
    handle = provider.create(WINDOWS, "dk-keep1", {})
    try:
        provider.wait_ready(handle, 1e18)
        # NestJS's own 404 for a route it does not have (spec section 2, error shape)
        fake.inject("POST", r"/last-activity$", 404, {"statusCode": 404, "error": "Not Found",
                                                     "message": f"Cannot POST /api/sandbox/{handle.resource_id}"
                                                                "/last-activity"})
        with pytest.raises(ProviderApiError) as info:
            provider.keepalive(handle)
        assert not isinstance(info.value, SessionLost) and "no such route" in info.value.message
        provider.keepalive(handle)  # the route answers again: nothing was decided on the 404's words
    finally:
        provider.destroy(handle)
    with pytest.raises(SessionLost):
        provider.keepalive(handle)  # now it is gone: its own GET says so
