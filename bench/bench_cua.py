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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import compare_action, open_close_cycles, print_action_header, print_round_trips, up_down_cycles

from deskctl.actions import Action, Click, KeyPress, Move, TypeText
from deskctl.providers.cua_cloud import _LINUX_INPUT, CuaCloudProvider, linux_input_ops, linux_pyautogui_code
from deskctl.spec import DesktopSpec
from fakes.cua import FakeCua, Pool

FAST = {"poll_interval": 0.005, "poll_max_interval": 0.05}


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
    # a token outlives the run: the naive client mints one, as a script would, and does not re-mint
    fake = FakeCua(pools=[Pool("harbor-ubuntu", "Linux", (1920, 1080), capacity=1000)], token_lifetime=3600)
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
            return {"command": ["python3", "-c", _LINUX_INPUT, json.dumps(linux_input_ops(action)),
                                linux_pyautogui_code(action)], "shell": False, "timeout": 30}

        actions: list[tuple[str, Action | None, str, str, dict[str, Any] | None]] = [
            ("move", Move(100, 100), "POST", "/execute", program(Move(100, 100))),
            ("click", Click(100, 100), "POST", "/execute", program(Click(100, 100))),
            ("key ctrl+a", KeyPress(("ctrl", "a")), "POST", "/execute", program(KeyPress(("ctrl", "a")))),
            ("type 'hello'", TypeText("hello"), "POST", "/execute", program(TypeText("hello"))),
            ("screenshot", None, "GET", "/screenshot", None),
        ]
        print_action_header(args.iterations,
                            "(server time of an action includes the guest's python3 input program on the real Xvfb)")
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

            compare_action(fake, label, via_provider, naive, args.iterations, warmup=5)
        provider.destroy(handle)

        ups, downs = up_down_cycles(provider, spec, args.cycles)
        opens, closes = open_close_cycles("cua-cloud", "ubuntu", "1920x1080", FAST, args.cycles)
        print_round_trips(args.cycles, ups, downs, opens, closes)
        print(f"  claims left on the fake: {len(fake.live())}")
    finally:
        raw.close()
        provider.close()
        fake.stop()
        home.cleanup()


if __name__ == "__main__":
    main()
