"""deskctl view of a cloud desktop (the cua fake, over real HTTP): frames come from the provider's screenshot API,
and a rate-limited screenshot is waited out (its Retry-After) instead of ending the view."""

from __future__ import annotations

import io
import urllib.request

from PIL import Image

import deskctl
from cua._cua_target import FAST_OPTIONS
from deskctl.errors import RateLimited
from deskctl.view import ViewServer
from fakes.cua import FakeCua


def test_a_rate_limited_screenshot_is_waited_out_and_the_frame_still_comes(cua_env: FakeCua) -> None:
    options = {**FAST_OPTIONS, "retry_attempts": 1}  # the provider hands the 429 to the view at once
    with deskctl.open_desktop("cua-cloud", geometry="1920x1080", provider_options=options) as desk:
        before = len([r for r in cua_env.log if r.path.endswith("/screenshot")])
        cua_env.inject("GET", "/screenshot$", 429, {"message": "slow down"}, headers={"Retry-After": "0"}, times=3)
        with ViewServer(desk, fps=5) as view:
            with urllib.request.urlopen(f"http://127.0.0.1:{view.port}/frame.jpg?token={view.token}",
                                        timeout=60) as reply:
                assert reply.status == 200
                image = Image.open(io.BytesIO(reply.read()))
            assert image.size == (1920, 1080)
            assert view.feed.error is None
            assert isinstance(view.feed.last_transient, RateLimited)
        shots = [r for r in cua_env.log if r.path.endswith("/screenshot")][before:]
        assert [r.status for r in shots[:4]] == [429, 429, 429, 200]
