"""The docker provider on a real Docker engine: isolation, exec, orphans, concurrency and faults.

The images come from scripts/setup.d/20-docker.sh (an offline debootstrap base, then ``deskctl image build``).
The contract itself (input, capture, geometry, cleanup) is covered by tests/conformance on the ``docker`` target.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import deskctl
from _cli import deskctl as deskctl_cli
from deskctl.errors import (
    CleanupIncomplete,
    DeskctlError,
    PreflightError,
    ProviderUnreachable,
    SessionLost,
    UsageError,
)
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from deskctl.providers.docker import DockerProvider, parse_memory
from deskctl.spec import DesktopSpec
from docker_provider._docker_target import docker_leftovers, docker_probe_address

pytestmark = pytest.mark.docker

DESKCTL = [sys.executable, "-c", "from deskctl.cli import main; main()"]
BASE = os.environ.get("DESKCTL_TEST_DOCKER_BASE", "deskctl-base:bookworm")


def _container_gone(sdk: Any, container: str, since: float, timeout: float = 60.0) -> bool:
    """Wait for the daemon's ``destroy`` event of ``container`` (an event stream, not a poll); True when gone."""
    import docker.errors

    try:
        sdk.api.inspect_container(container)
    except docker.errors.NotFound:
        return True
    for _ in sdk.api.events(filters={"container": container, "event": "destroy"}, decode=True,
                            since=int(since) - 1, until=int(time.time() + timeout)):
        break
    try:
        sdk.api.inspect_container(container)
    except docker.errors.NotFound:
        return True
    return False


