"""Benchmark: many docker desktops across two engines, in parallel next to one after another, in one run.

Half the desktops run on the local engine (display over a bind-mounted X socket), half on a second engine reached
over TCP (display through the in-desktop agent on a published port: scripts/setup.d/25-docker-remote.sh starts
one on loopback). Each desktop goes up -> screenshot -> click -> down; the same list of desktops runs once from a
thread per desktop and once one after another. Then the per-action cost of the two paths on one desktop each:
click and screenshot through the local X11 socket vs through the agent (bench/bench_agent.py compares the agent
with X11 on the same display without Docker in between).

    .venv/bin/python bench/bench_scale.py [--desktops 32] [--geometry 640x480] [--rounds 200]
        [--remote tcp://127.0.0.1:23751]

Prints wall times, per-step medians (milliseconds) and ratios. Uses the minimal image with a small geometry and a
256 MiB limit per desktop, so that 32 fit the memory of a small machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import median_ms, timed

_STEPS = ("up", "screenshot", "click", "down")


def _docker2_setting(key: str) -> str | None:
    """A fact of the second engine: from the environment, else from what 25-docker-remote.sh wrote."""
    if os.environ.get(key):
        return os.environ[key]
    env_file = Path("/run/deskctl-docker2.env")
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            name, _, value = line.partition("=")
            if name == key and value:
                return value
    return None


def _remote_engine(given: str | None) -> str | None:
    engine = given or _docker2_setting("DESKCTL_TEST_DOCKER2")
    cert_path = _docker2_setting("DESKCTL_TEST_DOCKER2_CERT_PATH")
    if engine and cert_path and not given:
        # the second engine lets in only its client certificate (the Docker clients' variables); they apply to
        # every engine named by a tcp:// URL, so the local one is named by its socket, where TLS does not apply
        os.environ.update(DOCKER_TLS_VERIFY="1", DOCKER_CERT_PATH=cert_path)
        os.environ.setdefault("DOCKER_HOST", "unix:///var/run/docker.sock")
    return engine


def _options(engine: str | None) -> dict[str, Any]:
    options: dict[str, Any] = {"variant": "minimal", "memory": "256m", "reaper": True}
    if engine:
        options["host"] = engine
    return options


def one_desktop(engine: str | None, geometry: str) -> dict[str, float]:
    """up -> screenshot -> click -> down of one desktop; seconds of each step."""
    import deskctl

    took: dict[str, float] = {}
    started = time.perf_counter()
    desk = deskctl.open_desktop("docker", geometry=geometry, provider_options=_options(engine))
    try:
        took["up"] = time.perf_counter() - started
        started = time.perf_counter()
        shot = desk.screenshot()
        took["screenshot"] = time.perf_counter() - started
        assert f"{shot.width}x{shot.height}" == geometry
        started = time.perf_counter()
        desk.click(10, 10)
        took["click"] = time.perf_counter() - started
    finally:
        started = time.perf_counter()
        desk.close()
        took["down"] = time.perf_counter() - started
    return took


def run_all(engines: list[str | None], geometry: str, parallel: bool) -> tuple[float, list[dict[str, float]]]:
    started = time.perf_counter()
    if parallel:
        with ThreadPoolExecutor(max_workers=len(engines)) as pool:
            results = list(pool.map(lambda engine: one_desktop(engine, geometry), engines))
    else:
        results = [one_desktop(engine, geometry) for engine in engines]
    return time.perf_counter() - started, results


def _print_steps(label: str, results: list[dict[str, float]]) -> None:
    cells = [f"{step} {median_ms([r[step] for r in results]):8.1f} ms" for step in _STEPS]
    print(f"  {label:<22}" + "  ".join(cells))


def _compare(action: Callable[[Any], object], local: Any, agent: Any, rounds: int) -> tuple[float, float]:
    """Median milliseconds of ``action`` on each desktop, both warmed first (a first capture allocates, a first
    click maps keys)."""
    timed(lambda: action(local), 5)
    timed(lambda: action(agent), 5)
    return median_ms(timed(lambda: action(local), rounds)), median_ms(timed(lambda: action(agent), rounds))


def per_action(remote: str, geometry: str, rounds: int) -> None:
    """Click and screenshot through the local X11 socket and through the agent, one desktop each."""
    import deskctl

    local = deskctl.open_desktop("docker", geometry=geometry, provider_options=_options(None))
    agent = deskctl.open_desktop("docker", geometry=geometry, provider_options=_options(remote))
    try:
        rows: list[tuple[str, Callable[[Any], object]]] = [
            ("click", lambda desk: desk.click(20, 20)),
            ("move", lambda desk: desk.move(30, 40)),
            ("screenshot", lambda desk: desk.screenshot()),
        ]
        print(f"per-action medians over {rounds} calls, one {geometry} desktop each (ms)")
        for name, action in rows:
            local_ms, agent_ms = _compare(action, local, agent, rounds)
            print(f"  {name:<11} local X11 socket {local_ms:8.3f}  agent over TCP {agent_ms:8.3f}  "
                  f"(agent/local x{agent_ms / local_ms:5.2f}, +{agent_ms - local_ms:.3f} ms)")
    finally:
        local.close()
        agent.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--desktops", type=int, default=32, help="desktops in all, half on each engine")
    parser.add_argument("--geometry", default="640x480")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of each per-action measurement")
    parser.add_argument("--remote", help="the second engine (default: DESKCTL_TEST_DOCKER2 or "
                                         "/run/deskctl-docker2.env)")
    args = parser.parse_args()
    os.environ.setdefault("DESKCTL_HOME", tempfile.mkdtemp(prefix="deskctl-bench-"))
    remote = _remote_engine(args.remote)
    if remote is None:
        print("no second engine: run scripts/setup.d/25-docker-remote.sh or pass --remote", file=sys.stderr)
        return 1
    half = args.desktops // 2
    engines: list[str | None] = [None, remote] * half + ([None] if args.desktops % 2 else [])
    print(f"{args.desktops} desktops ({half + args.desktops % 2} local engine, {half} on {remote}), "
          f"{args.geometry}, minimal image, up -> screenshot -> click -> down; {os.cpu_count()} CPUs")
    one_desktop(None, args.geometry)  # warm: image inspect, watcher process, imports
    one_desktop(remote, args.geometry)
    parallel_s, parallel = run_all(engines, args.geometry, parallel=True)
    serial_s, serial = run_all(engines, args.geometry, parallel=False)
    print(f"  wall time: in parallel {parallel_s:7.2f} s   one after another {serial_s:7.2f} s   "
          f"(x{serial_s / parallel_s:.1f})")
    local_parallel = [r for r, e in zip(parallel, engines, strict=True) if e is None]
    remote_parallel = [r for r, e in zip(parallel, engines, strict=True) if e is not None]
    local_serial = [r for r, e in zip(serial, engines, strict=True) if e is None]
    remote_serial = [r for r, e in zip(serial, engines, strict=True) if e is not None]
    print("  per-desktop step medians:")
    _print_steps("local, in parallel", local_parallel)
    _print_steps("remote, in parallel", remote_parallel)
    _print_steps("local, one by one", local_serial)
    _print_steps("remote, one by one", remote_serial)
    per_action(remote, args.geometry, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
