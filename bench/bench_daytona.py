"""Benchmark: what the Daytona provider adds on top of the service, measured against the loopback fake.

Per action: the client's wall time through ``DaytonaProvider`` minus the server's own time for the request (the
fake logs it), and the same request sent the naive way (one bare ``httpx.Client.post``/``get`` with the same
body), so the provider's overhead over a hand-written call is a ratio. Then up/down round trips: provider
create + wait_ready + destroy, and the full session (``deskctl.open_desktop`` with preflight, ledger and
metering, then close). Then file transfer (issue 14) on a Linux sandbox: ``upload``/``download`` of one file
per size and of a tree of small files, against the naive way the Daytona SDK takes (one ``files/bulk-upload``
request with every file as a part; one ``files/bulk-download`` answer read into memory and split), each with
the median of ``--file-rounds`` runs, the throughput, and the ratio naive/deskctl.

    .venv/bin/python bench/bench_daytona.py [--iterations 200] [--cycles 10] [--file-rounds 5] [--files-only]
"""

from __future__ import annotations

import argparse
import contextlib
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
    parser.add_argument("--file-rounds", type=int, default=5)
    parser.add_argument("--files-only", action="store_true", help="only the file transfer part")
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
        bench_files(fake, provider, raw, args.file_rounds)
        if args.files_only:
            return
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


def _naive_download(raw: Any, base: str, remote: str, local: Path) -> None:
    """The SDK's way for one file: the whole multipart answer in memory, split at the boundary."""
    answer = raw.post(base + "/files/bulk-download", json={"paths": [remote]})
    answer.raise_for_status()
    boundary = answer.headers["content-type"].split("boundary=", 1)[1].strip('"').encode()
    part = answer.content.split(b"\r\n--" + boundary)[0]
    local.write_bytes(part.split(b"\r\n\r\n", 1)[1])


def bench_files(fake: FakeDaytona, provider: DaytonaProvider, raw: Any, rounds: int) -> None:
    from _common import median_ms, row, timed

    spec = DesktopSpec.build(provider="daytona", platform="ubuntu", geometry="1024x768")
    handle = provider.create(spec, "dk-bench-files", {})
    work = tempfile.TemporaryDirectory(prefix="deskctl-bench-files-")
    try:
        provider.wait_ready(handle, time.monotonic() + 60)
        base = f"{fake.toolbox_url}/{handle.resource_id}"
        local_dir, remote_dir = Path(work.name, "local"), Path(work.name, "remote")
        local_dir.mkdir()
        print(f"\nfile transfer against the fake (median of {rounds}; naive = one bulk request, the SDK's way)")
        for size in (1 << 20, 16 << 20, 64 << 20):
            local = local_dir / f"f{size}"
            local.write_bytes(os.urandom(size))
            local.chmod(0o644)
            remote = str(remote_dir / f"f{size}")
            back = local_dir / f"back{size}"

            def naive_up(local: Path = local, remote: str = remote) -> None:
                with local.open("rb") as stream:
                    raw.post(base + "/files/bulk-upload", data={"files[0].path": remote},
                             files={"files[0].file": (local.name, stream)}).raise_for_status()

            ups = timed(lambda local=local, remote=remote: provider.upload(handle, str(local), remote), rounds)
            naive_ups = timed(naive_up, rounds)
            downs = timed(lambda remote=remote, back=back: provider.download(handle, remote, str(back)), rounds)
            assert back.read_bytes() == local.read_bytes()
            naive_downs = timed(lambda remote=remote, back=back: _naive_download(raw, base, remote, back), rounds)
            mib = size / (1 << 20)
            row(f"up {mib:g}M", ups, {"naive": naive_ups})
            row(f"down {mib:g}M", downs, {"naive": naive_downs})
            print(f"{'':11} MiB/s: upload deskctl {mib / median_ms(ups) * 1000:7.1f} naive "
                  f"{mib / median_ms(naive_ups) * 1000:7.1f}; download deskctl {mib / median_ms(downs) * 1000:7.1f} "
                  f"naive {mib / median_ms(naive_downs) * 1000:7.1f}")
        tree = local_dir / "tree"
        for i in range(200):
            (tree / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
            (tree / f"d{i % 10}" / f"f{i}.txt").write_bytes(os.urandom(4096))
        files = sorted(p for p in tree.rglob("*") if p.is_file())

        def naive_tree_up() -> None:
            with contextlib.ExitStack() as stack:
                data = {f"files[{i}].path": str(remote_dir / "naive-tree" / p.relative_to(tree))
                        for i, p in enumerate(files)}
                parts = {f"files[{i}].file": (p.name, stack.enter_context(p.open("rb"))) for i, p in enumerate(files)}
                raw.post(base + "/files/bulk-upload", data=data, files=parts).raise_for_status()

        tree_ups = timed(lambda: provider.upload(handle, str(tree), str(remote_dir / "tree")), rounds)
        row("up 200x4K", tree_ups, {"naive": timed(naive_tree_up, rounds)})
        tree_downs = timed(lambda: provider.download(handle, str(remote_dir / "tree"), str(local_dir / "tree-back")),
                           rounds)
        row("down 200x4K", tree_downs, {})
    finally:
        provider.destroy(handle)
        work.cleanup()


if __name__ == "__main__":
    main()
