"""What recording a trajectory costs per action, in one run on two identical host-Xvfb desktops.

* ``plain``: ``desk.click`` / ``desk.key`` / ``desk.type`` on a desktop opened without ``record``;
* ``recorded``: the same on a desktop opened with ``record=DIR`` (before shot, action, after shot, PNGs and
  their sha256 written, the lock taken, the JSONL row appended; ``record_settle`` 0);
* ``by hand``: what a harness author writes without deskctl's recorder on the plain desktop: screenshot, write
  the PNG, act, screenshot, write the PNG, append a JSON line (no lock, no hash, no step counter).

Both desktops show the same realistic picture (text, buttons, a noisy photo region), since the PNG encoding of
the two screenshots is most of the cost. Rounds of the three ways are interleaved so that machine noise falls
on all of them alike. Prints medians and ratios (recorded / plain, recorded / by hand).

    .venv/bin/python bench/bench_record.py [--actions 120] [--geometry 1024x768]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from _common import desktop_wallpaper, median_ms
from bench_xvfb import show_picture_on


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actions", type=int, default=120, help="actions of each kind, per way")
    parser.add_argument("--geometry", default="1024x768")
    args = parser.parse_args()
    width, height = (int(v) for v in args.geometry.split("x"))

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-record-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    import deskctl

    wallpaper = work / "wallpaper.png"
    desktop_wallpaper(wallpaper, (width, height), lines=50)
    record = work / "recorded"
    by_hand = work / "by-hand"
    by_hand.mkdir()
    print(f"deskctl recording benchmark: {width}x{height}, medians over {args.actions} actions per kind and way\n")
    try:
        with deskctl.open_desktop("xvfb", geometry=args.geometry) as plain, \
                deskctl.open_desktop("xvfb", geometry=args.geometry, record=record) as recorded:
            shown = [show_picture_on(d.handle.data, wallpaper) for d in (plain, recorded)]  # type: ignore[union-attr]
            counter = iter(range(1, 10**9))

            def hand_rolled(action: Callable[[], None], fields: dict[str, Any]) -> Callable[[], None]:
                def run() -> None:
                    step = next(counter)
                    before = plain.screenshot()
                    (by_hand / f"{step}-before.png").write_bytes(before.png)
                    started = time.monotonic()
                    action()
                    latency = time.monotonic() - started
                    after = plain.screenshot()
                    (by_hand / f"{step}-after.png").write_bytes(after.png)
                    with open(by_hand / "steps.jsonl", "a") as fh:
                        fh.write(json.dumps({"step": step, "action": fields, "latency": latency}) + "\n")
                return run

            points = [(random.randrange(width), random.randrange(height)) for _ in range(64)]
            kinds: dict[str, Callable[[deskctl.Desktop, int], None]] = {
                "click": lambda d, i: d.click(*points[i % len(points)]),
                "key chord": lambda d, i: d.key("shift+f5"),
                "type 11ch": lambda d, i: d.type("hello wörld"),
            }
            for desk in (plain, recorded):  # warm: connections open, first PNG encoded
                desk.click(1, 1)
            print(f"{'action':<11} {'plain':>9} {'recorded':>9} {'by hand':>9}   {'rec/plain':>9} {'rec/hand':>9}"
                  f"   {'overhead':>9} {'2 shots':>9}")
            for name, do in kinds.items():
                samples: dict[str, list[float]] = {"plain": [], "recorded": [], "by hand": [], "shot": []}
                for i in range(args.actions):
                    ways: list[tuple[str, Callable[[], None]]] = [
                        ("plain", partial(do, plain, i)),
                        ("recorded", partial(do, recorded, i)),
                        ("by hand", hand_rolled(partial(do, plain, i), {"kind": name})),
                        ("shot", plain.screenshot),  # one PNG screenshot, for scale: a step takes two
                    ]
                    random.shuffle(ways)
                    for way, call in ways:
                        started = time.perf_counter()
                        call()
                        samples[way].append(time.perf_counter() - started)
                p, r, h, shot = (median_ms(samples[k]) for k in ("plain", "recorded", "by hand", "shot"))
                print(f"{name:<11} {p:7.2f}ms {r:7.2f}ms {h:7.2f}ms   {r / p:8.1f}x {r / h:8.2f}x   {r - p:7.2f}ms"
                      f" {2 * shot:7.2f}ms")
            steps = [json.loads(line) for line in (record / "trajectory.jsonl").read_text().splitlines()]
            size = sum((record / s[w]["path"]).stat().st_size for s in steps for w in ("before", "after"))
            print(f"\noverhead = recorded - plain; 2 shots = twice the median of one PNG screenshot, taken in the "
                  f"same rounds.\na recorded step writes two PNGs (~{size // max(1, 2 * len(steps)) // 1024} KiB each) "
                  f"and one ~{(record / 'trajectory.jsonl').stat().st_size // max(1, len(steps))}-byte JSONL row")
            for display in shown:
                display.close()  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
