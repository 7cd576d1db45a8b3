"""What one CLI call costs, as a user pays it (a whole process each), next to the naive way, in one run.

* ``deskctl do ID click X Y`` against a detached xvfb session (``deskctl up --provider xvfb``) vs
  ``xdotool mousemove X Y click 1`` with DISPLAY and XAUTHORITY set;
* ``deskctl screenshot ID -o FILE`` vs ``scrot`` (and ImageMagick ``import -window root FILE`` when installed);
* for scale: the interpreter alone (``python -c pass``), ``python -c "import deskctl"`` and ``deskctl --help``;
* 16 desktops at once: 16 ``deskctl up`` processes in parallel, then one ``deskctl do ID click`` each (in
  parallel), then 16 ``deskctl down ID`` (in parallel), vs the naive way: 16 ``Xvfb :N`` started by hand, each
  polled with ``xdpyinfo`` every 50 ms until it answers, one ``xdotool`` click each, kill and wait.

Each process runs as installed code does: with ``.pyc`` files (``PYTHONDONTWRITEBYTECODE`` is dropped from the
children's environment and every command runs once to warm up before it is timed). Prints medians (and the
fastest run, which shows the cost without the noise of a busy machine) and ratios (naive / deskctl).
Target: ``deskctl do ID click`` <= 150 ms per call.

    .venv/bin/python bench/bench_cli.py [--calls 30] [--fleet 16] [--fleet-rounds 3]   (--fleet 0: no fleet)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import median_ms, row

BIN = Path(sys.executable).parent


def run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def per_call(argv: list[str], env: dict[str, str], calls: int) -> list[float]:
    """Wall seconds of ``calls`` runs of ``argv`` (after one run to warm up)."""
    run(argv, env)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        run(argv, env)
        samples.append(time.perf_counter() - started)
    return samples


def line(name: str, ours: list[float], naive: dict[str, list[float]], target: str = "") -> None:
    row(name, ours, naive, target)
    cells = [f"{'':<11} fastest: deskctl {min(ours) * 1000:8.2f} ms"]
    cells += [f"{label} {min(samples) * 1000:8.2f} ms" for label, samples in naive.items()]
    print("  ".join(cells))


def fleet_deskctl(env: dict[str, str], size: int) -> tuple[float, float, float]:
    """(up, act, down) wall seconds of ``size`` desktops handled by parallel deskctl processes."""
    deskctl = str(BIN / "deskctl")
    with ThreadPoolExecutor(max_workers=size) as pool:
        started = time.perf_counter()
        ids = [out.strip() for out in pool.map(
            lambda _: run([deskctl, "up", "--provider", "xvfb", "--geometry", "1024x768"], env), range(size))]
        up = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda sid: run([deskctl, "do", sid, "click", "10", "10"], env), ids))
        act = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda sid: run([deskctl, "down", sid], env), ids))
        down = time.perf_counter() - started
    return up, act, down


def _free_display(start: int, taken: set[int]) -> int:
    for number in range(start, 2000):
        if number not in taken and not Path(f"/tmp/.X11-unix/X{number}").exists() \
                and not Path(f"/tmp/.X{number}-lock").exists():
            return number
    raise RuntimeError("no free display number")


def fleet_naive(env: dict[str, str], size: int) -> tuple[float, float, float]:
    """The same by hand: Xvfb :N per desktop, xdpyinfo polled until it answers, an xdotool click, kill."""
    taken: set[int] = set()
    numbers = []
    for _ in range(size):
        numbers.append(_free_display(600, taken))
        taken.add(numbers[-1])
    servers: list[subprocess.Popen[bytes]] = []

    def start(number: int) -> None:
        servers.append(subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while subprocess.run(["xdpyinfo", "-display", f":{number}"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL).returncode != 0:
            time.sleep(0.05)  # the naive way: poll until it answers

    def click(number: int) -> None:
        run(["xdotool", "mousemove", "10", "10", "click", "1"], dict(env, DISPLAY=f":{number}"))

    try:
        with ThreadPoolExecutor(max_workers=size) as pool:
            started = time.perf_counter()
            list(pool.map(start, numbers))
            up = time.perf_counter() - started
            started = time.perf_counter()
            list(pool.map(click, numbers))
            act = time.perf_counter() - started
            started = time.perf_counter()
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait()
    down = time.perf_counter() - started
    return up, act, down


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--fleet", type=int, default=16)
    parser.add_argument("--fleet-rounds", type=int, default=3)
    args = parser.parse_args()
    for tool in ("xdotool", "scrot", "xdpyinfo", "Xvfb"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs the naive tools)")

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-cli-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["DESKCTL_HOME"] = str(work / "home")
    deskctl = str(BIN / "deskctl")
    print(f"deskctl CLI benchmark: whole processes, {args.calls} calls each; (xN) = naive / deskctl; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    session = run([deskctl, "up", "--provider", "xvfb", "--geometry", "1024x768", "--json"], env)
    import json

    info = json.loads(session)
    sid = info["id"]
    try:
        x_env = dict(env, DISPLAY=info["display"], XAUTHORITY=info["xauthority"])
        floor = per_call([sys.executable, "-c", "pass"], env, args.calls)
        imported = per_call([sys.executable, "-c", "import deskctl"], env, args.calls)
        helped = per_call([deskctl, "--help"], env, args.calls)
        ours = per_call([deskctl, "do", sid, "click", "10", "10"], env, args.calls)
        naive = per_call(["xdotool", "mousemove", "10", "10", "click", "1"], x_env, args.calls)
        line("do click", ours, {"xdotool": naive, "python -c pass": floor, "import deskctl": imported,
                                "deskctl --help": helped}, "<= 150 ms")
        shot = work / "shot.png"
        ours = per_call([deskctl, "screenshot", sid, "-o", str(shot)], env, args.calls)
        naive = {"scrot": per_call(["scrot", "-o", str(shot)], x_env, args.calls)}
        if shutil.which("import"):
            naive["import"] = per_call(["import", "-window", "root", str(shot)], x_env, args.calls)
        line("screenshot", ours, naive)
    finally:
        run([deskctl, "down", sid], env)
    if args.fleet <= 0:
        shutil.rmtree(work, ignore_errors=True)
        return

    print(f"\n{args.fleet} desktops at once (up, one click each, down; parallel processes), "
          f"medians over {args.fleet_rounds} rounds")
    ours_rounds = [fleet_deskctl(env, args.fleet) for _ in range(args.fleet_rounds)]
    naive_rounds = [fleet_naive(env, args.fleet) for _ in range(args.fleet_rounds)]
    for index, phase in enumerate(("up", "click", "down")):
        row(f"fleet {phase}", [r[index] for r in ours_rounds], {"Xvfb by hand": [r[index] for r in naive_rounds]})
    totals_ours = [sum(r) for r in ours_rounds]
    totals_naive = [sum(r) for r in naive_rounds]
    row("fleet total", totals_ours, {"Xvfb by hand": totals_naive})
    print(f"{'':<11} per desktop: deskctl {median_ms(totals_ours) / args.fleet:.1f} ms, "
          f"by hand {median_ms(totals_naive) / args.fleet:.1f} ms")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
