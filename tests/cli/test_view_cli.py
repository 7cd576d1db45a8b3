"""``deskctl view`` as a real process on a real Xvfb desktop, watched by a real headless Chromium: the page shows
what the desktop shows, a click on the page lands where it should, the token and --control are enforced, and
Ctrl-C stops the view without touching the desktop."""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops, ImageStat

from _chromium import chromium  # noqa: F401
from deskctl.providers._x11 import X11Address, read_cookie
from probe import Probe

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/Xvfb"), reason="Xvfb is not installed")

SIZE = (640, 480)


def deskctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())
    if check:
        assert proc.returncode == 0, f"deskctl {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    return proc


@dataclass
class Session:
    id: str
    address: X11Address
    cookie: bytes


@pytest.fixture
def session() -> Iterator[Session]:
    """A detached 640x480 Xvfb desktop made by `deskctl up`, destroyed by `deskctl down` afterwards."""
    from deskctl.ledger import open_ledger

    sid = deskctl("up", "--geometry", f"{SIZE[0]}x{SIZE[1]}", "--ttl", "10m").stdout.strip()
    try:
        with open_ledger() as book:
            record = book.get(sid)
        assert record is not None and record.handle is not None
        data = record.handle["data"]
        yield Session(sid, X11Address(str(data["display"])), read_cookie(str(data["cookie_file"])))
    finally:
        deskctl("down", sid, check=False)


