"""Real applications driven through the accessibility tree and the window list, on a host Xvfb desktop.

A GTK dialog (``zenity --question``) is found by role and name, its "Yes" button clicked through the tree, and
the dialog's exit status proves the click reached that button. A Chromium page's form controls appear with names
and bounds that match the screenshot (a pixel inside the bounds has the control's own colour). These need the
Debian packages of scripts/setup.d/60-observe.sh (at-spi2-core, dbus-x11, python3-gi, gir1.2-atspi-2.0, zenity,
chromium); without them they are skipped (and fail under CI).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

import deskctl
from deskctl.errors import ReadinessTimeout, UsageError
from deskctl.session import Desktop


def _have_atspi() -> bool:
    if shutil.which("zenity") is None or shutil.which("dbus-launch") is None:
        return False
    probe = subprocess.run(["/usr/bin/python3", "-c", "import gi; gi.require_version('Atspi', '2.0')"],
                           capture_output=True, check=False)
    return probe.returncode == 0


needs_atspi = pytest.mark.skipif(not _have_atspi(), reason="AT-SPI packages are not installed "
                                 "(scripts/setup.d/60-observe.sh)")


@pytest.fixture
def desk() -> Iterator[Desktop]:
    with deskctl.open_desktop("xvfb", geometry="1024x768") as desktop:
        yield desktop


@needs_atspi
def test_zenity_yes_is_clicked_through_the_tree(desk: Desktop, tmp_path: Path) -> None:
    status = tmp_path / "status"
    desk.accessibility_tree()  # the bus first: an application finds it when it starts
    desk.exec(f"zenity --question --title 'deskctl a11y' --text 'Go on?'; echo $? > {status}", background=True)
    desk.wait_for("deskctl a11y", timeout=60)
    yes = desk.find(role="push button", name="Yes", window="deskctl a11y")
    no = desk.find(role="push button", name="No", window="deskctl a11y")
    assert len(yes) == 1 and len(no) == 1
    assert yes[0].bounds is not None and "showing" in yes[0].states
    dialog = desk.accessibility_tree(window="deskctl a11y").root.children[0]
    assert (dialog.role, dialog.name) == ("dialog", "deskctl a11y")
    # the dialog's window is where the tree says it is
    listed = next(w for w in desk.windows() if w.title == "deskctl a11y")
    assert dialog.bounds == listed.geometry
    desk.click_element(yes[0])
    desk.wait_for(lambda d: status.exists() and status.read_text().strip(), timeout=30)
    assert status.read_text().strip() == "0"  # zenity --question exits 0 for Yes (1 for No)


@needs_atspi
def test_click_element_of_no_gives_exit_status_one(desk: Desktop, tmp_path: Path) -> None:
    status = tmp_path / "status"
    desk.accessibility_tree()
    desk.exec(f"zenity --question --title 'deskctl no' --text 'Go on?'; echo $? > {status}", background=True)
    desk.wait_for("deskctl no", timeout=60)
    (no,) = desk.find(role="push button", name="No", window="deskctl no")
    desk.click_element(no.to_dict())  # the node's JSON, as the CLI and MCP hand it back, serves too
    desk.wait_for(lambda d: status.exists() and status.read_text().strip(), timeout=30)
    assert status.read_text().strip() == "1"


FORM = """<!doctype html><html><head><title>deskctl form</title><style>
body { margin: 0; background: #ffffff; }
button, input { position: absolute; border: none; padding: 0; margin: 0; font-size: 18px; }
#go { left: 40px; top: 40px; width: 220px; height: 70px; background: rgb(200, 30, 60); color: #ffffff; }
#mail { left: 40px; top: 160px; width: 300px; height: 50px; background: rgb(20, 160, 240); }
#agree { left: 40px; top: 260px; width: 30px; height: 30px; }
</style></head><body>
<button id="go">Submit order</button>
<input id="mail" aria-label="Email address" value="ann@example.com">
<label><input id="agree" type="checkbox"> I agree</label>
</body></html>"""


@needs_atspi
def test_chromium_form_controls_have_names_and_bounds_that_match_the_screenshot(desk: Desktop,
                                                                                 tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed")
    page = tmp_path / "form.html"
    page.write_text(FORM)
    desk.accessibility_tree()
    # Chromium joins the accessibility bus with ACCESSIBILITY_ENABLED=1 (no GNOME setting says so here), and
    # exposes its pages' content with --force-renderer-accessibility
    desk.exec(f"ACCESSIBILITY_ENABLED=1 {chromium} --no-sandbox --no-first-run --disable-gpu "
              f"--force-renderer-accessibility --user-data-dir={tmp_path / 'profile'} --window-position=0,0 "
              f"--window-size=900,700 --app=file://{page}", background=True)
    desk.wait_for("deskctl form", timeout=90)

    def button(d: Desktop) -> object:
        return d.find(role="push button", name="Submit order", window="deskctl form")

    (go,) = desk.wait_for(button, timeout=60)  # the renderer's tree arrives after the window
    (mail,) = desk.find(role="entry", name="Email address", window="deskctl form")
    assert mail.value == "ann@example.com"
    boxes = desk.find(role="check box", window="deskctl form")
    assert boxes and boxes[0].bounds is not None
    shot = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
    for node, colour in ((go, (200, 30, 60)), (mail, (20, 160, 240))):
        assert node.bounds is not None
        x, y, w, h = node.bounds
        assert (w, h) == ((220, 70) if node is go else (300, 50))
        assert shot.getpixel((x + 4, y + 4)) == colour
        assert shot.getpixel((x + w - 5, y + h - 5)) == colour
        assert shot.getpixel((x - 3, y - 3)) == (255, 255, 255)


def test_ready_when_a_title_that_never_comes_is_an_infrastructure_failure_and_nothing_is_left() -> None:
    from deskctl.ledger import open_ledger

    with pytest.raises(ReadinessTimeout) as late:
        deskctl.open_desktop("xvfb", geometry="640x480", ready_when="never such a window", ready_timeout=2)
    assert late.value.exit_code == 20 and late.value.code == "readiness.timeout"
    with open_ledger() as book:
        (record,) = book.sessions()
    assert record.status in ("ended", "failed")
    assert not Path(f"/tmp/.X11-unix/X{record.handle['data']['display_number']}").exists() if record.handle else True
    with pytest.raises(UsageError):
        deskctl.open_desktop("xvfb", ready_when={"nonsense": 1})


def test_ready_when_a_command_and_a_window(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    with deskctl.open_desktop("xvfb", geometry="640x480", ready_when={"command": f"touch {flag} && test -e {flag}"},
                              ready_timeout=30) as desk:
        assert flag.exists()
        assert desk.wait_until_stable(quiet_ms=200, timeout=30) >= 0.2


def test_wait_until_stable_waits_for_a_changing_region_to_settle(desk: Desktop, tmp_path: Path) -> None:
    # a client repaints a corner every 20 ms for a while (a shell loop of xsetroot would need x11 tools): the
    # region under it is stable only after it stopped; a region elsewhere is stable at once
    script = tmp_path / "blink.py"
    script.write_text(
        "import time, sys\n"
        "from Xlib import X, display\n"
        "d = display.Display()\n"
        "s = d.screen()\n"
        "w = s.root.create_window(0, 0, 100, 100, 0, s.root_depth, X.InputOutput, X.CopyFromParent,"
        " background_pixel=0, override_redirect=1)\n"
        "w.map(); d.sync()\n"
        "end = time.monotonic() + float(sys.argv[1])\n"
        "i = 0\n"
        "while time.monotonic() < end:\n"
        "    gc = w.create_gc(foreground=(i * 7919) & 0xFFFFFF); w.fill_rectangle(gc, 0, 0, 100, 100); d.sync()\n"
        "    i += 1; time.sleep(0.02)\n"
        "open(sys.argv[2], 'w').write('done')\n"
        "time.sleep(60)\n")
    import sys

    done = tmp_path / "done"
    desk.exec(f"{sys.executable} {script} 1.5 {done}", background=True)
    desk.wait_for(lambda d: d.raw_frame().image().getpixel((50, 50)) != (0, 0, 0), timeout=30)
    desk.wait_until_stable(region=(0, 0, 100, 100), quiet_ms=400, timeout=60)
    assert done.exists()  # it changed until the loop ended
    with pytest.raises(UsageError):
        desk.wait_until_stable(quiet_ms=-1)


def test_focus_and_click_element_are_recorded_steps(tmp_path: Path) -> None:
    record = tmp_path / "rec"
    with deskctl.open_desktop("xvfb", geometry="640x480", record=record) as desk:
        desk.exec("xmessage -name obs -title 'deskctl rec' 'hello'", background=True) if shutil.which(
            "xmessage") else pytest.skip("xmessage is not installed")
        desk.wait_for("deskctl rec", timeout=30)
        window = desk.focus("deskctl rec")
        desk.move_window(window, 10, 20, 300, 100)
    # read once the session ended: the recorder writes its rows in the background
    rows = [json.loads(line) for line in (record / "trajectory.jsonl").read_text().splitlines()]
    steps = [r["action"] for r in rows if r.get("type") == "step"]
    assert [s["kind"] for s in steps] == ["focus", "move_window"]
    assert steps[1]["geometry"] == [10, 20, 300, 100]


def test_ready_when_a_devtools_page_is_there(tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed")
    page = tmp_path / "ready.html"
    page.write_text("<!doctype html><title>deskctl ready page</title><p>ready</p>")
    port = 9333
    with deskctl.open_desktop("xvfb", geometry="640x480") as desk:
        from deskctl.observe.readiness import wait_ready_when

        desk.exec(f"{chromium} --headless=new --no-sandbox --disable-gpu --remote-debugging-port={port} "
                  f"--user-data-dir={tmp_path / 'profile'} file://{page}", background=True)
        found = wait_ready_when(desk, {"url": "ready.html", "port": port}, 90)
        assert str(found).endswith("ready.html")
        assert wait_ready_when(desk, {"url": "deskctl ready page", "port": port}, 30)  # by its title too
        with pytest.raises(ReadinessTimeout):
            wait_ready_when(desk, {"url": "no-such-page", "port": port}, 1)
    # no port: the page is read through the session's own DevTools (xvfb's Chromium takes a free port, not 9222)
    with deskctl.open_desktop("xvfb", geometry="640x480", start_url=f"file://{page}",
                              ready_when={"url": "deskctl ready page"}, ready_timeout=90) as desk:
        assert [p.title for p in desk.browser_pages()] == ["deskctl ready page"]
    # a callable condition, as open_desktop takes it
    with deskctl.open_desktop("xvfb", geometry="640x480", ready_when=lambda d: d.size == (640, 480)) as desk:
        assert desk.size == (640, 480)


def test_the_async_surface_observes_too() -> None:
    import asyncio

    from deskctl import aio

    async def run() -> tuple[object, tuple[int, int], list[object]]:
        async with aio.open_desktop("xvfb", geometry="640x480", ready_when={"command": "true"}) as desk:
            shot = await desk.screenshot(max_size=(320, 240))
            await desk.move(10, 10, space=shot)
            position = await desk.cursor_position()
            return shot.transform, position, await desk.windows()  # type: ignore[attr-defined]

    transform, position, windows = asyncio.run(run())
    assert transform.size == (320, 240)  # type: ignore[attr-defined]
    assert position == (21, 21)  # image pixel 10 of a half-size image shows desktop pixel 21
    assert windows == []
