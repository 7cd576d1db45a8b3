"""An xvfb desktop's captures read the file its Xvfb draws the screen into (``-fbdir`` in a host tmpfs, mapped by
X11Provider._framebuffer), after one X round trip: the same pixels as the X server's own copy, what was drawn
just before included; a row without the file (a desktop started before) captures through the driver."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from deskctl.providers._x11 import X11Driver, read_cookie
from deskctl.providers.base import LABEL_OWNER, LABEL_SESSION, RemoteHandle
from deskctl.providers.xvfb import XvfbProvider
from deskctl.spec import DesktopSpec

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")


@pytest.fixture
def desktop() -> Iterator[tuple[XvfbProvider, RemoteHandle]]:
    provider = XvfbProvider()
    spec = DesktopSpec.build(provider="xvfb", geometry="320x200")
    handle = provider.create(spec, "dk-fbfile", {LABEL_SESSION: "dk-fbfile", LABEL_OWNER: "test"})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        yield provider, handle
    finally:
        provider.destroy(handle)
        provider.close()


def _paint(handle: RemoteHandle, colour: int, x: int, y: int) -> X11Driver:
    """A 40x30 rectangle of ``colour`` at (x, y) on the root window, drawn over another connection (kept open:
    the caller closes it)."""
    other = X11Driver.open(handle.data["display"], cookie=read_cookie(handle.data["cookie_file"]))
    root = other._root
    gc = root.create_gc(foreground=colour)
    root.fill_rectangle(gc, x, y, 40, 30)
    other._display.flush()
    return other


def _pixel(frame: bytes, width: int, x: int, y: int) -> tuple[int, int, int]:
    b, g, r = frame[(y * width + x) * 4:(y * width + x) * 4 + 3]
    return r, g, b


def test_a_capture_maps_the_framebuffer_file_and_sees_what_was_just_drawn(
        desktop: tuple[XvfbProvider, RemoteHandle]) -> None:
    provider, handle = desktop
    path = provider._framebuffer_path(handle)
    assert path.startswith("/dev/shm/") and path.endswith("/Xvfb_screen0")
    for colour, rgb in ((0xFF0000, (255, 0, 0)), (0x00FF00, (0, 255, 0)), (0x0000FF, (0, 0, 255))):
        other = _paint(handle, colour, 100, 60)
        try:
            frame = provider.raw_frame(handle)
            assert provider._framebuffer(handle) is not None  # the file's pixels, not a copy from the server
            assert (frame.width, frame.height) == (320, 200)
            data = bytes(frame.data)
            assert _pixel(data, 320, 110, 70) == rgb
            driver = provider._driver(handle)
            theirs = driver.raw_frame()  # the X server's own copy: the same screen
            assert bytes(theirs.data)[:320 * 200 * 4] == data[:320 * 200 * 4]
            shot = provider.screenshot(handle)
            assert (shot.width, shot.height) == (320, 200) and shot.png.startswith(b"\x89PNG")
        finally:
            other.close()


def test_a_row_without_the_file_captures_through_the_driver(desktop: tuple[XvfbProvider, RemoteHandle]) -> None:
    _, handle = desktop
    older = RemoteHandle(provider=handle.provider, session_id=handle.session_id, resource_id=handle.resource_id,
                         labels=dict(handle.labels), data={k: v for k, v in handle.data.items() if k != "framebuffer"})
    other = XvfbProvider()
    try:
        painter = _paint(handle, 0xFFFF00, 0, 0)
        try:
            frame = other.raw_frame(older)
            assert other._framebuffer(older) is None
            assert _pixel(bytes(frame.data), 320, 5, 5) == (255, 255, 0)
        finally:
            painter.close()
    finally:
        other.close()