def _child(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


@pytest.fixture
def desk() -> Iterator[deskctl.Desktop]:
    with deskctl.open_desktop("docker", geometry="800x600") as desktop:
        yield desktop


# -- the image ---------------------------------------------------------------------------------------------------


def test_image_build_is_a_no_op_when_its_inputs_are_unchanged() -> None:
    from deskctl.providers.docker.images import build_image, find_image, image_tag

    result = build_image("minimal", BASE)
    assert result.built is False
    assert result.tag == find_image("minimal")
    assert result.tag.startswith("deskctl-desktop:minimal-")
    # the tag is a hash of every input: another variant, base name or base id gives another tag
    assert image_tag("browser", BASE, "sha256:x") != image_tag("minimal", BASE, "sha256:x")
    assert image_tag("minimal", BASE, "sha256:y") != image_tag("minimal", BASE, "sha256:x")


def test_image_cli_lists_the_current_image_and_rejects_an_unknown_variant() -> None:
    from deskctl.providers.docker.images import find_image

    out = subprocess.run([*DESKCTL, "image", "ls", "--json"], capture_output=True, text=True,
                         check=True)
    listed = {i["tag"]: i for i in json.loads(out.stdout)["images"]}
    current = find_image("minimal")
    assert current in listed and listed[current]["current"] is True and listed[current]["base"] == BASE
    again = subprocess.run([*DESKCTL, "image", "build", "--base", BASE, "--json"], capture_output=True, text=True,
                           check=True)
    assert json.loads(again.stdout) == {**json.loads(again.stdout), "tag": current, "built": False,
                                        "variant": "minimal", "base": BASE}
    bad = subprocess.run([*DESKCTL, "image", "build", "--variant", "nope"],
                         capture_output=True, text=True)
    assert bad.returncode == 2, bad.stderr


# -- isolation and exec -------------------------------------------------------------------------------------------


def test_container_is_isolated_labelled_and_runs_x_as_a_non_root_user(desk: deskctl.Desktop, docker_sdk: Any) -> None:
    handle = desk.handle
    assert handle is not None
    attrs = docker_sdk.api.inspect_container(handle.resource_id)
    assert attrs["Name"] == f"/{desk.id}"
    labels = attrs["Config"]["Labels"]
    for key in ("deskctl.session", "deskctl.owner", "deskctl.created", "deskctl.expires"):
        assert key in labels
    assert labels["deskctl.session"] == desk.id
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    assert attrs["HostConfig"]["Memory"] == parse_memory("1g")
    assert not attrs["NetworkSettings"]["Ports"]
    assert attrs["Config"]["User"] == "1000:1000"

    xvfb_user = desk.exec("ps -o user= -C Xvfb")
    assert xvfb_user.stdout.split() == ["desk"], xvfb_user
    interfaces = desk.exec("ls /sys/class/net").stdout.split()
    assert interfaces == ["lo"]
    # no TCP listener at all, and no abstract X socket: the bind-mounted unix socket is the only way in
    tcp = desk.exec("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == \"0A\"'")
    assert tcp.stdout.strip() == ""
    unix = desk.exec("cat /proc/net/unix").stdout
    assert "@/tmp/.X11-unix" not in unix and "/tmp/.X11-unix/X0" in unix
    # the socket is on the host under deskctl's runtime directory, not in /tmp/.X11-unix
    assert Path(handle.data["socket_path"]).is_socket()
    assert str(handle.data["socket_path"]).startswith(os.environ["DESKCTL_HOME"])


def test_the_display_refuses_a_client_without_the_cookie(desk: deskctl.Desktop) -> None:
    from deskctl.providers._x11 import connect_display

    address, cookie = docker_probe_address(desk)
    assert cookie is not None
    with pytest.raises(ProviderUnreachable, match=r"MIT-MAGIC-COOKIE|refused|Authorization"):
        connect_display(address, bytes(16), timeout=5)
    connect_display(address, cookie, timeout=5).close()


def test_exec_keeps_stdout_stderr_and_exit_code_apart(desk: deskctl.Desktop) -> None:
    result = desk.exec("echo out; echo err >&2; id -u; exit 7")
    assert (result.exit_code, result.stdout, result.stderr, result.merged) == (7, "out\n1000\n", "err\n", False)
    on_display = desk.exec("xdpyinfo | grep dimensions")
    assert "800x600 pixels" in on_display.stdout


def test_exec_is_killed_at_its_timeout(desk: deskctl.Desktop) -> None:
    result = desk.exec("sleep 30", timeout=1)
    assert result.exit_code == 124


def test_exec_user_and_env_reach_the_engine_as_they_are_and_an_unknown_user_is_a_usage_error(
        desk: deskctl.Desktop) -> None:
    root = desk.exec('id -u; printf "%s|%s" "$DK_A" "$DISPLAY"', user="root", env={"DK_A": "a 'b' $c `d`"})
    assert root.stdout == "0\na 'b' $c `d`|:0", root.stderr  # the container's own environment is kept
    assert desk.exec("id -u", user="1000").stdout == "1000\n"
    with pytest.raises(UsageError) as info:
        desk.exec("id", user="no-such-user")
    assert info.value.code == "usage.bad_user"


def test_a_gui_app_started_in_the_background_returns_at_once_and_shows_its_window(desk: deskctl.Desktop) -> None:
    # the timeout is far shorter than the app lives: a foreground exec holding its pipes would end with 124
    started = desk.exec("xmessage -title dk-background hello", timeout=5, background=True, cwd="/tmp")
    assert started.exit_code == 0 and started.pid is not None
    assert desk.wait_for("dk-background", timeout=30) == "dk-background"
    assert desk.exec(f"readlink /proc/{started.pid}/cwd").stdout == "/tmp\n"
    desk.exec(f"kill {started.pid}")


def test_uploads_belong_to_the_desktop_user_keep_modes_and_may_land_in_root_owned_folders(
        desk: deskctl.Desktop, tmp_path: Path) -> None:
    source = tmp_path / "tree"
    (source / "bin").mkdir(parents=True)
    tool = source / "bin" / "dk-tool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    (source / "data.txt").write_text("data\n")
    desk.upload(source, "/tmp/dk-up/a/tree")
    listed = desk.exec("cd /tmp/dk-up && stat -c '%U:%G %a %n' a a/tree a/tree/bin a/tree/bin/dk-tool "
                       "a/tree/data.txt").stdout.splitlines()
    assert [line.split()[0] for line in listed] == ["desk:desk"] * 5, listed
    assert listed[3].split()[1] == "755"
    # like docker cp, the engine writes into a folder the desktop user may not (its own /usr/local/bin)
    desk.upload(tool, "/usr/local/bin/dk-tool")
    assert desk.exec("dk-tool").stdout == "tool ran\n"


def test_an_upload_cut_short_leaves_no_half_folder(desk: deskctl.Desktop, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the engine unpacks the archive as it arrives: a stream that stops in the middle (a local read error here)
    # has left the first entries on the desktop, and the upload removes the folder it made
    import errno

    from deskctl.providers.docker import files

    source = tmp_path / "tree"
    (source / "a").mkdir(parents=True)
    for index in range(20):
        (source / "a" / f"f{index}.txt").write_text(f"{index}\n")
    (source / "z.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    real = files.tar_stream

    def cut_short(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        sent = 0
        stream = real(*args, **kwargs)
        try:
            for chunk in stream:
                yield chunk
                sent += len(chunk)
                if sent > 1024 * 1024:
                    raise OSError(errno.EIO, "Input/output error")
        finally:
            stream.close()

    monkeypatch.setattr(files, "tar_stream", cut_short)
    desk.exec("mkdir -p /tmp/dk-cut/old && echo old > /tmp/dk-cut/old/keep.txt")
    for target in ("/tmp/dk-cut/tree", "/tmp/dk-cut/old"):
        with pytest.raises(DeskctlError) as caught:
            desk.upload(source, target)
        assert "Input/output error" in caught.value.message
    assert desk.exec("ls /tmp/dk-cut").stdout.split() == ["old"]  # the new folder went, the old one stays
    assert desk.exec("cat /tmp/dk-cut/old/keep.txt").stdout == "old\n"
    monkeypatch.undo()
    desk.upload(source, "/tmp/dk-cut/tree")
    assert desk.exec("ls /tmp/dk-cut/tree/a | wc -l").stdout.strip() == "20"


def test_cp_into_a_mount_the_engine_cannot_write_is_refused_not_reported_done(tmp_path: Path) -> None:
    # the engine's archive PUT writes the image's file system under /proc, /sys, /dev (tmpfs): a 200, nothing seen
    local = tmp_path / "f.txt"
    local.write_text("payload\n")
    sid = deskctl_cli("up", "--provider", "docker", "--geometry", "320x240", check=True).stdout.strip()
    try:
        for dest in ("/proc/x", "/sys/x", "/dev/", "/dev/shm/deeper/f"):
            proc = deskctl_cli("cp", str(local), f"{sid}:{dest}", "--json")
            assert proc.returncode == 2, (dest, proc.stdout, proc.stderr)
            error = json.loads(proc.stdout)["error"]
            assert error["code"] == "usage.bad_path" and "mount" in error["message"], error
        assert deskctl_cli("cp", str(local), f"{sid}:/tmp/f.txt").returncode == 0
        assert deskctl_cli("exec", sid, "--", "cat /tmp/f.txt").stdout == "payload\n"
    finally:
        deskctl_cli("down", sid)


def test_download_follows_a_symlink_and_keeps_links_inside_a_tree(desk: deskctl.Desktop, tmp_path: Path) -> None:
    made = desk.exec("mkdir -p /tmp/dk-down/tree/sub && echo hi > /tmp/dk-down/tree/sub/file && "
                     "ln -s sub/file /tmp/dk-down/tree/alias && ln -s /tmp/dk-down/tree /tmp/dk-down/link")
    assert made.exit_code == 0, made.stderr
    back = tmp_path / "back"
    desk.download("/tmp/dk-down/link", back)
    assert (back / "sub" / "file").read_text() == "hi\n"
    assert os.readlink(back / "alias") == "sub/file"
    desk.download("/tmp/dk-down/tree/alias", tmp_path / "one")
    assert (tmp_path / "one").read_text() == "hi\n" and not (tmp_path / "one").is_symlink()
    # a name past the 100 bytes of a tar header (an extended header precedes the file), an empty file, a mode
    long = "n" * 150
    made = desk.exec(f"cd /tmp/dk-down && head -c 100000 /dev/urandom > {long} && : > empty && chmod 751 {long}")
    assert made.exit_code == 0, made.stderr
    desk.download(f"/tmp/dk-down/{long}", tmp_path / "long")
    digest = desk.exec(f"sha256sum /tmp/dk-down/{long}").stdout.split()[0]
    assert hashlib.sha256((tmp_path / "long").read_bytes()).hexdigest() == digest
    assert (tmp_path / "long").stat().st_mode & 0o777 == 0o751
    desk.download("/tmp/dk-down/empty", tmp_path / "empty")
    assert (tmp_path / "empty").read_bytes() == b""


def test_the_client_kept_after_preflight_has_the_api_timeout_not_the_pings() -> None:
    """Preflight pings with a 5 s timeout; create, copies and destroy then used that client (a container with
    many files took longer than 5 s to remove: cleanup.incomplete)."""
    provider = DockerProvider({"api_timeout": 45})
    try:
        provider.preflight(DesktopSpec.build(provider="docker", geometry="640x480"))
        assert provider.client.api.timeout == 45
    finally:
        provider.close()


def test_files_of_a_container_removed_from_outside_are_a_lost_session(docker_sdk: Any, tmp_path: Path) -> None:
    local = tmp_path / "f.txt"
    local.write_text("x")
    with deskctl.open_desktop("docker", geometry="640x480") as desk:
        assert desk.handle is not None
        docker_sdk.api.remove_container(desk.handle.resource_id, force=True)
        with pytest.raises(SessionLost):
            desk.download("/etc/hostname", tmp_path / "h")
    assert not (tmp_path / "h").exists()


def test_network_is_opt_in_and_limits_come_from_provider_options(docker_sdk: Any) -> None:
    options = {"network": "bridge", "cpus": 0.5, "memory": "256m"}
    with deskctl.open_desktop("docker", geometry="640x480", provider_options=options) as desk:
        assert desk.handle is not None
        attrs = docker_sdk.api.inspect_container(desk.handle.resource_id)
        assert attrs["HostConfig"]["NetworkMode"] == "bridge"
        assert attrs["HostConfig"]["NanoCpus"] == 500_000_000
        assert attrs["HostConfig"]["Memory"] == attrs["HostConfig"]["MemorySwap"] == 256 * 2**20
        assert "eth0" in desk.exec("ls /sys/class/net").stdout.split()


# -- orphans -------------------------------------------------------------------------------------------------------


def test_owner_killed_by_sigkill_has_its_container_removed(docker_sdk: Any) -> None:
    child = _child(
        "import deskctl, sys\n"
        "desk = deskctl.open_desktop('docker', geometry='640x480')\n"
        "from deskctl.providers.docker import _Watcher\n"
        "watcher = _Watcher._instance.process.pid\n"
        "print(desk.id, desk.handle.resource_id, desk.handle.data['session_dir'], watcher, flush=True)\n"
        "sys.stdin.read()\n"
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line, child.stderr.read() if child.stderr else ""
        session_id, container, session_dir, watcher_pid = line.split()
        assert docker_sdk.api.inspect_container(container)["State"]["Running"]
        watcher = os.pidfd_open(int(watcher_pid))
        killed_at = time.time()
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    try:  # the watcher exits once it has removed everything the dead owner left
        assert select.select([watcher], [], [], 60)[0], "the watcher is still running a minute later"
    finally:
        os.close(watcher)
    assert _container_gone(docker_sdk, container, killed_at), "the watcher did not remove the container"
    assert docker_sdk.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}) == []
    assert not os.path.exists(session_dir)


def test_detached_desktop_outlives_its_process_and_is_reached_from_another(docker_sdk: Any) -> None:
    child = _child(
        "import deskctl\n"
        "from deskctl.providers.docker import _Watcher\n"
        "desk = deskctl.open_desktop('docker', geometry='640x480', detached=True)\n"
        "print(desk.id, desk.handle.resource_id, _Watcher._instance is None, flush=True)\n"
        "desk.release()\n"
    )
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    session_id, container, no_watcher = out.split()
    assert no_watcher == "True"  # a detached desktop is never registered with an owner watcher
    assert docker_sdk.api.inspect_container(container)["State"]["Running"]
    owned = DockerProvider().list_owned({LABEL_SESSION: session_id})
    assert [h.resource_id for h in owned] == [container]
    desk = deskctl.attach(session_id)
    shot = desk.screenshot()
    assert (shot.width, shot.height) == (640, 480)
    handle = desk.handle
    assert handle is not None
    desk.close()
    assert docker_leftovers(handle) == []


def test_destroy_is_idempotent_and_confirmed(docker_sdk: Any) -> None:
    provider = DockerProvider()
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    handle = provider.create(spec, "dk-idem0001", {LABEL_SESSION: "dk-idem0001"})
    try:
        provider.wait_ready(handle, time.monotonic() + 60)
        provider.destroy(handle)
        assert docker_leftovers(handle) == []
        provider.destroy(handle)  # already gone: success
        rebuilt = RemoteHandle.from_dict(json.loads(json.dumps(handle.to_dict())))
        provider.destroy(rebuilt)
    finally:
        provider.destroy(handle)
        provider.close()


# -- concurrency ---------------------------------------------------------------------------------------------------


def test_eight_desktops_at_once_each_on_its_own_display(docker_sdk: Any) -> None:
    from deskctl.providers._x11 import connect_display

    sizes = [(640 + 16 * i, 480 + 8 * i) for i in range(8)]
    desks: list[deskctl.Desktop] = []
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(deskctl.open_desktop, "docker", geometry=f"{w}x{h}") for w, h in sizes]
            errors: list[BaseException] = []
            for future in futures:
                try:
                    desks.append(future.result())
                except BaseException as exc:  # keep the others to close them
                    errors.append(exc)
            assert not errors, errors
        assert len({d.handle.data["socket_path"] for d in desks if d.handle}) == 8
        # each display is its own X server: a mark set on one is seen on that one only
        displays = []
        for index, desk in enumerate(desks):
            address, cookie = docker_probe_address(desk)
            display = connect_display(address, cookie, timeout=10)
            displays.append(display)
            atom = display.intern_atom("_DESKCTL_TEST_MARK")
            display.screen().root.change_property(atom, display.intern_atom("STRING"), 8, f"desk{index}".encode())
            display.sync()
        for index, display in enumerate(displays):
            atom = display.intern_atom("_DESKCTL_TEST_MARK")
            prop = display.screen().root.get_full_property(atom, 0)
            assert bytes(prop.value) == f"desk{index}".encode()
            display.close()
        with ThreadPoolExecutor(max_workers=8) as pool:
            shots = list(pool.map(lambda d: d.screenshot(), desks))
        assert [(s.width, s.height) for s in shots] == sizes
        assert [d.size for d in desks] == sizes
    finally:
        handles = [d.handle for d in desks if d.handle is not None]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda d: d.close(), desks))
    assert len(handles) == 8
    assert [left for h in handles for left in docker_leftovers(h)] == []


