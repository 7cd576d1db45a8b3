"""`deskctl mcp` as a real process, driven by the MCP SDK's own client over stdio and streamable HTTP, against a
real Xvfb desktop: the tools, a click seen by a real X client, the screenshot size, tool errors with deskctl's
codes, and the desktop's end (ledger row ended, no Xvfb left) on stdin close and on SIGTERM."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from PIL import Image

from _procs import alive as _alive
from deskctl.ledger import SessionRecord, open_ledger
from deskctl.providers._x11 import X11Address, read_cookie
from deskctl.providers.xvfb import XvfbProvider
from probe import Probe

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")

mcp = pytest.importorskip("mcp")

CLIPBOARD_TOOLS = {"clipboard_get", "clipboard_set"}
WINDOW_TOOLS = {"window_titles", "wait_for", "open_url"}
_XVFB = XvfbProvider.capabilities
# the harness tools are listed where the provider's capabilities say it has them (the test below checks xvfb does)
OBSERVE_TOOLS = ({"list_windows", "focus", "move_window"} if _XVFB.window_management else set()) | (
    {"accessibility_tree", "find", "click_element"} if _XVFB.accessibility else set())
BASE_TOOLS = ({"screenshot", "click", "double_click", "triple_click", "right_click", "middle_click", "mouse_down",
               "mouse_up", "move", "drag", "scroll", "type", "key", "key_down", "key_up", "wait", "cursor_position",
               "wait_until_stable"}
              | (CLIPBOARD_TOOLS if _XVFB.clipboard else set()) | (WINDOW_TOOLS if _XVFB.windows else set())
              | ({"browser_pages"} if _XVFB.browser else set()) | OBSERVE_TOOLS)
EXEC_TOOLS = {"exec"} | ({"launch"} if _XVFB.windows else set())


def _deskctl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "deskctl", *args]


def _sessions() -> list[SessionRecord]:
    with open_ledger() as book:
        return book.sessions(active=None)


def _only_session() -> SessionRecord:
    (record,) = _sessions()
    return record




def _leftovers(record: SessionRecord) -> list[str]:
    data = (record.handle or {}).get("data", {})
    left = [f"{p['role']} {p['pid']}" for p in data.get("procs", []) if _alive(int(p["pid"]))]
    if data.get("dir") and os.path.exists(data["dir"]):
        left.append(data["dir"])
    return left


def _probe_for(record: SessionRecord) -> Probe:
    data = (record.handle or {})["data"]
    return Probe.open(X11Address(display=str(data["display"])), read_cookie(data["cookie_file"]))


def _stdio_client(*args: str, env: dict[str, str] | None = None) -> Any:
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "deskctl", "mcp", *args],
                                       env={**os.environ, **(env or {})})
    return mcp.Client(params, read_timeout_seconds=120)


def _run(main: Callable[[], Awaitable[None]]) -> None:
    anyio.run(main)


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    body: dict[str, Any] = result.structured_content["error"]
    assert body["code"] in result.content[0].text
    return body


def test_stdio_tools_click_screenshot_errors_and_the_desktop_ends_when_stdin_closes() -> None:
    async def main() -> None:
        async with _stdio_client("--geometry", "800x600") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == BASE_TOOLS  # no exec without --allow-exec

            record = _only_session()
            assert record.status == "ready" and record.geometry == "800x600"
            with _probe_for(record) as probe:
                clicked = await client.call_tool("click", {"x": 123, "y": 45})
                assert not clicked.is_error, clicked
                await client.call_tool("right_click", {"x": 700, "y": 500})
                probe.wait_for(lambda p: p.releases(1) and p.releases(3), "a left and a right click")
                assert [e.pos for e in probe.presses(1)] == [(123, 45)]
                assert [e.pos for e in probe.presses(3)] == [(700, 500)]

                typed = await client.call_tool("type", {"text": "héllo"})
                assert not typed.is_error, typed
                probe.wait_for(lambda p: p.text() == "héllo", "the typed text")

            shot = await client.call_tool("screenshot", {})
            assert not shot.is_error
            image_block = next(block for block in shot.content if block.type == "image")
            assert image_block.mime_type == "image/png"
            with Image.open(io.BytesIO(base64.b64decode(image_block.data))) as img:
                assert (img.format, img.size) == ("PNG", (800, 600))
            assert shot.structured_content == {"width": 800, "height": 600}

            await client.call_tool("move", {"x": 321, "y": 222})
            where = await client.call_tool("cursor_position", {})
            assert where.structured_content == {"x": 321, "y": 222}

            outside = await client.call_tool("click", {"x": 800, "y": 10})
            assert _error(outside)["code"] == "geometry.out_of_bounds"
            assert _error(await client.call_tool("click", {"x": 1, "y": 1, "button": "thumb"}))["code"].startswith(
                "usage.")
            assert _error(await client.call_tool("wait", {"seconds": 3600}))["code"] == "usage.bad_value"
            # arguments the input schema rejects, and an unknown tool: the SDK's own errors, with a code too
            assert _error(await client.call_tool("click", {"x": "left", "y": 1}))["code"] == "usage.bad_tool_call"
            assert _error(await client.call_tool("teleport", {}))["code"] == "usage.bad_tool_call"
            waited = await client.call_tool("wait", {"seconds": 0})
            assert not waited.is_error
            # the server and the desktop are still up after tool errors
            again = await client.call_tool("screenshot", {})
            assert again.structured_content == {"width": 800, "height": 600}

    _run(main)
    # leaving `async with` closed the server's stdin: it destroyed the desktop and exited by itself (a SIGTERM
    # from the client's shutdown would have recorded "interrupted")
    record = _only_session()
    assert (record.status, record.reason) == ("ended", "closed")
    assert record.ended_at is not None and record.billable_seconds is not None
    assert _leftovers(record) == []


def test_exec_is_offered_only_with_allow_exec_and_runs_on_the_desktop() -> None:
    async def main() -> None:
        async with _stdio_client("--geometry", "640x480", "--allow-exec") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == BASE_TOOLS | EXEC_TOOLS
            display = (_only_session().handle or {})["data"]["display"]
            ran = await client.call_tool("exec", {"command": "echo $DISPLAY; echo oops >&2; exit 3"})
            assert not ran.is_error
            assert ran.structured_content == {"exit_code": 3, "stdout": f"{display}\n", "stderr": "oops\n",
                                              "merged": False}

    _run(main)
    assert _only_session().status == "ended"


def test_exec_output_is_cut_at_the_documented_size_and_says_how_much() -> None:
    from deskctl.mcp_server import MAX_EXEC_OUTPUT_CHARS

    async def main() -> None:
        async with _stdio_client("--geometry", "320x240", "--allow-exec") as client:
            # 20 MB in one result, once: the client held it all and a model's context could not
            ran = await client.call_tool("exec", {"command": "head -c 20000000 /dev/zero | tr '\\0' a; echo; echo END"})
            assert not ran.is_error
            out = ran.structured_content
            assert out["stdout"].startswith("a" * (MAX_EXEC_OUTPUT_CHARS // 2)) and out["stdout"].endswith("a\nEND\n")
            assert len(out["stdout"]) < MAX_EXEC_OUTPUT_CHARS + 100
            assert out["stdout_cut_chars"] == 20000005 - MAX_EXEC_OUTPUT_CHARS and "stderr_cut_chars" not in out
            assert f"stdout: {out['stdout_cut_chars']} of 20000005 characters cut" in ran.content[0].text
            small = await client.call_tool("exec", {"command": "echo hi"})
            assert small.structured_content == {"exit_code": 0, "stdout": "hi\n", "stderr": "", "merged": False}

    _run(main)


def test_harness_tools_clipboard_windows_open_url_launch_and_exec_options(tmp_path: Path) -> None:
    assert _XVFB.clipboard and _XVFB.windows, "xvfb implements the whole harness contract"
    # the desktop's own opener, xdg-open, found first on PATH: it records the URL and shows a titled window
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    opener = bin_dir / "xdg-open"
    opener.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {tmp_path}/opened\nexec xmessage -title "opened $1" "$1"\n')
    opener.chmod(0o755)
    title = f"deskctl-mcp-{os.getpid()}"

    async def main() -> None:
        async with _stdio_client("--geometry", "640x480", "--allow-exec",
                                 env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names >= CLIPBOARD_TOOLS | WINDOW_TOOLS | {"exec", "launch"}

            text = "héllo ✓ 'q' $x"
            assert not (await client.call_tool("clipboard_set", {"text": text})).is_error
            got = await client.call_tool("clipboard_get", {})
            assert got.structured_content == {"text": text}

            ran = await client.call_tool("exec", {"command": 'pwd; echo "$DK_A"', "cwd": str(tmp_path),
                                                  "env": {"DK_A": "two words"}})
            assert ran.structured_content["stdout"] == f"{tmp_path}\ntwo words\n", ran
            bad_env = await client.call_tool("exec", {"command": "true", "env": {"1BAD": "x"}})
            assert _error(bad_env)["code"] == "usage.bad_env"
            started = await client.call_tool("exec", {"command": "sleep 120", "background": True, "timeout": 10})
            pid = started.structured_content["pid"]
            assert isinstance(pid, int) and pid > 1
            assert _alive(pid)
            os.kill(pid, signal.SIGTERM)

            launched = await client.call_tool("launch", {"app": "xmessage", "args": ["-title", title, "hi"]})
            assert not launched.is_error, launched
            waited = await client.call_tool("wait_for", {"title": title, "timeout": 60})
            assert waited.structured_content == {"title": title}
            listed = await client.call_tool("window_titles", {})
            assert title in listed.structured_content["titles"]
            os.kill(launched.structured_content["pid"], signal.SIGTERM)

            url = "https://example.invalid/a?b=1"
            assert not (await client.call_tool("open_url", {"url": url})).is_error
            assert (await client.call_tool("wait_for", {"title": f"opened {url}", "timeout": 60})).structured_content \
                == {"title": f"opened {url}"}
            assert (tmp_path / "opened").read_text() == url

            late = await client.call_tool("wait_for", {"title": "no-such-window-anywhere", "timeout": 1})
            assert _error(late)["code"] == "wait.timeout"
            too_long = await client.call_tool("wait_for", {"title": "x", "timeout": 3600})
            assert _error(too_long)["code"] == "usage.bad_value"

    _run(main)  # the opener's xmessage ends with the desktop's X server
    assert _only_session().status == "ended"


def test_launch_needs_allow_exec_like_exec() -> None:
    async def main() -> None:
        async with _stdio_client("--geometry", "320x240") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert not names & {"exec", "launch"}
            assert _error(await client.call_tool("launch", {"app": "xterm"}))["code"] == "usage.bad_tool_call"

    _run(main)


def test_record_writes_a_trajectory_of_the_agents_actions(tmp_path: Path) -> None:
    record_dir = tmp_path / "run"

    async def main() -> None:
        async with _stdio_client("--geometry", "320x240", "--record", str(record_dir)) as client:
            await client.call_tool("click", {"x": 30, "y": 40})
            await client.call_tool("key", {"chord": "ctrl+s"})
            await client.call_tool("screenshot", {})  # not a step

    _run(main)
    rows = [json.loads(line) for line in (record_dir / "trajectory.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["type"] == "step"]
    assert [r["session"] for r in steps] == [_only_session().session_id] * 2
    assert [r["action"]["kind"] for r in steps] == ["click", "key"]
    assert (steps[0]["action"]["x"], steps[0]["action"]["y"]) == (30, 40)


def _wait_for_line(proc: subprocess.Popen[str], marker: str) -> str:
    """Read the process's stderr until a line contains ``marker``, however long a loaded machine takes to get there:
    until that line comes, or the process has ended without it (no fixed deadline; the test's own timeout bounds
    the wait). It reads the pipe itself: a buffered ``readline`` can hold the marker's line in its buffer while
    ``select`` waits on an empty pipe (several lines written at once, as under load)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    seen = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        chunk = os.read(fd, 65536) if ready else b""
        seen += chunk
        lines = seen.decode(errors="replace").splitlines(keepends=True)
        for line in lines:
            if marker in line and line.endswith("\n"):
                return line
        if (ready and not chunk) or (not ready and proc.poll() is not None):
            break  # end of stderr, or the process ended and wrote nothing more
    proc.kill()
    raise AssertionError(f"no {marker!r} from deskctl mcp (exit {proc.wait()}): {seen.decode(errors='replace')}")


