"""Issue 24 section 5 on use.computer, through the loopback fake over real HTTP: a create whose answer is lost
is recorded ``leaked`` (seen by ``ls`` and by preflight) with a remedy for its case, since the API cannot find
the sandbox again; and the macOS display the service lists decides preflight, before anything is created."""

from __future__ import annotations

import json
import subprocess

import pytest

from deskctl.errors import CleanupIncomplete, ProviderApiError, SessionLost
from fakes._cloud import run_deskctl
from fakes.use_computer import FakeUseComputer


def up(fake: FakeUseComputer, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_deskctl(fake, "up", "--provider", "use-computer", "--platform", "macos", "--geometry", "1024x768",
                       "--json", "-o", "poll_interval=0.005", *extra)


def test_a_pinned_size_the_macos_listing_does_not_offer_is_refused_before_create(uc_env: FakeUseComputer) -> None:
    fake = uc_env
    fake.sizes["macos"] = (1280, 800)  # what the service lists, and what its VMs then run at
    refused = run_deskctl(fake, "up", "--provider", "use-computer", "--platform", "macos", "--geometry", "1024x768",
                          "--json", "-o", "poll_interval=0.005")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "geometry.unsupported"
    assert "1280x800" in error["message"] and "1280x800" in error["remedy"]
    assert not [r for r in fake.log if r.method == "POST"]  # nothing was created, nothing billed
    pre = run_deskctl(fake, "preflight", "--provider", "use-computer", "--platform", "macos", "--geometry",
                      "1280x800", "--json")
    assert pre.returncode == 0, pre.stdout + pre.stderr  # the size it suggests is the size it accepts
    assert fake.live() == []


@pytest.mark.parametrize("ephemeral", [False, True])
def test_a_create_whose_answer_was_lost_is_leaked_with_a_remedy_for_its_case(uc_env: FakeUseComputer,
                                                                            ephemeral: bool) -> None:
    import deskctl

    fake = uc_env
    fake.create_failure = "hang"  # the sandbox is made; the answer never comes within the client's timeout
    with pytest.raises(CleanupIncomplete) as info:
        deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                             provider_options={"poll_interval": 0.005, "create_timeout": 0.5, "ephemeral": ephemeral})
    error = info.value
    assert "was lost" in error.message
    if ephemeral:
        assert "reaps it within about 2 minutes" in error.message
        assert (error.remedy or "").startswith("nothing to delete")
    else:
        assert "NOT ephemeral" in error.message and "macos sandbox" in error.message
        assert "dashboard" in (error.remedy or "") and "nothing to delete" not in (error.remedy or "")
    assert "deskctl reap --confirmed-gone dk-" in (error.remedy or "")
    assert len(fake.live()) == 1  # it does exist

    rows = json.loads(run_deskctl(fake, "ls", "--json").stdout)["sessions"]
    assert [(r["provider"], r["status"]) for r in rows] == [("use-computer", "leaked")]
    session_id = rows[0]["id"]
    pre = run_deskctl(fake, "preflight", "--provider", "use-computer", "--platform", "macos", "--json")
    leftovers = next(r for r in json.loads(pre.stdout)["results"] if r["code"] == "use-computer.leftovers")
    assert leftovers["status"] == "warn" and session_id in leftovers["message"]


def test_a_non_ephemeral_up_whose_answer_was_lost_exits_5_and_stays_listed(uc_env: FakeUseComputer) -> None:
    fake = uc_env
    fake.create_failure = "hang"
    failed = up(fake, "-o", "create_timeout=0.5", "-o", "ephemeral=false")
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert json.loads(failed.stdout)["error"]["code"] == "cleanup.incomplete"
    rows = json.loads(run_deskctl(fake, "ls", "--json").stdout)["sessions"]
    assert [r["status"] for r in rows] == ["leaked"]


def test_a_404_from_a_route_the_service_lacks_does_not_end_a_live_session(uc_env: FakeUseComputer) -> None:
    import deskctl

    fake = uc_env
    desk = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                                provider_options={"poll_interval": 0.005})
    try:
        # an older service without the route: the fake's own answer to a route it does not know
        fake.inject("GET", r"/mouse/position$", 404, {"error": "not_found", "message": "no route"})
        with pytest.raises(ProviderApiError) as info:
            desk.cursor_position()
        assert info.value.status == 404 and "still answers GET" in info.value.message
        assert len(fake.live()) == 1  # not torn down, not deleted
        assert desk.screenshot().width == 1024
        with fake._lock:
            fake._remove(fake.live()[0]["sandbox_id"])  # now it is really gone
        with pytest.raises(SessionLost):
            desk.screenshot()
    finally:
        desk.close()
    assert fake.live() == []


def test_reap_keeps_a_leaked_row_it_cannot_confirm_gone_and_says_how_to_find_it(uc_env: FakeUseComputer) -> None:
    """The API cannot list sandboxes, so a leaked row without a handle is never closed by ``reap`` (nothing
    confirms that the sandbox is gone: here it still runs); reap reports it as unconfirmed with the dashboard
    remedy and exits 5, until the person who deleted it says so with ``--confirmed-gone``."""
    fake = uc_env
    fake.create_failure = "hang"
    assert up(fake, "-o", "create_timeout=0.5", "-o", "ephemeral=false").returncode == 5
    session_id = json.loads(run_deskctl(fake, "ls", "--json").stdout)["sessions"][0]["id"]
    for sweep in (("reap", "--provider", "use-computer", "--json"), ("reap", "--json")):
        done = run_deskctl(fake, *sweep)
        assert done.returncode == 5, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        mine = [r for r in doc["reaped"] if r["session_id"] == session_id]
        assert [(r["action"], r["reason"]) for r in mine] == [
            ("unconfirmed", "an earlier destroy could not be confirmed")]
        assert "use.computer dashboard" in mine[0]["remedy"] and "macos sandbox" in mine[0]["remedy"]
        assert f"deskctl reap --confirmed-gone {session_id}" in mine[0]["remedy"]
        assert doc["error"]["code"] == "cleanup.incomplete" and session_id in doc["error"]["message"]
        rows = json.loads(run_deskctl(fake, "ls", "--json").stdout)["sessions"]
        assert [(r["id"], r["status"]) for r in rows] == [(session_id, "leaked")]
    assert len(fake.live()) == 1  # it was still running all along: closing the row would have hidden it

    # the person deleted it in the dashboard and says so: now the row is closed, and only this one
    with fake._lock:
        fake._remove(fake.live()[0]["sandbox_id"])
    closed = run_deskctl(fake, "reap", "--confirmed-gone", session_id, "--json")
    assert closed.returncode == 0, closed.stdout + closed.stderr
    assert [(r["session_id"], r["action"]) for r in json.loads(closed.stdout)["reaped"]] == [
        (session_id, "recorded_gone")]
    rows = json.loads(run_deskctl(fake, "ls", "--all", "--json").stdout)["sessions"]
    assert [(r["id"], r["status"]) for r in rows] == [(session_id, "failed")]
    assert run_deskctl(fake, "reap", "--json").returncode == 0
    unknown = run_deskctl(fake, "reap", "--confirmed-gone", "dk-nosuch", "--json")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "usage.not_found"