# -- faults --------------------------------------------------------------------------------------------------------


def test_daemon_down_is_provider_unreachable_with_the_remedy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"unix://{tmp_path}/no-daemon.sock"
    monkeypatch.setenv("DOCKER_HOST", dead)
    with pytest.raises(ProviderUnreachable) as caught:
        deskctl.open_desktop("docker", geometry="640x480")
    assert caught.value.exit_code == 20
    assert caught.value.remedy and "DOCKER_HOST" in caught.value.remedy
    # the provider's create itself says the same (nothing is sent, so nothing can be left)
    provider = DockerProvider()
    with pytest.raises(ProviderUnreachable) as direct:
        provider.create(DesktopSpec.build(provider="docker"), "dk-nodaemon1", {})
    assert direct.value.code == "provider.unreachable" and direct.value.exit_code == 20
    provider.close()
    monkeypatch.delenv("DOCKER_HOST")
    cli = subprocess.run([*DESKCTL, "image", "ls", "--json"], capture_output=True, text=True,
                         env={**os.environ, "DOCKER_HOST": dead})
    assert cli.returncode == 20
    error = json.loads(cli.stdout)["error"]
    assert error["code"] == "provider.unreachable" and "DOCKER_HOST" in error["remedy"]
    up = subprocess.run([*DESKCTL, "up", "--provider", "docker", "--json"], capture_output=True, text=True,
                        env={**os.environ, "DOCKER_HOST": dead})
    assert up.returncode == 20, up.stdout + up.stderr
    assert "DOCKER_HOST" in json.loads(up.stdout)["error"]["remedy"]


