"""What one CLI call costs, as a user pays it (a whole process each), next to the naive way, in one run.

One call at a time, against a detached xvfb session (``deskctl up --provider xvfb``):

* ``deskctl do ID click X Y`` and ``do ID key shift`` vs ``xdotool ... --delay 0`` (DISPLAY and XAUTHORITY set),
  and the interpreter's floor: ``python -c pass``, ``python -c "import deskctl"``, ``deskctl --help``
  (target: within 2x ``import deskctl``); the same on a detached docker desktop (when an engine answers; not
  with ``--no-docker``), next to ``docker exec CONTAINER xdotool ...`` and the same floor;
* ``deskctl screenshot ID -o FILE`` vs ``scrot`` (target: within 1.5x; and ImageMagick's ``import`` when
  installed);
* ``deskctl ls`` and ``deskctl cost`` with one session in the ledger (target: under 150 ms);
* a shell loop of 100 ``deskctl do ID click`` vs the same loop of ``xdotool``;
* ``deskctl down`` of one session (target: under 150 ms), and ``up`` + ``down`` vs the hand-made cycle: Xvfb
  started by hand, ``xdpyinfo`` polled until it answers, kill and wait (target: within 3x).

Many at once (``--fleet N``): N ``deskctl up`` processes in parallel, then one ``deskctl do ID click`` each (in
parallel), then N ``deskctl down ID`` (in parallel), vs for xvfb the naive way (N ``Xvfb :N`` by hand, each
polled with ``xdpyinfo`` every 50 ms until it answers, one ``xdotool`` click each, kill and wait) and for
docker (``--fleet-provider docker``) the library: ``open_desktop`` / ``click`` / ``close`` from N threads of one
process (target: the CLI's N downs within 1.5x the library's).

Each process runs as installed code does: with ``.pyc`` files (``PYTHONDONTWRITEBYTECODE`` is dropped from the
children's environment and every command runs once to warm up before it is timed). The commands a row compares
run in turns (one of each, then again), so that the load of a shared machine weighs on each alike. Prints medians
(and the fastest run, which shows the cost without the noise of a busy machine) and ratios (naive / deskctl).

    .venv/bin/python bench/bench_cli.py [--calls 30] [--cycles 10] [--fleet 16] [--fleet-rounds 3]
        [--fleet-provider xvfb|docker] [--no-single] [--no-docker]   (--fleet 0: no fleet)
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


def interleaved(commands: dict[str, tuple[list[str], dict[str, str]]], calls: int) -> dict[str, list[float]]:
    """Wall seconds of ``calls`` runs of each command, taken in turns (one of each, then again), so that a change
    of load on a shared machine weighs on every command alike (after one run of each to warm up)."""
    for argv, env in commands.values():
        run(argv, env)
    samples: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(calls):
        for label, (argv, env) in commands.items():
            started = time.perf_counter()
            run(argv, env)
            samples[label].append(time.perf_counter() - started)
    return samples


def line(name: str, ours: list[float], naive: dict[str, list[float]], target: str = "") -> None:
    row(name, ours, naive, target)
    cells = [f"{'':<11} fastest: deskctl {min(ours) * 1000:8.2f} ms"]
    cells += [f"{label} {min(samples) * 1000:8.2f} ms" for label, samples in naive.items()]
    print("  ".join(cells))


def fleet_deskctl(env: dict[str, str], size: int, provider: str = "xvfb",
                  geometry: str = "1024x768") -> tuple[float, float, float]:
    """(up, act, down) wall seconds of ``size`` desktops handled by parallel deskctl processes."""
    deskctl = str(BIN / "deskctl")
    with ThreadPoolExecutor(max_workers=size) as pool:
        started = time.perf_counter()
        ids = [out.strip() for out in pool.map(
            lambda _: run([deskctl, "up", "--provider", provider, "--geometry", geometry], env), range(size))]
        up = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda sid: run([deskctl, "do", sid, "click", "10", "10"], env), ids))
        act = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda sid: run([deskctl, "down", sid], env), ids))
        down = time.perf_counter() - started
    return up, act, down


def fleet_library(env: dict[str, str], size: int, provider: str, geometry: str) -> tuple[float, float, float]:
    """The same from this process through the library: ``open_desktop`` from a thread per desktop (detached,
    as ``deskctl up`` makes them), one click each, ``close`` from a thread each."""
    import deskctl

    os.environ["DESKCTL_HOME"] = env["DESKCTL_HOME"] + "-library"  # its own ledger, apart from the CLI's
    with ThreadPoolExecutor(max_workers=size) as pool:
        started = time.perf_counter()
        desks = list(pool.map(lambda _: deskctl.open_desktop(provider, geometry=geometry, detached=True),
                              range(size)))
        up = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda desk: desk.click(10, 10), desks))
        act = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda desk: desk.close(), desks))
        down = time.perf_counter() - started
    return up, act, down


def _xvfb_by_hand(servers: list[subprocess.Popen[bytes]], poll: float = 0.05) -> int:
    """Start an Xvfb the way a script does (it picks a free display and names it on a pipe: no clash with other
    users of this machine), then poll ``xdpyinfo`` every ``poll`` seconds until it answers; its display number."""
    read_end, write_end = os.pipe()
    try:
        servers.append(subprocess.Popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", "1024x768x24",
                                         "-nolisten", "tcp"], pass_fds=(write_end,), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
        os.close(write_end)
        announced = b""
        while not announced.endswith(b"\n"):
            chunk = os.read(read_end, 16)
            if not chunk:
                raise RuntimeError("Xvfb exited before it named its display")
            announced += chunk
    finally:
        os.close(read_end)
    number = int(announced)
    while subprocess.run(["xdpyinfo", "-display", f":{number}"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL).returncode != 0:
        time.sleep(poll)  # the naive way: poll until it answers
    return number


def fleet_naive(env: dict[str, str], size: int) -> tuple[float, float, float]:
    """The same by hand: an Xvfb per desktop, xdpyinfo polled until it answers, an xdotool click, kill."""
    servers: list[subprocess.Popen[bytes]] = []

    def click(number: int) -> None:
        run(["xdotool", "mousemove", "10", "10", "click", "1"], dict(env, DISPLAY=f":{number}"))

    try:
        with ThreadPoolExecutor(max_workers=size) as pool:
            started = time.perf_counter()
            numbers = list(pool.map(lambda _: _xvfb_by_hand(servers), range(size)))
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


def hand_cycle(env: dict[str, str]) -> None:
    """The hand-made up+down of an Xvfb desktop: started, polled with xdpyinfo until it answers, killed, waited."""
    servers: list[subprocess.Popen[bytes]] = []
    try:
        _xvfb_by_hand(servers, poll=0.01)
    finally:
        for server in servers:
            server.terminate()
            server.wait()


def single(env: dict[str, str], work: Path, calls: int, cycles: int) -> None:
    """One call at a time: each deskctl command next to its naive way and the interpreter's floor."""
    import json

    deskctl = str(BIN / "deskctl")
    info = json.loads(run([deskctl, "up", "--provider", "xvfb", "--geometry", "1024x768", "--json"], env))
    sid = info["id"]
    try:
        x_env = dict(env, DISPLAY=info["display"], XAUTHORITY=info["xauthority"])
        click = interleaved({
            "deskctl": ([deskctl, "do", sid, "click", "10", "10"], env),
            "xdotool": (["xdotool", "mousemove", "10", "10", "click", "--delay", "0", "1"], x_env),
            "python -c pass": ([sys.executable, "-c", "pass"], env),
            "import deskctl": ([sys.executable, "-c", "import deskctl"], env),
            "deskctl --help": ([deskctl, "--help"], env),
            "do key": ([deskctl, "do", sid, "key", "shift"], env),
            "xdotool key": (["xdotool", "key", "--delay", "0", "shift"], x_env),
        }, calls)
        imported = click["import deskctl"]
        line("do click", click["deskctl"], {k: click[k] for k in ("xdotool", "python -c pass", "import deskctl",
                                                                  "deskctl --help")}, "import deskctl >= x0.5")
        line("do key", click["do key"], {"xdotool": click["xdotool key"], "import deskctl": imported},
             "import deskctl >= x0.5")
        shot = work / "shot.png"
        shots = {"deskctl": ([deskctl, "screenshot", sid, "-o", str(work / "ours.png")], env),
                 "scrot": (["scrot", "-o", str(shot)], x_env)}
        if shutil.which("import"):
            shots["import"] = (["import", "-window", "root", str(work / "import.png")], x_env)
        taken = interleaved(shots, calls)
        line("screenshot", taken.pop("deskctl"), taken, "scrot >= x0.67")
        print(f"{'':<11} file sizes: deskctl {(work / 'ours.png').stat().st_size} B, scrot {shot.stat().st_size} B")
        for verb in ("ls", "cost"):
            listed = interleaved({"deskctl": ([deskctl, verb], env),
                                  "import deskctl": ([sys.executable, "-c", "import deskctl"], env)}, calls)
            line(verb, listed["deskctl"], {"import deskctl": listed["import deskctl"]}, "< 150 ms")
        loop = f'for i in $(seq 100); do {deskctl} do {sid} click 10 10 || exit 1; done'
        naive_loop = "for i in $(seq 100); do xdotool mousemove 10 10 click --delay 0 1 || exit 1; done"
        loops = interleaved({"deskctl": (["sh", "-c", loop], env), "xdotool loop": (["sh", "-c", naive_loop], x_env)},
                            max(1, calls // 10))
        line("100 clicks", loops["deskctl"], {"xdotool loop": loops["xdotool loop"]}, "a shell loop of 100")
    finally:
        run([deskctl, "down", sid], env)
    ups, downs, hand = [], [], []
    for _ in range(cycles + 1):
        started = time.perf_counter()
        cycle_id = run([deskctl, "up", "--provider", "xvfb", "--geometry", "1024x768"], env).strip()
        ups.append(time.perf_counter() - started)
        started = time.perf_counter()
        run([deskctl, "down", cycle_id], env)
        downs.append(time.perf_counter() - started)
        started = time.perf_counter()
        hand_cycle(env)
        hand.append(time.perf_counter() - started)
    ups, downs, hand = ups[1:], downs[1:], hand[1:]  # the first warms up
    line("down", downs, {"import deskctl": imported}, "< 150 ms (import deskctl: the same run, above)")
    line("up + down", [u + d for u, d in zip(ups, downs, strict=True)], {"Xvfb by hand": hand},
         "Xvfb by hand >= x0.33")


def docker_do(env: dict[str, str], calls: int) -> None:
    """``deskctl do`` on a docker desktop: the same floor as on xvfb, and ``docker exec`` of xdotool in its
    container (the naive way: the engine starts a process in the container per action)."""
    import json

    deskctl = str(BIN / "deskctl")
    info = json.loads(run([deskctl, "up", "--provider", "docker", "--geometry", "1024x768", "--json"], env))
    sid, container = info["id"], info["resource_id"]
    try:
        naive = ["docker", "exec", "-e", f"DISPLAY={info['display']}", container]
        click = interleaved({
            "deskctl": ([deskctl, "do", sid, "click", "10", "10"], env),
            "docker exec xdotool": ([*naive, "xdotool", "mousemove", "10", "10", "click", "--delay", "0", "1"], env),
            "python -c pass": ([sys.executable, "-c", "pass"], env),
            "import deskctl": ([sys.executable, "-c", "import deskctl"], env),
            "do key": ([deskctl, "do", sid, "key", "shift"], env),
        }, calls)
        line("do click (docker)", click["deskctl"],
             {k: click[k] for k in ("docker exec xdotool", "python -c pass", "import deskctl")},
             "import deskctl >= x0.5")
        line("do key (docker)", click["do key"], {"import deskctl": click["import deskctl"]}, "import deskctl >= x0.5")
    finally:
        run([deskctl, "down", sid], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=10, help="up + down cycles")
    parser.add_argument("--fleet", type=int, default=16)
    parser.add_argument("--fleet-rounds", type=int, default=3)
    parser.add_argument("--fleet-provider", default="xvfb", choices=("xvfb", "docker"),
                        help="docker: the fleet rows compare the CLI with the library (no naive way)")
    parser.add_argument("--no-single", action="store_true", help="only the fleet rows")
    parser.add_argument("--no-docker", action="store_true", help="no `deskctl do` rows on a docker desktop")
    args = parser.parse_args()
    for tool in ("xdotool", "scrot", "xdpyinfo", "Xvfb"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs the naive tools)")

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-cli-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["DESKCTL_HOME"] = str(work / "home")
    print(f"deskctl CLI benchmark: whole processes, {args.calls} calls each; (xN) = naive / deskctl; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    if not args.no_single:
        single(env, work, args.calls, args.cycles)
        if args.no_docker:
            pass
        elif subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
            print("do click (docker): skipped, no Docker engine answers `docker info`")
        else:
            docker_do(env, args.calls)
    if args.fleet <= 0:
        shutil.rmtree(work, ignore_errors=True)
        return

    if args.fleet_provider != "xvfb":
        geometry = "640x480"
        print(f"\n{args.fleet} {args.fleet_provider} desktops at {geometry} at once (up, one click each, down): "
              f"parallel deskctl processes vs the library from threads of one process (xN = library / CLI; "
              f"target: down >= x0.67), medians over {args.fleet_rounds} rounds")
        fleet_library(env, 1, args.fleet_provider, geometry)  # warm: imports, image inspection
        ours_rounds, library_rounds = [], []
        for _ in range(args.fleet_rounds):
            ours_rounds.append(fleet_deskctl(env, args.fleet, args.fleet_provider, geometry))
            library_rounds.append(fleet_library(env, args.fleet, args.fleet_provider, geometry))
        for index, phase in enumerate(("up", "click", "down")):
            row(f"fleet {phase}", [r[index] for r in ours_rounds], {"library": [r[index] for r in library_rounds]})
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
