"""Many desktops from ONE process: up, act, down at 16, 64, 128 and 256 desktops, next to the naive way.

deskctl: ``deskctl.open_desktop`` for each desktop from a pool of threads (all in this process, so every X
connection, API socket, pipe and pidfd shares one descriptor table: past 1024 of them select() would fail),
then one click and one screenshot each, then ``close`` each. The naive way (xvfb only): ``Xvfb :N`` started
by hand, ``xdpyinfo`` polled every 50 ms until it answers, one ``xdotool`` click, kill and wait
(``bench_cli.fleet_naive``). Docker has no naive row here (bench_docker.py compares one desktop with docker
run); its figures say what the machine holds.

Prints, per size: wall seconds of each phase, milliseconds per desktop, this process's memory per desktop (RSS
growth while the desktops are up, divided by their number) and, for xvfb, the Xvfb servers' memory per desktop.

    .venv/bin/python bench/bench_fleet.py [--sizes 16,64,128,256] [--provider xvfb|docker] [--workers 32]

``--downs N``: only the teardown, as a fleet's cleanup pays it: N ``deskctl down ID`` processes at once next to
the library's N ``close`` from threads of one process, rounds interleaved (target: the processes within 1.5x);
each round brings N detached desktops up through the library first (not timed). Two naive rows for docker put
the target in proportion: N ``docker rm -f NAME`` processes at once (the plain tool), and the floor of any
command written in Python: N bare interpreters (``python -S``) that each send the one engine request a destroy
is (``DELETE /containers/NAME?force=1`` on the engine's Unix socket) and nothing else. Prints medians and the
ratios (each to the library's time, and deskctl's to the floor), the load average, and the CPU seconds each side
used (the N processes' together, from their rusage; the library's from this process's): on a loaded machine
the wall times swing, the CPU figures much less, and the CPU of N processes on few cores is what a fleet's
teardown waits for.

    .venv/bin/python bench/bench_fleet.py --provider docker --downs 16 [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench_cli import fleet_naive


def rss_kib(pid: int | str = "self") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def servers_kib(home: Path) -> int:
    """Resident memory of the Xvfb servers started under ``home`` (their session directories are there)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"Xvfb") and any(str(home).encode() in arg for arg in argv):
            total += rss_kib(entry.name)
    return total


def fleet(provider: str, size: int, geometry: str, workers: int, home: Path) -> dict[str, Any]:
    import deskctl

    before = rss_kib()
    desks: list[Any] = []
    failures: list[str] = []

    def up(_: int) -> None:
        try:
            desks.append(deskctl.open_desktop(provider, geometry=geometry))
        except deskctl.DeskctlError as err:
            failures.append(err.code)

    def act(desk: Any) -> None:
        desk.click(10, 10)
        desk.screenshot()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        started = time.perf_counter()
        list(pool.map(up, range(size)))
        up_s = time.perf_counter() - started
        rss = rss_kib() - before
        servers = servers_kib(home) if provider == "xvfb" else 0
        started = time.perf_counter()
        list(pool.map(act, desks))
        act_s = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.map(lambda desk: desk.close(), desks))
        down_s = time.perf_counter() - started
    return {"up": up_s, "act": act_s, "down": down_s, "ok": len(desks), "failed": failures,
            "rss": rss / max(1, len(desks)), "servers": servers / max(1, len(desks))}


def _detached(provider: str, size: int, geometry: str) -> list[str]:
    """``size`` detached desktops brought up from threads and let go (what ``deskctl up`` leaves): their ids."""
    import deskctl

    def up(_: int) -> str:
        desk = deskctl.open_desktop(provider, geometry=geometry, detached=True)
        desk.release()
        return desk.id

    with ThreadPoolExecutor(max_workers=size) as pool:
        return list(pool.map(up, range(size)))