def test_missing_image_fails_before_anything_is_created(docker_sdk: Any) -> None:
    with pytest.raises(PreflightError) as caught:
        deskctl.open_desktop("docker", geometry="640x480", provider_options={"image": "deskctl-desktop:absent"})
    assert caught.value.exit_code == 3
    assert "deskctl-desktop:absent" in caught.value.message and caught.value.remedy
    with pytest.raises(PreflightError) as direct:
        deskctl.open_desktop("docker", geometry="640x480", preflight=False,
                             provider_options={"image": "deskctl-desktop:absent"})
    assert direct.value.code == "preflight.image_missing"
    ours = [c for c in docker_sdk.api.containers(all=True, filters={"label": LABEL_SESSION})
            if str(c["Labels"].get("deskctl.docker.dir", "")).startswith(os.environ["DESKCTL_HOME"])]
    assert ours == []


def test_too_little_memory_for_the_geometry_fails_preflight() -> None:
    with pytest.raises(PreflightError) as caught:
        deskctl.open_desktop("docker", geometry="4096x4096", provider_options={"memory": "48m"})
    assert caught.value.exit_code == 3 and "memory" in caught.value.message
    with pytest.raises(PreflightError, match="'lots' is not a size"):
        deskctl.open_desktop("docker", geometry="640x480", provider_options={"memory": "lots"})
    with pytest.raises(UsageError):
        parse_memory("lots")
    with pytest.raises(DeskctlError, match="needs the browser variant"):
        deskctl.open_desktop("docker", start_url="data:text/html,x", provider_options={"variant": "minimal"})
    assert (parse_memory("512m"), parse_memory("1.5g"), parse_memory("none")) == (512 * 2**20, 3 * 2**29, None)


