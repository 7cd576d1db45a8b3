"""Acceptance by code nobody here wrote: Playwright for Python connects over CDP to the endpoint ``desk.browser()``
gives (xvfb: the loopback port; docker: a forwarded channel, nothing published), reads the page's URL and title,
queries the DOM, and sees the effect of a click deskctl's own pointer made at the element's bounds (a trusted
event, at the screen point deskctl clicked). Nothing is downloaded: Playwright only connects, to Debian's
Chromium that the desktop runs (``playwright install`` is never needed)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

import deskctl

playwright_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                                     "(pip install -e '.[test]')")

pytestmark = [pytest.mark.slow]

TITLE = "deskctl playwright"
PAGE = ("data:text/html,<title>" + TITLE.replace(" ", "%20") + "</title>"
        "<body style='margin:0;background:white'>"
        "<button id='go' style='position:absolute;left:60px;top:50px;width:320px;height:200px'>Press me</button>"
        "<p id='said'>not yet</p><script>window.clicks=[];document.getElementById('go').addEventListener('click',"
        "e=>{window.clicks.push([e.isTrusted,e.screenX,e.screenY]);"
        "document.getElementById('said').textContent='pressed';});</script></body>")


def _until(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} in {timeout}s"
        time.sleep(0.2)


def _drive(desk: deskctl.Desktop, url: str = PAGE) -> None:
    endpoint = desk.browser()
    _until("the page in the DevTools list", lambda: any(t == TITLE for _, t in desk.browser_pages()))
    with playwright_api.sync_playwright() as pw:
        # as docs/browser.md shows it: the http URL (on docker a forwarded port; /json/version there names the
        # container's 9222, which Playwright replaces by the address it was given)
        browser = pw.chromium.connect_over_cdp(endpoint.http_url, timeout=60_000)
        try:
            page = _until("the page in Playwright", lambda: next(
                (p for c in browser.contexts for p in c.pages if p.title() == TITLE), None))
            assert page.url == url
            assert page.locator("#said").text_content() == "not yet"
            assert page.locator("button").count() == 1
            box = page.locator("#go").bounding_box()
            assert box is not None and (box["width"], box["height"]) == (320, 200)
            # where the viewport is on the screen: the window's place plus its frame (toolbars above, borders
            # either side); the middle of a 320x200 button leaves room for a frame guessed a few pixels off
            frame = page.evaluate("[screenX, screenY, outerWidth - innerWidth, outerHeight - innerHeight]")
            x = int(frame[0] + frame[2] // 2 + box["x"] + box["width"] / 2)
            y = int(frame[1] + frame[3] + box["y"] + box["height"] / 2)
            desk.click(x, y)
            _until("the click's effect", lambda: page.locator("#said").text_content() == "pressed")
            clicks = page.evaluate("window.clicks")
            assert len(clicks) == 1
            trusted, screen_x, screen_y = clicks[0]
            assert trusted is True  # real input from the X server, not a script's event
            assert (screen_x, screen_y) == (x, y)
        finally:
            browser.close()  # a CDP connection: closes the connection, the desktop's Chromium stays
    assert any(t == TITLE for _, t in desk.browser_pages())


def test_playwright_over_cdp_on_xvfb() -> None:
    with deskctl.open_desktop("xvfb", geometry="800x600", start_url=PAGE, window_geometry="700x500+0+0",
                              ready_timeout=120) as desk:
        _drive(desk)


@pytest.mark.docker
def test_playwright_over_cdp_on_docker() -> None:
    if os.environ.get("DESKCTL_SKIP_BROWSER") == "1":
        pytest.skip("DESKCTL_SKIP_BROWSER=1: the browser image was not built")
    with deskctl.open_desktop("docker", geometry="800x600", start_url=PAGE, window_geometry="700x500+0+0",
                              ready_timeout=120) as desk:
        _drive(desk)
