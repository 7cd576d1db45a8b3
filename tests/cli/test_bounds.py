"""A wedged server can always be stopped, and no accepted value breaks an output (docs/reliability.md, "A desktop
is always destroyed" and "Every input is bounded"): real `deskctl mcp` processes driven by the MCP SDK's own client
or its wire format, real Xvfb desktops, real `deskctl up` / `ls` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from _cli import deskctl
from _procs import alive, ledger_sessions, wait_until, xvfb_leftovers
from deskctl.providers._x11 import X11Address, read_cookie
from probe import Probe

mcp = pytest.importorskip("mcp")

#: what "it finished" may take on a loaded machine (never a measure of speed)
GENEROUS = 120.0


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    body: dict[str, Any] = result.structured_content["error"]
    return body


def _marked_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read() and alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_sigterm_during_the_longest_action_destroys_the_desktop_and_a_huge_scroll_is_refused() -> None:
    """The round-3 incident: one `scroll` with dy=1e9 held the X connection for hours, and SIGTERM left the session
    `destroying`. Now the scroll is refused before it runs, and a SIGTERM while the longest accepted action (100k
    characters typed) runs ends the desktop: Xvfb gone, ledger row ended."""
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "deskctl", "mcp", "--geometry", "320x240"],
                                       env=dict(os.environ))

    async def main() -> None:
        async with mcp.Client(params, read_timeout_seconds=GENEROUS) as client:
            (record,) = ledger_sessions()
            server_pid = int(record.owner.rsplit(":", 1)[1])
            # 200000 wheel clicks ran (the old code took seconds and hundreds of MB); 1e9 ran for hours
            for dy in (200_000, 10**9, -(10**9)):
                refused = await client.call_tool("scroll", {"x": 10, "y": 10, "dy": dy})
                assert _error(refused)["code"] == "usage.out_of_range", refused
            data = (record.handle or {})["data"]
            with Probe.open(X11Address(display=str(data["display"])), read_cookie(data["cookie_file"])) as probe:
                async with anyio.create_task_group() as group:
                    async def type_the_most() -> None:
                        try:
                            await client.call_tool("type", {"text": "a" * 100_000})
                        except Exception:  # the server is killed under the call: its answer is moot
                            pass

                    group.start_soon(type_the_most)
                    await anyio.to_thread.run_sync(
                        lambda: probe.wait_for(lambda p: len(p.key_presses()) > 50, "the typing under way"))
                    os.kill(server_pid, signal.SIGTERM)
                    await anyio.to_thread.run_sync(
                        lambda: wait_until(lambda: not alive(server_pid), "the server's exit", GENEROUS))
                    group.cancel_scope.cancel()

    anyio.run(main)
    (record,) = ledger_sessions()
    assert (record.status, record.reason) == ("failed", "interrupted"), record
    assert xvfb_leftovers(record) == []


def test_stdin_closed_during_a_long_exec_destroys_the_desktop() -> None:
    """A client that goes away (stdin EOF) while a tool call runs for an hour: the server stops serving at once and
    the desktop is destroyed (the server used to wait for the call to end)."""
    marker = f"deskctl-bounds-{uuid.uuid4().hex[:12]}"
    proc = subprocess.Popen([sys.executable, "-m", "deskctl", "mcp", "--geometry", "320x240", "--allow-exec"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

        def send(message: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}})
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "exec", "arguments": {"command": f"sleep 3600; : {marker}", "timeout": 7200}}})
        wait_until(lambda: _marked_processes(marker), "the command running on the desktop", GENEROUS)
        proc.stdin.close()
        proc.wait(timeout=GENEROUS)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    (record,) = ledger_sessions()
    assert (record.status, record.reason) == ("ended", "closed"), record
    assert xvfb_leftovers(record) == []
    assert _marked_processes(marker) == []


def test_the_biggest_ttl_accepted_still_shows_in_ls_json_and_a_bigger_one_is_refused(tmp_path: Path) -> None:
    """`up --ttl 99999999999999h --json` answered `internal` with the desktop up, and `ls --json` failed for good."""
    too_long = deskctl("up", "--ttl", "99999999999999h", "--geometry", "320x240", "--json")
    assert too_long.returncode == 2, too_long.stderr
    assert json.loads(too_long.stdout)["error"]["code"] == "usage.bad_duration"
    for flag, value in (("--ttl", "367d"), ("--max-minutes", "1e300"), ("--max-usd", "1e308")):
        refused = deskctl("up", flag, value, "--geometry", "320x240", "--json")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert json.loads(refused.stdout)["error"]["code"] in ("usage.bad_duration", "usage.bad_limit")
    assert ledger_sessions() == []  # refused before any desktop or ledger row

    up = deskctl("up", "--ttl", "366d", "--max-minutes", str(366 * 24 * 60), "--geometry", "320x240", "--json",
                 check=True)
    session_id = json.loads(up.stdout)["id"]
    try:
        listed = deskctl("ls", "--json", check=True)
        (row,) = json.loads(listed.stdout)["sessions"]
        assert row["id"] == session_id and row["expires_at"].startswith(("2027-", "2028-"))
        assert deskctl("ls", check=True).stdout.count(session_id) == 1
    finally:
        deskctl("down", session_id, check=True)
    (record,) = ledger_sessions()
    assert record.status == "ended" and xvfb_leftovers(record) == []