def test_container_killed_from_outside_ends_the_session_and_the_ledger_says_so(docker_sdk: Any) -> None:
    from deskctl.ledger import open_ledger

    desk = deskctl.open_desktop("docker", geometry="640x480")
    handle = desk.handle
    assert handle is not None
    try:
        docker_sdk.api.remove_container(handle.resource_id, force=True)
        with pytest.raises(SessionLost) as caught:
            desk.click(10, 10)
        assert caught.value.exit_code == 20
        assert "removed from outside" in caught.value.message
    finally:
        desk.close()
    with open_ledger() as ledger:
        record = ledger.get(desk.id)
    assert record is not None and record.status == "failed"
    assert record.reason is not None and "session_lost" in record.reason
    assert docker_leftovers(handle) == []


def test_a_command_over_the_memory_limit_is_killed_and_the_desktop_survives() -> None:
    with deskctl.open_desktop("docker", geometry="640x480", provider_options={"memory": "96m"}) as desk:
        hog = desk.exec("head -c 400m /dev/zero | tail > /dev/null")
        assert hog.exit_code == 137
        assert desk.screenshot().width == 640


def test_display_killed_by_the_memory_limit_is_reported_as_out_of_memory() -> None:
    """Xvfb itself outgrows the limit (pixmaps filled through X11): the session ends, saying why."""
    from deskctl.providers._x11 import connect_display

    desk = deskctl.open_desktop("docker", geometry="640x480", provider_options={"memory": "96m"})
    try:
        address, cookie = docker_probe_address(desk)
        display = connect_display(address, cookie, timeout=10)
        try:
            root = display.screen().root
            for index in range(64):  # 16 MiB each; the limit is 96 MiB
                pixmap = root.create_pixmap(2048, 2048, display.screen().root_depth)
                gc = pixmap.create_gc(foreground=index + 1)
                pixmap.fill_rectangle(gc, 0, 0, 2048, 2048)
                display.sync()
        except Exception:  # the server died under us: that is the point
            pass
        finally:
            try:
                display.close()
            except Exception:
                pass
        with pytest.raises(SessionLost) as caught:
            desk.screenshot()
        assert "out of memory" in caught.value.message
        assert caught.value.details.get("oom_killed") is True
    finally:
        desk.close()


