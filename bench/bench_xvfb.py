"""Latency of the ``xvfb`` provider through deskctl next to the naive way, in one run on one desktop.

* click and key: ``desk.click`` / ``desk.key`` (XTEST over one X connection) vs spawning ``xdotool`` per action;
* screenshot of a 1024x900 desktop showing realistic content, as PNG: ``desk.screenshot()`` vs ``scrot`` and
  ImageMagick ``import -window root`` per shot (each writes a file that is then read back);
* up and down: ``deskctl.open_desktop`` (preflight, ledger, create, ready, geometry check) to ready, and
  ``close`` (confirmed destroy, ledger end) vs starting ``Xvfb :N`` and polling ``xdpyinfo`` every 50 ms
  until it answers, then kill and wait.

Prints medians and ratios (naive / deskctl). Targets: click/key >= 20x faster than xdotool; screenshot < 20 ms
median; up-to-ready < 0.5 s.

    .venv/bin/python bench/bench_xvfb.py [--actions 200] [--naive-actions 40] [--shots 30] [--ups 10]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import desktop_wallpaper, row, show_picture, timed

GEOMETRY = (1024, 900)


def show_picture_on(data: dict[str, object], path: Path) -> object:
    """Cover the desktop with a window showing ``path`` (kept while the returned connection is open)."""
    from deskctl.providers._x11 import X11Address, connect_display, read_cookie

    display = connect_display(X11Address(str(data["display"])), read_cookie(str(data["cookie_file"])))
    return show_picture(display, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actions", type=int, default=200)
    parser.add_argument("--naive-actions", type=int, default=40)
    parser.add_argument("--shots", type=int, default=30)
    parser.add_argument("--ups", type=int, default=10)
    args = parser.parse_args()
    for tool in ("xdotool", "scrot", "import", "xdpyinfo", "Xvfb"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs the naive tools)")

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    import deskctl

    print(f"deskctl xvfb benchmark: {GEOMETRY[0]}x{GEOMETRY[1]}, medians; (xN) = naive / deskctl\n")
    try:
        with deskctl.open_desktop("xvfb", geometry=f"{GEOMETRY[0]}x{GEOMETRY[1]}") as desk:
            env = dict(os.environ, DISPLAY=desk.handle.data["display"],  # type: ignore[union-attr]
                       XAUTHORITY=desk.handle.data["cookie_file"])  # type: ignore[union-attr]
            wallpaper = work / "wallpaper.png"
            desktop_wallpaper(wallpaper, GEOMETRY, lines=60)
            shown = show_picture_on(desk.handle.data, wallpaper)  # type: ignore[union-attr]

            def naive(argv: list[str]) -> Callable[[], object]:
                return lambda: subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)

            points = [(random.randrange(GEOMETRY[0]), random.randrange(GEOMETRY[1])) for _ in range(64)]
            it = iter(points * (args.actions // len(points) + 2))
            desk.click(1, 1)  # warm: connection open
            ours_click = timed(lambda: desk.click(*next(it)), args.actions)
            x, y = points[0]
            xdo_click = timed(naive(["xdotool", "mousemove", str(x), str(y), "click", "1"]), args.naive_actions)
            xdo_click_only = timed(naive(["xdotool", "click", "1"]), args.naive_actions)
            row("click", ours_click, {"xdotool move+click": xdo_click, "xdotool click": xdo_click_only}, ">= 20x")

            ours_key = timed(lambda: desk.key("ctrl+shift+t"), args.actions)
            xdo_key = timed(naive(["xdotool", "key", "ctrl+shift+t"]), args.naive_actions)
            row("key chord", ours_key, {"xdotool": xdo_key}, ">= 20x")

            ours_type = timed(lambda: desk.type("hello wörld"), args.actions // 4)
            xdo_type = timed(naive(["xdotool", "type", "--delay", "0", "hello wörld"]), args.naive_actions // 2)
            row("type 11ch", ours_type, {"xdotool": xdo_type})

            shot_file = work / "naive.png"

            def scrot() -> bytes:
                subprocess.run(["scrot", "-o", str(shot_file)], env=env, check=True)
                return shot_file.read_bytes()

            def imagemagick() -> bytes:
                subprocess.run(["import", "-window", "root", str(shot_file)], env=env, check=True)
                return shot_file.read_bytes()

            shot = desk.screenshot()
            ours_shot = timed(desk.screenshot, args.shots)
            row("screenshot", ours_shot, {"scrot": timed(scrot, max(5, args.shots // 3)),
                                          "import": timed(imagemagick, max(5, args.shots // 3))}, "< 20 ms")
            print(f"{'':<11} PNG {shot.width}x{shot.height}, {len(shot.png) // 1024} KiB "
                  f"(scrot's: {len(scrot()) // 1024} KiB); capture via "
                  f"{'MIT-SHM' if desk.provider._driver(desk.handle).uses_shm else 'GetImage'}")  # type: ignore
            shown.close()
    finally:
        pass  # the with block destroyed the desktop

    # -- up and down -------------------------------------------------------------------------------------------
    ups: list[float] = []
    downs: list[float] = []
    for _ in range(args.ups):
        start = time.perf_counter()
        desk = deskctl.open_desktop("xvfb", geometry=f"{GEOMETRY[0]}x{GEOMETRY[1]}")
        ups.append(time.perf_counter() - start)
        start = time.perf_counter()
        desk.close()
        downs.append(time.perf_counter() - start)

    naive_ups: list[float] = []
    naive_downs: list[float] = []
    for i in range(args.ups):
        number = next(n for n in range(300 + i, 1000) if not Path(f"/tmp/.X11-unix/X{n}").exists()
                      and not Path(f"/tmp/.X{n}-lock").exists())
        start = time.perf_counter()
        server = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", f"{GEOMETRY[0]}x{GEOMETRY[1]}x24",
                                   "-nolisten", "tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while subprocess.run(["xdpyinfo", "-display", f":{number}"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL).returncode != 0:
                time.sleep(0.05)  # the naive way: poll until it answers
            naive_ups.append(time.perf_counter() - start)
        finally:
            start = time.perf_counter()
            server.terminate()
            server.wait()
            naive_downs.append(time.perf_counter() - start)
    row("up->ready", ups, {"Xvfb+poll": naive_ups}, "< 500 ms")
    row("down", downs, {"kill+wait": naive_downs})
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
