"""Benchmark: what the use-computer provider adds on top of the service, measured against the loopback fake.

Per action: the client's wall time through ``UseComputerProvider`` minus the server's own time for the request
(the fake logs it), and the same request sent the naive way (one bare ``httpx.Client.post``/``get`` with the same
body, as the SDK does), so the provider's overhead over a hand-written call is a ratio. Then up/down round trips:
the naive way (POST, then a DELETE whose status is ignored, as the SDK's ``close()`` does), provider create +
wait_ready + destroy (DELETE checked, GET until 404), and the full session (``deskctl.open_desktop`` with
preflight, ledger and metering, then close).

    .venv/bin/python bench/bench_use_computer.py [--iterations 200] [--cycles 10]
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

from _common import compare_action, median_ms, open_close_cycles, print_action_header, up_down_cycles

from deskctl.actions import Action, Click, KeyPress, Move, TypeText
from deskctl.providers.use_computer import UseComputerProvider
from deskctl.spec import DesktopSpec
from fakes.use_computer import FakeUseComputer

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
    fake = FakeUseComputer(capacity=1000)
    fake.start()
    os.environ["USE_COMPUTER_API_KEY"] = fake.api_key
    os.environ["USE_COMPUTER_BASE_URL"] = fake.base_url
    provider = UseComputerProvider(FAST)
    spec = DesktopSpec.build(provider="use-computer", platform="macos", geometry="1024x768")
    raw = httpx.Client(base_url=fake.base_url, headers={"Authorization": f"Bearer {fake.api_key}"})
    try:
        handle = provider.create(spec, "dk-bench", {})
        provider.wait_ready(handle, time.monotonic() + 60)
        base = f"/v1/sandboxes/{handle.resource_id}"

        actions: list[tuple[str, Action | None, str, str, dict[str, Any] | None]] = [
            ("move", Move(100, 100), "POST", "/mouse/move", {"x": 100, "y": 100}),
            ("click", Click(100, 100), "POST", "/mouse/click", {"x": 100, "y": 100, "button": "left",
                                                               "double": False}),
            ("key ctrl+a", KeyPress(("ctrl", "a")), "POST", "/keyboard/press", {"key": "a", "modifiers": ["ctrl"]}),
            ("type 'hello'", TypeText("hello"), "POST", "/keyboard/type", {"text": "hello"}),
            ("screenshot", None, "GET", "/screenshot", None),
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
                                       params={"show_cursor": "false"} if method == "GET" else None)
                response.raise_for_status()
                _ = response.content

            compare_action(fake, label, via_provider, naive, args.iterations, warmup=10)
        provider.destroy(handle)

        naive_ups, naive_downs = [], []
        for _ in range(args.cycles):
            started = time.perf_counter()
            made = raw.post("/v1/sandboxes", json={"type": "macos", "ephemeral": True}, timeout=180)
            made.raise_for_status()
            naive_ups.append(time.perf_counter() - started)
            started = time.perf_counter()
            raw.delete(f"/v1/sandboxes/{made.json()['sandbox_id']}")  # status ignored, as the SDK's close()
            naive_downs.append(time.perf_counter() - started)

        ups, downs = up_down_cycles(provider, spec, args.cycles)
        opens, closes = open_close_cycles("use-computer", "macos", "1024x768", FAST, args.cycles)
        print()
        print(f"up/down round trips, medians over {args.cycles} cycles (ms; the fake starts a real Xvfb per sandbox)")
        print(f"  naive POST {median_ms(naive_ups):9.1f}   naive DELETE (status ignored) {median_ms(naive_downs):8.1f}")
        print(f"  provider create+wait_ready {median_ms(ups):9.1f}   "
              f"destroy (DELETE checked, GET until 404) {median_ms(downs):8.1f}")
        print(f"  open_desktop (preflight, ledger, metering) {median_ms(opens):9.1f}   close {median_ms(closes):8.1f}")
        print(f"  provider / naive: up {median_ms(ups) / median_ms(naive_ups):.2f}x, "
              f"down {median_ms(downs) / median_ms(naive_downs):.2f}x; "
              f"session / provider: up {median_ms(opens) / median_ms(ups):.2f}x, "
              f"down {median_ms(closes) / median_ms(downs):.2f}x")
        print(f"  sandboxes left on the fake: {len(fake.live())}")
    finally:
        raw.close()
        provider.close()
        fake.stop()
        home.cleanup()


if __name__ == "__main__":
    main()