def test_close_when_destroy_cannot_be_confirmed_is_cleanup_incomplete(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path, docker_sdk: Any) -> None:
    provider = DockerProvider()
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    handle = provider.create(spec, "dk-unconf01", {LABEL_SESSION: "dk-unconf01"})
    try:
        provider.wait_ready(handle, time.monotonic() + 60)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/gone.sock")
        other = DockerProvider()
        with pytest.raises(CleanupIncomplete) as caught:
            other.destroy(handle)
        assert caught.value.exit_code == 5 and caught.value.details["left"] == ["dk-unconf01"]
        assert caught.value.remedy and "DOCKER_HOST" in caught.value.remedy
    finally:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
        provider.destroy(handle)
        provider.close()
    assert docker_leftovers(handle) == []


# -- browser variant -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_start_url_opens_in_the_browser_variant() -> None:
    if os.environ.get("DESKCTL_SKIP_BROWSER") == "1":
        pytest.skip("DESKCTL_SKIP_BROWSER=1: the browser image was not built")
    page = "data:text/html,<body style='margin:0;background:rgb(255,0,0)'></body>"
    with deskctl.open_desktop("docker", geometry="800x600", start_url=page, window_geometry="600x400+0+0") as desk:
        import io

        from PIL import Image

        deadline = time.monotonic() + 60
        while True:
            image = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
            if image.getpixel((300, 250)) == (255, 0, 0):
                break
            assert time.monotonic() < deadline, "the start page never showed"
            desk.exec("true")  # a round trip to the container between captures instead of a sleep


def test_screenshot_from_the_framebuffer_file_equals_getimage(desk: deskctl.Desktop) -> None:
    """The fast capture path (Xvfb's framebuffer file in the host's /dev/shm) shows what X shows, drawn just before."""
    import io

    from PIL import Image

    from deskctl.providers._x11 import connect_display

    assert desk.handle is not None
    assert str(desk.handle.data["framebuffer"]).startswith("/dev/shm/")
    address, cookie = docker_probe_address(desk)
    display = connect_display(address, cookie, timeout=10)
    try:
        root = display.screen().root
        gc = root.create_gc(foreground=0x3366CC)
        root.fill_rectangle(gc, 100, 50, 200, 100)
        display.sync()
    finally:
        display.close()
    fast = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
    assert fast.getpixel((150, 80)) == (0x33, 0x66, 0xCC)
    assert fast.getpixel((10, 10)) != (0x33, 0x66, 0xCC)
    provider = desk.provider
    assert isinstance(provider, DockerProvider)
    slow = Image.open(io.BytesIO(provider._driver(desk.handle).screenshot().png)).convert("RGB")
    assert fast.tobytes() == slow.tobytes()


def test_reap_removes_desktops_whose_owner_is_gone_and_keeps_the_others(docker_sdk: Any) -> None:
    import socket

    from deskctl.ledger import SessionRecord, open_ledger
    from deskctl.providers.base import LABEL_EXPIRES, LABEL_OWNER
    from deskctl.reaper import reap

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    host = socket.gethostname()
    expires = str(int(time.time()) + 3600)
    provider = DockerProvider({"reaper": False})  # as if the owner's watcher had died with it
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    with open_ledger() as ledger:  # deskctl writes the intent before it creates: the reaper reaps its own only
        for sid, pid in (("dk-orphan001", int(finished.stdout)), ("dk-kept00001", os.getpid())):
            ledger.record_intent(SessionRecord(sid, "docker", "ubuntu", "640x480", f"{host}:{pid}", False, "intent",
                                               time.time()))  # fmt: skip
    orphan = provider.create(spec, "dk-orphan001", {LABEL_SESSION: "dk-orphan001", LABEL_EXPIRES: expires,
                                                     LABEL_OWNER: f"{host}:{int(finished.stdout)}"})
    kept = provider.create(spec, "dk-kept00001", {LABEL_SESSION: "dk-kept00001", LABEL_EXPIRES: expires,
                                                   LABEL_OWNER: f"{host}:{os.getpid()}"})
    try:
        with open_ledger() as ledger:
            results = reap(ledger, providers=["docker"])
        reaped = {r.session_id: r for r in results}
        assert reaped["dk-orphan001"].action == "destroyed" and "gone" in reaped["dk-orphan001"].reason
        assert "dk-kept00001" not in reaped
        assert docker_leftovers(orphan) == []
        assert docker_sdk.api.inspect_container(kept.resource_id)["State"]["Running"]
    finally:
        provider.destroy(orphan)
        provider.destroy(kept)
        provider.close()
    assert docker_leftovers(kept) == []


