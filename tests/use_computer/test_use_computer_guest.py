"""The harness side of the use-computer provider (issue 14) that the conformance suite does not reach: what the
provider SENDS to a macOS or Windows sandbox (the fake runs bash on Linux, so those lines are checked in its
request log, with canned exec answers where a Linux shell could not run them), and the edges of files and the
pointer position over real HTTP against the fake (404s, a retried upload, Retina points).

What this cannot show (no macOS or Windows here) is listed as UNVERIFIED in docs/use_computer.md."""

from __future__ import annotations

import hashlib
import os
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deskctl.errors import ProviderApiError, SessionLost, UsageError
from deskctl.providers.base import RemoteHandle
from deskctl.providers.use_computer import UseComputerProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import pointer_at, ready_handle
from fakes.use_computer import FakeUseComputer

_SIZES = {"macos": "1024x768", "ubuntu": "1920x1080", "windows": "1024x768"}


def _spec(platform: str) -> DesktopSpec:
    return DesktopSpec.build(provider="use-computer", platform=platform, geometry=_SIZES[platform])


def _open(provider: UseComputerProvider, platform: str) -> RemoteHandle:
    handle = provider.create(_spec(platform), f"dk-{platform[:3]}guest", {})
    provider.wait_ready(handle, time.monotonic() + 30)
    return handle


@pytest.fixture(params=["macos", "windows", "ubuntu"])
def sandbox(request: pytest.FixtureRequest, provider: UseComputerProvider,
            fake: FakeUseComputer) -> Iterator[RemoteHandle]:
    yield from ready_handle(provider, fake, _spec(request.param), f"dk-{request.param[:3]}guest")


def _sent(fake: FakeUseComputer) -> list[dict[str, Any]]:
    """The bodies of every exec request, in order."""
    return [r.body for r in fake.log if r.method == "POST" and r.path.endswith("/exec")]


def _answer(fake: FakeUseComputer, stdout: str = "", code: int = 0, times: int = 1) -> None:
    """The next ``times`` exec requests are answered with this result (logged, not run)."""
    fake.inject("POST", r"/exec$", 200, {"return_code": code, "stdout": stdout, "stderr": ""}, times=times)


# -- macOS: posix lines without setsid, pbcopy/pbpaste/osascript/open ---------------------------------------------
@pytest.mark.parametrize("sandbox", ["macos"], indirect=True)
def test_macos_exec_options_are_sh_lines_without_setsid(provider: UseComputerProvider, fake: FakeUseComputer,
                                                        sandbox: RemoteHandle) -> None:
    _answer(fake, "/Users/lume/w s\na'b\n")
    provider.exec(sandbox, "pwd; echo $DK_A", cwd="/Users/lume/w s", env={"DK_A": "a'b"})
    _answer(fake, "4242\n")
    started = provider.exec(sandbox, "open -a TextEdit", background=True, user="lume")
    assert started.pid == 4242
    first, second = _sent(fake)[-2:]
    assert first == {"command": "cd -- '/Users/lume/w s' || exit 2; env 'DK_A=a'\"'\"'b' sh -c 'pwd; echo $DK_A'",
                     "timeout": 60}  # no "shell": macOS exec is SSH
    assert second["command"] == ("nohup sudo -n -H -u lume -- sh -c 'open -a TextEdit' </dev/null >/dev/null 2>&1 "
                                 "& echo $!")


@pytest.mark.parametrize("sandbox", ["macos"], indirect=True)
def test_macos_clipboard_windows_and_open_url(provider: UseComputerProvider, fake: FakeUseComputer,
                                              sandbox: RemoteHandle) -> None:
    _answer(fake)
    provider.clipboard_set(sandbox, "héllo ✓")
    _answer(fake, "from the mac")
    assert provider.clipboard_get(sandbox) == "from the mac"
    _answer(fake, "Finder\nTextEdit — notes\n")
    assert provider.window_titles(sandbox) == ["Finder", "TextEdit — notes"]
    _answer(fake, "77\n")
    provider.open_url(sandbox, "https://example.invalid/?a=1&b=2")
    lines = [b["command"] for b in _sent(fake)[-4:]]
    assert lines[0].endswith("| base64 -D | pbcopy") and "aMOpbGxvIOKckw==" in lines[0]
    assert lines[1] == "pbpaste"
    assert lines[2].startswith("osascript -e 'tell application \"System Events\"")
    assert lines[3] == ("nohup sh -c 'open '\"'\"'https://example.invalid/?a=1&b=2'\"'\"'' "
                        "</dev/null >/dev/null 2>&1 & echo $!")


