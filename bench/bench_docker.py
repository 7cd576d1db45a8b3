"""Benchmark: the docker provider next to the naive way of driving a container desktop, in one run.

The naive way is how Harbor's computer-1 drives a container: one ``docker exec ... xdotool`` per action and
``docker exec ... scrot`` per screenshot (the PNG read back through the same exec). deskctl talks X11 to the
container's display over a bind-mounted unix socket instead. Both run against the same image on the same engine.

    .venv/bin/python bench/bench_docker.py [--rounds N]

Prints medians (milliseconds) and ratios, and the memory of an idle desktop. Needs a Docker engine and the
image (scripts/setup.d/20-docker.sh). Targets (issue 3): click and key >= 100x faster than docker exec xdotool,
a 1024x900 screenshot >= 5x faster than docker exec scrot, up-to-ready < 2 s, < 80 MiB per idle desktop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def median_ms(func: Callable[[], Any], rounds: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        func()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        func()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def docker_exec(container: str, *argv: str) -> bytes:
    """The naive way: the docker CLI, one process and one exec per call."""
    done = subprocess.run(["docker", "exec", container, *argv], capture_output=True, check=True)
    return done.stdout


def idle_memory_mib(client: Any, container: str) -> tuple[float, float]:
    """(usage minus page cache, as ``docker stats`` shows it; resident set) in MiB."""
    stats = client.api.stats(container, stream=False)
    memory = stats["memory_stats"]
    inner = memory.get("stats", {})
    cache = inner.get("total_inactive_file", inner.get("inactive_file", inner.get("cache", 0)))
    rss = inner.get("total_rss", inner.get("rss", inner.get("anon", 0)))
    return (memory["usage"] - cache) / 2**20, rss / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds of each docker exec measurement")
    parser.add_argument("--fast-rounds", type=int, default=300, help="rounds of each deskctl action measurement")
    parser.add_argument("--lifecycles", type=int, default=5, help="up/down cycles to time")
    args = parser.parse_args()
    os.environ.setdefault("DESKCTL_HOME", tempfile.mkdtemp(prefix="deskctl-bench-"))

    import docker

    import deskctl
    from deskctl.providers.docker.images import find_image

    image = find_image("minimal")
    if image is None:
        print("no desktop image: run scripts/setup.d/20-docker.sh (or deskctl image build)", file=sys.stderr)
        return 1
    client = docker.from_env()
    rows: list[tuple[str, float, float | None]] = []

    # -- up to ready, and down ----------------------------------------------------------------------------------
    ups, downs, naive_ups, naive_downs = [], [], [], []
    for index in range(args.lifecycles):
        started = time.perf_counter()
        desk = deskctl.open_desktop("docker", geometry="1024x900")
        ups.append(time.perf_counter() - started)
        started = time.perf_counter()
        desk.close()
        downs.append(time.perf_counter() - started)

        name = f"bench-naive-{os.getpid()}-{index}"
        started = time.perf_counter()
        subprocess.run(["docker", "run", "-d", "--name", name, "--network", "none", "--init", "-e",
                        "DESKCTL_GEOMETRY=1024x900x24", "--entrypoint", "Xvfb", image, ":0", "-screen", "0",
                        "1024x900x24", "-nolisten", "tcp"], capture_output=True, check=True)
        while subprocess.run(["docker", "exec", "-e", "XAUTHORITY=", name, "xdpyinfo"],
                             capture_output=True).returncode != 0:
            pass  # the naive readiness probe: one docker exec after another until the display answers
        naive_ups.append(time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=True)
        naive_downs.append(time.perf_counter() - started)
    rows.append(("up to ready (open_desktop vs docker run + exec xdpyinfo)", statistics.median(ups) * 1000,
                 statistics.median(naive_ups) * 1000))
    rows.append(("down (close, confirmed vs docker rm -f)", statistics.median(downs) * 1000,
                 statistics.median(naive_downs) * 1000))

    # -- actions and capture on one desktop ----------------------------------------------------------------------
    with deskctl.open_desktop("docker", geometry="1024x900") as desk:
        container = desk.handle.resource_id if desk.handle else ""
        click = median_ms(lambda: desk.click(500, 400), args.fast_rounds)
        naive_click = median_ms(lambda: docker_exec(container, "xdotool", "mousemove", "500", "400", "click", "1"),
                                args.rounds)
        rows.append(("click", click, naive_click))
        key = median_ms(lambda: desk.key("shift"), args.fast_rounds)
        naive_key = median_ms(lambda: docker_exec(container, "xdotool", "key", "shift"), args.rounds)
        rows.append(("key", key, naive_key))
        shot = median_ms(desk.screenshot, max(30, args.rounds))
        naive_shot = median_ms(lambda: docker_exec(container, "sh", "-c", "scrot -o /tmp/s.png && cat /tmp/s.png"),
                               args.rounds)
        rows.append(("screenshot 1024x900 (PNG bytes in hand)", shot, naive_shot))
        exec_ms = median_ms(lambda: desk.exec("true"), args.rounds)
        naive_exec = median_ms(lambda: docker_exec(container, "true"), args.rounds)
        rows.append(("exec `true` (Engine API vs docker CLI)", exec_ms, naive_exec))

        # let it settle, then read its memory (one idle desktop, no window manager)
        desk.exec("true")
        usage, rss = idle_memory_mib(client, container)

    # -- eight at once -------------------------------------------------------------------------------------------
    from concurrent.futures import ThreadPoolExecutor

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        many = list(pool.map(lambda _: deskctl.open_desktop("docker", geometry="1024x768"), range(8)))
    all_ready = time.perf_counter() - started
    many_memory = sum(idle_memory_mib(client, d.handle.resource_id)[0] for d in many if d.handle)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda d: d.close(), many))
    all_down = time.perf_counter() - started

    print(f"{'measurement':58} {'deskctl ms':>11} {'naive ms':>10} {'naive/deskctl':>14}")
    for name, ours, naive in rows:
        ratio = f"{naive / ours:13.1f}x" if naive else ""
        print(f"{name:58} {ours:11.2f} {naive or 0:10.2f} {ratio}")
    print(f"idle desktop memory: {usage:.1f} MiB (docker stats: usage - page cache), rss {rss:.1f} MiB")
    print(f"8 desktops at once: all ready in {all_ready:.2f} s, {many_memory:.0f} MiB together, "
          f"all down in {all_down:.2f} s")
    targets = [
        ("click >= 100x", rows[2][2] / rows[2][1] >= 100),  # type: ignore[operator]
        ("key >= 100x", rows[3][2] / rows[3][1] >= 100),  # type: ignore[operator]
        ("screenshot >= 5x", rows[4][2] / rows[4][1] >= 5),  # type: ignore[operator]
        ("up to ready < 2 s", rows[0][1] < 2000),
        ("idle < 80 MiB", usage < 80),
    ]
    print("targets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in targets))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
