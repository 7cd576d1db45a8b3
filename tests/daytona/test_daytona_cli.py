"""The issue's "done when", as a user types it: deskctl preflight / up / screenshot / do / exec / down against
the Daytona fake over real HTTP, each command a separate process, and nothing left on the fake afterwards."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakes._cloud import pointer_at, run_deskctl
from fakes.daytona import FakeDaytona


def run(fake: FakeDaytona, *args: str) -> subprocess.CompletedProcess[str]:
    return run_deskctl(fake, *args)


def up(fake: FakeDaytona, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(fake, "up", "--provider", "daytona", "--platform", "windows", "--json",
               "-o", "poll_interval=0.005", "-o", "poll_max_interval=0.05", *extra)


def pointer(fake: FakeDaytona, sandbox_id: str) -> tuple[int, int]:
    return pointer_at(fake.display_of(sandbox_id))


def test_preflight_up_screenshot_do_down(fake: FakeDaytona, tmp_path: Path) -> None:
    pre = run(fake, "preflight", "--platform", "windows", "--provider", "daytona", "--json")
    assert pre.returncode == 0, pre.stdout + pre.stderr
    assert {r.method for r in fake.log} == {"GET"}  # preflight only reads
    assert fake.api_key not in pre.stdout + pre.stderr

    started = up(fake)
    assert started.returncode == 0, started.stdout + started.stderr
    info: dict[str, Any] = json.loads(started.stdout)
    session_id, sandbox_id = info["id"], info["resource_id"]
    assert info["geometry"] == "1024x768"
    assert [s["name"] for s in fake.live()] == [session_id]

    shot = tmp_path / "shot.png"
    taken = run(fake, "screenshot", session_id, "-o", str(shot))
    assert taken.returncode == 0, taken.stderr
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1024, 768)

    clicked = run(fake, "do", session_id, "click", "10", "20")
    assert clicked.returncode == 0, clicked.stderr
    assert pointer(fake, sandbox_id) == (10, 20)
    typed = run(fake, "do", session_id, "type", "héllo")
    assert typed.returncode == 0, typed.stderr
    assert [r.body for r in fake.log if r.path.endswith("/keyboard/type")] == [{"text": "héllo", "delay": 0}]
    ran = run(fake, "exec", session_id, "--", "sh", "-c", "echo out; echo err >&2")
    assert ran.returncode == 0, ran.stderr
    assert "out" in ran.stdout and "err" in ran.stdout + ran.stderr

    down = run(fake, "down", session_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert fake.live() == []
    listed = run(fake, "ls", "--json")
    assert listed.returncode == 0
    assert fake.api_key not in "".join(r.stdout + r.stderr for r in (started, taken, clicked, down, listed))


@pytest.mark.parametrize("failure", ["bare_502", "failed_to_start", "drop"])
def test_up_with_a_failing_create_leaves_nothing(fake: FakeDaytona, failure: str) -> None:
    fake.create_failure = failure
    failed = up(fake)
    assert failed.returncode == 20, failed.stdout + failed.stderr
    error = json.loads(failed.stdout)["error"]
    assert error["provider"] == "daytona"
    assert error["code"] in ("provider.api_error", "provider.unreachable")
    assert fake.live() == []


def test_revoked_key_down_reports_what_is_left_then_down_again_removes_it(fake: FakeDaytona) -> None:
    started = up(fake)
    assert started.returncode == 0, started.stderr
    session_id = json.loads(started.stdout)["id"]
    fake.revoke_key()
    down = run(fake, "down", session_id, "--json")
    assert down.returncode == 5, down.stdout + down.stderr
    assert session_id in down.stdout + down.stderr
    assert len(fake.live()) == 1
    fake.restore_key()
    again = run(fake, "down", session_id, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert fake.live() == []
