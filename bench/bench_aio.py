"""Eight host-Xvfb desktops driven at once: ``deskctl.aio`` under ``asyncio.gather`` vs the sync API in a
``ThreadPoolExecutor`` (one thread per desktop) vs the sync API one desktop after another, in one run.

Each way, per round: open the desktops (preflight, ledger, create, ready, geometry check), on each do ``--actions``
actions (click, move, key in turn) and ``--shots`` screenshots, then close them (confirmed destroy, ledger end).
Prints the median wall time of a round per way and its parts (up, work, down: the moment the last desktop of
the round got through that part), and the ratios to deskctl.aio: of the medians, and the median of each round's
own ratio (the ways of one round run back to back, so a slower minute of a shared machine falls on all of them).
Then the cost of one awaited call: a click on one desktop, sync vs aio (the hop to the desktop's worker thread).
The ways alternate within a round, and their order turns by one each round: a way does not always start right
after the same other way's desktops went down (Xvfb processes still exiting, the ledger's checkpoint).

    .venv/bin/python bench/bench_aio.py [--desktops 8] [--actions 40] [--shots 5] [--rounds 5]
                                        [--geometry 1024x768] [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import median_ms

Parts = tuple[float, float, float]  # seconds: up, work, down


def _steps(actions: int) -> list[tuple[str, tuple[object, ...]]]:
    kinds = [("click", (10, 20)), ("move", (200, 150)), ("key", ("a",))]
    return [(kinds[i % len(kinds)][0], kinds[i % len(kinds)][1]) for i in range(actions)]


def run_sync_one(geometry: str, actions: int, shots: int) -> Parts:
    """One desktop through the sync API: (up, up+work, round) seconds from its own start."""
    import deskctl

    started = time.perf_counter()
    desk = deskctl.open_desktop("xvfb", geometry=geometry)
    up = time.perf_counter()
    try:
        for name, args in _steps(actions):
            getattr(desk, name)(*args)
        for _ in range(shots):
            desk.screenshot()
        work = time.perf_counter()
    finally:
        desk.close()
    down = time.perf_counter()
    return up - started, work - started, down - started


def sequential(desktops: int, geometry: str, actions: int, shots: int) -> Parts:
    # up and work here are the sums over the desktops (each waits for the one before)
    started = time.perf_counter()
    up = work = 0.0
    for _ in range(desktops):
        parts = run_sync_one(geometry, actions, shots)
        up += parts[0]
        work += parts[1] - parts[0]
    return up, up + work, time.perf_counter() - started


def threads(desktops: int, geometry: str, actions: int, shots: int) -> Parts:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=desktops) as pool:
        results = list(pool.map(lambda _: _relative(started, run_sync_one, geometry, actions, shots),
                                range(desktops)))
    return _last(results)


def _relative(origin: float, fn: Callable[..., Parts], *args: object) -> Parts:
    offset = time.perf_counter() - origin
    up, work, down = fn(*args)
    return offset + up, offset + work, offset + down


def _last(results: list[Parts]) -> Parts:
    return max(r[0] for r in results), max(r[1] for r in results), max(r[2] for r in results)


def with_aio(desktops: int, geometry: str, actions: int, shots: int) -> Parts:
    from deskctl import aio

    async def one(origin: float) -> Parts:
        async with aio.open_desktop("xvfb", geometry=geometry) as desk:
            up = time.perf_counter() - origin
            for name, args in _steps(actions):
                await getattr(desk, name)(*args)
            for _ in range(shots):
                await desk.screenshot()
            work = time.perf_counter() - origin
        return up, work, time.perf_counter() - origin

    async def main() -> Parts:
        origin = time.perf_counter()
        return _last(list(await asyncio.gather(*(one(origin) for _ in range(desktops)))))

    return asyncio.run(main())


def per_call(geometry: str, calls: int) -> tuple[list[float], list[float]]:
    """Seconds of each ``click`` on one desktop: called directly (sync) and awaited (aio: a hop to the
    desktop's worker thread and back)."""
    import deskctl
    from deskctl import aio

    with deskctl.open_desktop("xvfb", geometry=geometry) as desk:
        direct = []
        for i in range(calls):
            started = time.perf_counter()
            desk.click(i % 100, 10)
            direct.append(time.perf_counter() - started)

    async def awaited() -> list[float]:
        out = []
        async with aio.open_desktop("xvfb", geometry=geometry) as adesk:
            for i in range(calls):
                started = time.perf_counter()
                await adesk.click(i % 100, 10)
                out.append(time.perf_counter() - started)
        return out

    return direct, asyncio.run(awaited())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--desktops", type=int, default=8)
    parser.add_argument("--actions", type=int, default=40)
    parser.add_argument("--shots", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--geometry", default="1024x768")
    parser.add_argument("--calls", type=int, default=300, help="clicks timed one by one for the per-call cost")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="deskctl-bench-aio-")
    os.environ["DESKCTL_HOME"] = home  # a private ledger: the bench's sessions do not mix with anyone's
    ways: dict[str, Callable[[int, str, int, int], Parts]] = {
        "deskctl.aio + gather": with_aio, "sync + threads": threads, "sync, sequential": sequential,
    }
    samples: dict[str, list[Parts]] = {name: [] for name in ways}
    for way in ways.values():  # warm-up: imports, first Xvfb start, ledger file
        way(1, args.geometry, 3, 1)
    names = list(ways)
    for turn in range(args.rounds):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            samples[name].append(ways[name](args.desktops, args.geometry, args.actions, args.shots))

    print(f"{args.desktops} xvfb desktops at {args.geometry}, {args.actions} actions + {args.shots} screenshots "
          f"each; medians over {args.rounds} rounds (ms; up/work: when the last desktop got through; ledger in "
          f"{Path(home)})")
    ours = samples["deskctl.aio + gather"]
    base = median_ms([s[2] for s in ours])
    print(f"{'way':<22}{'up':>10}{'up+work':>10}{'round':>10}{'round / aio':>13}{'per round':>11}")
    for name, parts in samples.items():
        total = median_ms([p[2] for p in parts])
        paired = statistics.median(p[2] / o[2] for p, o in zip(parts, ours, strict=True))
        print(f"{name:<22}{median_ms([p[0] for p in parts]):>10.1f}{median_ms([p[1] for p in parts]):>10.1f}"
              f"{total:>10.1f}{total / base:>12.2f}x{paired:>10.2f}x")
    direct, awaited = per_call(args.geometry, args.calls)
    print(f"one click on one desktop, medians over {args.calls}: sync {median_ms(direct):.3f} ms, "
          f"aio {median_ms(awaited):.3f} ms (aio / sync x{median_ms(awaited) / median_ms(direct):.2f})")


if __name__ == "__main__":
    main()