@dataclass
class View:
    proc: subprocess.Popen[str]
    url: str

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as a person at the terminal does: (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@contextmanager
def viewing(session_id: str, *flags: str) -> Iterator[View]:
    proc = subprocess.Popen([sys.executable, "-m", "deskctl", "view", session_id, *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            raise AssertionError(f"deskctl view printed no URL: {proc.communicate()[1]}")
        yield View(proc, line.strip())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def request(url: str, data: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``condition`` (a browser gives no event to wait on from here) until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_token_everywhere_input_only_with_control_and_ctrl_c_leaves_the_desktop(session: Session) -> None:
    from deskctl.paths import home_dir

    with Probe.open(session.address, session.cookie) as probe, viewing(session.id) as view:
        assert view.url.startswith("http://127.0.0.1:")
        for path in ("/", "/stream", "/frame.jpg", "/info", "/input", "/no-such-page"):
            for query in ("", "?token=", "?token=" + view.token[:-1], "?token=" + view.token + "x",
                          "?token=%C3%A9"):
                status, body = request(view.base + path + query)
                assert status == 403, (path, query)
                assert json.loads(body)["error"]["code"] == "view.forbidden"
        status, body = request(view.base + "/input", b'{"type": "click", "x": 1, "y": 1, "w": 2, "h": 2}')
        assert (status, json.loads(body)["error"]["code"]) == (403, "view.forbidden")
        status, body = request(f"{view.base}/input?token={view.token}",
                               b'{"type": "click", "x": 1, "y": 1, "w": 2, "h": 2}')
        assert (status, json.loads(body)["error"]["code"]) == (403, "view.control_off")
        status, body = request(f"{view.base}/info?token={view.token}")
        assert status == 200
        assert json.loads(body) == {"id": session.id, "provider": "xvfb", "width": 640, "height": 480,
                                    "control": False}
        port = int(view.base.rsplit(":", 1)[1])
        with pytest.raises(OSError), socket.create_connection(("127.0.0.2", port), timeout=5):
            pass  # bound to 127.0.0.1 only: not even the rest of the loopback network reaches it
        probe.sync_point()
        assert probe.presses() == []
        code, err = view.stop()
    assert code == 0, err
    assert err.endswith(f"view of {session.id} stopped (0 frames sent); the desktop is still up\n")
    # the token is in no log, no message and no file of deskctl's (the ledger included)
    assert view.token not in err
    for path in Path(home_dir()).rglob("*"):
        if path.is_file():
            assert view.token.encode() not in path.read_bytes(), path
    listed = json.loads(deskctl("ls", "--json").stdout)["sessions"]
    assert [r["status"] for r in listed if r["id"] == session.id] == ["ready"]
    deskctl("do", session.id, "click", "5", "5")


def _shown(driver: Any) -> Image.Image:
    """What the page shows of the desktop: the pixels of the <img> as Chromium rendered them."""
    element = driver.find_element("id", "screen")
    return Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB")


def _close(a: tuple[int, ...], b: tuple[int, ...], tolerance: int = 12) -> bool:
    return all(abs(x - y) <= tolerance for x, y in zip(a, b, strict=True))


def _open_page(driver: Any, view: View) -> None:
    driver.get(view.url)
    until(lambda: driver.execute_script("return document.getElementById('screen').naturalWidth") == SIZE[0],
          "the first frame in the page")


def test_the_page_in_chromium_shows_the_live_desktop(
        session: Session, chromium: Any, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    boxes = [((40, 30, 120, 90), (220, 30, 40)), ((300, 200, 160, 100), (20, 90, 230)),
             ((560, 400, 80, 80), (250, 210, 0))]
    with Probe.open(session.address, session.cookie) as probe, viewing(session.id) as view:
        for (x, y, w, h), rgb in boxes:
            probe.paint(x, y, w, h, rgb)
        _open_page(chromium, view)
        shot_path = tmp_path / "shot.png"
        deskctl("screenshot", session.id, "-o", str(shot_path))
        desktop = Image.open(shot_path).convert("RGB")

        def matches() -> Image.Image | None:
            shown = _shown(chromium)
            if shown.size != desktop.size:
                return None
            return shown if all(_close(shown.getpixel((x + w // 2, y + h // 2)), rgb)  # type: ignore[arg-type]
                                for (x, y, w, h), rgb in boxes) else None

        shown = until(matches, "the painted boxes in the page")
        assert shown.size == SIZE  # shown at its own size: one page pixel per desktop pixel
        mean_error = sum(ImageStat.Stat(ImageChops.difference(shown, desktop)).mean) / 3
        assert mean_error < 2.0, mean_error  # the whole picture, not just the boxes (JPEG is close, not equal)
        assert _close(shown.getpixel((5, 5)), (255, 255, 255))  # type: ignore[arg-type]

        probe.paint(40, 30, 120, 90, (0, 160, 60))  # the stream goes on: a change shows up in the open page
        until(lambda: _close(_shown(chromium).getpixel((100, 75)), (0, 160, 60)),  # type: ignore[arg-type]
              "the repainted box in the page")
        code, err = view.stop()
    assert code == 0, err


def test_a_click_and_keys_in_the_page_reach_the_desktop_at_its_coordinates(
        session: Session, chromium: Any) -> None:  # noqa: F811 (the fixture imported above)
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    with Probe.open(session.address, session.cookie) as probe, viewing(session.id, "--control") as view:
        _open_page(chromium, view)
        screen = chromium.find_element("id", "screen")
        # shown at half size, so that the page's point must be scaled to the desktop's
        chromium.execute_script("arguments[0].style.width = '320px'", screen)
        until(lambda: screen.size == {"width": 320, "height": 240}, "the image at half size")
        # Selenium's offsets are from the element's centre (160, 120)
        ActionChains(chromium).move_to_element_with_offset(screen, 100 - 160, 50 - 120).click().perform()
        probe.wait_for(lambda p: p.releases(1), "the left click")
        assert [(e.button, e.pos) for e in probe.presses()] == [(1, (200, 100))]
        ActionChains(chromium).move_to_element_with_offset(screen, 300 - 160, 230 - 120).context_click().perform()
        probe.wait_for(lambda p: p.releases(3), "the right click")
        assert probe.presses(3)[0].pos == (600, 460)
        ActionChains(chromium).send_keys("hi").perform()
        probe.wait_for(lambda p: p.text() == "hi", "the typed text")
        # each press and release and both keys were answered (the page counts the answers)
        until(lambda: chromium.execute_script("return window.deskctlInputsDone") == 6, "six answered inputs")
        probe.clear()
        # the wheel (two notches down) and a drag, at the desktop's coordinates too
        ActionChains(chromium).scroll_from_origin(ScrollOrigin.from_element(screen, 10 - 160, 20 - 120), 0, 200
                                                  ).perform()
        probe.wait_for(lambda p: len(p.releases(5)) == 2, "two wheel clicks down")
        assert [e.pos for e in probe.presses(5)] == [(20, 40), (20, 40)]
        ActionChains(chromium).move_to_element_with_offset(screen, 40 - 160, 40 - 120).click_and_hold().move_by_offset(
            60, 30).release().perform()
        probe.wait_for(lambda p: p.releases(1), "the end of the drag")
        assert probe.presses(1)[0].pos == (80, 80)
        assert probe.releases(1)[0].pos == (200, 140)
        assert (200, 140) in [e.pos for e in probe.motions()]
        assert chromium.find_element("id", "status").text == ""
        code, err = view.stop()
    assert code == 0, err


def test_a_desktop_that_goes_away_ends_the_view_with_its_error(session: Session) -> None:
    with viewing(session.id) as view:
        stream = urllib.request.urlopen(f"{view.base}/stream?token={view.token}", timeout=30)
        assert stream.read(2) == b"--"  # watched: frames are being captured
        deskctl("down", session.id)
        _, err = view.proc.communicate(timeout=60)
        stream.close()
    assert view.proc.returncode == 20, err
    assert "(provider.session_lost)" in err


def test_a_desktop_that_goes_away_while_nobody_watches_ends_the_view_too(session: Session) -> None:
    # once: with no viewer nothing was captured, so nothing noticed, and the view ran on forever
    with viewing(session.id) as view:
        deskctl("down", session.id)  # another process ends the session
        _, err = view.proc.communicate(timeout=60)
    assert view.proc.returncode == 20, err
    assert f"the desktop {session.id} is gone: its session ended" in err and "(provider.session_lost)" in err


def test_a_desktop_killed_from_outside_while_nobody_watches_ends_the_view(session: Session) -> None:
    from deskctl.ledger import open_ledger

    with open_ledger() as book:
        record = book.get(session.id)
    assert record is not None and record.handle is not None
    (xvfb,) = [int(p["pid"]) for p in record.handle["data"]["procs"] if p["role"] == "xvfb"]
    with viewing(session.id) as view:
        os.kill(xvfb, signal.SIGKILL)  # not through deskctl: the ledger still says ready
        _, err = view.proc.communicate(timeout=60)
    assert view.proc.returncode == 20, err
    assert "xvfb says it no longer exists" in err and "(provider.session_lost)" in err


def test_view_of_an_unknown_session_is_a_usage_error() -> None:
    proc = deskctl("view", "dk-missing", check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == "error: no session 'dk-missing' in the ledger (usage.not_found)\n  remedy: deskctl ls --all\n"


def test_a_port_in_use_is_a_usage_error(session: Session) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = deskctl("view", session.id, "--port", str(port), check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "(usage.bad_port)" in proc.stderr
