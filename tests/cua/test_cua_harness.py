"""The harness part of the cua-cloud provider (issue 14) over real HTTP against the loopback fake: what exec sends
with its options, files through the guest's ``/setup/upload`` and ``/file`` (and the fake's strictness about
them), the pointer from ``/cursor_position``, and, for a Windows sandbox (whose fake guest cannot run cmd.exe),
exactly what the provider sends: cmd.exe lines and ``C:\\`` paths, checked in the fake's request log."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _procs import alive, wait_until
from deskctl.actions import Move
from deskctl.errors import ProviderApiError, UsageError
from deskctl.providers.base import RemoteHandle
from deskctl.providers.cua_cloud import CuaCloudProvider, windows_background_line
from deskctl.spec import DesktopSpec
from fakes._cloud import ready_handle
from fakes.cua import FakeCua

UBUNTU = DesktopSpec.build(provider="cua-cloud", platform="ubuntu", geometry="1920x1080")
WINDOWS = DesktopSpec.build(provider="cua-cloud", platform="windows", geometry="native")


@pytest.fixture
def ready(provider: CuaCloudProvider, fake: FakeCua) -> Iterator[RemoteHandle]:
    yield from ready_handle(provider, fake, UBUNTU, "dk-harn1")


@pytest.fixture
def windows(provider: CuaCloudProvider, fake: FakeCua) -> Iterator[RemoteHandle]:
    yield from ready_handle(provider, fake, WINDOWS, "dk-win2")


def executed(fake: FakeCua) -> list[Any]:
    """The ``command`` of every ``/execute`` request, in order."""
    return [r.body["command"] for r in fake.log if r.path.endswith("/execute") and isinstance(r.body, dict)]


def answer(fake: FakeCua, output: str = "", returncode: int = 0, times: int = 1) -> None:
    """The Windows guest's next ``/execute`` answers (the fake's guest runs on Linux: it cannot run cmd.exe)."""
    fake.inject("POST", r"/harbor-windows/.*/execute$", 200,
                {"status": "success", "output": output, "error": "", "returncode": returncode}, times=times)


def svc(fake: FakeCua, handle: RemoteHandle) -> str:
    return f"{fake.base_url}/api/svc/{handle.data['namespace']}/{handle.data['sandbox']}-server"


# -- Linux: exec options --------------------------------------------------------------------------------------
def test_exec_options_run_bash_in_a_login_shell(provider: CuaCloudProvider, fake: FakeCua,
                                                ready: RemoteHandle) -> None:
    result = provider.exec(ready, '[[ "$PWD" == /tmp ]] && echo "bash in $PWD with $DK"', cwd="/tmp",
                           env={"DK": "a b"})
    assert (result.exit_code, result.stdout, result.stderr) == (0, "bash in /tmp with a b\n", "")
    sent = executed(fake)[-1]
    assert sent[:6] == ["timeout", "-k", "5", "60", "bash", "-lc"]
    assert sent[6] == "cd -- /tmp || exit 2; env 'DK=a b' bash -c '[[ \"$PWD\" == /tmp ]] && echo \"bash in $PWD " \
                      "with $DK\"'"
    # no option: the same bash, in the guest server's own folder (the sandbox's HOME on the fake)
    home = fake.homes[ready.data["sandbox"]]
    assert provider.exec(ready, "pwd; echo ~").stdout == f"{home}\n{home}\n"


def test_a_background_command_returns_its_pid_at_once(provider: CuaCloudProvider, ready: RemoteHandle) -> None:
    started = provider.exec(ready, "sleep 100", timeout=5, background=True)  # in the foreground: 124
    try:
        assert started.exit_code == 0 and started.pid is not None
        assert provider.exec(ready, f"cat /proc/{started.pid}/cmdline | tr '\\0' ' '").stdout == "sleep 100 "
    finally:
        provider.exec(ready, f"kill {started.pid}")


def test_a_released_sandbox_leaves_no_process_behind(provider: CuaCloudProvider, fake: FakeCua) -> None:
    handle = provider.create(UBUNTU, "dk-reset1", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        pid = provider.exec(handle, "sleep 300", background=True).pid
        assert pid is not None and Path(f"/proc/{pid}").exists()
    finally:
        provider.destroy(handle)
    # the reset SIGKILLs it; the kernel ends it a moment later (the old one-look check failed when it looked first)
    wait_until(lambda: not alive(pid) or b"sleep" not in _cmdline(pid), f"the background sleep (pid {pid}) to end")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


# -- Linux: files ---------------------------------------------------------------------------------------------
def test_files_go_through_upload_and_file_and_keep_the_executable_mode(provider: CuaCloudProvider,
                                                                       fake: FakeCua, ready: RemoteHandle,
                                                                       tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_bytes(b"#!/bin/sh\necho ran\n")
    script.chmod(0o750)
    plain = tmp_path / "data.bin"
    plain.write_bytes(os.urandom(200_000))
    plain.chmod(0o640)
    provider.upload(ready, str(script), "deep/er/run.sh")  # relative: the guest server's folder
    provider.upload(ready, str(plain), "deep/data.bin")
    home = fake.homes[ready.data["sandbox"]]
    assert (home / "deep/data.bin").read_bytes() == plain.read_bytes()
    assert provider.exec(ready, "deep/er/run.sh; stat -c %a deep/er/run.sh deep/data.bin").stdout == \
        "ran\n750\n644\n"  # the plain file has the guest's default mode: only an executable gets its own back
    uploads = [r for r in fake.log if r.path.endswith("/setup/upload")]
    assert [(u.status, u.body["form"], u.body["files"]["file_data"]["size"]) for u in uploads] == [
        (200, {"file_path": "deep/er/run.sh"}, 19), (200, {"file_path": "deep/data.bin"}, 200_000)]
    provider.download(ready, "deep/data.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == plain.read_bytes()
    assert [(r.body, r.status) for r in fake.log if r.path.endswith("/file")] == [
        ({"form": {"file_path": "deep/data.bin"}, "files": {}}, 200)]


def test_one_request_per_file_where_it_settles_it(provider: CuaCloudProvider, fake: FakeCua, ready: RemoteHandle,
                                                  tmp_path: Path) -> None:
    local = tmp_path / "a.txt"
    local.write_text("a\n")
    local.chmod(0o644)
    provider.exec(ready, "mkdir there")
    steps = len(fake.log)
    provider.upload(ready, str(local), "there/a.txt")  # the parent is there: one request
    provider.download(ready, "there/a.txt", str(tmp_path / "b.txt"))
    assert [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.log[steps:]] == [("upload", 200), ("file", 200)]
    assert (tmp_path / "b.txt").read_text() == "a\n"
    steps = len(fake.log)
    provider.upload(ready, str(local), "not/yet/a.txt")  # the guest's 500 (no parent): the shared way
    assert [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.log[steps:]] == [
        ("upload", 500), ("execute", 200), ("upload", 200)]
    assert "mkdir -p -- not/yet" in executed(fake)[-1][-1]
    steps = len(fake.log)
    provider.download(ready, "not", str(tmp_path / "tree"))  # a folder: the guest's 500, then one tar
    assert (tmp_path / "tree/yet/a.txt").read_text() == "a\n"
    assert [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.log[steps:]][:2] == [("file", 500), ("execute", 200)]
    steps = len(fake.log)
    with pytest.raises(UsageError) as info:
        provider.download(ready, "not/here", str(tmp_path / "x"))
    assert info.value.code == "usage.no_such_file" and not (tmp_path / "x").exists()
    assert [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.log[steps:] if "/api/svc/" in r.path] == [
        ("file", 404), ("execute", 200)]  # the guest's word checked: not there at all, not a folder


def test_a_file_gone_before_its_download_is_no_such_file(provider: CuaCloudProvider, fake: FakeCua,
                                                         ready: RemoteHandle, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        provider._get_file(ready, "/tmp/deskctl-no-such-file-here", tmp_path / "x")
    assert info.value.code == "usage.no_such_file"
    assert [r.status for r in fake.log if r.path.endswith("/file")] == [404]
    # the guest's own 500 (a folder where a file is asked) is an API error, not "no such file"
    with pytest.raises(ProviderApiError) as err:
        provider._get_file(ready, "/tmp", tmp_path / "x")
    assert err.value.status == 500


def test_a_streamed_download_survives_token_expiry_and_reports_errors(provider: CuaCloudProvider, fake: FakeCua,
                                                                      ready: RemoteHandle, tmp_path: Path) -> None:
    home = fake.homes[ready.data["sandbox"]]
    (home / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 5))
    fake.expire_tokens()
    provider._get_file(ready, "big.bin", tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == (home / "big.bin").read_bytes()
    last = [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.log[-3:]]
    assert last == [("file", 302), ("token", 200), ("file", 200)]
    fake.inject("POST", r"/file$", 507, {"error": "guest disk is full"}, times=10)
    with pytest.raises(ProviderApiError) as info:
        provider._get_file(ready, "big.bin", tmp_path / "again.bin")
    assert info.value.status == 507 and "guest disk is full" in info.value.message


def test_the_fake_file_routes_are_as_strict_as_the_guest(provider: CuaCloudProvider, fake: FakeCua,
                                                         ready: RemoteHandle) -> None:
    token = provider._access_token()
    base = svc(fake, ready)
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as raw:
        missing_file = raw.post(f"{base}/setup/upload", data={"file_path": "x"})
        missing_path = raw.post(f"{base}/setup/upload", files={"file_data": ("x", b"1")})
        as_field = raw.post(f"{base}/setup/upload", data={"file_path": "x", "file_data": "1"})
        no_parent = raw.post(f"{base}/setup/upload", data={"file_path": "no/such/dir/x"},
                             files={"file_data": ("x", b"1")})
        done = raw.post(f"{base}/setup/upload", data={"file_path": "~/x"}, files={"file_data": ("x", b"12")})
        read = raw.post(f"{base}/file", data={"file_path": "~/x"})
        unread = raw.post(f"{base}/file", data={"file_path": "~/nothing"})
        no_form = raw.post(f"{base}/file", json={"file_path": "~/x"})
    for refused in (missing_file, missing_path, as_field):
        assert (refused.status_code, refused.json()) == (400, {"error": "file_path and file_data are required"})
    assert no_parent.status_code == 500
    assert (done.status_code, done.text) == (200, "File Uploaded: 2 bytes")
    assert (read.status_code, read.content) == (200, b"12")
    assert (unread.status_code, unread.json()) == (404, {"error": "File not found"})
    assert (no_form.status_code, no_form.json()) == (400, {"error": "file_path is required"})


# -- the pointer ------------------------------------------------------------------------------------------------
def test_cursor_position_is_the_guests(provider: CuaCloudProvider, fake: FakeCua, ready: RemoteHandle) -> None:
    provider.act(ready, Move(321, 234))
    assert provider.cursor_position(ready) == (321, 234)
    fake.inject("GET", r"/cursor_position$", 200, {"x": 5, "y": 6})  # another server's shape
    assert provider.cursor_position(ready) == (5, 6)
    fake.inject("GET", r"/cursor_position$", 200, {"status": "error"})
    with pytest.raises(ProviderApiError):
        provider.cursor_position(ready)


# -- Windows: what is sent --------------------------------------------------------------------------------------
def test_windows_exec_sends_cmd_lines(provider: CuaCloudProvider, fake: FakeCua, windows: RemoteHandle) -> None:
    answer(fake, "C:\\Users\\Public\r\n")
    result = provider.exec(windows, "cd", cwd="C:\\Users\\Public", env={"DK_A": "two words", "DK_B": "x%y"})
    assert (result.exit_code, result.stdout) == (0, "C:\\Users\\Public\r\n")
    assert executed(fake)[-1] == 'cd /d "C:\\Users\\Public" && set "DK_A=two words" && set "DK_B=x%y" && cd'
    answer(fake, "4242\r\n")
    started = provider.exec(windows, "notepad.exe C:\\a.txt", cwd="C:\\Users\\Public", env={"DK": "it's"},
                            background=True)
    assert started.exit_code == 0 and started.pid == 4242
    assert executed(fake)[-1] == windows_background_line("notepad.exe C:\\a.txt", "C:\\Users\\Public", {"DK": "it's"})
    encoded = executed(fake)[-1].split()
    assert encoded[:4] == ["powershell", "-NoProfile", "-NonInteractive", "-EncodedCommand"] and len(encoded) == 5
    assert base64.b64decode(encoded[4]).decode("utf-16-le") == (
        "Set-Location -LiteralPath 'C:\\Users\\Public'; $env:DK = 'it''s'; (Start-Process -PassThru -WindowStyle "
        "Hidden -FilePath cmd.exe -ArgumentList '/c notepad.exe C:\\a.txt').Id")
    sent = len(fake.log)
    for bad in ({"user": "Administrator"}, {"cwd": 'C:\\"quoted"'}):
        with pytest.raises(UsageError):
            provider.exec(windows, "whoami", **bad)
    assert len(fake.log) == sent  # refused before anything was sent
    assert [r.body["shell"] for r in fake.log if r.path.endswith("/execute")][-2:] == [True, True]


def test_windows_files_use_drive_paths_and_cmd(provider: CuaCloudProvider, fake: FakeCua, windows: RemoteHandle,
                                               tmp_path: Path) -> None:
    home = fake.homes[windows.data["sandbox"]]
    local = tmp_path / "one.txt"
    local.write_bytes(b"hello\r\nwindows\r\n")
    (home / "C/Users/Public/dk").mkdir(parents=True)  # what the mkdir line below makes on a real guest
    fake.inject("POST", r"/setup/upload$", 500, raw=b"<h1>Internal Server Error</h1>")  # as if it were not there
    answer(fake)
    provider.upload(windows, str(local), "C:\\Users\\Public\\dk\\one.txt")
    assert executed(fake)[-1] == 'if not exist "C:\\Users\\Public\\dk" mkdir "C:\\Users\\Public\\dk"'
    assert (home / "C/Users/Public/dk/one.txt").read_bytes() == local.read_bytes()
    assert [r.status for r in fake.log if r.path.endswith("/setup/upload")] == [500, 200]
    assert [r.body["form"] for r in fake.log if r.path.endswith("/setup/upload")][-1] == {
        "file_path": "C:\\Users\\Public\\dk\\one.txt"}
    provider.download(windows, "C:\\Users\\Public\\dk\\one.txt", str(tmp_path / "fast.txt"))  # one request
    assert (tmp_path / "fast.txt").read_bytes() == local.read_bytes()
    fake.inject("POST", r"/file$", 500, raw=b"<h1>Internal Server Error</h1>")  # as a folder answers
    answer(fake, "file\r\n")
    provider.download(windows, "C:\\Users\\Public\\dk\\one.txt", str(tmp_path / "back.txt"))
    assert executed(fake)[-1] == ('if exist "C:\\Users\\Public\\dk\\one.txt\\*" (echo dir) else if exist '
                                  '"C:\\Users\\Public\\dk\\one.txt" (echo file) else (echo none)')
    assert (tmp_path / "back.txt").read_bytes() == local.read_bytes()
    answer(fake, "none\r\n")
    with pytest.raises(UsageError) as info:
        provider.download(windows, "C:\\missing.txt", str(tmp_path / "x"))
    assert info.value.code == "usage.no_such_file"
    assert [r.body["form"] for r in fake.log if r.path.endswith("/file")][-1] == {"file_path": "C:\\missing.txt"}


def test_windows_directory_upload_stages_one_tar(provider: CuaCloudProvider, fake: FakeCua,
                                                 windows: RemoteHandle, tmp_path: Path) -> None:
    home = fake.homes[windows.data["sandbox"]]
    (home / "C/Windows/Temp").mkdir(parents=True)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("a")
    answer(fake, times=3)
    provider.upload(windows, str(tree), "C:\\work\\tree")
    staged = next(r.body["form"]["file_path"] for r in fake.log if r.path.endswith("/setup/upload"))
    assert staged.startswith("C:\\Windows\\Temp\\deskctl-cp-") and staged.endswith(".tar")
    assert executed(fake)[-3:] == [
        'if not exist "C:\\work\\tree" mkdir "C:\\work\\tree"',
        f'tar -xf "{staged}" -C "C:\\work\\tree"',
        f'del /f /q "{staged}"',
    ]


def test_windows_harness_actions_are_powershell_through_cmd(provider: CuaCloudProvider, fake: FakeCua,
                                                            windows: RemoteHandle) -> None:
    answer(fake, "Untitled - Notepad\r\nCalculator\r\n")
    assert provider.window_titles(windows) == ["Untitled - Notepad", "Calculator"]
    assert executed(fake)[-1].startswith('powershell -NoProfile -Command "Get-Process')
    answer(fake, "héllo\r\n")
    assert provider.clipboard_get(windows) == "héllo"
    answer(fake)
    provider.clipboard_set(windows, "héllo")
    assert "Set-Clipboard" in executed(fake)[-1] and "aMOpbGxv" in executed(fake)[-1]  # base64, never raw text
    answer(fake, "missing\r\n")  # the program is looked up first: one the guest lacks is a usage error
    with pytest.raises(UsageError) as info:
        provider.launch(windows, "nocalc.exe")
    assert info.value.code == "usage.no_such_program"
    assert executed(fake)[-1] == ('powershell -NoProfile -Command "if (Get-Command -ErrorAction SilentlyContinue '
                                  "-Name 'nocalc.exe') { 'found' } else { 'missing' }\"")
    answer(fake, "found\r\n")
    answer(fake, "77\r\n")
    assert provider.launch(windows, "calc.exe") == 77
    assert executed(fake)[-1] == windows_background_line("calc.exe", None, {})
    answer(fake, "78\r\n")
    provider.open_url(windows, "https://example.invalid/?a=1&b=(2)")  # cmd.exe would end the command at &
    assert executed(fake)[-1] == windows_background_line('explorer.exe "https://example.invalid/?a=1&b=(2)"', None, {})
    assert provider.cursor_position(windows) == fake.desktop("dk-win2").cursor_position()
