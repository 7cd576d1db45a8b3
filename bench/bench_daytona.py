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
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from deskctl.actions import Action, Click, KeyPress, Move, TypeText
from deskctl.providers.daytona import DaytonaProvider
from deskctl.spec import DesktopSpec
from fakes.daytona import FakeDaytona

FAST = {"poll_interval": 0.005, "poll_max_interval": 0.05}


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


def measure(fake: FakeDaytona, iterations: int, call: Callable[[], Any]) -> tuple[list[float], list[float]]:
    """(client seconds, server seconds) per call; the server time is the fake's own for the last request."""
    client, server = [], []
    for _ in range(iterations):
        before = len(fake.log)
        started = time.perf_counter()
        call()
        client.append(time.perf_counter() - started)
        server.append(sum(r.server_seconds for r in fake.log[before:]))
    return client, server


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
        print(f"per-action medians over {args.iterations} calls (ms); overhead = client - server time")
        print(f"{'action':<14}{'server':>9}{'naive':>9}{'deskctl':>9}{'naive ovh':>11}{'deskctl ovh':>13}"
              f"{'ratio':>8}")
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

            measure(fake, 10, via_provider)  # warm up both paths
            measure(fake, 10, naive)
            ours_client, ours_server = measure(fake, args.iterations, via_provider)
            naive_client, naive_server = measure(fake, args.iterations, naive)
            ours_overhead = [c - s for c, s in zip(ours_client, ours_server, strict=True)]
            naive_overhead = [c - s for c, s in zip(naive_client, naive_server, strict=True)]
            ratio = median_ms(ours_overhead) / max(1e-9, median_ms(naive_overhead))
            print(f"{label:<14}{median_ms(ours_server):>9.3f}{median_ms(naive_client):>9.3f}"
                  f"{median_ms(ours_client):>9.3f}{median_ms(naive_overhead):>11.3f}{median_ms(ours_overhead):>13.3f}"
                  f"{ratio:>7.2f}x")
        provider.destroy(handle)

        ups, downs = [], []
        for i in range(args.cycles):
            started = time.perf_counter()
            cycle = provider.create(spec, f"dk-bench-{i}", {})
            provider.wait_ready(cycle, time.monotonic() + 60)
            ups.append(time.perf_counter() - started)
            started = time.perf_counter()
            provider.destroy(cycle)
            downs.append(time.perf_counter() - started)

        import deskctl

        opens, closes = [], []
        for _ in range(args.cycles):
            started = time.perf_counter()
            desk = deskctl.open_desktop("daytona", platform="windows", geometry="1024x768",
                                        provider_options=dict(FAST))
            opens.append(time.perf_counter() - started)
            started = time.perf_counter()
            desk.close()
            closes.append(time.perf_counter() - started)
        print()
        print(f"up/down round trips, medians over {args.cycles} cycles (ms; the fake starts a real Xvfb per sandbox)")
        print(f"  provider create+wait_ready {median_ms(ups):9.1f}   "
              f"destroy (DELETE, GET until 404) {median_ms(downs):8.1f}")
        print(f"  open_desktop (preflight, ledger, metering) {median_ms(opens):9.1f}   close {median_ms(closes):8.1f}")
        print(f"  session / provider: up {median_ms(opens) / median_ms(ups):.2f}x, "
              f"down {median_ms(closes) / median_ms(downs):.2f}x")
        leftovers = fake.live()
        print(f"  sandboxes left on the fake: {len(leftovers)}")
    finally:
        raw.close()
        provider.close()
        fake.stop()
        home.cleanup()


if __name__ == "__main__":
    main()
