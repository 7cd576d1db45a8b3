"""Screen capture at the floor: deskctl's raw frames and PNGs next to python-mss on the SAME X socket, in one run.

For each provider (a docker desktop, whose X server is in another IPC namespace, and an xvfb desktop), at
1024x768 covered with a desktop-like picture:

* ``Desktop.raw_frame()`` and ``Desktop.screenshot()`` (the library as a user calls it; for docker that reads
  the framebuffer file after one X round trip);
* the X11 driver alone (``X11Driver.raw_frame`` / ``screenshot``: MIT-SHM, for docker by file descriptor);
* python-mss 10 (XShmGetImage through libxcb) on the same socket: ``grab`` (raw BGRA), and ``grab`` +
  ``mss.tools.to_png(level=1)`` (its PNG; deskctl encodes at zlib level 1 too).

Prints medians and ratios deskctl / python-mss (target <= 1.1). python-mss is a benchmark-only dependency
(``.venv/bin/pip install mss``); without it only deskctl's rows print.

    .venv/bin/python bench/bench_capture.py [--shots 60] [--providers docker,xvfb]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import desktop_wallpaper, median_ms, show_picture, timed

GEOMETRY = (1024, 768)


@contextlib.contextmanager
def display_link(socket_path: str) -> Iterator[str]:
    """A ``:N`` display name for a unix socket anywhere (python-mss, like libxcb, only knows
    /tmp/.X11-unix/XN): a symlink there, removed at the end."""
    for number in range(900, 2000):
        link = Path(f"/tmp/.X11-unix/X{number}")
        try:
            link.symlink_to(socket_path)
        except FileExistsError:
            continue
        try:
            yield f":{number}"
        finally:
            link.unlink(missing_ok=True)
        return
    raise RuntimeError("no free display number for the link")


def ratio_line(name: str, ours: list[float], theirs: list[float] | None, note: str = "") -> None:
    text = f"  {name:<34} deskctl {median_ms(ours):7.2f} ms"
    if theirs is not None:
        text += f"   python-mss {median_ms(theirs):7.2f} ms   (deskctl/mss x{median_ms(ours) / median_ms(theirs):.2f})"
    print(text + (f"  {note}" if note else ""))


def one_provider(provider: str, shots: int, work: Path) -> None:
    import deskctl
    from deskctl.providers._x11 import X11Address, X11Driver, connect_display, read_cookie, write_xauthority

    desk = deskctl.open_desktop(provider, geometry=f"{GEOMETRY[0]}x{GEOMETRY[1]}")
    try:
        data = desk.handle.data  # type: ignore[union-attr]
        if provider == "docker":
            socket_path, auth = str(data["socket_path"]), str(data["xauthority"])
            cookie, name = read_cookie(auth, 0), ":0"
        else:
            name, auth = str(data["display"]), str(data["cookie_file"])
            socket_path, cookie = f"/tmp/.X11-unix/X{name[1:]}", read_cookie(auth)
        picture = work / "wallpaper.png"
        desktop_wallpaper(picture, GEOMETRY, lines=50)
        shown = show_picture(connect_display(X11Address(name, socket_path=socket_path), cookie), picture)
        driver = X11Driver.open(name, socket_path=socket_path, cookie=cookie)
        grab: Callable[[], Any] | None = None
        png: Callable[[], Any] | None = None
        with contextlib.ExitStack() as stack:
            try:
                import mss
                import mss.tools

                link = stack.enter_context(display_link(socket_path))
                # the cookie for any display number (the desktop's file names its own number, not the link's)
                os.environ["XAUTHORITY"] = str(write_xauthority(work / "link.auth", None, cookie))
                grabber = getattr(mss, "MSS", None) or mss.mss  # python-mss 10 names it MSS (mss.mss deprecated)
                sct = stack.enter_context(grabber(display=link))
                monitor = sct.monitors[1]

                def grab() -> Any:
                    return bytes(sct.grab(monitor).raw)

                def png() -> Any:
                    shot = sct.grab(monitor)
                    return mss.tools.to_png(shot.rgb, shot.size, level=1)
            except ImportError:
                print("  (python-mss is not installed: .venv/bin/pip install mss)")
            for fn in (desk.raw_frame, desk.screenshot, driver.raw_frame, driver.screenshot, grab, png):
                if fn is not None:
                    timed(fn, 3)  # warm: segments, encoder pool
            shm = getattr(driver, "_shm", None)
            how = ("MIT-SHM by descriptor" if shm is not None and shm.by_fd else
                   "MIT-SHM by System V id" if shm is not None else "GetImage")
            print(f"{provider} {GEOMETRY[0]}x{GEOMETRY[1]} (X11 driver capture: {how}), medians over {shots}")
            theirs_raw = timed(grab, shots) if grab else None
            theirs_png = timed(png, shots) if png else None
            ratio_line("raw frame, Desktop.raw_frame", timed(desk.raw_frame, shots), theirs_raw, "[<= 1.1]")
            ratio_line("raw frame, X11 driver", timed(driver.raw_frame, shots), theirs_raw)
            ratio_line("PNG, Desktop.screenshot", timed(desk.screenshot, shots), theirs_png, "[<= 1.1]")
            ratio_line("PNG, X11 driver", timed(driver.screenshot, shots), theirs_png)
        driver.close()
        shown.close()
    finally:
        desk.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shots", type=int, default=60)
    parser.add_argument("--providers", default="docker,xvfb")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-capture-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    print(f"deskctl capture benchmark: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    try:
        for provider in args.providers.split(","):
            one_provider(provider, args.shots, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
