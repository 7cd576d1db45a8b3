"""Benchmark: episodes. Reset by restoring a snapshot next to destroy + create, per provider; and steps per second
of the Gymnasium environment (one action and one screen observation per step) next to a hand-written loop over
``docker exec xdotool`` + ``docker exec scrot`` (the PNG read back and decoded to an array, as an agent needs it).

    .venv/bin/python bench/bench_episodes.py [--resets N] [--steps N] [--only daytona|docker|gym]

Prints medians (milliseconds), steps per second and ratios. Needs a Docker engine with the desktop image, host
Xvfb, and the ``gym`` extra. Daytona runs against the loopback fake (tests/fakes/daytona: real HTTP, a real Xvfb
per sandbox), so its figures are deskctl's and the fake's share, not the service's.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def reset_by_restore(provider: str, rounds: int, **open_kwargs: Any) -> float:
    import deskctl

    with deskctl.open_desktop(provider, geometry="1024x768", **open_kwargs) as desk:
        desk.exec("echo start > /tmp/state")
        snap = desk.snapshot(f"bench-{desk.id}")
        samples = []
        try:
            for i in range(rounds):
                desk.exec(f"echo {i} > /tmp/state")
                started = time.perf_counter()
                desk.restore(snap)
                samples.append(time.perf_counter() - started)
        finally:
            from deskctl.episodes import delete_snapshot

            desk.close()
            delete_snapshot(desk.ledger, snap)
    return _median_ms(samples)


def reset_by_recreate(provider: str, rounds: int, **open_kwargs: Any) -> float:
    import deskctl

    desk = deskctl.open_desktop(provider, geometry="1024x768", **open_kwargs)
    samples = []
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            desk.close()
            desk = deskctl.open_desktop(provider, geometry="1024x768", **open_kwargs)
            samples.append(time.perf_counter() - started)
    finally:
        desk.close()
    return _median_ms(samples)


def gym_steps_per_second(provider: str, steps: int) -> float:
    from deskctl.gym import DesktopEnv

    env = DesktopEnv(provider, geometry="1024x768", max_steps=steps + 10, actions=("move",))
    try:
        env.reset(seed=0)
        env.step({"action": 0, "x": 1, "y": 1})
        started = time.perf_counter()
        for i in range(steps):
            env.step({"action": 0, "x": 10 + i % 500, "y": 10 + i % 300})
        return steps / (time.perf_counter() - started)
    finally:
        env.close()


def library_steps_per_second(provider: str, steps: int) -> float:
    """The same step written by hand on the library: ``desk.move`` and the screen as an array."""
    import deskctl
    from deskctl.gym import observation_of

    with deskctl.open_desktop(provider, geometry="1024x768") as desk:
        observation_of(desk)
        started = time.perf_counter()
        for i in range(steps):
            desk.move(10 + i % 500, 10 + i % 300)
            observation_of(desk)
        return steps / (time.perf_counter() - started)


def naive_docker_steps_per_second(steps: int) -> float:
    """One ``docker exec xdotool mousemove`` and one ``docker exec scrot`` + read back + decode per step."""
    import numpy as np
    from PIL import Image

    import deskctl

    with deskctl.open_desktop("docker", geometry="1024x768") as desk:
        container = str(desk.handle.data["container"]) if desk.handle else ""

        def run(*argv: str) -> bytes:
            return subprocess.run(["docker", "exec", "-e", "DISPLAY=:0", "-u", "1000", container, *argv],
                                  capture_output=True, check=True).stdout

        def step(i: int) -> Any:
            run("xdotool", "mousemove", str(10 + i % 500), str(10 + i % 300))
            png = run("sh", "-c", "scrot -o /tmp/s.png && cat /tmp/s.png")
            return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

        step(0)
        started = time.perf_counter()
        for i in range(steps):
            shape = step(i).shape
        assert shape == (768, 1024, 3), shape
        return steps / (time.perf_counter() - started)


def daytona_resets(rounds: int) -> tuple[float, float]:
    """Reset by restore and by destroy + create on Daytona, against a loopback fake of its own (torn down after)."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from fakes.daytona import FakeDaytona

    saved = {k: os.environ.get(k) for k in ("DAYTONA_API_KEY", "DAYTONA_API_URL", "DESKCTL_HTTP_RETRY_SCALE")}
    fake = FakeDaytona(quota=(1000, 1000, 1000))
    fake.start()
    try:
        os.environ.update(fake.env(), DESKCTL_HTTP_RETRY_SCALE="0")
        options = {"provider_options": {"poll_interval": 0.005, "poll_max_interval": 0.05}}
        restore = reset_by_restore("daytona", rounds, **options)
        recreate = reset_by_recreate("daytona", rounds, **options)
        assert fake.live() == [] and fake.live_snapshots() == [], "the bench left something on the fake"
        return restore, recreate
    finally:
        fake.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resets", type=int, default=5, help="resets timed per way and provider")
    parser.add_argument("--steps", type=int, default=100, help="gym steps timed per provider")
    parser.add_argument("--only", choices=("daytona", "docker", "gym"), help="one part only")
    args = parser.parse_args()
    os.environ.setdefault("DESKCTL_HOME", tempfile.mkdtemp(prefix="deskctl-bench-"))

    print("reset (median ms)        restore    destroy+create   ratio")
    if args.only in (None, "daytona"):
        restore_t, recreate_t = daytona_resets(args.resets)
        print(f"  daytona (fake)       {restore_t:9.0f}  {recreate_t:15.0f}   {recreate_t / restore_t:5.2f}x")
    if args.only in (None, "docker"):
        restore = reset_by_restore("docker", args.resets)
        recreate = reset_by_recreate("docker", args.resets)
        print(f"  docker               {restore:9.0f}  {recreate:15.0f}   {recreate / restore:5.2f}x")
        recreate_x = reset_by_recreate("xvfb", args.resets)
        print(f"  xvfb                 {'(none)':>9}  {recreate_x:15.0f}   (xvfb has no snapshots: reset recreates)")
    if args.only not in (None, "gym"):
        return 0

    print("steps/s (move + 1024x768 observation)")
    gym_x = gym_steps_per_second("xvfb", args.steps)
    gym_d = gym_steps_per_second("docker", args.steps)
    lib_x = library_steps_per_second("xvfb", args.steps)
    lib_d = library_steps_per_second("docker", args.steps)
    naive = naive_docker_steps_per_second(max(10, args.steps // 5))
    print(f"  gym on xvfb          {gym_x:8.1f}   (the library by hand: {lib_x:.1f})")
    print(f"  gym on docker        {gym_d:8.1f}   (the library by hand: {lib_d:.1f})")
    print(f"  docker exec xdotool + scrot {naive:8.1f}   gym on docker is {gym_d / naive:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
