"""Screenshots by damage tracking: :class:`_FrameCache` keeps the remote screen as a client-side frame and
refreshes only what the X DAMAGE extension reports changed (:func:`_merge_boxes` turns its rectangles into few
fetches)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from deskctl.providers._png import BandedPng
from deskctl.providers.base import RawFrame, Screenshot


class _FrameCache:
    """The remote screen kept as a client-side frame, refreshed by what the X DAMAGE extension says changed.

    A full 1024x768 frame is 3 MiB of raw pixels through SSH; an agent's screen mostly changes in small places
    between two screenshots (a button, a line of text). This keeps its own X connection (a second channel on the
    session's SSH connection) with a DeltaRectangles damage object on the root window, and per capture:
    resets the damage region, makes one round trip (every damage event sent before it has then arrived), and
    fetches only the damaged boxes with GetImage, patched into the frame. Correct by construction: drawing that
    happens after the reset is reported again and fetched at the latest next time; fetching it twice is harmless.
    The first capture, a size change, or damage over half the screen fetches the whole screen.

    The PNG is encoded by bands of rows (:class:`BandedPng`), so a small change re-compresses a few bands, not
    the whole picture; with no change at all the last PNG is returned as it is.
    """

    MAX_BOXES = 8
    FULL_FRACTION = 0.5

    def __init__(self, display: Any) -> None:
        from Xlib.ext import damage

        self._display = display
        self._lock = threading.Lock()
        display.damage_query_version()
        screen = display.screen()
        self._root = screen.root
        depth = int(screen.root_depth)
        formats = {int(f.depth): int(f.bits_per_pixel) for f in display.display.info.pixmap_formats}
        if formats.get(depth) != 32:
            raise ValueError(f"{depth}-bit screen")
        # python-xlib registers a copy of damage.DamageNotify per display: match the event code, not the class
        self._notify_code = int(display.query_extension("DAMAGE").first_event) + damage.DamageNotifyCode
        self._damage = self._root.damage_create(damage.DamageReportDeltaRectangles)
        self._frame: bytearray | None = None
        self._size = (0, 0)
        self._png: Screenshot | None = None  # the last PNG, valid while nothing changed
        self._encoder: BandedPng | None = None
        self.fetched_pixels = 0  # for tests and the benchmark: what crossed the wire

    @classmethod
    def supported(cls, display: Any) -> bool:
        return bool(display.has_extension("DAMAGE"))

    def screenshot(self) -> Screenshot:
        """The current screen as PNG; the same PNG again when nothing changed since the last one."""
        with self._lock:
            changed = self._refresh()
            if changed or self._png is None:
                assert self._frame is not None and self._encoder is not None
                width, height = self._size
                self._png = Screenshot(png=self._encoder.encode(self._frame), width=width, height=height)
            return self._png

    def raw_frame(self) -> RawFrame:
        """The current screen's pixels (a copy of the frame, brought up to date)."""
        with self._lock:
            if self._refresh():
                self._png = None  # the next screenshot must encode what was fetched here
            assert self._frame is not None
            width, height = self._size
            return RawFrame(bytes(self._frame), width, height, "BGRX")

    @property
    def encoder(self) -> BandedPng | None:
        return self._encoder

    def _refresh(self) -> bool:
        """Bring the frame up to date; whether any pixel was fetched."""
        from Xlib import X

        display = self._display
        display.damage_subtract(self._damage)
        geometry = self._root.get_geometry()  # the round trip: every earlier damage event is now queued
        width, height = int(geometry.width), int(geometry.height)
        boxes: list[tuple[int, int, int, int]] = []
        while display.pending_events():
            event = display.next_event()
            if event.type & 0x7F == self._notify_code:
                area = event.area
                boxes.append((int(area.x), int(area.y), int(area.width), int(area.height)))
        if self._frame is None or self._size != (width, height):
            boxes = [(0, 0, width, height)]
            self._frame = bytearray(width * height * 4)
            self._size = (width, height)
            self._encoder = BandedPng(width, height)
        frame, encoder = self._frame, self._encoder
        assert encoder is not None
        fetch = _merge_boxes(boxes, width, height, self.MAX_BOXES, self.FULL_FRACTION)
        for x, y, w, h in fetch:
            data = self._root.get_image(x, y, w, h, X.ZPixmap, 0xFFFFFFFF).data
            self.fetched_pixels += w * h
            encoder.invalidate(y, y + h)
            if w == width:
                frame[y * width * 4:(y + h) * width * 4] = data
                continue
            stride = w * 4
            for row in range(h):
                start = ((y + row) * width + x) * 4
                frame[start:start + stride] = data[row * stride:(row + 1) * stride]
        return bool(fetch)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._display.close()


def _merge_boxes(boxes: list[tuple[int, int, int, int]], width: int, height: int, max_boxes: int,
                 full_fraction: float) -> list[tuple[int, int, int, int]]:
    """Clip to the screen, merge boxes that touch (or nearly), and fall back to fewer, larger fetches: the
    bounding box when more than ``max_boxes`` remain, the whole screen when they cover ``full_fraction`` of it."""
    slack = 16
    rects: list[list[int]] = []
    for x, y, w, h in boxes:
        x1, y1, x2, y2 = max(0, x), max(0, y), min(width, x + w), min(height, y + h)
        if x2 > x1 and y2 > y1:
            rects.append([x1, y1, x2, y2])
    merged = True
    while merged and len(rects) > 1:
        merged = False
        out: list[list[int]] = []
        for rect in rects:
            for other in out:
                if (rect[0] <= other[2] + slack and other[0] <= rect[2] + slack
                        and rect[1] <= other[3] + slack and other[1] <= rect[3] + slack):
                    other[0], other[1] = min(other[0], rect[0]), min(other[1], rect[1])
                    other[2], other[3] = max(other[2], rect[2]), max(other[3], rect[3])
                    merged = True
                    break
            else:
                out.append(rect)
        rects = out
    if len(rects) > max_boxes:
        rects = [[min(r[0] for r in rects), min(r[1] for r in rects),
                  max(r[2] for r in rects), max(r[3] for r in rects)]]
    if sum((r[2] - r[0]) * (r[3] - r[1]) for r in rects) >= full_fraction * width * height:
        rects = [[0, 0, width, height]]
    return [(r[0], r[1], r[2] - r[0], r[3] - r[1]) for r in rects]
