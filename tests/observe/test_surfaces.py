"""The observe actions through the generated surfaces: ``deskctl do`` (a real CLI process) and the MCP server (the
official client): windows, focus, moves, a stable screen, the tree; a screenshot for a model and a click in its
image's space."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from _cli import deskctl as cli


@pytest.fixture
def session() -> Iterator[str]:
    up = cli("up", "--provider", "xvfb", "--geometry", "800x600", "--json", check=True)
    session_id = str(json.loads(up.stdout)["id"])
    try:
        yield session_id
    finally:
        cli("down", session_id)


def _json(*args: str) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_do_list_windows_focus_move_window_stable_and_a11y(session: str) -> None:
    cli("exec", session, "--background", "xmessage -title 'deskctl surfaces' hello", check=True)
    cli("do", session, "wait-for", "deskctl surfaces", check=True)
    # the title is set before the window is mapped, and without a window manager only mapped windows are listed
    deadline = time.monotonic() + 30
    while not [w for w in _json("do", session, "list-windows")["windows"] if w["title"] == "deskctl surfaces"]:
        assert time.monotonic() < deadline, "the xmessage window was never listed"
    listed = _json("do", session, "list-windows")["windows"]
    (window,) = [w for w in listed if w["title"] == "deskctl surfaces"]
    assert window["class"] == "Xmessage" and len(window["geometry"]) == 4
    plain = cli("do", session, "list-windows", check=True).stdout.splitlines()
    assert any(json.loads(line)["title"] == "deskctl surfaces" for line in plain)  # one JSON object a line

    focused = _json("do", session, "focus", "deskctl surfaces")["window"]
    assert focused["focused"] and focused["id"] == window["id"]
    moved = _json("do", session, "move-window", str(window["id"]), "30", "40", "300", "120")["window"]
    assert moved["geometry"][:2] == [30, 40]
    assert _json("do", session, "wait-until-stable", "--quiet-ms", "100")["seconds"] >= 0.1
    tree = _json("do", session, "a11y", "--max-depth", "3")["tree"]
    assert tree["tree"]["role"] == "desktop"

    missing = cli("do", session, "focus", "no such window", "--json")
    assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["code"] == "usage.not_found"


def test_mcp_screenshot_for_a_model_and_a_click_in_its_space() -> None:
    mcp = pytest.importorskip("mcp")
    import anyio

    params = mcp.StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                       args=["-m", "deskctl", "mcp", "--provider", "xvfb", "--geometry", "800x600"])

    async def main() -> None:
        async with mcp.Client(params, read_timeout_seconds=120) as client:
            shot = await client.call_tool("screenshot", {"max_size": "400x400"})
            transform = shot.structured_content["transform"]
            assert transform["size"] == [400, 300] and "transform" in shot.content[1].text
            await client.call_tool("move", {"x": 100, "y": 50, "space": transform})
            where = await client.call_tool("cursor_position", {})
            assert (where.structured_content["x"], where.structured_content["y"]) == (201, 101)
            windows = await client.call_tool("list_windows", {})
            assert not windows.is_error
            bad = await client.call_tool("click", {"x": 400, "y": 0, "space": transform})
            assert bad.is_error and bad.structured_content["error"]["code"] == "geometry.out_of_bounds"

    anyio.run(main)


def test_a_do_action_run_in_this_process_leaves_full_drivers_behind(session: str) -> None:
    """`deskctl do ID click` takes the wire driver (no python-xlib) for its one action; a harness that calls the
    CLI's main() in its own process gets full drivers afterwards, and windows are listed through whichever
    driver a session holds (this host has no python3-xlib for the in-desktop fallback)."""
    from deskctl.core import x11, x11wire

    cli("do", session, "click", "5", "5", check=True)  # in this process: the fast `do` path
    assert not x11wire.wire_preferred()
    cli("exec", session, "--background", "xmessage -title 'after a do' hello", check=True)
    cli("do", session, "wait-for", "after a do", check=True)
    deadline = time.monotonic() + 30
    while not [w for w in _json("do", session, "list-windows")["windows"] if w["title"] == "after a do"]:
        assert time.monotonic() < deadline, "the xmessage window was never listed"
    x11.prefer_wire()
    try:
        from deskctl import attach

        desk = attach(session)
        try:
            desk.click(6, 6)  # the session's driver is now a wire driver
            assert any(w.title == "after a do" for w in desk.windows())
        finally:
            desk.release()
    finally:
        x11.prefer_wire(False)
