"""Typing throughput (characters per second) of deskctl next to ``xdotool type``, in one run on one xvfb desktop.

* ``desk.type(text)`` (the library: one X connection, XTEST) for 10k and 100k characters (the most one action takes), vs
  ``xdotool type --delay 0 TEXT`` (DISPLAY and XAUTHORITY set) for 10k characters;
* the same text through the CLI as a whole process: ``deskctl do ID type TEXT`` (10k characters) vs xdotool;
* a text with non-ASCII characters (about 1 in 20 is one of ``éß€日本``, which the keymap lacks and both tools
  bind to spare keycodes), 2k characters each.

Texts are printable ASCII in both cases (so Shift comes and goes), spaces and newlines, typed into the focused
root window of a 1024x768 desktop. Prints medians of chars/s and the ratio deskctl / xdotool (xN: deskctl is N
times faster).

    .venv/bin/python bench/bench_typing.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent


def make_text(length: int, seed: int, extra: str = "") -> str:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + string.punctuation + "   \n"
    return "".join(rng.choice(extra) if extra and rng.random() < 0.05 else rng.choice(alphabet)
                   for _ in range(length))


def rate(fn: Callable[[], object], chars: int, rounds: int) -> float:
    """Median characters per second of ``rounds`` calls of ``fn`` (which types ``chars`` characters)."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        samples.append(chars / (time.perf_counter() - started))
    return statistics.median(samples)


def show(name: str, ours: float, naive: float | None) -> None:
    versus = f"  xdotool {naive:12,.0f} chars/s  (x{ours / naive:7.1f})" if naive else ""
    print(f"{name:<26} deskctl {ours:12,.0f} chars/s{versus}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for tool in ("xdotool", "Xvfb"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs the naive tools)")
    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-typing-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    import deskctl

    print(f"typing throughput, medians over {args.rounds} rounds; (xN) = deskctl / xdotool chars per second\n")
    with deskctl.open_desktop("xvfb", geometry="1024x768") as desk:
        data = desk.handle.data  # type: ignore[union-attr]
        x_env = dict(env, DISPLAY=str(data["display"]), XAUTHORITY=str(data["cookie_file"]))

        def xdotool(text: str) -> Callable[[], object]:
            return lambda: subprocess.run(["xdotool", "type", "--delay", "0", text], env=x_env, check=True)

        def cli(text: str) -> Callable[[], object]:
            return lambda: subprocess.run([str(BIN / "deskctl"), "do", desk.id, "type", text], env=env,
                                          check=True)

        short = make_text(10_000, seed=1)
        naive = rate(xdotool(short), len(short), args.rounds)
        for size in (10_000, 100_000):  # 100k: the most one type action takes (limits.py)
            text = short if size == len(short) else make_text(size, seed=size)
            show(f"desk.type {size // 1000}k", rate(lambda t=text: desk.type(t), size, args.rounds), naive)
        cli(short)()  # warm: .pyc files
        show("deskctl do ID type 10k", rate(cli(short), len(short), args.rounds), naive)
        mixed = make_text(2_000, seed=2, extra="éß€日本")
        show("desk.type 2k non-ASCII", rate(lambda: desk.type(mixed), len(mixed), args.rounds),
             rate(xdotool(mixed), len(mixed), args.rounds))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
