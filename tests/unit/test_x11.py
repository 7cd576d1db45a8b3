"""The shared X11 driver against real Xvfb servers: key mapping, cookies, the three ways to connect, capture,
input as a real X client sees it, keymap borrowing, and error translation."""

from __future__ import annotations

import io
import os
import select
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from _procs import wait_until
from _relay import pump
from deskctl.actions import Click, KeyPress, Scroll, TypeText
from deskctl.errors import ProviderUnreachable, SessionLost, UsageError
from deskctl.providers._x11 import (
    X11Address,
    X11Driver,
    connect_display,
    keysym_for_char,
    keysym_for_key,
    new_cookie,
    read_cookie,
    write_xauthority,
)
from probe import Probe
from probe.keys import KeyRecorder

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    number: int
    cookie: bytes
    auth: Path

    @property
    def display(self) -> str:
        return f":{self.number}"

    @property
    def address(self) -> X11Address:
        return X11Address(self.display)


def start_xvfb(tmp: Path, geometry: str = "640x480x24") -> Server:
    cookie = new_cookie()
    auth = write_xauthority(tmp / "auth", None, cookie)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_end), "-screen", "0", geometry, "-auth", str(auth), "-nolisten", "tcp",
         "-noreset"], pass_fds=(write_end,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(write_end)
    try:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([read_end], [], [], 30)
            chunk = os.read(read_end, 32) if ready else b""
            if not chunk:
                proc.kill()
                proc.wait()
                raise RuntimeError("Xvfb did not start")
            data += chunk
    finally:
        os.close(read_end)
    return Server(proc, int(data), cookie, auth)


def stop_xvfb(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_xvfb(tmp_path_factory.mktemp("xvfb"))
    try:
        yield running
    finally:
        stop_xvfb(running)


@pytest.fixture
def driver(server: Server) -> Iterator[X11Driver]:
    with X11Driver.open(server.display, cookie=server.cookie) as drv:
        yield drv


@pytest.fixture
def probe(server: Server) -> Iterator[Probe]:
    with Probe.open(server.address, server.cookie) as window:
        yield window


# -- pure mappings -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "xname"),
    [("ctrl", "Control_L"), ("super", "Super_L"), ("cmd", "Super_L"), ("enter", "Return"), ("pageup", "Prior"),
     ("pagedown", "Next"), ("escape", "Escape"), ("backspace", "BackSpace"), ("f1", "F1"), ("f12", "F12"),
     ("f24", "F24"), ("alt", "Alt_L"), ("shift", "Shift_L"), ("delete", "Delete"), ("printscreen", "Print"),
     ("space", "space"), ("capslock", "Caps_Lock"), ("a", "a"), ("A", "A"), ("+", "plus")],
)
def test_key_names_map_to_the_keysyms_xlib_knows(name: str, xname: str) -> None:
    from Xlib import XK

    assert keysym_for_key(name) == XK.string_to_keysym(xname)


def test_characters_map_to_latin1_or_unicode_keysyms() -> None:
    assert keysym_for_char("é") == 0xE9
    assert keysym_for_char("€") == 0x010020AC
    assert keysym_for_char("日") == 0x01000000 | ord("日")
    assert keysym_for_char("\n") == 0xFF0D
    with pytest.raises(UsageError):
        keysym_for_key("hyperspace")


# -- cookies -------------------------------------------------------------------------------------------------------


def test_xauthority_file_is_private_and_readable_by_xauth(tmp_path: Path) -> None:
    cookie = new_cookie()
    path = write_xauthority(tmp_path / "a", 7, cookie)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_cookie(path, 7) == cookie
    assert read_cookie(path) == cookie
    with pytest.raises(ProviderUnreachable):
        read_cookie(path, 8)
    if shutil.which("xauth"):
        listed = subprocess.run(["xauth", "-f", str(path), "list"], capture_output=True, text=True, check=True)
        assert "MIT-MAGIC-COOKIE-1" in listed.stdout and cookie.hex() in listed.stdout
        assert ":7" in listed.stdout


def test_missing_or_malformed_cookie_files_are_unreachable(tmp_path: Path) -> None:
    with pytest.raises(ProviderUnreachable):
        read_cookie(tmp_path / "nope")
    (tmp_path / "bad").write_bytes(b"\x01")
    with pytest.raises(ProviderUnreachable):
        read_cookie(tmp_path / "bad")


# -- connecting ----------------------------------------------------------------------------------------------------


def test_wrong_cookie_is_refused(server: Server) -> None:
    with pytest.raises(ProviderUnreachable, match="refused"):
        X11Driver.open(server.display, cookie=b"0" * 16, provider="xvfb")
    with pytest.raises(ProviderUnreachable):
        X11Driver.open(server.display, cookie=None)


def test_no_server_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(ProviderUnreachable) as info:
        X11Driver.open(":5", socket_path=str(tmp_path / "X5"), cookie=None, provider="docker")
    assert info.value.provider == "docker"


def test_connect_through_a_socket_at_any_path(server: Server, tmp_path: Path) -> None:
    link = tmp_path / "shared-volume" / "X9"
    link.parent.mkdir()
    link.symlink_to(f"/tmp/.X11-unix/X{server.number}")
    with X11Driver.open(":9", socket_path=str(link), cookie=server.cookie) as drv:
        assert drv.size() == (640, 480)


class Relay:
    """A loopback TCP port forwarded to the server's unix socket, as ``ssh -L`` would give."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for conn in self.conns:
            conn.close()


def test_connect_through_a_forwarded_tcp_port(server: Server, probe: Probe) -> None:
    relay = Relay(f"/tmp/.X11-unix/X{server.number}")
    try:
        with X11Driver.open(":0", host="127.0.0.1", port=relay.port, cookie=server.cookie) as drv:
            assert drv.size() == (640, 480)
            drv.click(33, 44)
            shot = drv.screenshot()
            assert not drv.uses_shm
            assert (shot.width, shot.height) == (640, 480)
        probe.wait_for(lambda p: p.releases(1), "a click over TCP")
        assert probe.presses(1)[0].pos == (33, 44)
    finally:
        relay.close()


def test_connections_from_many_threads_each_reach_their_own_server(server: Server, tmp_path: Path) -> None:
    other = start_xvfb(tmp_path, "320x200x24")
    sizes: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def work(srv: Server) -> None:
        try:
            for _ in range(5):
                with X11Driver.open(srv.display, cookie=srv.cookie) as drv:
                    sizes.append(drv.size())
        except BaseException as exc:  # collected and re-raised below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in (server, other, server, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop_xvfb(other)
    assert not errors
    assert sorted(set(sizes)) == [(320, 200), (640, 480)] and len(sizes) == 20


def test_plain_python_xlib_users_are_not_affected(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    import Xlib.display

    connect_display(server.address, server.cookie).close()  # the shim is installed
    monkeypatch.setenv("XAUTHORITY", str(server.auth))
    plain = Xlib.display.Display(server.display)
    try:
        assert plain.screen().width_in_pixels == 640
    finally:
        plain.close()


# -- capture -------------------------------------------------------------------------------------------------------


def test_screenshot_pixels_are_the_screen(server: Server, probe: Probe) -> None:
    from Xlib import X

    screen = probe.display.screen()
    red = screen.root.create_window(100, 50, 40, 30, 0, screen.root_depth, X.InputOutput, X.CopyFromParent,
                                    background_pixel=0xFF0000, override_redirect=True)
    red.map()
    probe.display.sync()
    try:
        for use_shm in (True, False):
            drv = X11Driver.open(server.display, cookie=server.cookie, use_shm=use_shm)
            with drv:
                image = Image.open(io.BytesIO(drv.screenshot().png)).convert("RGB")
                assert drv.uses_shm is use_shm
            assert image.size == (640, 480)
            assert image.getpixel((100, 50)) == (255, 0, 0)
            assert image.getpixel((139, 79)) == (255, 0, 0)
            assert image.getpixel((140, 80)) == (255, 255, 255)
            assert image.getpixel((99, 50)) == (255, 255, 255)
    finally:
        red.destroy()
        probe.display.sync()


def test_capture_of_a_16_bit_screen(tmp_path: Path) -> None:
    srv = start_xvfb(tmp_path, "320x200x16")
    try:
        with X11Driver.open(srv.display, cookie=srv.cookie) as drv:
            image = Image.open(io.BytesIO(drv.screenshot().png))
            assert image.size == (320, 200)
    finally:
        stop_xvfb(srv)


# -- input ---------------------------------------------------------------------------------------------------------


def test_actions_arrive_in_a_real_client(driver: X11Driver, probe: Probe) -> None:
    driver.act(Click(10, 20, "left", 2))
    driver.act(Click(30, 40, "right"))
    driver.act(Scroll(50, 60, dy=1, dx=-1))
    driver.act(TypeText("aZ\u00e9"))
    driver.act(KeyPress(("ctrl", "c")))
    probe.wait_for(lambda p: len(p.key_presses()) >= 6, "typed keys and a chord")
    assert [(e.button, e.pos) for e in probe.presses()] == [(1, (10, 20)), (1, (10, 20)), (3, (30, 40)),
                                                            (5, (50, 60)), (6, (50, 60))]
    assert probe.text().startswith("aZé")
    ctrl_c = [e for e in probe.key_presses() if e.char == "c"]
    assert ctrl_c and ctrl_c[0].state & 4


def test_borrowed_keycodes_are_reused_and_restored(server: Server, probe: Probe) -> None:
    text = "".join(chr(0x4E00 + i) for i in range(300))  # more symbols than there are spare keycodes
    with X11Driver.open(server.display, cookie=server.cookie) as drv:
        drv.restore_keymap()  # undo what earlier tests on this server borrowed
        before = drv._display.get_keyboard_mapping(8, 248)
        drv.type_text(text[:40])
        probe.wait_for(lambda p: len(p.text()) >= 40, "forty CJK characters")
        assert probe.text() == text[:40]
        drv.restore_keymap()
        after = drv._display.get_keyboard_mapping(8, 248)
        assert [tuple(r) for r in after] == [tuple(r) for r in before]
        probe.clear()
        drv.type_text(text)  # cycles through the pool
        drv.restore_keymap()
        assert [tuple(r) for r in drv._display.get_keyboard_mapping(8, 248)] == [tuple(r) for r in before]


def _long_text(length: int, seed: int, extra: str = "") -> str:
    """Printable ASCII (both cases, so Shift comes and goes), spaces, newlines and tabs, and ``extra`` symbols."""
    import random
    import string

    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + string.punctuation + "  \n\t" + extra
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_a_long_text_arrives_whole_and_in_order(server: Server) -> None:
    """Typing was quadratic (python-xlib joins queued requests one by one), so 150k characters ran into the
    watchdog and lost the session; every key of the text, some needing a borrowed keycode, must arrive."""
    text = _long_text(150_000, seed=1, extra="éß€日本")
    with KeyRecorder.open(server.address, server.cookie) as keys, \
            X11Driver.open(server.display, cookie=server.cookie) as drv:
        drv.type_text(text)
        received = keys.text()
        # the sequence numbers wrapped several times: replies must still match their requests
        assert drv.size() == (640, 480)
        drv.restore_keymap()
    assert len(received) == len(text)
    assert received == text


def test_the_driver_sets_up_xtest_only_and_reads_the_keymap_only_to_type(server: Server, probe: Probe) -> None:
    """A CLI action opens one connection per process: no module and no round trip for the dozen extensions
    the driver does not use, and no keymap for a click."""
    with X11Driver.open(server.display, cookie=server.cookie) as drv:
        assert drv._display.extensions == ["XTEST"]
        drv.click(7, 8)
        assert drv._keymap == []
        drv.type_text("Ok")
        assert drv._keymap
        assert drv.screenshot().width == 640  # MIT-SHM is queried on its own when first needed
    probe.wait_for(lambda p: len(p.text()) >= 2, "two typed letters")
    assert probe.presses(1)[0].pos == (7, 8) and probe.text() == "Ok"


def test_unknown_button_and_key_are_usage_errors(driver: X11Driver) -> None:
    with pytest.raises(UsageError):
        driver.click(1, 1, "fourth")
    with pytest.raises(UsageError):
        driver.key("ctrl", "nokey")


# -- losing the server ---------------------------------------------------------------------------------------------


def test_a_server_that_dies_is_a_lost_session(tmp_path: Path) -> None:
    srv = start_xvfb(tmp_path)
    drv = X11Driver.open(srv.display, cookie=srv.cookie, provider="xvfb")
    try:
        drv.ping()
        srv.proc.kill()
        srv.proc.wait()
        with pytest.raises(SessionLost) as info:
            drv.click(1, 1)
        assert info.value.provider == "xvfb"
        with pytest.raises(SessionLost):
            drv.screenshot()
    finally:
        drv.close()
        drv.close()
        stop_xvfb(srv)
    with pytest.raises(SessionLost):
        drv.size()


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare as root")
def test_capture_shares_memory_by_descriptor_with_a_server_in_another_ipc_namespace(tmp_path: Path) -> None:
    """A server in another IPC namespace (as in a container) cannot attach a System V segment by id; the
    segment goes to it as a file descriptor (MIT-SHM AttachFd), and the pixels are the screen's."""
    cookie = new_cookie()
    auth = write_xauthority(tmp_path / "auth", None, cookie)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(["unshare", "--ipc", "Xvfb", "-displayfd", str(write_end), "-screen", "0",
                             "320x200x24", "-auth", str(auth), "-nolisten", "tcp"], pass_fds=(write_end,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        select.select([read_end], [], [], 30)
        number = int(os.read(read_end, 32) or b"-1")
        assert number >= 0, "Xvfb did not start under unshare"
        with X11Driver.open(f":{number}", cookie=cookie) as drv, \
                X11Driver.open(f":{number}", cookie=cookie, use_shm=False) as plain:
            plain.click(1, 1)  # the cursor is not drawn in captures; a black root with a white pixel is
            probe = connect_display(X11Address(f":{number}"), cookie)
            try:
                screen = probe.screen()
                gc = screen.root.create_gc(foreground=0xFFFFFF)
                screen.root.fill_rectangle(gc, 7, 5, 1, 1)
                probe.sync()
                shared = drv.raw_frame()
                assert drv.uses_shm
                assert shared == plain.raw_frame() and not plain.uses_shm
            finally:
                probe.close()
            assert (shared.width, shared.height) == (320, 200)
            image = Image.open(io.BytesIO(drv.screenshot().png)).convert("RGB")
            assert image.getpixel((7, 5)) == (255, 255, 255) and image.getpixel((8, 5)) == (0, 0, 0)
    finally:
        os.close(read_end)
        proc.terminate()
        proc.communicate(timeout=10)


def test_key_down_of_an_upper_case_letter_holds_shift_with_it(driver: X11Driver, probe: Probe) -> None:
    driver.key_down("Q")
    driver.key_up("Q")
    driver.type_text("q")
    probe.wait_for(lambda p: len(p.text()) >= 2, "two letters")
    assert probe.text() == "Qq"


def test_a_refused_request_is_an_error_not_a_message_on_stderr(
    driver: X11Driver, capsys: pytest.CaptureFixture[str]
) -> None:
    from deskctl.errors import ProviderApiError

    with pytest.raises(ProviderApiError, match="refused"):
        driver.click(10, 10, "left")  # fine
        driver._display.xtest_fake_input(2, 3)  # KeyPress of keycode 3, below min_keycode: BadValue
        driver.ping()
    assert "X protocol error" not in capsys.readouterr().err
    driver.ping()  # the error was reported once; the connection is still good


def test_a_server_that_stops_answering_fails_the_call_instead_of_hanging_it(tmp_path: Path) -> None:
    import signal

    srv = start_xvfb(tmp_path)
    drv = X11Driver.open(srv.display, cookie=srv.cookie, provider="xvfb", op_timeout=0.5)
    try:
        drv.ping()
        drv.click(5, 5)  # an armed and disarmed watchdog does not fire between calls
        srv.proc.send_signal(signal.SIGSTOP)
        with pytest.raises(SessionLost, match=r"did not answer within 0\.5s"):
            drv.size()
    finally:
        srv.proc.send_signal(signal.SIGCONT)
        drv.close()
        stop_xvfb(srv)


def test_compound_text_titles_decode_latin1_and_utf8_segments() -> None:
    from deskctl.providers._x11 import decode_compound_text

    # what xterm -T "ünï ✓ x" writes as WM_NAME: Latin-1, then UTF-8 in an ESC % G ... ESC % @ segment
    assert decode_compound_text(b"\xfcn\xef \x1b%G\xe2\x9c\x93\x1b%@ x") == "ünï ✓ x"
    assert decode_compound_text(b"\x1b-A\xe9t\xe9") == "été"  # a designation of the Latin-1 right half
    assert decode_compound_text(b"plain") == "plain"


def test_close_does_not_wait_for_an_action_in_progress(server: Server) -> None:
    """A teardown closes the driver while another thread types: close does not wait for the driver's lock (it used
    to, i.e. for the whole action: here minutes of typing, which then completed), and the action ends as a lost
    session at its next step."""
    driver = X11Driver.open(server.display, cookie=server.cookie)
    outcome: list[BaseException | None] = []

    def type_for_minutes() -> None:
        try:
            driver.type_text("a" * 5_000_000)  # far longer than the test: minutes of key taps
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    def under_way() -> bool:  # the typing thread holds the driver's lock (or has already ended: see outcome)
        if not typing.is_alive():
            return True
        if driver._lock.acquire(blocking=False):
            driver._lock.release()
            return False
        return True

    typing = threading.Thread(target=type_for_minutes, daemon=True)
    typing.start()
    try:
        wait_until(under_way, "the typing under way", timeout=120)
        driver.close()
    finally:
        typing.join(timeout=600)
    assert not typing.is_alive(), "the action went on after close"
    assert len(outcome) == 1 and isinstance(outcome[0], SessionLost), outcome
    assert driver.closed
