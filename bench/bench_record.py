"""What recording a trajectory costs per action, in one run on identical desktops (host Xvfb, then Docker).

* ``plain``: ``desk.click`` / ``desk.key`` / ``desk.type`` on a desktop opened without ``record``;
* ``recorded``: the same on a desktop opened with ``record=DIR`` (``record_settle`` 0), timed as an agent pays
  it: the recorder's background worker has written the previous step (as it does while the model thinks), so
  this is the hot path: two raw captures, the action, the step number under the lock, the job queued;
* ``back-to-back``: steps with no pause between them, the worker's flush included (per step): what a loop
  that never waits pays once the bounded queue is full (PNG encoding, sha256, file writes);
* ``by hand``: what a harness author writes without deskctl's recorder on the plain desktop: screenshot, write
  the PNG, act, screenshot, write the PNG, append a JSON line (no lock, no hash, no step counter).

Both desktops of a provider show the same realistic picture (text, buttons, a noisy photo region), since the
PNG encoding of the two screenshots is most of the cost. Rounds of the ways are interleaved so that machine
noise falls on all of them alike. Prints medians, the overhead (recorded - plain; the target is <= 10 ms) and
the ratios.

With ``--video`` the recorded desktop also records its video (``video=True``, ``--video-fps``): the table is
then the step cost with the video's capture thread and ffmpeg running beside it (both desktops are in this
process, so ``plain`` shares the machine with them too), and a last line gives the video's CPU cost: CPU
seconds (this process's capture thread and the ffmpeg child) per minute of video of an idle desktop showing the
picture, against the same minute without a video.

    .venv/bin/python bench/bench_record.py [--actions 120] [--geometry 1024x768] [--providers xvfb,docker]
        [--video [--video-fps 10] [--video-seconds 30]]
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
    parser.add_argument("--providers", default="xvfb,docker")
    parser.add_argument("--video", action="store_true", help="the recorded desktop also records its video")
    parser.add_argument("--video-fps", type=int, default=10)
    parser.add_argument("--video-seconds", type=float, default=30.0, help="length of the CPU-cost measurement")
    args = parser.parse_args()
    video = {"fps": args.video_fps} if args.video else None
    width, height = (int(v) for v in args.geometry.split("x"))

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-record-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    import deskctl

    wallpaper = work / "wallpaper.png"
    desktop_wallpaper(wallpaper, (width, height), lines=50)
    print(f"deskctl recording benchmark: {width}x{height}, medians over {args.actions} actions per kind and way")
    try:
        for provider in args.providers.split(","):
            try:
                run_provider(deskctl, provider, args.geometry, width, height, args.actions, wallpaper, work,
                             video)
                if video is not None:
                    video_cpu(deskctl, provider, args.geometry, wallpaper, work, args.video_fps,
                              args.video_seconds)
            except deskctl.DeskctlError as exc:
                print(f"\n{provider}: skipped ({exc.code}: {exc.message})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def show_picture_docker(desk: Any, wallpaper: Path) -> None:
    """The wallpaper as the root window's background, drawn by a program in the container."""
    desk.upload(str(wallpaper), "/tmp/wallpaper.png")
    done = desk.exec("command -v feh >/dev/null && feh --bg-scale /tmp/wallpaper.png || "
                     "command -v xsetroot >/dev/null", timeout=30)
    if done.exit_code != 0:
        print("  (no feh in the image: the docker desktops show the plain background)")


def _cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and of its children that ended (ffmpeg, once reaped)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def video_cpu(deskctl: Any, provider: str, geometry: str, wallpaper: Path, work: Path, fps: int,
              seconds: float) -> None:
    """CPU seconds per minute of video: an idle desktop showing the picture for ``seconds``, with and without."""
    from deskctl.recording_video import VideoOptions

    costs = {}
    for way in ("without video", "with video"):
        record = work / f"video-cpu-{provider}-{way.replace(' ', '-')}"
        options = VideoOptions(fps=fps) if way == "with video" else None
        shown = None
        with deskctl.open_desktop(provider, geometry=geometry, record=record, video=options) as desk:
            if provider == "xvfb":
                shown = show_picture_on(desk.handle.data, wallpaper)
            else:
                show_picture_docker(desk, wallpaper)
            started = _cpu_seconds()
            time.sleep(seconds)
            if shown is not None:
                shown.close()
            desk.close()  # the video ends here: ffmpeg is reaped, its CPU counted
            costs[way] = _cpu_seconds() - started
    per_minute = (costs["with video"] - costs["without video"]) * 60.0 / seconds
    video_file = work / f"video-cpu-{provider}-with-video" / "video.mp4"
    size = video_file.stat().st_size if video_file.exists() else 0
    print(f"video ({fps} fps, {geometry}, H.264 ultrafast): {per_minute:.1f} CPU-seconds per minute of video "
          f"({costs['with video']:.1f}s with, {costs['without video']:.1f}s without, over {seconds:.0f}s); "
          f"{size * 60 / seconds / 1024:.0f} KiB per minute of a still picture")


