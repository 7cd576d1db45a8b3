"""Benchmark: what the use-computer provider adds on top of the service, measured against the loopback fake.

Per action: the client's wall time through ``UseComputerProvider`` minus the server's own time for the request
(the fake logs it), and the same request sent the naive way (one bare ``httpx.Client.post``/``get`` with the same
body, as the SDK does), so the provider's overhead over a hand-written call is a ratio. Then up/down round trips:
the naive way (POST, then a DELETE whose status is ignored, as the SDK's ``close()`` does), provider create +
wait_ready + destroy (DELETE checked, GET until 404), and the full session (``deskctl.open_desktop`` with
preflight, ledger and metering, then close). Last, file transfer on an Ubuntu sandbox: one large file and a tree
of small files, up and down, through ``upload``/``download`` (streamed PUT/GET; a tree as one tar) next to the
naive way with the same API (the whole file read into memory for one PUT, and a ``.content`` GET; a tree as one
``mkdir -p`` exec then one PUT per file, and down one ``find`` exec then one GET per file).

    .venv/bin/python bench/bench_use_computer.py [--iterations 200] [--cycles 10] [--file-mb 64] [--files 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
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
    parser.add_argument("--file-mb", type=int, default=64, help="size of the one large file")
    parser.add_argument("--files", type=int, default=200, help="small files in the tree")
    parser.add_argument("--rounds", type=int, default=5, help="transfers of each kind")
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
        files_section(fake, provider, raw, args)
    finally:
        raw.close()
        provider.close()
        fake.stop()
        home.cleanup()


def files_section(fake: FakeUseComputer, provider: UseComputerProvider, raw: Any, args: argparse.Namespace) -> None:
    """Upload/download throughput: deskctl against the naive way, medians over ``args.rounds``. The fake is on
    loopback (no network latency), which flatters the naive way's one request per file."""
    ubuntu = DesktopSpec.build(provider="use-computer", platform="ubuntu", geometry="1920x1080")
    handle = provider.create(ubuntu, "dk-bench-files", {})
    work = tempfile.TemporaryDirectory(prefix="deskctl-bench-files-")
    try:
        provider.wait_ready(handle, time.monotonic() + 60)
        base = f"/v1/sandboxes/{handle.resource_id}"
        root = Path(work.name)
        remote_root = fake.home_of(handle.resource_id)

        def run(command: str) -> str:
            answer = raw.post(f"{base}/exec", json={"command": command, "shell": "bash", "timeout": 300},
                              timeout=330)
            answer.raise_for_status()
            return str(answer.json()["stdout"])

        big = root / "big.bin"
        with big.open("wb") as fh:
            for _ in range(args.file_mb):
                fh.write(os.urandom(1 << 20))
        tree = root / "tree"
        for i in range(args.files):
            leaf = tree / f"d{i % 10}" / f"f{i}.txt"
            leaf.parent.mkdir(parents=True, exist_ok=True)
            leaf.write_bytes(os.urandom(4096))
        tree_bytes = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file())

        def naive_put_file(local: Path, remote: str) -> None:
            raw.put(f"{base}/files", params={"path": remote}, content=local.read_bytes(),
                    timeout=300).raise_for_status()

        def naive_get_file(remote: str, local: Path) -> None:
            answer = raw.get(f"{base}/files", params={"path": remote}, timeout=300)
            answer.raise_for_status()
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(answer.content)

        def naive_put_tree(remote: str) -> None:
            dirs = sorted({str(f.parent.relative_to(tree)) for f in tree.rglob("*") if f.is_file()})
            run("mkdir -p " + " ".join(f"'{remote}/{d}'" for d in dirs))
            for f in tree.rglob("*"):
                if f.is_file():
                    naive_put_file(f, f"{remote}/{f.relative_to(tree)}")

        def naive_get_tree(remote: str, local: Path) -> None:
            for name in run(f"cd '{remote}' && find . -type f").split():
                naive_get_file(f"{remote}/{name[2:]}", local / name[2:])

        counter = iter(range(1_000_000))

        def fresh() -> str:
            return f"{remote_root}/t{next(counter)}"

        def interleaved(ours: Callable[[], None], naive: Callable[[], None]) -> tuple[list[float], list[float]]:
            """Alternate the two ways round by round, so a busy machine slows both alike."""
            out: tuple[list[float], list[float]] = ([], [])
            for _ in range(args.rounds):
                for fn, into in ((ours, out[0]), (naive, out[1])):
                    started = time.perf_counter()
                    fn()
                    into.append(time.perf_counter() - started)
            return out

        up_file = f"{remote_root}/big.bin"
        provider.upload(handle, str(big), up_file)
        provider.upload(handle, str(tree), f"{remote_root}/tree")
        rows = [
            ("upload file", args.file_mb << 20,
             *interleaved(lambda: provider.upload(handle, str(big), f"{fresh()}/big.bin"),
                          lambda: naive_put_file(big, up_file))),
            ("download file", args.file_mb << 20,
             *interleaved(lambda: provider.download(handle, up_file, str(root / f"down{next(counter)}.bin")),
                          lambda: naive_get_file(up_file, root / f"naive{next(counter)}.bin"))),
            (f"upload tree ({args.files})", tree_bytes,
             *interleaved(lambda: provider.upload(handle, str(tree), fresh()), lambda: naive_put_tree(fresh()))),
            (f"download tree ({args.files})", tree_bytes,
             *interleaved(lambda: provider.download(handle, f"{remote_root}/tree", str(root / f"dt{next(counter)}")),
                          lambda: naive_get_tree(f"{remote_root}/tree", root / f"nt{next(counter)}"))),
        ]
        print()
        print(f"file transfer on an ubuntu sandbox of the fake, medians over {args.rounds} rounds "
              f"(file {args.file_mb} MiB; tree {args.files} files of 4 KiB in 10 folders)")
        for label, size, ours, naive in rows:
            ours_ms, naive_ms = median_ms(ours), median_ms(naive)
            print(f"  {label:<22} deskctl {ours_ms:9.1f} ms ({size / (1 << 20) / (ours_ms / 1000):7.1f} MiB/s)   "
                  f"naive {naive_ms:9.1f} ms ({size / (1 << 20) / (naive_ms / 1000):7.1f} MiB/s)   "
                  f"naive/deskctl x{naive_ms / ours_ms:.2f}")
    finally:
        provider.destroy(handle)
        work.cleanup()


if __name__ == "__main__":
    main()
