"""The user's path: deskctl preflight / up / screenshot / do / exec / down against the cua fake over real HTTP,
each command a separate process, and nothing left on the fake afterwards, whatever failed during create."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakes._cloud import pointer_at, run_deskctl
from fakes.cua import FakeCua


def run(fake: FakeCua, *args: str) -> subprocess.CompletedProcess[str]:
    return run_deskctl(fake, *args)


def up(fake: FakeCua, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(fake, "up", "--provider", "cua-cloud", "--platform", "ubuntu", "--geometry", "1920x1080", "--json",
               "-o", "poll_interval=0.005", "-o", "poll_max_interval=0.05", *extra)


def pointer(fake: FakeCua, claim: str) -> tuple[int, int]:
    return pointer_at(fake.display_of(claim))


def secrets_of(fake: FakeCua) -> list[str]:
    return [fake.client_secret, fake.client_id, *fake.tokens]


def test_preflight_up_screenshot_click_type_exec_down(fake: FakeCua, tmp_path: Path) -> None:
    pre = run(fake, "preflight", "--platform", "ubuntu", "--geometry", "1920x1080", "--provider", "cua-cloud",
              "--json")
    assert pre.returncode == 0, pre.stdout + pre.stderr
    assert {r.method for r in fake.log if r.path.startswith("/api/")} == {"GET"}  # preflight only reads
    assert fake.live() == []

    started = up(fake)
    assert started.returncode == 0, started.stdout + started.stderr
    info: dict[str, Any] = json.loads(started.stdout)
    session_id, claim = info["id"], info["resource_id"]
    assert info["geometry"] == "1920x1080"
    assert [c["metadata"]["name"] for c in fake.live()] == [session_id]

    shot = tmp_path / "shot.png"
    taken = run(fake, "screenshot", session_id, "-o", str(shot))
    assert taken.returncode == 0, taken.stderr
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1920, 1080)

    clicked = run(fake, "do", session_id, "click", "10", "20")
    assert clicked.returncode == 0, clicked.stderr
    assert pointer(fake, claim) == (10, 20)
    typed = run(fake, "do", session_id, "type", "héllo")
    assert typed.returncode == 0, typed.stderr
    ran = run(fake, "exec", session_id, "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert ran.returncode == 4, ran.stderr
    assert "out" in ran.stdout and "err" in ran.stderr

    down = run(fake, "down", session_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert fake.live() == [] and fake.displays() == []
    everything = "".join(r.stdout + r.stderr for r in (pre, started, taken, clicked, typed, ran, down))
    assert not [s for s in secrets_of(fake) if s in everything]


@pytest.mark.parametrize("failure", ["status_500", "bare_502", "drop", "no_capacity", "drained"])
def test_up_with_a_failing_create_leaves_nothing(fake: FakeCua, failure: str) -> None:
    if failure == "no_capacity":
        fake.inject("POST", "osgymsandboxclaims$", 503, {"error": "NO_CAPACITY"})
    elif failure == "drained":
        fake.pools["harbor-ubuntu"].capacity = 0
    else:
        fake.create_failure = failure
    failed = up(fake)
    assert failed.returncode == 20, failed.stdout + failed.stderr
    error = json.loads(failed.stdout)["error"]
    assert error["provider"] == "cua-cloud"
    expected = "capacity.unavailable" if failure in ("no_capacity", "drained") else None
    assert error["code"] == expected if expected else error["code"] in ("provider.api_error",
                                                                        "provider.unreachable")
    assert fake.live() == [] and fake.displays() == []


def test_revoked_client_down_reports_what_is_left_then_down_again_removes_it(fake: FakeCua) -> None:
    started = up(fake)
    assert started.returncode == 0, started.stderr
    session_id = json.loads(started.stdout)["id"]
    fake.revoke_client()
    down = run(fake, "down", session_id, "--json")
    assert down.returncode == 5, down.stdout + down.stderr
    assert session_id in down.stdout + down.stderr
    assert len(fake.live()) == 1
    fake.restore_client()
    again = run(fake, "down", session_id, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert fake.live() == []