def test_prune_removes_superseded_images_only(docker_sdk: Any) -> None:
    import io
    import tarfile

    from deskctl.providers.docker.images import LABEL_FILES, LABEL_VARIANT, find_image, prune_images

    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    stale = f"deskctl-desktop:minimal-stale{os.getpid()}"
    docker_sdk.api.import_image_from_data(
        empty.getvalue(), repository=stale.split(":")[0], tag=stale.split(":")[1],
        changes=[f"LABEL {LABEL_VARIANT}=minimal", f"LABEL {LABEL_FILES}=0000000000000000"],
    )
    current = find_image("minimal")
    try:
        removed = prune_images()
        assert stale in removed and current not in removed
        assert find_image("minimal") == current
    finally:
        with contextlib.suppress(Exception):
            docker_sdk.api.remove_image(stale, force=True)


def test_prune_keeps_the_superseded_images_of_another_installation_unless_all(docker_sdk: Any) -> None:
    import io
    import tarfile

    from deskctl.providers.docker.images import LABEL_FILES, LABEL_SOURCE, LABEL_VARIANT, installation, prune_images

    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    theirs, ours = (f"deskctl-desktop:minimal-{who}{os.getpid()}" for who in ("theirs", "ours"))
    for tag, source in ((theirs, "/elsewhere/checkout/src/deskctl"), (ours, installation())):
        docker_sdk.api.import_image_from_data(
            empty.getvalue(), repository=tag.split(":")[0], tag=tag.split(":")[1],
            changes=[f"LABEL {LABEL_VARIANT}=minimal {LABEL_FILES}=0000000000000000 {LABEL_SOURCE}={source}"],
        )
    try:
        assert theirs not in prune_images(dry_run=True)
        removed = prune_images()
        assert ours in removed and theirs not in removed
        docker_sdk.images.get(theirs)  # another checkout's build is still there
        assert theirs in prune_images(every_installation=True)
    finally:
        for tag in (theirs, ours):
            with contextlib.suppress(Exception):
                docker_sdk.api.remove_image(tag, force=True)


def test_a_taken_name_is_refused_and_the_other_container_is_left_alone(docker_sdk: Any) -> None:
    provider = DockerProvider()
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    first = provider.create(spec, "dk-twice0001", {LABEL_SESSION: "dk-twice0001"})
    try:
        provider.wait_ready(first, time.monotonic() + 60)
        with pytest.raises(UsageError) as caught:
            provider.create(spec, "dk-twice0001", {LABEL_SESSION: "dk-twice0001"})
        assert caught.value.code == "usage.conflict"
        assert provider.is_alive(first)
        assert provider.screenshot(first).width == 640  # its cookie and socket are untouched
    finally:
        provider.destroy(first)
        provider.close()
    assert docker_leftovers(first) == []


def test_a_desktop_past_its_expiry_stops_itself(docker_sdk: Any) -> None:
    from deskctl.providers.base import LABEL_EXPIRES

    provider = DockerProvider({"expiry_grace": 0, "reaper": False})
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    handle = provider.create(spec, "dk-expire001", {LABEL_SESSION: "dk-expire001",
                                                    LABEL_EXPIRES: str(int(time.time()) + 2)})
    try:
        provider.wait_ready(handle, time.monotonic() + 60)
        docker_sdk.api.wait(handle.resource_id, timeout=60)  # blocks until the container stops
        assert not provider.is_alive(handle)
        with pytest.raises(SessionLost, match="exited"):
            provider.screenshot(handle)
    finally:
        provider.destroy(handle)
        provider.close()
    assert docker_leftovers(handle) == []


def test_a_home_too_long_for_a_unix_socket_is_a_config_error(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from deskctl.errors import ConfigInvalid

    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / ("h" * 100)))
    provider = DockerProvider()
    try:
        with pytest.raises(ConfigInvalid, match="too long"):
            provider.create(DesktopSpec.build(provider="docker"), "dk-longpath1", {})
    finally:
        provider.close()


