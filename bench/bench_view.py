"""Frames a second that reach a viewer of a changing 1024x900 desktop: ``deskctl view`` next to the naive way,
in one run on one desktop.

* deskctl: ``deskctl view ID`` as a real process (MIT-SHM capture, JPEG only of changed frames, one
  multipart/x-mixed-replace stream); the client reads ``/stream`` and counts the frames that arrive;
* naive: a loop of screenshots served over HTTP as a page would poll them (``img.src = "/shot.png?" + n`` on
  every load): each request runs ``scrot`` (and ImageMagick ``import -window root`` when installed) and sends
  the file; the client fetches again as soon as a picture has arrived.

The screen shows a desktop-like picture and a box that moves 120 times a second, so every capture differs.
Prints the median time between two frames at the client, frames a second, and the ratio (deskctl / naive fps).
Target: deskctl >= 15 fps.

    .venv/bin/python bench/bench_view.py [--seconds 6]
"""

from __future__ import annotations

import argparse
import http.server
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import desktop_wallpaper, median_ms
from bench_xvfb import show_picture_on

GEOMETRY = (1024, 900)
BOUNDARY = b"--deskctl-frame\r\n"


class Animator:
    """A box that moves across the desktop 120 times a second (its own X connection and thread)."""

    def __init__(self, data: dict[str, Any]) -> None:
        from Xlib import X

        from deskctl.providers._x11 import X11Address, connect_display, read_cookie

        self.display = connect_display(X11Address(str(data["display"])), read_cookie(str(data["cookie_file"])))
        screen = self.display.screen()
        self.window = screen.root.create_window(0, 0, 120, 90, 0, screen.root_depth, X.InputOutput,
                                                X.CopyFromParent, background_pixel=0xE04020, override_redirect=True)
        self.window.map()
        self.display.sync()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        step = 0
        while not self._stop.wait(1 / 120):
            step += 1
            self.window.configure(x=(step * 7) % (GEOMETRY[0] - 120), y=(step * 3) % (GEOMETRY[1] - 90))
            self.display.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.display.close()


def stream_intervals(url: str, seconds: float) -> list[float]:
    """Seconds between frames arriving on deskctl's stream during ``seconds``."""
    base, token = url.split("/?token=")
    arrivals: list[float] = []
    tail = b""
    with urllib.request.urlopen(f"{base}/stream?token={token}", timeout=30) as stream:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            chunk = stream.read1(1 << 16)
            if not chunk:
                break
            data = tail + chunk
            # every boundary after the first closes a frame (the next part's head follows each frame at once)
            arrivals.extend([time.perf_counter()] * data.count(BOUNDARY))
            tail = data[-(len(BOUNDARY) - 1):]  # a boundary cut in two by the chunks, never one counted twice
    return [b - a for a, b in itertools.pairwise(arrivals[1:])]


def naive_server(shoot: Callable[[], bytes]) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = shoot()
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def poll_intervals(port: int, seconds: float) -> list[float]:
    """Seconds between pictures a polling client gets during ``seconds``."""
    arrivals: list[float] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/shot.png?{n}", timeout=30) as reply:
            reply.read()
        arrivals.append(time.perf_counter())
    return [b - a for a, b in itertools.pairwise(arrivals)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="how long each way is watched")
    args = parser.parse_args()
    for tool in ("scrot", "Xvfb"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs the naive tools)")

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-view-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    import deskctl

    print(f"deskctl view benchmark: {GEOMETRY[0]}x{GEOMETRY[1]} desktop changing 120 times a second, "
          f"{args.seconds:g} s per way; fps = 1000 / median ms between frames at the client\n")
    desk = deskctl.open_desktop("xvfb", geometry=f"{GEOMETRY[0]}x{GEOMETRY[1]}", detached=True)
    view: subprocess.Popen[str] | None = None
    try:
        data = desk.handle.data  # type: ignore[union-attr]
        wallpaper = work / "wallpaper.png"
        desktop_wallpaper(wallpaper, GEOMETRY, lines=60)
        shown = show_picture_on(data, wallpaper)
        animator = Animator(data)
        env = dict(os.environ, DISPLAY=str(data["display"]), XAUTHORITY=str(data["cookie_file"]))
        try:
            view = subprocess.Popen([sys.executable, "-m", "deskctl", "view", desk.id], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            assert view.stdout is not None
            url = view.stdout.readline().strip()
            stream_intervals(url, 1.0)  # warm: Pillow loaded, the shared-memory segment attached
            ours = stream_intervals(url, args.seconds)

            results: dict[str, list[float]] = {}
            shot_file = work / "naive.png"
            tools = {"scrot": ["scrot", "-o", str(shot_file)],
                     "import": ["import", "-window", "root", str(shot_file)]}
            for label, argv in tools.items():
                if shutil.which(argv[0]) is None:
                    print(f"({label} is not installed: not measured)")
                    continue

                def shoot(argv: list[str] = argv) -> bytes:
                    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
                    return shot_file.read_bytes()

                server = naive_server(shoot)
                try:
                    poll_intervals(server.server_address[1], 1.0)
                    results[f"{label} loop"] = poll_intervals(server.server_address[1], args.seconds)
                finally:
                    server.shutdown()
                    server.server_close()
        finally:
            animator.close()
            shown.close()  # type: ignore[attr-defined]

        ours_fps = 1000.0 / median_ms(ours)
        print(f"{'way':<22}{'frames':>8}{'median ms':>12}{'fps':>8}{'deskctl / naive':>18}")
        print(f"{'deskctl view':<22}{len(ours):>8}{median_ms(ours):>12.1f}{ours_fps:>8.1f}{'':>18}  [>= 15 fps]")
        for label, samples in results.items():
            fps = 1000.0 / median_ms(samples)
            print(f"{label:<22}{len(samples):>8}{median_ms(samples):>12.1f}{fps:>8.1f}{ours_fps / fps:>17.1f}x")
    finally:
        if view is not None:
            view.terminate()
            view.wait(timeout=30)
        desk.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
