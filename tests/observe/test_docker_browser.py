"""The desktop image's browser: a start URL's form controls in the accessibility tree of a docker desktop, with
bounds that match the screenshot (the image starts the accessibility bus at boot and Chromium with renderer
accessibility)."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

import deskctl
from deskctl.session import Desktop

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PAGE = ("data:text/html,<title>deskctl docker form</title><body style='margin:0;background:white'>"
        "<button style='position:absolute;left:40px;top:40px;width:200px;height:60px;border:none;"
        "background:rgb(200,30,60)'>Send it</button></body>")


def test_a_start_page_button_is_in_the_tree_where_the_screenshot_shows_it() -> None:
    if os.environ.get("DESKCTL_SKIP_BROWSER") == "1":
        pytest.skip("DESKCTL_SKIP_BROWSER=1: the browser image was not built")
    with deskctl.open_desktop("docker", geometry="800x600", start_url=PAGE, window_geometry="700x500+0+0",
                              ready_when="deskctl docker form", ready_timeout=120) as desk:

        def button(d: Desktop) -> object:
            return d.find(role="push button", name="Send it", window="deskctl docker form")

        (node,) = desk.wait_for(button, timeout=90)
        assert node.bounds is not None
        x, y, w, h = node.bounds
        assert (w, h) == (200, 60)
        shot = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
        assert shot.getpixel((x + 3, y + 3)) == (200, 30, 60)
        assert shot.getpixel((x + w - 4, y + h - 4)) == (200, 30, 60)
