"""The ``memory`` provider through deskctl's real surfaces (the CLI as child processes, the MCP SDK's client, the
library), beyond the conformance suite (which runs on it too: ``pytest tests/conformance -k memory``): what its
screen shows, the text typed into it, its preflight and cost, refusals, and leftovers found by label."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from _cli import deskctl
from _procs import alive
from deskctl.ledger import open_ledger
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from deskctl.providers.memory import MemoryProvider, MemoryScreen


def _record(session_id: str) -> Any:
    with open_ledger() as book:
        return book.get(session_id)


def test_cli_up_do_screenshot_exec_down_across_processes(tmp_path: Path) -> None:
    up = deskctl("up", "--provider", "memory", "--geometry", "320x200", "--json", check=True)
    session_id = json.loads(up.stdout)["id"]
    handle = RemoteHandle.from_dict(_record(session_id).handle)
    directory = Path(handle.data["dir"])
    try:
        deskctl("do", session_id, "click", "10", "12", check=True)
        deskctl("do", session_id, "right-click", "300", "190", check=True)
        deskctl("do", session_id, "type", "hé there", check=True)
        shot = tmp_path / "shot.png"
        deskctl("screenshot", session_id, "-o", str(shot), check=True)
        with Image.open(shot) as png:
            image = png.convert("RGB")
        assert image.size == (320, 200)
        assert image.getpixel((10, 12)) == (255, 0, 0)  # a left click leaves a red mark
        assert image.getpixel((300, 190)) == (0, 0, 255)  # a right click a blue one
        assert image.getpixel((100, 100)) == (0, 0, 0)  # the rest of the screen is untouched
        ran = deskctl("exec", session_id, "--", 'cat "$DESKCTL_MEMORY_DESKTOP/typed.txt"; echo; '
                      "xdpyinfo | grep dimensions")
        assert ran.returncode == 0, ran.stderr
        typed, dimensions = ran.stdout.splitlines()
        assert typed == "hé there"
        assert "320x200 pixels" in dimensions
        listed = json.loads(deskctl("ls", "--json", check=True).stdout)
        assert session_id in json.dumps(listed)
    finally:
        down = deskctl("down", session_id)
    assert down.returncode == 0, down.stderr
    assert not directory.exists()
    record = _record(session_id)
    assert record.status == "ended"
    assert record.cost_usd == 0  # a known price of zero, not an unknown one


def test_preflight_is_ready_with_a_known_cost_of_zero() -> None:
    done = deskctl("preflight", "--provider", "memory", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ready"] == ["memory"]
    rows = {row["code"]: row for row in report["results"]}
    assert rows["memory.ready"]["status"] == "pass"
    assert "$0/h" in rows["budget.projection"]["message"]


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (["-o", "speed=1"], "usage.unknown_option", 2),
        (["--start-url", "http://example.invalid/"], "usage.unsupported", 2),
        (["--platform", "windows"], "compat.platform_unsupported", 3),
    ],
)
def test_what_it_cannot_do_is_refused_with_a_code_and_leaves_nothing(args: list[str], code: str,
                                                                     exit_code: int) -> None:
    done = deskctl("up", "--provider", "memory", "--json", *args)
    assert done.returncode == exit_code, done.stdout + done.stderr
    assert json.loads(done.stdout)["error"]["code"] == code
    assert "Traceback" not in done.stderr
    assert MemoryProvider().list_owned() == []


def test_a_folder_left_by_a_dead_create_is_found_by_its_session_label_and_destroyed_twice() -> None:
    from deskctl.paths import runtime_dir

    provider = MemoryProvider()
    orphan = runtime_dir() / "memory" / "dk-orphan0001"
    orphan.mkdir(parents=True)  # what a create killed before its marker was written leaves
    (found,) = provider.list_owned({LABEL_SESSION: "dk-orphan0001"})
    assert found.data["dir"] == str(orphan)
    assert provider.is_alive(found)
    provider.destroy(found)
    provider.destroy(found)  # already gone: success
    assert not orphan.exists()
    assert not provider.is_alive(found)


def test_exec_leftovers_end_with_the_desktop() -> None:
    import deskctl as api

    desk = api.open_desktop("memory", geometry="200x100")
    started = desk.exec("sleep 300", background=True)
    assert started.pid is not None and alive(started.pid)
    desk.close()
    assert not alive(started.pid)


def test_mcp_tools_drive_the_memory_screen() -> None:
    mcp = pytest.importorskip("mcp")
    import anyio

    async def main() -> None:
        params = mcp.StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                           args=["-m", "deskctl", "mcp", "--provider", "memory", "--geometry",
                                                 "400x300", "--allow-exec"])
        async with mcp.Client(params, read_timeout_seconds=120) as client:
            with open_ledger() as book:
                (record,) = book.sessions(active=None)
            screen = MemoryScreen(record.handle["data"]["dir"])
            assert not (await client.call_tool("click", {"x": 123, "y": 45})).is_error
            events, _ = screen.events()
            assert [(e["kind"], e["x"], e["y"], e["button"]) for e in events if e["kind"] != "motion"] == [
                ("press", 123, 45, 1), ("release", 123, 45, 1)]
            shot = await client.call_tool("screenshot", {})
            assert shot.structured_content == {"width": 400, "height": 300}
            assert not (await client.call_tool("clipboard_set", {"text": "from mcp ✓"})).is_error
            ran = await client.call_tool("exec", {"command": "xclip -selection clipboard -o"})
            assert ran.structured_content["stdout"] == "from mcp ✓"
            outside = await client.call_tool("click", {"x": 400, "y": 1})
            assert outside.is_error and outside.structured_content["error"]["code"] == "geometry.out_of_bounds"
        return None

    anyio.run(main)
    with open_ledger() as book:
        (record,) = book.sessions(active=None)
    assert record.status == "ended"
    assert not Path(record.handle["data"]["dir"]).exists()
