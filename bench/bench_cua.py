"""Benchmark: what the cua-cloud provider adds on top of the service, measured against the loopback fake.

Per action: the client's wall time through ``CuaCloudProvider`` minus the server's own time for the request (the
fake logs it; for an action that includes running the guest's input program), and the same request sent the
naive way (one bare ``httpx.Client.post``/``get`` with the same body and a token minted once by hand), so the
provider's overhead over a hand-written call is a ratio. Then up/down round trips: provider create + wait_ready
+ destroy, and the full session (``deskctl.open_desktop`` with preflight, ledger and metering, then close).

    .venv/bin/python bench/bench_cua.py [--iterations 100] [--cycles 10]
"""

from __future__ import annotations

import argparse
import json
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
from deskctl.providers.cua_cloud import _LINUX_INPUT, CuaCloudProvider, linux_input_ops
from deskctl.spec import DesktopSpec
from fakes.cua import FakeCua, Pool

FAST = {"poll_interval": 0.005, "poll_max_interval": 0.05}


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


def measure(fake: FakeCua, iterations: int, call: Callable[[], Any]) -> tuple[list[float], list[float]]:
    """(client seconds, server seconds) per call; the server time is the fake's own for the call's requests."""
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
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=10)
    args = parser.parse_args()

    import httpx

    home = tempfile.TemporaryDirectory(prefix="deskctl-bench-")
    os.environ["DESKCTL_HOME"] = home.name
    os.environ["DESKCTL_HTTP_RETRY_SCALE"] = "0"
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    fake = FakeCua(pools=[Pool("harbor-ubuntu", "Linux", (1920, 1080), capacity=1000)])
    fake.start()
    os.environ.update(fake.env())
    provider = CuaCloudProvider(FAST)
    spec = DesktopSpec.build(provider="cua-cloud", platform="ubuntu", geometry="1920x1080")
    raw = httpx.Client()
    try:
        minted = raw.post(fake.token_url, data={"grant_type": "client_credentials", "client_id": fake.client_id,
                                                "client_secret": fake.client_secret}).json()["access_token"]
        raw.headers["Authorization"] = f"Bearer {minted}"
        handle = provider.create(spec, "dk-bench", {})
        provider.wait_ready(handle, time.monotonic() + 60)
        base = f"{fake.base_url}/api/svc/harbor-ubuntu/{handle.data['sandbox']}-server"

        def program(action: Action) -> dict[str, Any]:
            return {"command": ["python3", "-c", _LINUX_INPUT, json.dumps(linux_input_ops(action))],
                    "shell": False, "timeout": 30}

        actions: list[tuple[str, Action | None, str, str, dict[str, Any] | None]] = [
            ("move", Move(100, 100), "POST", "/execute", program(Move(100, 100))),
            ("click", Click(100, 100), "POST", "/execute", program(Click(100, 100))),
            ("key ctrl+a", KeyPress(("ctrl", "a")), "POST", "/execute", program(KeyPress(("ctrl", "a")))),
            ("type 'hello'", TypeText("hello"), "POST", "/execute", program(TypeText("hello"))),
            ("screenshot", None, "GET", "/screenshot", None),
        ]
        print(f"per-action medians over {args.iterations} calls (ms); overhead = client - server time")
        print("(server time of an action includes the guest's python3 input program on the real Xvfb)")
        print(f"{'action':<14}{'server':>9}{'naive':>9}{'deskctl':>9}{'naive ovh':>11}{'deskctl ovh':>13}"
              f"{'ratio':>8}")
        for label, action, method, path, body in actions:
            def via_provider(action: Action | None = action) -> None:
                if action is None:
                    provider.screenshot(handle)
                else:
                    provider.act(handle, action)

            def naive(method: str = method, path: str = path, body: dict[str, Any] | None = body) -> None:
                response = raw.request(method, base + path, json=body)
                response.raise_for_status()
                if method == "POST":
                    assert response.json()["returncode"] == 0

            measure(fake, 5, via_provider)  # warm up both paths
            measure(fake, 5, naive)
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
            desk = deskctl.open_desktop("cua-cloud", platform="ubuntu", geometry="1920x1080",
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
        print(f"  claims left on the fake: {len(fake.live())}")
    finally:
        raw.close()
        provider.close()
        fake.stop()
        home.cleanup()


if __name__ == "__main__":
    main()
