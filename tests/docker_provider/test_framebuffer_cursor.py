"""A capture read from Xvfb's framebuffer file (docker's and xvfb's desktops) shows what GetImage shows: no pointer.
Xvfb draws a software cursor into its framebuffer wherever a window defines one (a browser, an xterm), and GetImage
leaves it out; the desktops' Xvfb runs with ``-nocursor``, so the file holds the screen alone: screenshots do not
depend on the capture path, and a recording does not take a pointer's move for a change of the screen."""

from __future__ import annotations

import pytest

import deskctl

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("provider", ["docker", "xvfb"])
def test_a_cursor_a_window_defines_is_not_in_a_framebuffer_capture(provider: str) -> None:
    with deskctl.open_desktop(provider, geometry="320x240") as desk:
        prov, handle = desk.provider, desk.handle
        assert handle is not None
        driver = prov._driver(handle)  # type: ignore[attr-defined]
        display = driver._display
        font = display.open_font("cursor")
        arrow = font.create_glyph_cursor(font, 68, 69, (0, 0, 0), (65535, 65535, 65535))  # left_ptr
        driver._root.change_attributes(cursor=arrow)
        display.sync()
        for x, y in ((100, 100), (20, 200)):
            desk.move(x, y)
            frame = desk.raw_frame()
            assert prov._framebuffer(handle) is not None  # type: ignore[attr-defined]
            size = 320 * 240 * 4
            assert bytes(frame.data)[:size] == bytes(driver.raw_frame().data)[:size]