# -- Windows: PowerShell (the default) or cmd ----------------------------------------------------------------------
@pytest.mark.parametrize("sandbox", ["windows"], indirect=True)
def test_windows_exec_options_are_powershell(provider: UseComputerProvider, fake: FakeUseComputer,
                                             sandbox: RemoteHandle) -> None:
    _answer(fake, "out\r\n")
    provider.exec(sandbox, "Get-ChildItem", cwd="C:\\Users\\it's me", env={"DK_A": "x y"})
    _answer(fake, "5120\r\n")
    assert provider.exec(sandbox, "notepad.exe", background=True).pid == 5120
    first, second = _sent(fake)[-2:]
    assert first == {"command": "Set-Location -LiteralPath 'C:\\Users\\it''s me'; $env:DK_A = 'x y'; Get-ChildItem",
                     "timeout": 60, "shell": "powershell"}
    assert second["command"] == ("(Start-Process -PassThru -WindowStyle Hidden -FilePath cmd.exe -ArgumentList "
                                 "'/c notepad.exe').Id")
    before = len(fake.log)
    with pytest.raises(UsageError) as info:
        provider.exec(sandbox, "whoami", user="Administrator")
    assert info.value.code == "usage.unsupported" and info.value.provider == "use-computer"
    assert len(fake.log) == before  # refused before anything was sent


@pytest.mark.parametrize("sandbox", ["windows"], indirect=True)
def test_windows_clipboard_and_windows_in_powershell(provider: UseComputerProvider, fake: FakeUseComputer,
                                                     sandbox: RemoteHandle) -> None:
    _answer(fake)
    provider.clipboard_set(sandbox, "héllo")
    _answer(fake, "héllo\r\n")
    assert provider.clipboard_get(sandbox) == "héllo"
    _answer(fake, "Notepad\r\nUntitled - Paint\r\n")
    assert provider.window_titles(sandbox) == ["Notepad", "Untitled - Paint"]
    lines = [b["command"] for b in _sent(fake)[-3:]]
    assert lines[0] == ("Set-Clipboard -Value ([Text.Encoding]::UTF8.GetString([Convert]::FromBase64String("
                        "'aMOpbGxv')))")
    assert lines[1].endswith("Get-Clipboard -Raw") and not lines[1].startswith("powershell")
    assert lines[2].startswith("Get-Process | Where-Object")


def test_windows_with_the_cmd_shell_sends_cmd_lines(uc_env: FakeUseComputer) -> None:
    provider = UseComputerProvider({"poll_interval": 0.005, "shell": "cmd"})
    try:
        handle = _open(provider, "windows")
        try:
            _answer(uc_env)
            provider.exec(handle, "dir", cwd="C:\\Temp", env={"K": "v"})
            assert _sent(uc_env)[-1] == {"command": 'cd /d "C:\\Temp" && set "K=v" && dir', "timeout": 60,
                                         "shell": "cmd"}
        finally:
            provider.destroy(handle)
    finally:
        provider.close()


@pytest.mark.parametrize("sandbox", ["windows"], indirect=True)
def test_windows_files_use_windows_paths(provider: UseComputerProvider, fake: FakeUseComputer,
                                         sandbox: RemoteHandle, tmp_path: Path) -> None:
    local = tmp_path / "a.txt"
    local.write_bytes(b"win")
    _answer(fake)  # New-Item for the parent
    # the PUT goes to the fake's real /files, which takes the Windows path as a relative name in the sandbox's home
    provider.upload(sandbox, str(local), "C:\\Users\\me\\a.txt")
    assert _sent(fake)[-1]["command"] == "New-Item -ItemType Directory -Force -Path 'C:\\Users\\me' | Out-Null"
    put = next(r for r in reversed(fake.log) if r.method == "PUT")
    assert put.query == {"path": ["C:\\Users\\me\\a.txt"]} and put.body == {"bytes": 3}
    folder = tmp_path / "tree"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x").write_text("x")
    _answer(fake, times=3)  # New-Item, tar -x, Remove-Item
    provider.upload(sandbox, str(folder), "C:\\Users\\me\\tree")
    mkdir, untar, remove = (b["command"] for b in _sent(fake)[-3:])
    staged = untar.split("'")[1]
    assert staged.startswith("C:\\Windows\\Temp\\deskctl-cp-") and staged.endswith(".tar")
    assert untar == f"tar -xf '{staged}' -C 'C:\\Users\\me\\tree'"
    assert remove == f"Remove-Item -Recurse -Force -LiteralPath '{staged}'"
    assert mkdir.startswith("New-Item")
    _answer(fake, "none\r\n")
    with pytest.raises(UsageError) as info:
        provider.download(sandbox, "C:\\nope.txt", str(tmp_path / "nope"))
    assert info.value.code == "usage.no_such_file"
    assert _sent(fake)[-1]["command"].startswith("if (Test-Path -LiteralPath 'C:\\nope.txt' -PathType Container)")