def run_provider(deskctl: Any, provider: str, geometry: str, width: int, height: int, actions: int,
                 wallpaper: Path, work: Path, video: dict[str, int] | None = None) -> None:
    from deskctl.recording_video import VideoOptions

    record = work / f"recorded-{provider}"
    by_hand = work / f"by-hand-{provider}"
    by_hand.mkdir()
    options = VideoOptions(fps=video["fps"]) if video else None
    with deskctl.open_desktop(provider, geometry=geometry) as plain, \
            deskctl.open_desktop(provider, geometry=geometry, record=record, video=options) as recorded:
        shown = []
        for desk in (plain, recorded):
            if provider == "xvfb":
                shown.append(show_picture_on(desk.handle.data, wallpaper))
            else:
                show_picture_docker(desk, wallpaper)
        recorder = recorded.recording
        assert recorder is not None
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
        kinds: dict[str, Callable[[Any, int], None]] = {
            "click": lambda d, i: d.click(*points[i % len(points)]),
            "key chord": lambda d, i: d.key("shift+f5"),
            "type 11ch": lambda d, i: d.type("hello wörld"),
        }
        for desk in (plain, recorded):  # warm: connections open, first PNG encoded
            desk.click(1, 1)
        recorder.flush()
        print(f"\n{provider}" + (f" (the recorded desktop also records a {video['fps']} fps video)" if video else "")
              + ":")
        print(f"{'action':<11} {'plain':>9} {'recorded':>9} {'b-to-b':>9} {'by hand':>9}   {'overhead':>9}"
              f"   {'rec/plain':>9} {'rec/hand':>9} {'btb/hand':>9}")
        for name, do in kinds.items():
            samples: dict[str, list[float]] = {"plain": [], "recorded": [], "by hand": [], "b-to-b": []}
            burst = 8
            for i in range(actions):
                def back_to_back(i: int = i, burst: int = burst, do: Callable[[Any, int], None] = do) -> None:
                    for j in range(burst):
                        do(recorded, i + j)
                    recorder.flush()

                ways: list[tuple[str, Callable[[], None], int]] = [
                    ("plain", partial(do, plain, i), 1),
                    ("recorded", partial(do, recorded, i), 1),
                    ("by hand", hand_rolled(partial(do, plain, i), {"kind": name}), 1),
                ]
                if i % burst == 0:
                    ways.append(("b-to-b", back_to_back, burst))
                random.shuffle(ways)
                for way, call, steps in ways:
                    recorder.flush()  # the worker is idle, as after an agent's model call
                    started = time.perf_counter()
                    call()
                    samples[way].append((time.perf_counter() - started) / steps)
            p, r, b, h = (median_ms(samples[k]) for k in ("plain", "recorded", "b-to-b", "by hand"))
            print(f"{name:<11} {p:7.2f}ms {r:7.2f}ms {b:7.2f}ms {h:7.2f}ms   {r - p:7.2f}ms   {r / p:8.1f}x "
                  f"{r / h:8.2f}x {b / h:8.2f}x")
        recorder.flush()
        steps = [row for row in map(json.loads, (record / "trajectory.jsonl").read_text().splitlines())
                 if row.get("type") == "step"]
        size = sum((record / s[w]["path"]).stat().st_size for s in steps for w in ("before", "after"))
        print(f"overhead = recorded - plain (target <= 10 ms); b-to-b = a step of a loop that never pauses, the "
              f"worker's flush included.\na recorded step writes two PNGs (~{size // max(1, 2 * len(steps)) // 1024}"
              f" KiB each) and one ~{(record / 'trajectory.jsonl').stat().st_size // max(1, len(steps))}-byte "
              "JSONL row")
        for display in shown:
            display.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
