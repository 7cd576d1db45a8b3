"""Benchmark: what the cua-cloud provider adds on top of the service, measured against the loopback fake.

Per action: the client's wall time through ``CuaCloudProvider`` minus the server's own time for the request (the
fake logs it; for an action that includes running the guest's input program), and the same request sent the
naive way (one bare ``httpx.Client.post``/``get`` with the same body and a token minted once by hand), so the
provider's overhead over a hand-written call is a ratio. Then up/down round trips: provider create + wait_ready
+ destroy, and the full session (``deskctl.open_desktop`` with preflight, ledger and metering, then close).
Then file throughput: ``upload``/``download`` of one file (and of a folder of small files) through the provider
against the naive way Harbor's cua environment uses (one hand-written ``POST /setup/upload`` or ``POST /file``
per file, into a folder that exists), with MB/s and ratios.

    .venv/bin/python bench/bench_cua.py [--iterations 100] [--cycles 10] [--file-mb 1 16 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import (
    compare_action,
    median_ms,
    open_close_cycles,
    print_action_header,
    print_round_trips,
    row,
    timed,
    up_down_cycles,
)

from deskctl.actions import Action, Click, KeyPress, Move, TypeText
from deskctl.providers.cua_cloud import _LINUX_INPUT, CuaCloudProvider, linux_input_ops, linux_pyautogui_code
from deskctl.spec import DesktopSpec
from fakes.cua import FakeCua, Pool

FAST = {"poll_interval": 0.005, "poll_max_interval": 0.05}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--file-mb", type=int, nargs="*", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=5, help="transfers per file size and way")
    parser.add_argument("--tree-files", type=int, default=200, help="small files in the folder transfer")
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
        compare_files(provider, handle, raw, base, args.file_mb, args.rounds, args.tree_files)
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


def alternating(ours: Callable[[], object], naive: Callable[[], object], rounds: int
                ) -> tuple[list[float], list[float]]:
    """Seconds of ``rounds`` calls of each, taken in turns (so a busy moment of the machine weighs on both)."""
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        mine += timed(ours, 1)
        theirs += timed(naive, 1)
    return mine, theirs


def compare_files(provider: CuaCloudProvider, handle: Any, raw: Any, base: str, sizes: list[int], rounds: int,
                  tree_files: int) -> None:
    """Upload and download medians (and MB/s) through the provider and the naive way, side by side."""
    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-files-"))
    remote = f"/tmp/deskctl-bench-{os.getpid()}"
    try:
        provider.exec(handle, f"mkdir -p {remote}")
        print(f"\nfile transfer medians over {rounds} rounds (naive: one POST per file into a folder that exists)")
        for mb in sizes:
            local = work / f"f{mb}.bin"
            local.write_bytes(os.urandom(mb * 1024 * 1024))

            def naive_up(local: Path = local, mb: int = mb) -> None:
                with local.open("rb") as fh:
                    raw.post(f"{base}/setup/upload", data={"file_path": f"{remote}/naive{mb}.bin"},
                             files={"file_data": (local.name, fh)}).raise_for_status()

            def naive_down(mb: int = mb) -> None:
                answer = raw.post(f"{base}/file", data={"file_path": f"{remote}/naive{mb}.bin"})
                answer.raise_for_status()
                (work / "naive.out").write_bytes(answer.content)

            ours_up, theirs_up = alternating(
                lambda local=local, mb=mb: provider.upload(handle, str(local), f"{remote}/d{mb}.bin"), naive_up, rounds)
            ours_down, theirs_down = alternating(
                lambda mb=mb: provider.download(handle, f"{remote}/d{mb}.bin", str(work / "d.out")), naive_down, rounds)
            assert (work / "d.out").read_bytes() == local.read_bytes() == (work / "naive.out").read_bytes()
            for way, ours, theirs in (("up", ours_up, theirs_up), ("down", ours_down, theirs_down)):
                rate = mb / (median_ms(ours) / 1000.0)
                row(f"{mb:>3} MB {way}", ours, {"naive": theirs}, f"deskctl {rate:.0f} MB/s")
        tree = work / "tree"
        for i in range(tree_files):
            sub = tree / f"d{i % 10}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"f{i}.txt").write_bytes(os.urandom(2048))
        files = sorted(p for p in tree.rglob("*") if p.is_file())

        def naive_tree_up() -> None:
            provider.exec(handle, f"mkdir -p {remote}/naive-tree/d{{0..9}}")  # Harbor makes folders with a command
            for path in files:
                with path.open("rb") as fh:
                    raw.post(f"{base}/setup/upload", data={"file_path": f"{remote}/naive-tree/"
                                                                        f"{path.relative_to(tree)}"},
                             files={"file_data": (path.name, fh)}).raise_for_status()

        ours_tree, theirs_tree = alternating(lambda: provider.upload(handle, str(tree), f"{remote}/tree"),
                                             naive_tree_up, rounds)
        row(f"{tree_files} files up", ours_tree, {"naive per file": theirs_tree}, "deskctl: one tar")
    finally:
        provider.exec(handle, f"rm -rf {remote}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
