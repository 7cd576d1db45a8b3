"""deskctl preflight / up / screenshot / do / exec / down against the use.computer fake over real HTTP, each
command a separate process, and nothing left on the fake afterwards."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakes._cloud import pointer_at, run_deskctl
from fakes.use_computer import FakeUseComputer


def run(fake: FakeUseComputer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_deskctl(fake, *args, cwd=cwd)


def up(fake: FakeUseComputer, *extra: str) -> subprocess.CompletedProcess[str]:
    return run(fake, "up", "--provider", "use-computer", "--platform", "macos", "--geometry", "1024x768", "--json",
               "-o", "poll_interval=0.005", *extra)


def pointer(fake: FakeUseComputer, sandbox_id: str) -> tuple[int, int]:
    return pointer_at(fake.display_of(sandbox_id))


def test_preflight_up_screenshot_do_exec_down(fake: FakeUseComputer, tmp_path: Path) -> None:
    pre = run(fake, "preflight", "--platform", "macos", "--provider", "use-computer", "--json")
    assert pre.returncode == 0, pre.stdout + pre.stderr
    assert fake.log and {r.method for r in fake.log} == {"GET"}  # preflight only reads
    assert fake.api_key not in pre.stdout + pre.stderr

    started = up(fake, "-o", "ephemeral=false")
    assert started.returncode == 0, started.stdout + started.stderr
    info: dict[str, Any] = json.loads(started.stdout)
    session_id, sandbox_id = info["id"], info["resource_id"]
    assert info["geometry"] == "1024x768"
    assert [s["sandbox_id"] for s in fake.live()] == [sandbox_id]

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
    assert [r.body for r in fake.log if r.path.endswith("/keyboard/type")] == [{"text": "héllo"}]
    held = run(fake, "do", session_id, "mouse-down", "1", "1", "--json")
    assert held.returncode == 2, held.stdout + held.stderr
    assert json.loads(held.stdout)["error"]["code"] == "usage.unsupported"
    ran = run(fake, "exec", session_id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (ran.returncode, ran.stdout) == (3, "out\n"), ran.stderr
    assert "err" in ran.stderr

    down = run(fake, "down", session_id)
    assert down.returncode == 0, down.stdout + down.stderr
    assert fake.live() == []
    outputs = "".join(r.stdout + r.stderr for r in (started, taken, clicked, typed, held, ran, down))
    assert fake.api_key not in outputs
    home = Path(os.environ["DESKCTL_HOME"])
    stored = [p for p in home.rglob("*") if p.is_file()]
    assert stored, "the ledger was not written under DESKCTL_HOME"
    assert not [p for p in stored if fake.api_key.encode() in p.read_bytes()]  # never in the ledger


def test_up_of_an_ephemeral_sandbox_is_refused_and_creates_nothing(fake: FakeUseComputer) -> None:
    refused = up(fake)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "usage.detached_unsupported"
    assert "ephemeral=false" in error["remedy"]
    assert not [r for r in fake.log if r.method == "POST"]
    assert fake.live() == []


@pytest.mark.parametrize("failure", ["error_500", "drop"])
def test_up_with_a_create_that_fails_after_the_sandbox_exists(fake: FakeUseComputer, failure: str) -> None:
    fake.create_failure = failure
    failed = up(fake, "-o", "ephemeral=false")
    assert failed.returncode == 5, failed.stdout + failed.stderr  # honest: something may be left
    error = json.loads(failed.stdout)["error"]
    assert error["provider"] == "use-computer"
    assert error["code"] == "cleanup.incomplete"
    assert "cannot find" in error["message"] and "NOT ephemeral" in error["message"]
    assert len([r for r in fake.log if r.method == "POST"]) == 1
    # the fake keeps what the failed create made (not ephemeral); a test cleans its own fake up
    assert len(fake.live()) == 1


def test_revoked_key_down_reports_what_is_left_then_down_again_removes_it(fake: FakeUseComputer) -> None:
    started = up(fake, "-o", "ephemeral=false")
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


def test_preflight_windows_task_os_rules(fake: FakeUseComputer) -> None:
    checked = run(fake, "preflight", "--platform", "windows", "--provider", "use-computer", "--geometry", "native",
                  "--task-os", "linux", "--agent", "claude-code", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    refused = run(fake, "preflight", "--platform", "windows", "--provider", "use-computer", "--geometry", "native",
                  "--agent", "claude-code", "--json")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "compat.agent_unsupported" in refused.stdout
    assert {r.method for r in fake.log} == {"GET"}


def test_a_project_deskctl_toml_makes_up_persistent(fake: FakeUseComputer, tmp_path: Path) -> None:
    (tmp_path / "deskctl.toml").write_text('[providers.use-computer]\nephemeral = false\n')
    started = run(fake, "up", "--provider", "use-computer", "--platform", "macos", "--geometry", "native", "--json",
                  "-o", "poll_interval=0.005", cwd=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
    assert [s["ephemeral"] for s in fake.live()] == [False]
    down = run(fake, "down", json.loads(started.stdout)["id"], cwd=tmp_path)
    assert down.returncode == 0, down.stdout + down.stderr
    assert fake.live() == []