@contextlib.asynccontextmanager
async def _http_client(url: str, token: str | None) -> AsyncIterator[Any]:
    """The official client over streamable HTTP, sending ``token`` as a bearer token (None: no header)."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with create_mcp_http_client(headers=headers) as http, \
            mcp.Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client:
        yield client


def test_http_needs_the_printed_bearer_token_and_a_config_file_cannot_allow_exec_or_bind(tmp_path: Path) -> None:
    # a deskctl.toml in a parent folder (a cloned project) cannot turn on exec or open the port to the network
    project = tmp_path / "cloned" / "sub"
    project.mkdir(parents=True)
    for key in ("allow-exec = true", 'bind = "0.0.0.0"'):
        (project.parent / "deskctl.toml").write_text(f"[defaults]\n{key}\n")
        refused = subprocess.run(_deskctl_argv("mcp", "--transport", "http", "--port", "0", "--json"), cwd=project,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stderr
        error = json.loads(refused.stdout)["error"]
        assert error["code"] == "config.invalid" and "only the command line may set" in error["message"], error
        assert _sessions() == []

    proc = subprocess.Popen(_deskctl_argv("mcp", "--transport", "http", "--port", "0", "--geometry", "320x240",
                                          "--allow-exec"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_line(proc, "serving MCP on http://")
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        header = proc.stdout.readline().strip()
        assert header.startswith("Authorization: Bearer ")
        token = header.removeprefix("Authorization: Bearer ")

        async def main() -> None:
            for wrong in (None, token[:-1] + ("x" if token[-1] != "x" else "y")):
                # the client library reports the 401 as an error response; the status itself is checked below
                with pytest.raises(Exception, match=r"unhandled errors|error response"):
                    async with _http_client(url, wrong) as client:
                        await client.list_tools()
            async with _http_client(url, token) as client:
                result = await client.call_tool("exec", {"command": "echo tokened"})
                assert result.structured_content["stdout"] == "tokened\n"

        _run(main)
        import httpx

        answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=60)
        assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer")
        assert answer.json()["error"]["code"] == "mcp.unauthorized" and token not in answer.text
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _leftovers(_only_session()) == []


def test_a_bind_beyond_loopback_is_warned_about_on_stderr() -> None:
    proc = subprocess.Popen(_deskctl_argv("mcp", "--transport", "http", "--bind", "0.0.0.0", "--port", "0",
                                          "--geometry", "320x240"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _wait_for_line(proc, "WARNING")
        assert line.startswith("WARNING: --bind 0.0.0.0 serves this desktop beyond this machine"), line
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_streamable_http_serves_the_desktop_and_sigterm_destroys_it() -> None:
    proc = subprocess.Popen(_deskctl_argv("mcp", "--transport", "http", "--port", "0", "--geometry", "640x400",
                                          "--json"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _wait_for_line(proc, "serving MCP on http://")
        url = line.rsplit(" ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        token = ready.pop("token")
        assert ready == {"id": _only_session().session_id, "provider": "xvfb", "geometry": "640x400", "url": url}
        assert isinstance(token, str) and len(token) >= 32

        async def main() -> None:
            async with _http_client(url, token) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert names == BASE_TOOLS
                record = _only_session()
                with _probe_for(record) as probe:
                    await client.call_tool("double_click", {"x": 600, "y": 17})
                    probe.wait_for(lambda p: len(p.releases(1)) >= 2, "a double click")
                    assert [e.pos for e in probe.presses(1)] == [(600, 17), (600, 17)]
                shot = await client.call_tool("screenshot", {})
                assert shot.structured_content == {"width": 640, "height": 400}

        _run(main)
        # a client that disconnects from the HTTP endpoint does not end the server: only a signal does
        assert proc.poll() is None
        assert _only_session().status == "ready"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert json.loads(out)["error"]["code"] == "interrupted"
    record = _only_session()
    assert (record.status, record.reason) == ("failed", "interrupted")
    assert record.ended_at is not None
    assert _leftovers(record) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_a_stdio_server_with_a_client_attached_destroys_the_desktop(signum: signal.Signals) -> None:
    proc = subprocess.Popen(_deskctl_argv("mcp", "--geometry", "320x240"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "test", "version": "1"}}}
        proc.stdin.write(json.dumps(hello) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "deskctl"
        assert _only_session().status == "ready"
        # stdin stays open: the server's reader is blocked on it when the signal comes
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert f"error: interrupted by {signum.name}; the desktop was cleaned up (interrupted)" in err
    record = _only_session()
    assert (record.status, record.reason) == ("failed", "interrupted")
    assert _leftovers(record) == []


def test_a_preflight_failure_exits_3_before_serving_and_creates_nothing() -> None:
    proc = subprocess.run(_deskctl_argv("mcp", "--platform", "windows"), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    assert "serving MCP" not in proc.stderr
    assert [r.status for r in _sessions()] == []


def test_a_port_in_use_is_a_usage_error_before_any_desktop(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run(_deskctl_argv("mcp", "--transport", "http", "--port", str(port), "--json"),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "usage.bad_option"
    assert error["message"].startswith(f"cannot listen on 127.0.0.1:{port}: ")
    assert _sessions() == []


def test_without_the_mcp_sdk_the_command_names_the_extra_and_exits_2() -> None:
    # the real CLI in a process where the SDK cannot be imported (as when the extra is not installed)
    code = ("import sys; sys.modules['mcp'] = None; from deskctl.cli import main; "
            "main(['mcp', '--geometry', '320x240'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert "deskctl mcp needs the MCP SDK" in proc.stderr
    assert "(usage.missing_extra)" in proc.stderr
    assert "remedy: pip install 'mcp>=2.3,<3' (the mcp extra: pip install '.[mcp]' in a deskctl checkout)" \
        in proc.stderr
    assert _sessions() == []


def test_the_desktop_reaching_its_time_limit_ends_the_server_with_exit_4(tmp_path: Path) -> None:
    # stdin stays open (a client still attached): the limit alone must end the desktop and the process
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        proc = subprocess.Popen(_deskctl_argv("mcp", "--geometry", "320x240", "--max-minutes", "0.02"),
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
    err = log.read_text()
    assert proc.returncode == 4, err
    assert "(budget.exceeded)" in err
    record = _only_session()
    assert (record.status, record.reason) == ("ended", "budget.exceeded")
    assert _leftovers(record) == []
