"""The xvfb provider on real Xvfb servers: preflight, privacy of the display, display numbers under
concurrency, stale locks, the owner watch, expiry, reap of a live orphan, destroy from another process, exec,
the start-URL browser window, and error translation."""

from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _procs import alive as _alive
from deskctl.actions import Click
from deskctl.errors import ProviderUnreachable, SessionLost
from deskctl.providers._x11 import X11Driver, read_cookie
from deskctl.providers.base import LABEL_DETACHED, LABEL_EXPIRES, LABEL_OWNER, LABEL_SESSION, RemoteHandle
from deskctl.providers.xvfb import XvfbProvider, _file_id, _lock_owner
from deskctl.spec import DesktopSpec

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")

PROBE_DIR = Path(__file__).resolve().parent.parent / "probe"




def _wait_exit(pid: int, timeout: float = 20.0) -> None:
    """Wait on the process's pidfd (no polling) until it has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    assert not _alive(pid), f"process {pid} is still alive"


def _pids(handle: RemoteHandle, role: str | None = None) -> list[int]:
    return [int(p["pid"]) for p in handle.data["procs"] if role is None or p["role"] == role]


@pytest.fixture
def provider() -> Iterator[XvfbProvider]:
    prov = XvfbProvider()
    made: list[RemoteHandle] = []
    original = prov.create

    def tracking_create(*args: Any, **kwargs: Any) -> RemoteHandle:
        handle = original(*args, **kwargs)
        made.append(handle)
        return handle

    prov.create = tracking_create  # type: ignore[method-assign]
    try:
        yield prov
    finally:
        for handle in made:
            prov.destroy(handle)
        prov.close()


def _spec(**fields: Any) -> DesktopSpec:
    return DesktopSpec.build(provider="xvfb", **{"geometry": "640x480", **fields})


def _labels(session_id: str, **extra: str) -> dict[str, str]:
    return {LABEL_SESSION: session_id, LABEL_OWNER: f"{socket.gethostname()}:{os.getpid()}", **extra}


# -- preflight --------------------------------------------------------------------------------------------------


def test_preflight_passes_here_and_names_remedies_when_binaries_are_missing(
    provider: XvfbProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert all(r.status == "pass" for r in provider.preflight(_spec(window_manager=True)))
    monkeypatch.setenv("PATH", str(tmp_path))
    results = {r.code: r for r in provider.preflight(_spec(window_manager=True, start_url="https://example.org"))}
    assert results["xvfb.binary"].status == "fail" and results["xvfb.binary"].remedy == "apt-get install xvfb"
    assert results["xvfb.xauth"].status == "warn"
    assert results["xvfb.window_manager"].status == "fail"
    assert results["xvfb.browser"].status == "fail" and "chromium" in (results["xvfb.browser"].remedy or "")


def test_preflight_refuses_other_platforms_and_warns_about_a_window_that_does_not_fill(
    provider: XvfbProvider, tmp_path: Path
) -> None:
    from deskctl.checks.runner import run_checks

    # the platform is checked once, by the engine: the provider's own checks do not repeat it
    codes = {r.code: r.status for r in run_checks(_spec(platform="windows"), provider)}
    assert codes["compat.platform_unsupported"] == "fail"
    assert not any(r.code.startswith("compat.") for r in provider.preflight(_spec(platform="windows")))
    browser = _fake_browser(tmp_path)
    prov = XvfbProvider({"browser": str(browser)})
    # a pinned size: the engine checks the window, once
    warn = {r.code: r for r in run_checks(_spec(start_url="http://x", window_geometry="320x200"), prov)}
    assert warn["geometry.window_fill"].status == "warn" and "does not fill" in warn["geometry.window_fill"].message
    assert "xvfb.window_geometry" not in warn
    fills = {r.code: r for r in run_checks(_spec(start_url="http://x", window_geometry="640x480+0+0"), prov)}
    assert not any(r.code.startswith(("geometry.window", "xvfb.window")) for r in fills.values())
    # the native size is xvfb's own (1024x768): xvfb checks the window against it
    native = {r.code: r for r in prov.preflight(_spec(geometry="native", start_url="http://x",
                                                      window_geometry="800x600"))}
    assert native["xvfb.window_geometry"].status == "warn"
    assert "does not fill the 1024x768 desktop" in native["xvfb.window_geometry"].message
    fills = {r.code: r for r in prov.preflight(_spec(geometry="native", start_url="http://x",
                                                     window_geometry="1024x768+0+0"))}
    assert fills["xvfb.window_geometry"].status == "pass"


# -- the desktop --------------------------------------------------------------------------------------------------


def test_desktop_is_private_and_pinned(provider: XvfbProvider) -> None:
    handle = provider.create(_spec(geometry="800x600x24"), "dk-private", _labels("dk-private"))
    provider.wait_ready(handle, time.monotonic() + 30)
    assert provider.display_size(handle) == (800, 600)
    cookie_file = Path(handle.data["cookie_file"])
    assert stat.S_IMODE(cookie_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(handle.data["dir"]).stat().st_mode) == 0o700
    with pytest.raises(ProviderUnreachable):
        X11Driver.open(handle.data["display"], cookie=None)
    with pytest.raises(ProviderUnreachable):
        X11Driver.open(handle.data["display"], host="127.0.0.1", cookie=read_cookie(cookie_file))
    assert "cookie" not in json.dumps(handle.to_dict()).replace("cookie_file", "")
    assert read_cookie(cookie_file).hex() not in json.dumps(handle.to_dict())


def test_concurrent_creates_in_several_processes_get_distinct_displays(provider: XvfbProvider) -> None:
    script = (
        "import sys, json, time\n"
        "from deskctl.providers.xvfb import XvfbProvider\n"
        "from deskctl.spec import DesktopSpec\n"
        "p = XvfbProvider({'owner_watch': False})\n"
        "h = p.create(DesktopSpec.build(geometry='320x240'), sys.argv[1], {'deskctl.session': sys.argv[1]})\n"
        "print(json.dumps(h.to_dict()), flush=True)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, f"dk-par{i}"], stdout=subprocess.PIPE, text=True)
             for i in range(3)]
    handles: list[RemoteHandle] = []
    threads_out: list[RemoteHandle] = []

    def in_thread(i: int) -> None:
        threads_out.append(provider.create(_spec(geometry="320x240"), f"dk-thr{i}", _labels(f"dk-thr{i}")))

    threads = [threading.Thread(target=in_thread, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            handles.append(RemoteHandle.from_dict(json.loads(out)))
        for t in threads:
            t.join()
        numbers = [h.data["display_number"] for h in handles + threads_out]
        assert len(numbers) == 5 and len(set(numbers)) == 5
        for handle in handles + threads_out:
            assert provider.is_alive(handle)
    finally:
        for handle in handles:
            provider.destroy(handle)


def test_a_stale_lock_and_socket_never_block_a_new_desktop(provider: XvfbProvider) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    number = next(n for n in range(5, 200) if not Path(f"/tmp/.X{n}-lock").exists()
                  and not Path(f"/tmp/.X11-unix/X{n}").exists())
    lower_free = [n for n in range(number) if not Path(f"/tmp/.X{n}-lock").exists()]
    lock = Path(f"/tmp/.X{number}-lock")
    lock.write_text(f"{dead.pid:>10}\n")
    try:
        handle = provider.create(_spec(), "dk-stale", _labels("dk-stale"))
        provider.wait_ready(handle, time.monotonic() + 30)
        assert provider.display_size(handle) == (640, 480)
        if not lower_free:  # Xvfb takes the lowest number it can: the stale one
            assert handle.data["display_number"] == number
    finally:
        if lock.exists() and lock.read_text().strip() == str(dead.pid):
            lock.unlink()


def test_destroy_ends_every_process_and_removes_every_file_even_after_sigkill(provider: XvfbProvider) -> None:
    handle = provider.create(_spec(window_manager=True), "dk-kill", _labels("dk-kill"))
    provider.wait_ready(handle, time.monotonic() + 30)
    roles = {p["role"] for p in handle.data["procs"]}
    assert roles == {"xvfb", "window_manager", "watcher"}
    with X11Driver.open(handle.data["display"], cookie=read_cookie(handle.data["cookie_file"])) as drv:
        atom = drv._display.intern_atom("_NET_SUPPORTING_WM_CHECK")
        assert drv._root.get_full_property(atom, 0) is not None, "ready means the window manager runs"
    number = handle.data["display_number"]
    xvfb = _pids(handle, "xvfb")[0]
    os.kill(xvfb, signal.SIGKILL)  # leaves its lock and socket behind
    _wait_exit(xvfb)
    assert Path(f"/tmp/.X{number}-lock").exists()
    with pytest.raises(SessionLost):
        provider.screenshot(handle)
    provider.destroy(handle)
    for pid in _pids(handle):
        assert not _alive(pid)
    # another test process may take the freed number at once: what must be gone is our server's files
    assert _lock_owner(Path(f"/tmp/.X{number}-lock")) != xvfb
    assert _file_id(Path(f"/tmp/.X11-unix/X{number}")) != handle.data["socket_id"]
    assert not Path(handle.data["dir"]).exists()
    assert Path(handle.data["framebuffer"]).name == "Xvfb_screen0"
    assert not Path(handle.data["framebuffer"]).parent.exists()  # the file a SIGKILLed Xvfb left in /dev/shm
    provider.destroy(handle)  # idempotent
    assert provider.list_owned() == []


def test_destroy_ends_a_helper_that_left_the_session_but_names_its_folder(provider: XvfbProvider) -> None:
    """Chromium's helpers (zygote, renderers, crashpad) run with a scrubbed environment, some in a session of their
    own: no DESKCTL_SESSION marker, not in the browser's process group; they name the profile in the session's
    folder on their command line, and kept writing into it while destroy removed it (cleanup.incomplete)."""
    handle = provider.create(_spec(), "dk-helper", _labels("dk-helper"))
    provider.wait_ready(handle, time.monotonic() + 30)
    profile = Path(handle.data["dir"]) / "profile"
    helper = subprocess.Popen(["env", "-i", "setsid", sys.executable, "-c", "import time; time.sleep(600)",
                               f"--user-data-dir={profile}"])
    try:
        provider.destroy(handle)
        helper.wait(timeout=30)  # ended by destroy (a TimeoutExpired here: it was left running)
        assert not Path(handle.data["dir"]).exists()
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()


def test_destroy_leaves_the_socket_of_a_newer_server_that_took_the_number(provider: XvfbProvider) -> None:
    """After our Xvfb died, another server may take its number and bind /tmp/.X11-unix/XN before it listens:
    destroy must not unlink that file (its clients would find no socket), only the one our server made.

    The test plays that newer server. It first holds the number's abstract socket (what Xvfb -displayfd binds to
    choose a number), so that no real server of another test takes the number while the test swaps the socket
    file: it once unlinked the file of a server another xdist worker had just started on the freed number."""
    import errno
    import socket as socketlib

    for attempt in range(5):
        session_id = f"dk-taken{attempt}"
        handle = provider.create(_spec(), session_id, _labels(session_id))
        provider.wait_ready(handle, time.monotonic() + 30)
        number = handle.data["display_number"]
        xvfb = _pids(handle, "xvfb")[0]
        os.kill(xvfb, signal.SIGKILL)
        _wait_exit(xvfb)
        guard = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        try:
            guard.bind(f"\0/tmp/.X11-unix/X{number}")
        except OSError as exc:  # a real server took the number first: its files are not ours to touch
            guard.close()
            assert exc.errno == errno.EADDRINUSE, exc
            provider.destroy(handle)
            continue
        break
    else:
        pytest.fail("another server took the freed display number five times in a row")
    path = Path(f"/tmp/.X11-unix/X{number}")
    newer = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    try:
        path.unlink()
        newer.bind(str(path))  # bound, not yet listening: as a starting server is for a moment
        provider.destroy(handle)
        assert path.exists(), "the newer server's socket file was removed"
    finally:
        newer.close()
        path.unlink(missing_ok=True)
        guard.close()
    assert _lock_owner(Path(f"/tmp/.X{number}-lock")) != xvfb


def test_another_process_can_use_and_destroy_a_desktop_from_its_handle(provider: XvfbProvider) -> None:
    handle = provider.create(_spec(), "dk-other", _labels("dk-other"))
    provider.wait_ready(handle, time.monotonic() + 30)
    saved = json.dumps(handle.to_dict())
    script = (
        "import sys, json\n"
        "from deskctl.providers.xvfb import XvfbProvider\n"
        "from deskctl.providers.base import RemoteHandle\n"
        "from deskctl.actions import Click\n"
        "p = XvfbProvider()\n"
        "h = RemoteHandle.from_dict(json.loads(sys.argv[1]))\n"
        "p.act(h, Click(1, 1))\n"
        "print(p.screenshot(h).width)\n"
        "p.destroy(h)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, saved], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "640"
    for pid in _pids(handle):
        _wait_exit(pid)
    assert not provider.is_alive(handle)
    assert provider.list_owned() == []


def test_list_owned_finds_desktops_by_label(provider: XvfbProvider) -> None:
    a = provider.create(_spec(), "dk-a", _labels("dk-a", team="x"))
    provider.create(_spec(), "dk-b", _labels("dk-b", team="y"))
    assert {h.session_id for h in provider.list_owned()} == {"dk-a", "dk-b"}
    found = provider.list_owned({"team": "x"})
    assert [h.session_id for h in found] == ["dk-a"]
    assert found[0].data["display"] == a.data["display"]


# -- owner watch, expiry and the reaper ---------------------------------------------------------------------------

_HOLDER = (
    "import sys, json, threading\n"
    "from deskctl.providers.xvfb import XvfbProvider\n"
    "from deskctl.spec import DesktopSpec\n"
    "import os, socket\n"
    "p = XvfbProvider(json.loads(sys.argv[2]))\n"
    "labels = {'deskctl.session': sys.argv[1], 'deskctl.owner': f'{socket.gethostname()}:{os.getpid()}'}\n"
    "h = p.create(DesktopSpec.build(geometry='320x240'), sys.argv[1], labels)\n"
    "print(json.dumps(h.to_dict()), flush=True)\n"
    "threading.Event().wait()\n"
)


def _killed_holder(session_id: str, options: dict[str, Any]) -> RemoteHandle:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, session_id, json.dumps(options)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        handle = RemoteHandle.from_dict(json.loads(proc.stdout.readline()))
    finally:
        proc.kill()
        proc.communicate()
    return handle


def test_the_owner_watch_ends_the_desktop_when_its_owner_is_killed(provider: XvfbProvider) -> None:
    handle = _killed_holder("dk-watched", {})
    try:
        for pid in _pids(handle):
            _wait_exit(pid)
        assert _file_id(Path(f"/tmp/.X11-unix/X{handle.data['display_number']}")) != handle.data["socket_id"]
        assert [h.session_id for h in provider.list_owned()] == ["dk-watched"], "the marker waits for the reaper"
    finally:
        provider.destroy(handle)
    assert provider.list_owned() == []


def test_reap_removes_a_live_desktop_whose_owner_died(provider: XvfbProvider) -> None:
    from deskctl.ledger import SessionRecord, open_ledger
    from deskctl.reaper import reap

    handle = _killed_holder("dk-orphan", {"owner_watch": False})
    try:
        assert provider.is_alive(handle), "without the watch the orphan lives on"
        with open_ledger() as book:
            # deskctl writes the intent before it creates: the reaper takes the desktops of its own ledger only
            book.record_intent(SessionRecord("dk-orphan", "xvfb", "ubuntu", "320x240", handle.labels[LABEL_OWNER],
                                             False, "creating", time.time()))  # fmt: skip
            results = reap(book, providers=["xvfb"])
        assert [(r.session_id, r.action) for r in results] == [("dk-orphan", "destroyed")]
        assert "owner" in results[0].reason
        for pid in _pids(handle):
            assert not _alive(pid)
        assert not Path(handle.data["dir"]).exists()
    finally:
        provider.destroy(handle)


def test_a_detached_desktop_ends_at_its_expiry(provider: XvfbProvider) -> None:
    expires = time.time() + 1.0
    handle = provider.create(_spec(), "dk-ttl", _labels("dk-ttl", **{LABEL_DETACHED: "1",
                                                                      LABEL_EXPIRES: f"{expires:.3f}"}))
    assert "watcher" in {p["role"] for p in handle.data["procs"]}
    xvfb = _pids(handle, "xvfb")[0]
    _wait_exit(xvfb, timeout=30)
    assert time.time() >= expires


# -- exec -------------------------------------------------------------------------------------------------------


def test_exec_has_the_display_separate_streams_and_a_timeout(provider: XvfbProvider) -> None:
    handle = provider.create(_spec(), "dk-exec", _labels("dk-exec"))
    result = provider.exec(handle, "echo $DISPLAY; echo oops >&2; exit 4")
    assert (result.exit_code, result.stdout, result.stderr) == (4, f"{handle.data['display']}\n", "oops\n")
    slow = provider.exec(handle, "echo started; exec sleep 30", timeout=0.5)
    assert slow.exit_code == 124 and slow.stdout == "started\n" and "timed out" in slow.stderr
    provider.destroy(handle)
    with pytest.raises(SessionLost):
        provider.exec(handle, "true")
    with pytest.raises(SessionLost):
        provider.act(handle, Click(1, 1))


# -- start URL --------------------------------------------------------------------------------------------------


def _fake_browser(tmp_path: Path) -> Path:
    wrapper = tmp_path / "chromium"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {PROBE_DIR / 'fake_browser.py'} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_start_url_opens_a_browser_window_sized_to_the_window_geometry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "browser.json"
    monkeypatch.setenv("FAKE_BROWSER_LOG", str(log))
    prov = XvfbProvider({"browser": str(_fake_browser(tmp_path))})
    spec = _spec(geometry="800x600", start_url="https://example.org/start", window_geometry="700x500+10+20")
    handle = prov.create(spec, "dk-browser", _labels("dk-browser"))
    try:
        prov.wait_ready(handle, time.monotonic() + 60)  # returns once the window is viewable
        opened = json.loads(log.read_text())
        assert opened["url"] == "https://example.org/start"
        assert opened["geometry"] == [10, 20, 700, 500]
        assert "browser" in {p["role"] for p in handle.data["procs"]}
    finally:
        prov.destroy(handle)
        prov.close()
    for pid in _pids(handle):
        assert not _alive(pid)


def test_destroy_ends_what_exec_left_running_in_other_groups(provider: XvfbProvider) -> None:
    from deskctl.providers.xvfb import SESSION_ENV, _tagged_processes

    handle = provider.create(_spec(), "dk-daemon", _labels("dk-daemon"))
    started = provider.exec(handle, "setsid -f sleep 1000 >/dev/null 2>&1; echo $" + SESSION_ENV)
    assert started.stdout == "dk-daemon\n"
    daemons = _tagged_processes("dk-daemon")
    assert daemons, "the escaped sleep carries the session tag"
    provider.destroy(handle)
    for pid, _ in daemons:
        assert not _alive(pid)
    assert _tagged_processes("dk-daemon") == []


def test_a_browser_that_exits_at_once_fails_readiness_with_its_log(tmp_path: Path) -> None:
    from deskctl.errors import ProviderApiError

    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\necho 'cannot open display: no GPU' >&2\nexit 1\n")
    broken.chmod(0o755)
    prov = XvfbProvider({"browser": str(broken)})
    handle = prov.create(_spec(start_url="https://example.org"), "dk-badbrowser", _labels("dk-badbrowser"))
    try:
        with pytest.raises(ProviderApiError, match="no GPU"):
            prov.wait_ready(handle, time.monotonic() + 60)
    finally:
        prov.destroy(handle)
        prov.close()


def test_a_depth_xvfb_cannot_give_is_refused_in_preflight_and_create(provider: XvfbProvider) -> None:
    from deskctl.checks.runner import run_checks
    from deskctl.errors import GeometryUnsupported

    results = {r.code: r for r in run_checks(_spec(geometry="640x480x32"), provider)}
    assert results["geometry.unsupported"].status == "fail"
    assert "32-bit" in results["geometry.unsupported"].message
    assert "geometry.unsupported" not in {r.code for r in provider.preflight(_spec(geometry="640x480x32"))}
    with pytest.raises(GeometryUnsupported):
        provider.create(_spec(geometry="640x480x32"), "dk-depth", _labels("dk-depth"))
    assert provider.list_owned() == []
    grey = provider.create(_spec(geometry="320x200x16"), "dk-16", _labels("dk-16"))
    assert provider.screenshot(grey).width == 320


@pytest.mark.skipif(shutil.which("xterm") is None, reason="xterm is not installed")
def test_a_real_application_receives_clicks_and_non_ascii_typing(provider: XvfbProvider, tmp_path: Path) -> None:
    """xterm (an XKB-aware Xt client, unlike the probe) turns our key events into UTF-8 text."""
    from deskctl.actions import KeyPress, TypeText

    out = tmp_path / "typed.txt"
    handle = provider.create(_spec(geometry="640x480"), "dk-xterm", _labels("dk-xterm"))
    provider.wait_ready(handle, time.monotonic() + 30)
    started = provider.exec(handle, "LANG=C.UTF-8 xterm -u8 -geometry 80x24+0+0 -e sh -c "
                                    f"'IFS= read -r line; printf %s \"$line\" > {out}' >/dev/null 2>&1 & echo $!")
    xterm = int(started.stdout)
    provider._wait_on_display(handle, "xterm", xterm, time.monotonic() + 30,
                              lambda d, r: any(c.get_attributes().map_state == 2 for c in r.query_tree().children),
                              "the xterm window")
    provider.act(handle, Click(100, 100))  # no window manager: focus follows the pointer into xterm
    provider.act(handle, TypeText("héllo wörld €"))
    provider.act(handle, KeyPress(("enter",)))
    _wait_exit(xterm, timeout=30)
    assert out.read_text(encoding="utf-8") == "héllo wörld €"


def test_a_megabyte_typed_through_a_session_arrives_and_the_session_stays_usable() -> None:
    """1 MB through desk.type: before typing was linear, 40k characters already lost the session (the watchdog
    dropped a connection busy joining queued requests). Every key press must reach the focused client. One call
    types at most ``limits.BOUNDS["type_chars"]`` characters: a megabyte in one call is refused before any key
    is sent, and the megabyte in calls of the largest accepted size arrives whole."""
    import random
    import string

    import deskctl
    from deskctl.errors import UsageError
    from deskctl.limits import BOUNDS
    from deskctl.providers._x11 import X11Address
    from probe.keys import KeyRecorder

    rng = random.Random(5)
    text = "".join(rng.choice(string.ascii_lowercase + string.digits + " .,;\n") for _ in range(1_000_000))
    step = int(BOUNDS["type_chars"].hi)
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        data = desk.handle.data  # type: ignore[union-attr]
        with KeyRecorder.open(X11Address(str(data["display"])), read_cookie(data["cookie_file"])) as keys:
            with pytest.raises(UsageError) as refused:
                desk.type(text)
            assert refused.value.code == "usage.too_long"
            for start in range(0, len(text), step):
                desk.type(text[start:start + step])
            received = keys.text()
            desk.click(5, 5)  # the session is still there
    assert len(received) == len(text)
    assert received == text


# -- harness: exec options, files, windows (the contract's tests are in tests/conformance) -----------------------


def test_a_timeout_returns_even_when_a_daemon_keeps_the_output_pipes(provider: XvfbProvider) -> None:
    """The process group is killed at the timeout; a daemon that left it still holds stdout. Before, exec
    then waited for that daemon (here ten minutes, past the test's own timeout)."""
    handle = provider.create(_spec(), "dk-pipes", _labels("dk-pipes"))
    result = provider.exec(handle, "setsid sleep 600 & echo started; exec sleep 60", timeout=0.5)
    assert result.exit_code == 124 and "timed out" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("sudo") is None, reason="needs root and sudo")