@pytest.mark.parametrize("sandbox", ["ubuntu"], indirect=True)
def test_ubuntu_commands_get_the_desktop_display_unless_set(provider: UseComputerProvider, fake: FakeUseComputer,
                                                            sandbox: RemoteHandle) -> None:
    assert provider.exec(sandbox, "echo $DISPLAY").stdout == fake.display_of(sandbox.resource_id) + "\n"
    assert _sent(fake)[-1]["command"] == 'export DISPLAY="${DISPLAY:-:0}"; echo $DISPLAY'
    fake.exec_display = False  # an exec environment without DISPLAY: the desktop's :0 (spec) is named
    assert provider.exec(sandbox, "echo $DISPLAY").stdout == ":0\n"


# -- files over real HTTP: 404s, retries, big files ---------------------------------------------------------------
@pytest.mark.parametrize("sandbox", ["ubuntu"], indirect=True)
def test_a_missing_file_is_no_such_file_but_a_gone_sandbox_is_session_lost(
        provider: UseComputerProvider, fake: FakeUseComputer, sandbox: RemoteHandle, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        provider._get_file(sandbox, f"{tmp_path}/nope", tmp_path / "out")
    assert info.value.code == "usage.no_such_file"
    with pytest.raises(UsageError) as info:  # the spec: the parent must exist
        provider._put_file(sandbox, Path(__file__), f"{tmp_path}/no/parent")
    assert info.value.code == "usage.no_such_file"
    assert [r.status for r in fake.log if r.path.endswith("/files")] == [404, 404]
    other = _open(provider, "macos")
    provider.destroy(other)
    with pytest.raises(SessionLost):
        provider._get_file(other, f"{tmp_path}/nope", tmp_path / "out")


@pytest.mark.parametrize("sandbox", ["ubuntu"], indirect=True)
def test_a_retried_upload_sends_the_whole_file_again(provider: UseComputerProvider, fake: FakeUseComputer,
                                                     sandbox: RemoteHandle, tmp_path: Path) -> None:
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(5 * 1024 * 1024 + 3))
    remote = f"{fake.home_of(sandbox.resource_id)}/big.bin"
    fake.inject("PUT", r"/files$", 503, {"error": "busy"})
    provider.upload(sandbox, str(local), remote)
    puts = [r for r in fake.log if r.method == "PUT"]
    assert [(r.status, r.body) for r in puts] == [(503, {"bytes": local.stat().st_size}),
                                                  (200, {"bytes": local.stat().st_size})]
    assert Path(remote).read_bytes() == local.read_bytes()
    back = tmp_path / "back.bin"
    fake.inject("GET", r"/files$", 502, {"error": "bad_gateway"})  # a streamed GET's error answer, retried
    provider.download(sandbox, "big.bin", str(back))  # relative: the sandbox's home
    assert [r.status for r in fake.log if r.method == "GET" and r.path.endswith("/files")] == [502, 200]
    assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(local.read_bytes()).digest()
    assert not list(tmp_path.glob(".*deskctl-part"))


@pytest.mark.parametrize("sandbox", ["ubuntu"], indirect=True)
def test_an_uploaded_script_keeps_its_mode(provider: UseComputerProvider, sandbox: RemoteHandle,
                                           tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o750)
    remote = f"{tmp_path}/up/run.sh"
    provider.upload(sandbox, str(script), remote)
    assert provider.exec(sandbox, shlex.quote(remote)).stdout == "ran\n"
    assert provider.exec(sandbox, f"stat -c %a {shlex.quote(remote)}").stdout == "750\n"


# -- the pointer -------------------------------------------------------------------------------------------------
def test_cursor_position_is_in_points_on_retina(uc_env: FakeUseComputer) -> None:
    uc_env.macos_scale = 2
    provider = UseComputerProvider({"poll_interval": 0.005})
    try:
        handle = _open(provider, "macos")
        try:
            from deskctl.actions import Move

            provider.act(handle, Move(300, 200))
            assert pointer_at(uc_env.display_of(handle.resource_id)) == (600, 400)
            assert provider.cursor_position(handle) == (300, 200)
            uc_env.inject("GET", r"/mouse/position$", 200, {"x": "left"})
            with pytest.raises(ProviderApiError):
                provider.cursor_position(handle)
        finally:
            provider.destroy(handle)
    finally:
        provider.close()
