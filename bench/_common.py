"""What the benchmark scripts share: timing and medians, the deskctl-vs-naive table rows, a desktop-like
wallpaper, and for the cloud fakes the per-action comparison and the up/down round trips.

The scripts run as ``.venv/bin/python bench/NAME.py``; Python puts the script's folder (``bench/``) first on
``sys.path``, so ``from _common import ...`` finds this module.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "compare_action",
    "desktop_wallpaper",
    "measure",
    "median_ms",
    "open_close_cycles",
    "print_action_header",
    "print_round_trips",
    "row",
    "timed",
    "up_down_cycles",
]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000.0


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    """Wall seconds of each of ``rounds`` calls of ``fn``."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def row(name: str, ours: list[float], naive: dict[str, list[float]], target: str = "", ratio_width: int = 6) -> None:
    """One line: deskctl's median, then each naive way's median and its ratio to deskctl's (and a target)."""
    cells = [f"{name:<11} deskctl {median_ms(ours):8.2f} ms"]
    for label, samples in naive.items():
        cells.append(f"{label} {median_ms(samples):8.2f} ms (x{median_ms(samples) / median_ms(ours):{ratio_width}.1f})")
    print("  ".join(cells) + (f"  [{target}]" if target else ""))


def desktop_wallpaper(path: Path, size: tuple[int, int], lines: int) -> None:
    """A desktop-like picture: a title bar, ``lines`` lines of coloured text, buttons, and a noisy photo region."""
    from PIL import Image, ImageDraw

    rng = random.Random(7)
    width = size[0]
    image = Image.new("RGB", size, (246, 246, 246))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width, 28), fill=(45, 52, 64))
    words = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "agents", "click",
             "buttons", "and", "type", "text")
    for line in range(lines):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        draw.text((16, 40 + line * 14), text, fill=(rng.randint(0, 90), rng.randint(0, 90), rng.randint(0, 140)))
    for i in range(8):
        x, y = 620 + (i % 2) * 190, 60 + (i // 2) * 50
        draw.rounded_rectangle((x, y, x + 170, y + 36), radius=6, fill=(60, 120, 220))
        draw.text((x + 12, y + 12), f"Button {i}", fill=(255, 255, 255))
    image.paste(Image.effect_noise((360, 240), 48).convert("RGB"), (620, 300))
    image.save(path)


# -- the cloud fakes (Daytona, cua, use.computer) ------------------------------------------------------------
def measure(fake: Any, iterations: int, call: Callable[[], Any]) -> tuple[list[float], list[float]]:
    """(client seconds, server seconds) per call; the server time is the fake's own for the call's requests
    (the sum of ``server_seconds`` over what ``fake.log`` gained during the call)."""
    client, server = [], []
    for _ in range(iterations):
        before = len(fake.log)
        started = time.perf_counter()
        call()
        client.append(time.perf_counter() - started)
        server.append(sum(r.server_seconds for r in fake.log[before:]))
    return client, server


def print_action_header(iterations: int, note: str | None = None) -> None:
    print(f"per-action medians over {iterations} calls (ms); overhead = client - server time")
    if note:
        print(note)
    print(f"{'action':<14}{'server':>9}{'naive':>9}{'deskctl':>9}{'naive ovh':>11}{'deskctl ovh':>13}"
          f"{'ratio':>8}")


def compare_action(fake: Any, label: str, via_provider: Callable[[], Any], naive: Callable[[], Any],
                   iterations: int, warmup: int) -> None:
    """Warm up both paths, time each ``iterations`` times and print the row: the server's time, both client
    times, both overheads (client - server) and their ratio (deskctl / naive)."""
    measure(fake, warmup, via_provider)
    measure(fake, warmup, naive)
    ours_client, ours_server = measure(fake, iterations, via_provider)
    naive_client, naive_server = measure(fake, iterations, naive)
    ours_overhead = [c - s for c, s in zip(ours_client, ours_server, strict=True)]
    naive_overhead = [c - s for c, s in zip(naive_client, naive_server, strict=True)]
    ratio = median_ms(ours_overhead) / max(1e-9, median_ms(naive_overhead))
    print(f"{label:<14}{median_ms(ours_server):>9.3f}{median_ms(naive_client):>9.3f}"
          f"{median_ms(ours_client):>9.3f}{median_ms(naive_overhead):>11.3f}{median_ms(ours_overhead):>13.3f}"
          f"{ratio:>7.2f}x")


def up_down_cycles(provider: Any, spec: Any, cycles: int) -> tuple[list[float], list[float]]:
    """(create + wait_ready seconds, destroy seconds) of ``cycles`` provider round trips."""
    ups, downs = [], []
    for i in range(cycles):
        started = time.perf_counter()
        cycle = provider.create(spec, f"dk-bench-{i}", {})
        provider.wait_ready(cycle, time.monotonic() + 60)
        ups.append(time.perf_counter() - started)
        started = time.perf_counter()
        provider.destroy(cycle)
        downs.append(time.perf_counter() - started)
    return ups, downs


def open_close_cycles(provider: str, platform: str, geometry: str, options: dict[str, Any],
                      cycles: int) -> tuple[list[float], list[float]]:
    """(open_desktop seconds, close seconds) of ``cycles`` full sessions."""
    import deskctl

    opens, closes = [], []
    for _ in range(cycles):
        started = time.perf_counter()
        desk = deskctl.open_desktop(provider, platform=platform, geometry=geometry, provider_options=dict(options))
        opens.append(time.perf_counter() - started)
        started = time.perf_counter()
        desk.close()
        closes.append(time.perf_counter() - started)
    return opens, closes


def print_round_trips(cycles: int, ups: list[float], downs: list[float], opens: list[float],
                      closes: list[float]) -> None:
    print()
    print(f"up/down round trips, medians over {cycles} cycles (ms; the fake starts a real Xvfb per sandbox)")
    print(f"  provider create+wait_ready {median_ms(ups):9.1f}   "
          f"destroy (DELETE, GET until 404) {median_ms(downs):8.1f}")
    print(f"  open_desktop (preflight, ledger, metering) {median_ms(opens):9.1f}   close {median_ms(closes):8.1f}")
    print(f"  session / provider: up {median_ms(opens) / median_ms(ups):.2f}x, "
          f"down {median_ms(closes) / median_ms(downs):.2f}x")


def show_picture(display: Any, path: Path) -> Any:
    """Cover the screen of the open X connection ``display`` with an override-redirect window showing the
    picture at ``path`` (kept while the connection is open); returns ``display``, with ``.window`` set."""
    from PIL import Image
    from Xlib import X

    screen = display.screen()
    image = Image.open(path).convert("RGBX")
    width, height = image.size
    raw = image.tobytes("raw", "BGRX")
    pixmap = screen.root.create_pixmap(width, height, screen.root_depth)
    gc = pixmap.create_gc()
    rows = max(1, 200_000 // (width * 4))  # PutImage requests stay well under the server's request size limit
    for top in range(0, height, rows):
        chunk = raw[top * width * 4 : min(height, top + rows) * width * 4]
        pixmap.put_image(gc, 0, top, width, len(chunk) // (width * 4), X.ZPixmap, screen.root_depth, 0, chunk)
    window = screen.root.create_window(0, 0, width, height, 0, screen.root_depth, X.InputOutput,
                                       X.CopyFromParent, background_pixmap=pixmap, override_redirect=True)
    window.map()
    display.sync()
    display.window = window
    return display
