"""Observation beyond pixels, for every target in conftest.TARGETS: screenshots resized or cropped for a model and
clicks mapped back from their images (every provider: the transform is deskctl's own), and the top-level windows
(a provider without the ``window_management`` or ``accessibility`` capability flag must fail those tests with
``usage.unsupported``: deskctl.testing.CAPABILITY_TESTS).
"""

from __future__ import annotations

import io
import random
from typing import Any

import pytest
from PIL import Image

from deskctl.errors import GeometryOutOfBounds, UsageError
from deskctl.session import Desktop

BLOCK = 64


def _paint_blocks(probe: Any, size: tuple[int, int], rng: random.Random) -> dict[tuple[int, int], tuple[int, ...]]:
    """Cover the probe window with BLOCK-pixel squares of random colours; their colours by block index."""
    colours: dict[tuple[int, int], tuple[int, ...]] = {}
    for by in range(0, size[1], BLOCK):
        for bx in range(0, size[0], BLOCK):
            colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
            probe.paint(bx, by, BLOCK, BLOCK, colour)
            colours[bx // BLOCK, by // BLOCK] = colour
    return colours


def _near_edge(x: int, y: int, margin: float) -> bool:
    return min(x % BLOCK, BLOCK - 1 - x % BLOCK, y % BLOCK, BLOCK - 1 - y % BLOCK) < margin


def test_a_click_at_a_point_of_a_transformed_image_lands_on_the_pixel_it_shows(desk: Desktop, probe: Any) -> None:
    rng = random.Random(20)
    width, height = desk.size
    colours = _paint_blocks(probe, (width, height), rng)
    shots = 0
    expected: list[tuple[int, int]] = []
    while shots < 8:
        rw, rh = rng.randint(BLOCK * 2, width), rng.randint(BLOCK * 2, height)
        region = (rng.randint(0, width - rw), rng.randint(0, height - rh), rw, rh)
        how = rng.choice(["max_size", "scale", "zoom"])
        if how == "max_size":
            shot = desk.screenshot(max_size=(rng.randint(200, 1280), rng.randint(150, 800)))
        elif how == "scale":
            shot = desk.screenshot(scale=rng.uniform(0.3, 2.5), region=region)
        else:
            shot = desk.screenshot(region=(region[0], region[1], BLOCK * 2, BLOCK * 2), max_size=(700, 700),
                                   scale=4)
        transform = shot.transform  # type: ignore[attr-defined]
        image = Image.open(io.BytesIO(shot.png)).convert("RGB")
        assert image.size == (shot.width, shot.height) == transform.size
        (rx, ry, rw, rh), (iw, ih) = transform.region, transform.size
        # a resampling filter blends a few image pixels' worth of the desktop: stay that far from block edges
        margin = 4 * max(rw / iw, rh / ih, 1.0)
        for _ in range(40):
            u, v = rng.randrange(iw), rng.randrange(ih)
            x, y = int(rx + (u + 0.5) * rw / iw), int(ry + (v + 0.5) * rh / ih)
            if not _near_edge(x, y, margin):
                break
        else:
            continue
        shown = image.getpixel((u, v))
        assert isinstance(shown, tuple)
        assert max(abs(a - b) for a, b in zip(shown, colours[x // BLOCK, y // BLOCK], strict=True)) <= 3
        desk.click(u, v, space=shot)
        expected.append((x, y))
        shots += 1
    probe.wait_for(lambda p: len(p.releases(1)) >= len(expected), f"{len(expected)} clicks")
    assert [e.pos for e in probe.presses(1)] == expected
    # the space may also be the transform's dict, as the CLI and MCP print it
    shot = desk.screenshot(max_size=(320, 240))
    desk.right_click(159, 119, space=shot.transform.to_dict())  # type: ignore[attr-defined]
    iw, ih = shot.width, shot.height
    point = (int((159 + 0.5) * width / iw), int((119 + 0.5) * height / ih))
    probe.wait_for(lambda p: p.releases(3), "a right click")
    assert [e.pos for e in probe.presses(3)] == [point]

def test_transform_bad_input_is_a_usage_error_before_the_screen(desk: Desktop) -> None:
    width = desk.size[0]
    with pytest.raises(GeometryOutOfBounds):
        desk.screenshot(region=(width - 10, 0, 20, 20))
    with pytest.raises(UsageError) as bad:
        desk.screenshot(max_size="big")
    assert bad.value.code == "usage.bad_space"
    with pytest.raises(UsageError) as bad:
        desk.screenshot(scale=0)
    assert bad.value.code == "usage.bad_space"
    shot = desk.screenshot(max_size=(100, 100))
    assert max(shot.width, shot.height) == 100
    with pytest.raises(GeometryOutOfBounds):
        desk.click(shot.width, 0, space=shot)
    with pytest.raises(UsageError) as bad:
        desk.click(1, 1, space={"region": [0, 0]})
    assert bad.value.code == "usage.bad_space"


# -- windows -----------------------------------------------------------------------------------------------------


class _Client:
    """A real X client on the desktop's display: plain top-level windows with a title, a WM_CLASS and a pid."""

    def __init__(self, address: Any, cookie: bytes | None) -> None:
        from deskctl.core.x11 import connect_display

        self.display: Any = connect_display(address, cookie)

    def window(self, title: str, wm_class: tuple[str, str], pid: int, geometry: tuple[int, int, int, int]) -> Any:
        from Xlib import X, Xatom

        d = self.display
        x, y, w, h = geometry
        screen = d.screen()
        window = screen.root.create_window(x, y, w, h, 0, screen.root_depth, X.InputOutput, X.CopyFromParent,
                                           background_pixel=screen.white_pixel, event_mask=X.StructureNotifyMask)
        window.set_wm_name(title)
        window.change_property(d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING"), 8, title.encode())
        window.set_wm_class(*wm_class)
        window.change_property(d.intern_atom("_NET_WM_PID"), Xatom.CARDINAL, 32, [pid])
        window.set_wm_normal_hints(flags=1 | 4, x=x, y=y)  # USPosition | USSize: a window manager keeps them
        window.map()
        d.sync()
        return window

    def focus_of(self) -> int:
        return int(self.display.get_input_focus().focus.id)

    def geometry_of(self, window: Any) -> tuple[int, int, int, int]:
        geo = window.get_geometry()
        at = window.translate_coords(self.display.screen().root, 0, 0)
        return -int(at.x), -int(at.y), int(geo.width), int(geo.height)

    def close(self) -> None:
        self.display.close()


def test_windows_list_focus_and_move(desk: Desktop, target: Any) -> None:
    desk.windows()  # usage.unsupported without window_management (deskctl.testing.CAPABILITY_TESTS)
    if target.probe_address is None:
        pytest.skip(f"{target.name} is no X display: the suite cannot open windows of its own on it")
    client = _Client(*target.probe_address(desk))
    try:
        first = client.window("deskctl observe one", ("obsone", "ObsOne"), 4242, (30, 40, 200, 100))
        client.window("deskctl observe two", ("obstwo", "ObsTwo"), 4343, (300, 200, 160, 120))
        desk.wait_for("deskctl observe two", timeout=30)
        found = {w.title: w for w in desk.windows()}
        one = found["deskctl observe one"]
        assert (one.wm_class, one.instance, one.pid, one.id) == ("ObsOne", "obsone", 4242, int(first.id))
        assert one.geometry == client.geometry_of(first)
        assert found["deskctl observe two"].pid == 4343
        assert one.to_dict()["class"] == "ObsOne"

        focused = desk.focus("deskctl observe one")
        assert focused.focused and focused.id == int(first.id)
        assert client.focus_of() == int(first.id)
        assert [w.title for w in desk.windows() if w.focused] == ["deskctl observe one"]

        moved = desk.move_window(int(first.id), 120, 130, 320, 180)
        assert moved.geometry == (120, 130, 320, 180) == client.geometry_of(first)

        with pytest.raises(UsageError) as missing:
            desk.focus("no such window title")
        assert missing.value.code == "usage.not_found"
        with pytest.raises(UsageError):
            desk.move_window("deskctl observe one", 0, 0, 0, 10)
    finally:
        client.close()


# -- accessibility -----------------------------------------------------------------------------------------------


#: a GTK dialog in a few lines of the desktop's python3 (the deskctl image has GTK 3 for it, not zenity, which
#: brings WebKit along); exit status 0 for Yes, 1 for No
GTK_DIALOG = """
import sys, gi
gi.require_version("Gtk", "3.0")
from gi.repository import Gtk
dialog = Gtk.Dialog(title=sys.argv[1])
dialog.add_buttons("_No", Gtk.ResponseType.NO, "_Yes", Gtk.ResponseType.YES)
dialog.get_content_area().add(Gtk.Label(label="Go on?"))
dialog.show_all()
sys.exit(0 if dialog.run() == Gtk.ResponseType.YES else 1)
"""


def test_a_gtk_dialog_is_driven_through_the_accessibility_tree(desk: Desktop, target: Any) -> None:
    # usage.unsupported without accessibility (CAPABILITY_TESTS); else it starts the desktop's accessibility bus
    # where the desktop was not started with one
    empty = desk.accessibility_tree()
    assert empty.root.role == "desktop"
    title = f"deskctl a11y {desk.id}"
    status = f"/tmp/deskctl-a11y-{desk.id}"
    script = f"/tmp/deskctl-a11y-{desk.id}.py"
    desk.exec(f"cat > {script} <<'EOF'\n{GTK_DIALOG}\nEOF")
    desk.exec(f"/usr/bin/python3 {script} '{title}'; echo $? > {status}", background=True)
    desk.wait_for(title, timeout=60)
    dialog = desk.accessibility_tree(window=title).root.children[0]
    assert (dialog.role, dialog.name) == ("dialog", title)
    (yes,) = desk.find(role="push button", name="Yes", window=title)
    assert yes.bounds is not None
    x, y, w, h = yes.bounds
    assert x + w <= desk.size[0] and y + h <= desk.size[1] and min(x, y) >= 0
    desk.click_element(yes)

    def exited(d: Desktop) -> str:
        return str(d.exec(f"cat {status} 2>/dev/null").stdout.strip())

    assert desk.wait_for(exited, timeout=30) == "0"  # 0 is Yes
    desk.exec(f"rm -f {status} {script}")
