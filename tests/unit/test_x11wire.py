"""The wire path of `deskctl do` (core/x11wire.py) against a real Xvfb: the same events as python-xlib's
driver for every input action, its errors as deskctl's, and a `deskctl do` process that never loads python-xlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import deskctl
from deskctl import actions as act
from deskctl.core import x11 as _x11
from deskctl.core.x11wire import WireDriver
from deskctl.errors import ProviderUnreachable
from deskctl.providers._x11 import X11Address, X11Driver, read_cookie
from probe import Probe

ACTIONS: list[act.Action] = [
    act.Move(10, 12),
    act.Click(30, 40, "left", 1),
    act.Click(31, 41, "right", 2),
    act.MouseDown(50, 60, "middle"),
    act.MouseUp(55, 65, "middle"),
    act.Drag(5, 5, 100, 80, "left"),
    act.Scroll(70, 70, 2, -3),
    act.KeyPress(("ctrl", "shift", "a")),
    act.KeyPress(("A",)),  # a shifted character: Shift put around it
    act.KeyDown("B"),
    act.KeyUp("B"),
    act.TypeText("Hello, wire!\n"),
]


@pytest.fixture
def desk() -> Iterator[Any]:
    with deskctl.open_desktop("xvfb", geometry="320x240") as opened:
        yield opened


def _open(desk: Any, wire: bool) -> Any:
    data = desk.handle.data
    _x11.prefer_wire(wire)
    try:
        return X11Driver.open(str(data["display"]), cookie=read_cookie(str(data["cookie_file"])), provider="xvfb")
    finally:
        _x11.prefer_wire(False)


def _events(desk: Any, wire: bool) -> list[tuple[Any, ...]]:
    data = desk.handle.data
    driver = _open(desk, wire)
    assert isinstance(driver, WireDriver) is wire
    try:
        with Probe.open(X11Address(str(data["display"])), read_cookie(str(data["cookie_file"]))) as probe:
            probe.sync_point()
            probe.clear()
            for action in ACTIONS:
                driver.act(action)
            probe.sync_point()
            return [(e.kind, e.x, e.y, e.button, e.keysym, e.state) for e in probe.events]
    finally:
        driver.close()


def test_the_wire_path_sends_the_same_events_as_python_xlib(desk: Any) -> None:
    by_xlib = _events(desk, wire=False)
    by_wire = _events(desk, wire=True)
    assert by_xlib and by_wire == by_xlib
    assert ("key", 0, 0, 0, ord("H"), 1) in [(k, 0, 0, b, s, st & 1) for k, _, _, b, s, st in by_wire]


def test_what_the_wire_does_not_take_goes_to_the_full_driver(desk: Any) -> None:
    driver = _open(desk, wire=True)
    try:
        driver.act(act.Click(3, 3, "left", 1))
        assert driver.size() == (320, 240)
        assert driver._full is None  # a click and the screen's size needed no python-xlib
        assert isinstance(driver.window_titles(), list)  # anything else opens the full driver, the wire is closed
        assert driver._full is not None and driver._wire is None
        shot = driver.screenshot()
        assert (shot.width, shot.height) == (320, 240)
        driver.act(act.TypeText("é€"))  # keysyms the keymap lacks: a borrowed keycode, by the full driver
        driver.ping()
    finally:
        driver.close()
    assert driver.closed


def test_a_bad_cookie_or_no_server_is_provider_unreachable(desk: Any, tmp_path: Path) -> None:
    data = desk.handle.data
    _x11.prefer_wire(True)
    try:
        with pytest.raises(ProviderUnreachable) as refused:
            X11Driver.open(str(data["display"]), cookie=b"\x00" * 16, provider="xvfb")
        with pytest.raises(ProviderUnreachable) as absent:
            X11Driver.open(":1", socket_path=str(tmp_path / "no-socket"), cookie=None, provider="xvfb")
    finally:
        _x11.prefer_wire(False)
    assert "refused the connection" in refused.value.message and refused.value.remedy
    assert "cannot connect" in absent.value.message and absent.value.exit_code == 20


def test_deskctl_do_acts_without_loading_python_xlib() -> None:
    desk_id = deskctl.open_desktop("xvfb", geometry="320x240", detached=True)
    sid = desk_id.id
    desk_id.release()
    data = deskctl.attach(sid).handle.data  # type: ignore[union-attr]
    script = ("import json, sys\n"
              "from deskctl.cli import main\n"
              "try:\n"
              "    main(['do', sys.argv[1], *sys.argv[2:]])\n"
              "except SystemExit as exc:\n"
              "    code = exc.code\n"
              "else:\n"
              "    code = 0\n"
              "print(json.dumps({'code': code, 'xlib': 'Xlib' in sys.modules}))\n")
    try:
        with Probe.open(X11Address(str(data["display"])), read_cookie(str(data["cookie_file"]))) as probe:
            probe.sync_point()
            for argv in (["click", "20", "30"], ["type", "ok"]):
                done = subprocess.run([sys.executable, "-c", script, sid, *argv], capture_output=True, text=True,
                                      timeout=120, env=os.environ.copy())
                assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "xlib": False}, done.stderr
            probe.wait_for(lambda p: p.text() == "ok", "the typed text")
            assert probe.presses(1)[0].pos == (20, 30)
    finally:
        deskctl.attach(sid).close()


def test_a_wire_capture_has_the_pixels_of_python_xlibs(desk: Any) -> None:
    data = desk.handle.data
    with Probe.open(X11Address(str(data["display"])), read_cookie(str(data["cookie_file"]))) as probe:
        probe.paint(10, 20, 50, 40, (200, 30, 90))  # something that is not one colour
        probe.paint(100, 100, 30, 30, (10, 220, 40))
        probe.sync_point()
        by_wire, by_xlib = _open(desk, wire=True), _open(desk, wire=False)
        try:
            wire_frame = by_wire.raw_frame()
            assert by_wire._full is None  # captured over the wire
            xlib_frame = by_xlib.raw_frame()
            assert (wire_frame.width, wire_frame.height, wire_frame.mode) == (320, 240, "BGRX")
            assert wire_frame.data == xlib_frame.data
            shot = by_wire.screenshot()
            assert shot.png == by_xlib.screenshot().png
        finally:
            by_wire.close()
            by_xlib.close()


def test_a_wire_capture_is_read_in_place_not_copied(desk: Any) -> None:
    """A `deskctl screenshot` process's capture: the image lands in one buffer as it is received, and the PNG is
    made from that buffer (each copy of a 1024x768 frame was 3 MiB more memory and time, per shot)."""
    import tracemalloc

    driver = _open(desk, wire=True)
    try:
        driver.size()  # connected, the setup read
        frame = 320 * 240 * 4
        tracemalloc.start()
        try:
            data, width, height, mode = driver.capture_raw()
            captured = tracemalloc.get_traced_memory()[1]
            size = len(data)
            del data  # not counted in the screenshot's own
            tracemalloc.reset_peak()
            shot = driver.screenshot()
            encoded = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert driver._full is None  # over the wire
        assert (width, height, mode, size) == (320, 240, "BGRX", frame)
        assert (shot.width, shot.height) == (320, 240)
        # the buffer received into and the frame's bytes (was 4 frames: the joined buffer, its slice, the reply's
        # copy with its header, the pixels' copy without it)
        assert captured < 2.5 * frame
        # the frame as received, its RGB rows, the filtered rows (was 4 frames, the capture's copies at the top)
        assert encoded < 3.5 * frame
    finally:
        driver.close()