def test_a_daemon_started_as_another_user_is_tagged_and_ended_by_destroy(provider: XvfbProvider) -> None:
    from deskctl.providers.xvfb import _tagged_processes

    handle = provider.create(_spec(), "dk-nobody", _labels("dk-nobody"))
    # a daemon started as nobody (sudo resets the environment: the tag must be passed on explicitly)
    started = provider.exec(handle, "setsid -f sleep 1000 >/dev/null 2>&1", user="nobody", cwd="/")
    assert started.exit_code == 0, started.stderr
    nobody = str(pwd.getpwnam("nobody").pw_uid)
    tagged = []
    for pid, _ in _tagged_processes("dk-nobody"):
        with open(f"/proc/{pid}/status") as fh:
            if next(line.split()[1] for line in fh if line.startswith("Uid:")) == nobody:
                tagged.append(pid)
    assert tagged, "the daemon runs as nobody and carries the session tag"
    provider.destroy(handle)
    for pid in tagged:
        assert not _alive(pid)


def test_another_user_needs_root_and_an_existing_name(provider: XvfbProvider,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from deskctl.errors import UsageError

    handle = provider.create(_spec(), "dk-user", _labels("dk-user"))
    with pytest.raises(UsageError) as info:
        provider.exec(handle, "true", user="no-such-user-here")
    assert info.value.code == "usage.bad_user"
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert provider.exec(handle, "id -un", user=me).stdout.strip() == me  # oneself: no sudo at all
    other = "nobody" if me != "nobody" else "root"
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # as a non-root caller sees it
    with pytest.raises(UsageError) as info:
        provider.exec(handle, "id -un", user=other)
    assert info.value.code == "usage.unsupported" and "root" in info.value.message


def test_files_are_copied_on_this_host_with_links_and_modes(provider: XvfbProvider, tmp_path: Path) -> None:
    from deskctl.errors import UsageError

    handle = provider.create(_spec(), "dk-files", _labels("dk-files"))
    source = tmp_path / "src"
    (source / "bin").mkdir(parents=True)
    (source / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (source / "bin" / "tool").chmod(0o750)
    (source / "link").symlink_to("bin/tool")
    provider.upload(handle, str(source), str(tmp_path / "a" / "b" / "dst"))
    dst = tmp_path / "a" / "b" / "dst"
    assert os.readlink(dst / "link") == "bin/tool"
    assert stat.S_IMODE((dst / "bin" / "tool").stat().st_mode) == 0o750
    assert provider.exec(handle, f"{dst}/link").stdout == "tool\n"
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(UsageError) as info:
        provider.download(handle, str(dst / "bin" / "tool"), str(blocker / "under" / "tool"))
    assert info.value.code == "usage.bad_path"
    assert [p.name for p in tmp_path.iterdir() if "deskctl-part" in p.name] == []


@pytest.mark.skipif(shutil.which("xterm") is None or shutil.which("openbox") is None
                    or shutil.which("xdotool") is None, reason="needs xterm, openbox and xdotool")
@pytest.mark.parametrize("window_manager", [False, True], ids=["bare", "openbox"])
def test_window_titles_are_read_over_x_in_utf8_and_include_minimised_windows(window_manager: bool) -> None:
    import deskctl

    title = f"ünï ✓ {os.getpid()}"
    with deskctl.open_desktop("xvfb", geometry="640x480", window_manager=window_manager) as desk:
        pid = desk.launch("xterm", "-u8", "-T", title, "-e", "sleep 600")
        assert desk.wait_for(title, timeout=60) == title
        assert desk.window_titles().count(title) == 1  # a frame of the window manager is no window of its own
        if window_manager:
            assert desk.exec(f"xdotool search --sync --name '{title}' windowminimize --sync").exit_code == 0
            assert title in desk.window_titles()
        assert pid is not None
        desk.exec(f"kill {pid}")


def test_which_finds_what_shutil_which_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """display.which (no shutil import on `up`'s path) answers as shutil.which for names and paths."""
    from deskctl.providers.xvfb.display import which

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("")  # not executable: skipped
    (second / "tool").write_text("#!/bin/sh\n")
    (second / "tool").chmod(0o755)
    (first / "folder").mkdir(mode=0o755)  # a directory is not a program
    monkeypatch.setenv("PATH", os.pathsep.join([str(first), str(second), str(first)]))
    for name in ("tool", "folder", "missing", str(second / "tool"), str(first / "tool"), str(first)):
        assert which(name) == shutil.which(name), name
    assert which("tool") == str(second / "tool")