def test_a_16_bit_desktop_is_captured_through_x_when_the_framebuffer_file_does_not_fit() -> None:
    """... through X with shared memory: the container's X server has its own IPC namespace, so the segment goes
    to it as a file descriptor (MIT-SHM AttachFd); the pixels equal plain GetImage's."""
    from deskctl.providers._x11 import X11Driver

    with deskctl.open_desktop("docker", geometry="640x480x16") as desk:
        provider = desk.provider
        assert isinstance(provider, DockerProvider) and desk.handle is not None
        assert provider._framebuffer(desk.handle) is None  # 16 bits per pixel: not the fast path
        shot = desk.screenshot()
        assert (shot.width, shot.height) == (640, 480)
        assert "depth of root window:    16 planes" in desk.exec("xdpyinfo").stdout
        assert provider._driver(desk.handle).uses_shm
        address, cookie = docker_probe_address(desk)
        with X11Driver.open(address.display, socket_path=address.socket_path, cookie=cookie,
                            use_shm=False) as plain:
            desk.click(5, 5)  # an action between captures: the screen settles the same for both
            assert desk.raw_frame() == plain.raw_frame()


def test_image_prune_dry_run_lists_a_superseded_image_and_removes_nothing(docker_sdk: Any) -> None:
    import io
    import tarfile
    import uuid

    from deskctl.providers.docker.images import LABEL_FILES, LABEL_VARIANT, REPOSITORY

    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w") as tar:
        info = tarfile.TarInfo("marker")
        tar.addfile(info, io.BytesIO(b""))
    tag = f"{REPOSITORY}:minimal-stale{uuid.uuid4().hex[:8]}"  # this test's own tag, removed below
    repository, _, version = tag.partition(":")
    docker_sdk.api.import_image_from_data(blob.getvalue(), repository=repository, tag=version,
                                          changes=[f"LABEL {LABEL_VARIANT}=minimal {LABEL_FILES}=superseded"])
    try:
        out = subprocess.run([*DESKCTL, "image", "prune", "--dry-run", "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["dry_run"] is True and doc["removed"] == [] and tag in doc["would_remove"]
        docker_sdk.images.get(tag)  # still there
        text = subprocess.run([*DESKCTL, "image", "prune", "--dry-run"], capture_output=True, text=True)
        assert tag in text.stdout.splitlines() and "would remove" in text.stderr
        docker_sdk.images.get(tag)
    finally:
        docker_sdk.api.remove_image(tag, force=True)


def test_a_file_never_replaces_a_folder_nor_a_folder_a_file(desk: deskctl.Desktop, tmp_path: Path) -> None:
    from deskctl.errors import UsageError

    assert desk.exec("mkdir -p /tmp/keep/inner && echo kept > /tmp/keep/inner/a && echo f > /tmp/afile").exit_code == 0
    one = tmp_path / "one.txt"
    one.write_text("one\n")
    tree = tmp_path / "tree"
    (tree / "x").mkdir(parents=True)
    with pytest.raises(UsageError) as info:
        desk.upload(one, "/tmp/keep")
    assert info.value.code == "usage.bad_path"
    with pytest.raises(UsageError) as info:
        desk.upload(tree, "/tmp/afile")
    assert info.value.code == "usage.bad_path"
    assert desk.exec("cat /tmp/keep/inner/a /tmp/afile").stdout == "kept\nf\n"
    desk.upload(one, "/tmp/keep/one.txt")  # into the folder by a path under it
    assert desk.exec("cat /tmp/keep/one.txt").stdout == "one\n"


def test_down_leaves_the_sdk_ssh_transport_unloaded_and_an_ssh_engine_still_gets_it() -> None:
    """`deskctl down` is a whole process: the docker SDK's SSH transport (paramiko, invoke: half of its import)
    loads only for an ssh:// engine."""
    sid = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "docker", "--geometry", "320x240"],
                         capture_output=True, text=True, timeout=180, check=True).stdout.strip()
    code = (
        "import sys; from deskctl.cli import main\n"
        "try:\n"
        f"    main(['down', {sid!r}])\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
        "print(sorted(m for m in ('paramiko', 'invoke') if m in sys.modules))\n"
        "import docker\n"
        "try:\n"
        "    docker.APIClient(base_url='ssh://nobody@127.0.0.1:1', timeout=1)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__module__.split('.')[0])\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
        assert proc.stdout.splitlines() == ["exit 0", "[]", "paramiko"], proc.stdout + proc.stderr
        assert f"{sid}: destroyed" in proc.stderr
    finally:
        subprocess.run([sys.executable, "-m", "deskctl", "down", sid], capture_output=True, timeout=180)
