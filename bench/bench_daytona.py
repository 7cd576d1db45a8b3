"""Benchmark: what the Daytona provider adds on top of the service, measured against the loopback fake.

Per action: the client's wall time through ``DaytonaProvider`` minus the server's own time for the request (the
fake logs it), and the same request sent the naive way (one bare ``httpx.Client.post``/``get`` with the same
body), so the provider's overhead over a hand-written call is a ratio. Then up/down round trips: provider
create + wait_ready + destroy, and the full session (``deskctl.open_desktop`` with preflight, ledger and
metering, then close).

    .venv/bin/python bench/bench_daytona.py [--iterations 200] [--cycles 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import compare_action, open_close_cycles, print_action_header, print_round_trips, up_down_cycles

from deskctl.actions import Action, Click, KeyPress, Move, TypeText
from deskctl.providers.daytona import DaytonaProvider
from deskctl.spec import DesktopSpec
from fakes.daytona import FakeDaytona

FAST = {"poll_interval": 0.005, "poll_max_interval": 0.05}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=10)
    args = parser.parse_args()

    import httpx

    home = tempfile.TemporaryDirectory(prefix="deskctl-bench-")
    os.environ["DESKCTL_HOME"] = home.name
    os.environ["DESKCTL_HTTP_RETRY_SCALE"] = "0"
    fake = FakeDaytona(quota=(1000, 1000, 1000))
    fake.start()
    os.environ["DAYTONA_API_KEY"] = fake.api_key
    os.environ["DAYTONA_API_URL"] = fake.api_url
    provider = DaytonaProvider(FAST)
    spec = DesktopSpec.build(provider="daytona", platform="windows", geometry="1024x768")
    raw = httpx.Client(headers={"Authorization": f"Bearer {fake.api_key}"})
    try:
        handle = provider.create(spec, "dk-bench", {})
        provider.wait_ready(handle, time.monotonic() + 60)
        base = f"{fake.toolbox_url}/{handle.resource_id}"

        actions: list[tuple[str, Action | None, str, str, dict[str, Any] | None]] = [
            ("move", Move(100, 100), "POST", "/computeruse/mouse/move", {"x": 100, "y": 100}),
            ("click", Click(100, 100), "POST", "/computeruse/mouse/click",
             {"x": 100, "y": 100, "button": "left", "double": False}),
            ("key ctrl+a", KeyPress(("ctrl", "a")), "POST", "/computeruse/keyboard/key",
             {"key": "a", "modifiers": ["ctrl"]}),
            ("type 'hello'", TypeText("hello"), "POST", "/computeruse/keyboard/type", {"text": "hello", "delay": 0}),
            ("screenshot", None, "GET", "/computeruse/screenshot", None),
        ]
        print_action_header(args.iterations)
        for label, action, method, path, body in actions:
            def via_provider(action: Action | None = action) -> None:
                if action is None:
                    provider.screenshot(handle)
                else:
                    provider.act(handle, action)

            def naive(method: str = method, path: str = path, body: dict[str, Any] | None = body) -> None:
                response = raw.request(method, base + path, json=body,
                                       params={"showCursor": "false"} if method == "GET" else None)
                response.raise_for_status()
                if method == "GET":
                    import base64

                    base64.b64decode(response.json()["screenshot"])

            compare_action(fake, label, via_provider, naive, args.iterations, warmup=10)
        provider.destroy(handle)

        ups, downs = up_down_cycles(provider, spec, args.cycles)
        opens, closes = open_close_cycles("daytona", "windows", "1024x768", FAST, args.cycles)
        print_round_trips(args.cycles, ups, downs, opens, closes)
        leftovers = fake.live()
        print(f"  sandboxes left on the fake: {len(leftovers)}")
    finally:
        raw.close()
        provider.close()
        fake.stop()
        home.cleanup()


if __name__ == "__main__":
    main()
