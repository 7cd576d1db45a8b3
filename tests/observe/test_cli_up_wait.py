"""``deskctl up --wait-for ...``: the CLI waits for the application after the desktop, and a condition that never
holds is an infrastructure failure (exit 20) that leaves no desktop behind."""

from __future__ import annotations

import json
from pathlib import Path

from _cli import deskctl


def test_up_wait_for_a_title_that_never_comes_exits_20_and_destroys_the_desktop() -> None:
    done = deskctl("up", "--provider", "xvfb", "--geometry", "640x480", "--wait-for", "never such a window",
                   "--ready-timeout", "2", "--json")
    assert done.returncode == 20, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "readiness.timeout"
    assert "never such a window" in error["message"]
    listed = deskctl("ls", "--all", "--json")
    rows = json.loads(listed.stdout)
    rows = rows.get("sessions", rows) if isinstance(rows, dict) else rows
    assert len(rows) == 1 and rows[0]["status"] in ("ended", "failed")
    display = rows[0].get("display")
    if display:
        assert not Path(f"/tmp/.X11-unix/X{str(display).lstrip(':')}").exists()


def test_up_wait_for_command_then_down(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    done = deskctl("up", "--provider", "xvfb", "--geometry", "640x480", "--wait-for-command",
                   f"touch {flag}", "--json")
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout)["id"]
    assert flag.exists()
    assert deskctl("down", session).returncode == 0


def test_up_with_two_conditions_is_a_usage_error() -> None:
    done = deskctl("up", "--provider", "xvfb", "--wait-for", "a", "--wait-for-command", "true", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["code"] == "usage.invalid"
    assert json.loads(deskctl("ls", "--all", "--json").stdout) in ([], {"sessions": []})
