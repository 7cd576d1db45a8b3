"""The harness side of the Daytona provider (issue 14) over real HTTP against the loopback fake: exec options as
the toolbox's own fields and as shell text, stderr kept apart on Linux, files over ``files/bulk-upload`` and
``files/bulk-download`` (multipart both ways), the fake's strictness on those routes, the streamed multipart
reader, and the Windows side checked by what the provider sends (the fake's guest is bash, not cmd.exe)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _small_disk import small_disk
from deskctl.errors import ProviderApiError, UsageError
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from deskctl.providers.daytona import DaytonaProvider, MultipartReader
from deskctl.spec import DesktopSpec
from fakes._cloud import ready_handle
from fakes.daytona import FakeDaytona


def _open(provider: DaytonaProvider, fake: FakeDaytona, platform: str, name: str) -> Iterator[RemoteHandle]:
    spec = DesktopSpec.build(provider="daytona", platform=platform, geometry="1024x768")
    yield from ready_handle(provider, fake, spec, name, {LABEL_SESSION: name})
    assert not any(os.path.exists(root) for root in fake.roots.values())  # the sandbox's folder went with it


@pytest.fixture
def linux(provider: DaytonaProvider, fake: FakeDaytona) -> Iterator[RemoteHandle]:
    yield from _open(provider, fake, "ubuntu", "dk-linux1")


@pytest.fixture
def windows(provider: DaytonaProvider, fake: FakeDaytona) -> Iterator[RemoteHandle]:
    yield from _open(provider, fake, "windows", "dk-win1")


def _executed(fake: FakeDaytona) -> list[dict[str, object]]:
    return [r.body for r in fake.log if r.path.endswith("/process/execute")]


def _toolbox(fake: FakeDaytona, handle: RemoteHandle) -> httpx.Client:
    return httpx.Client(base_url=f"{fake.toolbox_url}/{handle.resource_id}",
                        headers={"Authorization": f"Bearer {fake.api_key}"})


# -- exec -------------------------------------------------------------------------------------------------------
def test_linux_exec_keeps_stderr_apart_and_sends_cwd_env_as_fields(provider: DaytonaProvider, fake: FakeDaytona,
                                                                  linux: RemoteHandle, tmp_path: Path) -> None:
    result = provider.exec(linux, "echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.stdout, result.stderr, result.merged) == (7, "out\n", "err\n", False)
    no_newline = provider.exec(linux, "printf out; printf err >&2")
    assert (no_newline.stdout, no_newline.stderr) == ("out", "err")

    result = provider.exec(linux, 'pwd; printf %s "$DK_X"', cwd=str(tmp_path), env={"DK_X": "a 'b' $c"})
    assert result.stdout == f"{tmp_path}\na 'b' $c"
    sent = _executed(fake)[-1]
    assert sent["cwd"] == str(tmp_path) and sent["envs"] == {"DK_X": "a 'b' $c"}
    assert "a 'b'" not in str(sent["command"])  # the value travels as data, not as shell text


def test_linux_exec_defaults_to_the_work_dir_and_reports_a_missing_cwd(provider: DaytonaProvider,
                                                                       fake: FakeDaytona, linux: RemoteHandle,
                                                                       tmp_path: Path) -> None:
    work_dir = fake.host_path(linux.resource_id, fake.sandboxes[linux.resource_id]["_workdir"])
    assert provider.exec(linux, "pwd").stdout == f"{work_dir}\n"
    missing = provider.exec(linux, f"touch {tmp_path}/ran", cwd=f"{tmp_path}/missing")
    # exit 2, as the other providers' `cd DIR || exit 2`; the service's own words in stderr
    assert missing.exit_code == 2 and "no such file or directory" in missing.stderr
    assert not (tmp_path / "ran").exists()


def test_linux_exec_as_another_user_carries_env_inside_sudo(provider: DaytonaProvider, fake: FakeDaytona,
                                                            linux: RemoteHandle) -> None:
    result = provider.exec(linux, 'id -un; printf %s "$DK_Y"', user="nobody", env={"DK_Y": "kept"})
    assert (result.exit_code, result.stdout) == (0, "nobody\nkept"), result.stderr
    sent = _executed(fake)[-1]
    assert "envs" not in sent and "sudo -n -H -u nobody" in str(sent["command"])


def test_linux_background_exec_returns_the_pid_at_once(provider: DaytonaProvider, linux: RemoteHandle) -> None:
    result = provider.exec(linux, "sleep 60", timeout=5, background=True)
    assert result.exit_code == 0 and result.pid is not None
    try:
        assert provider.exec(linux, f"kill -0 {result.pid}").exit_code == 0
    finally:
        provider.exec(linux, f"kill {result.pid}")


def test_windows_exec_sends_cmd_lines_and_fields(provider: DaytonaProvider, fake: FakeDaytona,
                                                 windows: RemoteHandle) -> None:
    provider.exec(windows, "dir", cwd="C:\\Users\\daytona", env={"DK_A": "1 2"})
    assert _executed(fake)[-1] == {"command": "dir", "timeout": 60, "cwd": "C:\\Users\\daytona",
                                   "envs": {"DK_A": "1 2"}}
    result = provider.exec(windows, "notepad.exe", background=True)
    assert _executed(fake)[-1]["command"] == 'start "" /b cmd /c notepad.exe'
    assert result.pid is None  # cmd.exe's start does not tell it
    with pytest.raises(UsageError) as info:
        provider.exec(windows, "whoami", user="other")
    assert info.value.code == "usage.unsupported"
    merged = provider.exec(windows, "echo out; echo err >&2")
    assert merged.merged and merged.stderr == ""


# -- files -----------------------------------------------------------------------------------------------------
def test_linux_files_go_through_the_bulk_routes(provider: DaytonaProvider, fake: FakeDaytona, linux: RemoteHandle,
                                                tmp_path: Path) -> None:
    local = tmp_path / "script.sh"
    local.write_bytes(b"#!/bin/sh\necho ran\n" + os.urandom(200_000))
    local.chmod(0o750)
    remote = str(tmp_path / "remote" / "deep" / "script.sh")
    provider.upload(linux, str(local), remote)
    uploads = [r for r in fake.log if r.path.endswith("/files/bulk-upload")]
    assert [u.body for u in uploads] == [{"files[0].path": remote, "files[0].file": {"bytes": local.stat().st_size}}]
    assert stat.S_IMODE(os.stat(remote).st_mode) == 0o750  # the daemon writes 0644; the mode is set after
    assert hashlib.sha256(Path(remote).read_bytes()).digest() == hashlib.sha256(local.read_bytes()).digest()

    back = tmp_path / "back.sh"
    provider.download(linux, remote, str(back))
    assert back.read_bytes() == local.read_bytes()
    assert [r.body for r in fake.log if r.path.endswith("/files/bulk-download")] == [{"paths": [remote]}]


def test_linux_relative_paths_resolve_against_the_work_dir(provider: DaytonaProvider, fake: FakeDaytona,
                                                           linux: RemoteHandle, tmp_path: Path) -> None:
    local = tmp_path / "notes.txt"
    local.write_text("relative\n")
    provider.upload(linux, str(local), "docs/notes.txt")
    with _toolbox(fake, linux) as client:
        work_dir = client.get("/work-dir").json()["dir"]
    assert Path(work_dir, "docs", "notes.txt").read_text() == "relative\n"
    assert provider.exec(linux, "cat docs/notes.txt").stdout == "relative\n"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    provider.upload(linux, str(empty), "docs/empty")
    provider.download(linux, "docs/empty", str(tmp_path / "empty-back"))
    assert (tmp_path / "empty-back").read_bytes() == b""


def test_a_missing_remote_file_is_no_such_file_at_every_step(provider: DaytonaProvider, linux: RemoteHandle,
                                                            tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        provider.download(linux, str(tmp_path / "nope"), str(tmp_path / "x"))
    assert info.value.code == "usage.no_such_file"
    # the download's own answer: an error part (the file went between the look and the download)
    with pytest.raises(UsageError) as info:
        provider._get_file(linux, str(tmp_path / "gone"), tmp_path / "y")
    assert info.value.code == "usage.no_such_file"
    with pytest.raises(UsageError) as info:  # a directory is no file to the daemon either
        provider._get_file(linux, str(tmp_path), tmp_path / "z")
    assert info.value.code == "usage.no_such_file"


def test_a_refused_file_is_a_provider_error_not_a_key_problem(provider: DaytonaProvider, fake: FakeDaytona,
                                                             linux: RemoteHandle, tmp_path: Path) -> None:
    fake.inject("GET", r"/files/info$", 403, {"statusCode": 403, "code": "FILE_ACCESS_DENIED",
                                             "message": "stat /root/x: permission denied", "source": "DAYTONA_DAEMON"})
    with pytest.raises(ProviderApiError) as info:
        provider.download(linux, "/root/x", str(tmp_path / "x"))
    assert info.value.status == 403 and "permission denied" in info.value.message


def test_windows_paths_reach_the_file_routes_unchanged(provider: DaytonaProvider, fake: FakeDaytona,
                                                       windows: RemoteHandle, tmp_path: Path) -> None:
    local = tmp_path / "report.txt"
    local.write_bytes(b"windows bytes\r\n")
    remote = "C:\\Users\\daytona\\Desktop\\new folder\\report.txt"
    provider.upload(windows, str(local), remote)
    folders = [r.query["path"][0] for r in fake.log if r.path.endswith("/files/folder")]
    assert folders == ["C:\\Users\\daytona\\Desktop\\new folder"]
    uploads = [r.body for r in fake.log if r.path.endswith("/files/bulk-upload")]
    assert uploads == [{"files[0].path": remote, "files[0].file": {"bytes": 15}}]
    assert not [r for r in fake.log if r.path.endswith("/files/permissions")]  # no POSIX modes on Windows
    landed = Path(fake.root_of(windows.resource_id), "C", "Users", "daytona", "Desktop", "new folder", "report.txt")
    assert landed.read_bytes() == b"windows bytes\r\n"
    back = tmp_path / "back.txt"
    provider.download(windows, remote, str(back))
    assert back.read_bytes() == b"windows bytes\r\n"
    # a relative path lands in the work dir, C:\Users\daytona on the fake
    provider.upload(windows, str(local), "rel.txt")
    assert Path(fake.root_of(windows.resource_id), "C", "Users", "daytona", "rel.txt").exists()


def test_windows_directories_are_one_tar_unpacked_by_cmd(provider: DaytonaProvider, fake: FakeDaytona,
                                                         windows: RemoteHandle, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("a")
    with pytest.raises(ProviderApiError):  # the fake's bash cannot run tar on C:\ paths: checked by what is sent
        provider.upload(windows, str(tree), "C:\\work\\tree")
    staged = [r.body["files[0].path"] for r in fake.log if r.path.endswith("/files/bulk-upload")]
    assert len(staged) == 1 and str(staged[0]).startswith("C:\\Windows\\Temp\\deskctl-cp-")
    commands = [str(b["command"]) for b in _executed(fake)]
    assert f'tar -xf "{staged[0]}" -C "C:\\work\\tree"' in commands
    assert f'del /f /q "{staged[0]}"' in commands  # the staged tar is removed even though unpacking failed


# -- the fake is strict where the daemon is --------------------------------------------------------------------
def test_the_fake_file_routes_refuse_what_the_daemon_refuses(fake: FakeDaytona, linux: RemoteHandle,
                                                             tmp_path: Path) -> None:
    with _toolbox(fake, linux) as client:
        answer = client.post("/files/bulk-upload", content=b"not multipart",
                             headers={"Content-Type": "application/octet-stream"})
        assert (answer.status_code, answer.json()) == (400, {"errors": ["invalid multipart form"]})
        answer = client.post("/files/bulk-upload", files={"files[0].file": ("x", b"data")})
        assert answer.status_code == 400 and answer.json()["errors"] == ["file[0]: missing .path metadata"]
        answer = client.post("/files/bulk-upload", data={"files[0].path": " "}, files={"files[0].file": ("x", b"1")})
        assert answer.status_code == 400 and "path[0]: empty path" in answer.json()["errors"]
        answer = client.post("/files/bulk-download", json={"paths": []})
        assert answer.status_code == 400
        answer = client.get("/files/info", params={"path": str(tmp_path / "nope")})
        assert (answer.status_code, answer.json()["code"]) == (404, "FILE_NOT_FOUND")
        assert client.get("/files/info").status_code == 400
        assert client.post("/files/folder", params={"path": str(tmp_path / "d"), "mode": "9x"}).status_code == 400
        # a download answer is multipart: one part per path, an error part for a missing one
        (tmp_path / "f.bin").write_bytes(b"\r\n--DAYTONA-FILE-BOUNDAR\r\n")
        answer = client.post("/files/bulk-download", json={"paths": [str(tmp_path / "f.bin"), "missing.txt"]})
        assert answer.headers["content-type"] == "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"
    parts: list[tuple[str, bytearray]] = []

    def on_part(headers: dict[str, str]) -> object:
        parts.append((headers["content-disposition"], bytearray()))
        return parts[-1][1].extend

    reader = MultipartReader(b"DAYTONA-FILE-BOUNDARY", on_part)  # type: ignore[arg-type]
    reader.feed(answer.content)
    assert reader.done
    assert parts[0] == (f'form-data; name="file"; filename="{tmp_path / "f.bin"}"',
                        bytearray(b"\r\n--DAYTONA-FILE-BOUNDAR\r\n"))
    assert parts[1][0] == 'form-data; name="error"; filename="missing.txt"'
    assert json.loads(parts[1][1])["code"] == "FILE_NOT_FOUND"


# -- the streamed multipart reader -----------------------------------------------------------------------------
BODY = (b"preamble\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/x\"\r\n\r\n"
        b"line1\r\n--b0und\r\n--b0undarX\r\n\r\n--b0undary\r\nContent-Type: application/json\r\n"
        b"Content-Disposition: form-data; name=\"error\"\r\n\r\n{}\r\n--b0undary\r\n\r\nheaderless"
        b"\r\n--b0undary--\r\nepilogue")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 13, len(BODY)])
def test_the_multipart_reader_splits_the_same_at_any_chunk_size(size: int) -> None:
    parts: list[tuple[dict[str, str], bytearray]] = []

    def on_part(headers: dict[str, str]) -> object:
        parts.append((dict(headers), bytearray()))
        return parts[-1][1].extend

    reader = MultipartReader(b"b0undary", on_part)  # type: ignore[arg-type]
    for at in range(0, len(BODY), size):
        reader.feed(BODY[at:at + size])
    assert reader.done
    assert [bytes(data) for _, data in parts] == [b"line1\r\n--b0und\r\n--b0undarX\r\n", b"{}", b"headerless"]
    assert parts[1][0] == {"content-type": "application/json", "content-disposition": 'form-data; name="error"'}
    assert parts[2][0] == {}


def test_a_truncated_multipart_body_is_not_done() -> None:
    reader = MultipartReader(b"b0undary", lambda headers: (lambda data: None))
    reader.feed(BODY[:BODY.index(b"headerless") + 4])
    assert not reader.done


def test_a_refused_upload_names_the_daemons_reasons(provider: DaytonaProvider, fake: FakeDaytona,
                                                    linux: RemoteHandle, tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a folder")
    local = tmp_path / "x.txt"
    local.write_text("x")
    with pytest.raises(ProviderApiError) as info:  # bulk-upload's 400 carries {"errors": [...]}
        provider._put_file(linux, local, str(tmp_path / "plain" / "x.txt"))
    assert info.value.status == 400 and "mkdir" in info.value.message and "not a directory" in info.value.message
    assert fake.api_key not in json.dumps(info.value.to_dict())


def test_a_download_error_part_is_mapped_by_its_code(provider: DaytonaProvider) -> None:
    denied = provider._download_error("/root/x", json.dumps({
        "message": "error opening file: permission denied", "statusCode": 403, "code": "FILE_ACCESS_DENIED",
        "source": "DAYTONA_DAEMON"}).encode())
    assert isinstance(denied, ProviderApiError) and denied.status == 403 and "permission denied" in denied.message
    legacy = provider._download_error("/x", b"file not found or invalid: /x")  # an older daemon's plain text
    assert isinstance(legacy, UsageError) and legacy.code == "usage.no_such_file"


def test_windows_harness_actions_send_cmd_and_powershell_lines(provider: DaytonaProvider, fake: FakeDaytona,
                                                               windows: RemoteHandle) -> None:
    # the fake's guest is not Windows: each line fails there, and what was sent is what is checked
    url = "https://example.invalid/path?x=1&y=(2)"
    with pytest.raises(ProviderApiError):
        provider.open_url(windows, url)
    # cmd.exe would split an unquoted & into a second command: the URL goes as one quoted argument
    assert _executed(fake)[-1]["command"] == f'start "" /b cmd /c explorer.exe "{url}"'
    with pytest.raises(ProviderApiError):
        provider.clipboard_set(windows, "héllo")
    sent = str(_executed(fake)[-1]["command"])
    assert sent.startswith('powershell -NoProfile -Command "Set-Clipboard -Value') and "héllo" not in sent
    with pytest.raises(ProviderApiError):
        provider.window_titles(windows)
    assert "MainWindowTitle" in str(_executed(fake)[-1]["command"])


def test_a_tree_the_sandbox_cannot_store_leaves_no_half_folder(provider: DaytonaProvider, fake: FakeDaytona,
                                                                linux: RemoteHandle, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    with small_disk(tmp_path / "small") as small:  # the guest's file system is full in the middle of the unpack
        (small / "keep.txt").write_text("keep\n")
        with pytest.raises(ProviderApiError) as info:
            provider.upload(linux, str(tree), f"{small}/new/tree")
        assert "unpack into" in info.value.message
        assert sorted(p.name for p in small.iterdir()) == ["keep.txt", "new"]  # the parent made stays, empty
        assert list((small / "new").iterdir()) == []
        assert fake.api_key not in json.dumps(info.value.to_dict())
        # into a folder that is there: what was there stays, and a copy that fits arrives whole
        (tree / "sub" / "big.bin").write_bytes(b"small now")
        (small / "new" / "tree").mkdir()
        (small / "new" / "tree" / "mine.txt").write_text("mine\n")
        provider.upload(linux, str(tree), f"{small}/new/tree")
        assert sorted(p.name for p in (small / "new" / "tree").iterdir()) == ["a.txt", "mine.txt", "sub"]
        assert (small / "new" / "tree" / "sub" / "big.bin").read_bytes() == b"small now"
