"""deskctl.view without a browser: page-to-desktop coordinates, input events, and the frame feed's rules (a frame
that did not change is not encoded or sent again; a transient capture error is retried, any other ends the feed)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

import pytest
from PIL import Image

from deskctl import actions as act
from deskctl.errors import RateLimited, SessionLost, UsageError
from deskctl.providers.base import RawFrame
from deskctl.view import FrameFeed, encode_jpeg, input_action, to_desktop


@pytest.mark.parametrize(
    ("point", "shown", "size", "expected"),
    [
        ((0, 0), (640, 480), (640, 480), (0, 0)),
        ((100.5, 50.2), (640, 480), (640, 480), (100, 50)),
        ((100, 50), (320, 240), (640, 480), (200, 100)),  # shown at half size
        ((471.6, 414.5), (943.2, 829), (1024, 900), (512, 450)),  # a 1024x900 desktop fitted into a window
        ((320, 240), (320, 240), (640, 480), (639, 479)),  # the far edge stays on the screen
        ((-3, -1), (320, 240), (640, 480), (0, 0)),
    ],
)
def test_a_point_on_the_shown_image_maps_to_the_desktop_pixel_under_it(
        point: tuple[float, float], shown: tuple[float, float], size: tuple[int, int],
        expected: tuple[int, int]) -> None:
    assert to_desktop(*point, *shown, size) == expected


def test_input_events_become_actions_in_desktop_coordinates() -> None:
    size = (1000, 800)
    shown = {"w": 500, "h": 400}
    assert input_action({"type": "down", "x": 10, "y": 20, **shown}, size) == act.MouseDown(20, 40, "left")
    assert input_action({"type": "up", "x": 10, "y": 20, "button": "right", **shown}, size) == act.MouseUp(
        20, 40, "right")
    assert input_action({"type": "click", "x": 1, "y": 2, "count": 2, **shown}, size) == act.Click(2, 4, "left", 2)
    assert input_action({"type": "move", "x": 250, "y": 200, **shown}, size) == act.Move(500, 400)
    assert input_action({"type": "scroll", "x": 0, "y": 0, "dy": 3, **shown}, size) == act.Scroll(0, 0, 0, 3)
    assert input_action({"type": "type", "text": "hé"}, size) == act.TypeText("hé")
    assert input_action({"type": "key", "chord": "Control+s"}, size) == act.KeyPress(("ctrl", "s"))


@pytest.mark.parametrize(
    ("event", "fragment"),
    [
        ({"type": "launch"}, "unknown input type 'launch'"),
        ({}, "unknown input type None"),
        ({"type": "click", "x": "1", "y": 2, "w": 1, "h": 1}, "'x' must be a number"),
        ({"type": "click", "x": 1, "y": 2, "w": 0, "h": 1}, "input field 'w' 0 must be greater than 0"),
        ({"type": "click", "x": 1, "y": 2, "w": 9, "h": 9, "button": "fourth"}, "fourth"),
        ({"type": "type", "text": ""}, "'text' must be a non-empty string"),
        ({"type": "key", "chord": "hyper+q"}, "hyper"),
    ],
)
def test_bad_input_events_are_usage_errors(event: dict[str, object], fragment: str) -> None:
    with pytest.raises(UsageError) as caught:
        input_action(event, (640, 480))
    assert fragment in caught.value.message
    assert caught.value.code.startswith("usage.")


def _frame(rgb: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> RawFrame:
    image = Image.new("RGB", size, rgb)
    return RawFrame(image.convert("RGBX").tobytes("raw", "BGRX"), size[0], size[1], "BGRX")


@pytest.mark.parametrize("mode", ["BGRX", "RGB", "L", "BGR;16"])
def test_jpeg_of_each_raw_mode_shows_the_frame(mode: str) -> None:
    image = Image.new("RGB", (40, 30), (200, 40, 90))
    if mode == "L":
        data = image.convert("L").tobytes()
    elif mode == "BGRX":
        data = image.convert("RGBX").tobytes("raw", "BGRX")
    elif mode == "RGB":
        data = image.tobytes()
    else:  # an X server's 16-bit pixel: 5-6-5 bits, red high, little-endian
        value = (90 >> 3) | ((40 >> 2) << 5) | ((200 >> 3) << 11)
        data = value.to_bytes(2, "little") * (40 * 30)
    decoded = Image.open(io.BytesIO(encode_jpeg(RawFrame(data, 40, 30, mode)))).convert("RGB")
    expected = image.convert("L").convert("RGB") if mode == "L" else image
    got, want = decoded.getpixel((20, 15)), expected.getpixel((20, 15))
    assert isinstance(got, tuple) and isinstance(want, tuple)
    assert all(abs(a - b) <= 8 for a, b in zip(got, want, strict=True)), (got, want)


class Screen:
    """What the feed captures: a frame the test changes, and what each capture returned or raised."""

    def __init__(self, frame: RawFrame) -> None:
        self.frame = frame
        self.errors: list[Exception] = []
        self.grabs = 0
        self.lock = threading.Lock()

    def grab(self) -> RawFrame:
        with self.lock:
            self.grabs += 1
            if self.errors:
                raise self.errors.pop(0)
            return self.frame


def _wait_for(feed: FrameFeed, condition: Callable[[], bool]) -> None:
    """Wait (on the feed's own notifications) until ``condition`` holds."""
    deadline = 200
    while not condition():
        deadline -= 1
        assert deadline > 0, "the feed never reached the condition"
        feed.wait(after_seq=10**9, timeout=0.05)  # woken by every capture


def test_an_unchanged_screen_is_not_sent_again_and_a_change_is() -> None:
    screen = Screen(_frame((255, 0, 0)))
    feed = FrameFeed(screen.grab, fps=200)
    feed.start()
    try:
        with feed.watching():
            first = feed.wait(timeout=10)
            assert first is not None and first.seq == 1
            captured = feed.captures()
            _wait_for(feed, lambda: feed.captures() >= captured + 5)
            assert feed.wait(after_seq=1, timeout=0) is None  # five captures of the same screen: nothing new
            screen.frame = _frame((0, 0, 255))
            second = feed.wait(after_seq=1, timeout=10)
            assert second is not None and second.seq == 2
            pixel = Image.open(io.BytesIO(second.jpeg)).convert("RGB").getpixel((10, 10))
            assert isinstance(pixel, tuple) and pixel[2] > 240 and pixel[0] < 15
    finally:
        feed.stop()


def test_a_rate_limit_is_waited_out_and_a_lost_desktop_ends_the_feed() -> None:
    screen = Screen(_frame((0, 255, 0)))
    screen.errors = [RateLimited("slow down", retry_after=0.01), RateLimited("slow down", retry_after=0.01)]
    feed = FrameFeed(screen.grab, fps=200)
    feed.start()
    try:
        with feed.watching():
            first = feed.wait(timeout=10)
            assert first is not None and screen.grabs >= 3
            assert feed.error is None and isinstance(feed.last_transient, RateLimited)
            screen.errors = [SessionLost("the desktop is gone")]
            assert feed.wait(after_seq=first.seq, timeout=10) is None
            assert isinstance(feed.error, SessionLost) and feed.stopped
    finally:
        feed.stop()


def test_only_a_capture_made_after_asking_is_served_as_fresh() -> None:
    screen = Screen(_frame((10, 20, 30)))
    feed = FrameFeed(screen.grab, fps=200)
    feed.start()
    try:
        with feed.watching():
            assert feed.wait(timeout=10) is not None
        asked_at = feed.captures()
        grabs = screen.grabs
        with feed.watching():
            fresh = feed.wait(after_capture=asked_at, timeout=10)
        assert fresh is not None and screen.grabs > grabs
    finally:
        feed.stop()