def downs(provider: str, size: int, geometry: str, rounds: int) -> None:
    """N `deskctl down` processes at once vs the library's N closes from threads, interleaved; medians."""
    import resource
    import statistics
    import subprocess

    import deskctl

    def cpu(who: int) -> float:
        used = resource.getrusage(who)
        return used.ru_utime + used.ru_stime

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: with .pyc
    binary = str(Path(sys.executable).with_name("deskctl"))
    sides: dict[str, Any] = {"deskctl": lambda sid: [binary, "down", sid]}
    socket_path = _engine_socket() if provider == "docker" else None
    if provider == "docker" and shutil.which("docker"):
        sides["docker rm -f"] = lambda sid: ["docker", "rm", "-f", sid]
    if socket_path:
        sides["floor"] = lambda sid: [sys.executable, "-S", "-c", _FLOOR, socket_path, sid]
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpus: dict[str, list[float]] = {name: [] for name in sides}
    library, library_cpu = [], []

    def processes(name: str, ids: list[str]) -> None:
        with ThreadPoolExecutor(max_workers=size) as pool:
            before = cpu(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = list(pool.map(lambda sid: subprocess.run(sides[name](sid), env=env, capture_output=True,
                                                             text=True), ids))
            took = time.perf_counter() - started
            used = cpu(resource.RUSAGE_CHILDREN) - before
        failed = [d.stderr.strip() or d.stdout.strip() for d in done if d.returncode != 0]
        if failed:
            sys.exit(f"{name} failed: {failed[0]}")
        if number:
            times[name].append(took)
            cpus[name].append(used)
        if name != "deskctl":  # the ledger still holds them: recorded as gone (not timed)
            subprocess.run([binary, "down", "--ignore-missing", *ids], env=env, capture_output=True)

    for number in range(rounds + 1):  # the first round warms up (imports, .pyc files, the image's layers)
        for name in sides:
            processes(name, _detached(provider, size, geometry))
        desks = [deskctl.attach(sid) for sid in _detached(provider, size, geometry)]
        with ThreadPoolExecutor(max_workers=size) as pool:
            before = cpu(resource.RUSAGE_SELF)
            started = time.perf_counter()
            list(pool.map(lambda desk: desk.close(), desks))
            took = time.perf_counter() - started
            used = cpu(resource.RUSAGE_SELF) - before
        if number:
            library.append(took)
            library_cpu.append(used)
    ours, theirs = statistics.median(times["deskctl"]), statistics.median(library)
    print(f"{size} {provider} downs at once, medians over {rounds} rounds (load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores): the library's {size} closes from threads {theirs:.2f} s (fastest "
          f"{min(library):.2f}; CPU {statistics.median(library_cpu):.2f} s)")
    for name in sides:
        took, used = statistics.median(times[name]), statistics.median(cpus[name])
        label = {"deskctl": "deskctl down", "docker rm -f": "docker rm -f", "floor": "floor (python -S, 1 request)"}
        print(f"  {size} {label[name]} processes: {took:.2f} s (fastest {min(times[name]):.2f}), "
              f"CPU {used:.2f} s ({used * 1000 / size:.0f} ms each); {name}/library {took / theirs:.2f}")
    print(f"CLI/library {ours / theirs:.2f} (target 1.5)"
          + (f"; the floor/library {statistics.median(times['floor']) / theirs:.2f}, deskctl/floor "
             f"{ours / statistics.median(times['floor']):.2f}" if "floor" in times else ""))


#: the floor of a Python command that destroys a container: one request on the engine's socket, nothing else
_FLOOR = (
    "import _socket, sys\n"
    "s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\n"
    "s.connect(sys.argv[1])\n"
    "s.sendall(b'DELETE /containers/' + sys.argv[2].encode() + b'?force=1 HTTP/1.0\\r\\nHost: docker\\r\\n\\r\\n')\n"
    "head = b''\n"
    "while chunk := s.recv(65536):\n"
    "    head += chunk\n"
    "sys.exit(0 if head.split(b' ', 2)[1] == b'204' else head.decode(errors='replace'))\n"
)


def _engine_socket() -> str | None:
    """The engine's Unix socket as the docker provider finds it (``DOCKER_HOST`` or the default), else None."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    path = host.removeprefix("unix://") if host.startswith("unix://") else None
    return path if path and os.path.exists(path) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="16,64,128,256")
    parser.add_argument("--provider", default="xvfb", choices=("xvfb", "docker"))
    parser.add_argument("--geometry", default="1024x768")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--no-naive", action="store_true", help="skip the naive rows")
    parser.add_argument("--downs", type=int, default=0, help="only N concurrent `deskctl down`s vs the library")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --downs")
    args = parser.parse_args()
    if args.downs:
        work = Path(tempfile.mkdtemp(prefix="dk-bf-"))  # short: the X socket paths under it are length-limited
        os.environ["DESKCTL_HOME"] = str(work / "home")
        try:
            downs(args.provider, args.downs, "640x480" if args.geometry == "1024x768" else args.geometry,
                  args.rounds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    for tool in ("Xvfb", "xdotool", "xdpyinfo"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs it)")
    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-fleet-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"deskctl fleet benchmark: {args.provider} desktops at {args.geometry} from one process "
          f"({args.workers} threads); open-file limit {soft}/{hard}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    print(f"{'desktops':<11} {'ok':>4} {'up s':>7} {'act s':>7} {'down s':>7} {'up ms/desk':>11} {'act ms/desk':>12} "
          f"{'down ms/desk':>13} {'py KiB/desk':>12} {'X KiB/desk':>11}  naive up/act/down s")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            ours = fleet(args.provider, size, args.geometry, args.workers, work / "home")
            name = f"{args.provider} {size}"
            cells = (f"{name:<11} {ours['ok']:>4} {ours['up']:>7.2f} {ours['act']:>7.2f} {ours['down']:>7.2f} "
                     f"{ours['up'] * 1000 / size:>11.1f} {ours['act'] * 1000 / size:>12.1f} "
                     f"{ours['down'] * 1000 / size:>13.1f} {ours['rss']:>12.0f} {ours['servers']:>11.0f}")
            if args.provider == "xvfb" and not args.no_naive:
                naive = fleet_naive(dict(os.environ), size)
                cells += (f"  {naive[0]:.2f}/{naive[1]:.2f}/{naive[2]:.2f}  "
                          f"(naive/deskctl up x{naive[0] / ours['up']:.2f}, act x{naive[1] / ours['act']:.2f}, "
                          f"down x{naive[2] / ours['down']:.2f})")
            print(cells + (f"  FAILED: {sorted(set(ours['failed']))} x{len(ours['failed'])}" if ours["failed"]
                           else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
