"""Latency of a tool call through ``deskctl mcp`` next to the other ways an agent reaches a desktop, in one run.

One ``deskctl mcp --geometry 1024x768`` process (xvfb) is driven by the MCP SDK's client over stdio. Per call:

* click: the ``click`` tool vs ``xdotool mousemove X Y click 1`` spawned per action with the desktop's DISPLAY
  (an agent's shell tool) vs ``desk.click`` in-process (the library, the floor);
* screenshot: the ``screenshot`` tool (PNG, base64 in JSON-RPC) vs ``scrot`` per shot (file written, read back)
  vs ``desk.screenshot()`` in-process.

Prints medians and ratios (other / MCP).

    .venv/bin/python bench/bench_mcp.py [--calls 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _common import median_ms, timed

import deskctl
from deskctl.ledger import open_ledger


async def _mcp_samples(calls: int, home: str) -> tuple[list[float], list[float], dict[str, Any]]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "deskctl", "mcp", "--geometry", "1024x768"],
                                   env={**os.environ, "DESKCTL_HOME": home})
    async with Client(params, read_timeout_seconds=120) as client:
        with open_ledger() as book:
            (record,) = book.sessions(active=True)
        data = dict((record.handle or {})["data"])
        await client.call_tool("screenshot", {})  # warm: the first capture sets up shared memory
        clicks, shots = [], []
        for i in range(calls):
            start = time.perf_counter()
            result = await client.call_tool("click", {"x": 10 + i % 500, "y": 20})
            clicks.append(time.perf_counter() - start)
            assert not result.is_error, result
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool("screenshot", {})
            shots.append(time.perf_counter() - start)
            assert not result.is_error, result
        naive = _naive(data, max(5, calls // 3))
    return clicks, shots, {"naive": naive}


def _naive(data: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    env = {**os.environ, "DISPLAY": str(data["display"]), "XAUTHORITY": str(data["cookie_file"])}
    out: dict[str, list[float]] = {}
    if shutil.which("xdotool"):
        out["xdotool"] = timed(lambda: subprocess.run(["xdotool", "mousemove", "10", "20", "click", "1"], env=env,
                                                      check=True), rounds)
    if shutil.which("scrot"):
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "shot.png"

            def scrot() -> None:
                subprocess.run(["scrot", "-o", str(target)], env=env, check=True)
                target.read_bytes()

            out["scrot"] = timed(scrot, rounds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["DESKCTL_HOME"] = home
        clicks, shots, extra = anyio.run(_mcp_samples, args.calls, home)
        with deskctl.open_desktop("xvfb", geometry="1024x768") as desk:
            desk.screenshot()
            library_click = timed(lambda: desk.click(10, 20), args.calls)
            library_shot = timed(desk.screenshot, args.calls)
    naive = extra["naive"]
    print(f"deskctl mcp over stdio, 1024x768 xvfb desktop, {args.calls} calls each (medians; ratio = other / MCP)")
    _line("click", clicks, library_click, "xdotool per process", naive.get("xdotool"))
    _line("screenshot", shots, library_shot, "scrot per process", naive.get("scrot"))


def _line(name: str, mcp: list[float], library: list[float], label: str, naive: list[float] | None) -> None:
    ours = median_ms(mcp)
    floor = median_ms(library)
    cells = [f"{name:<11} mcp {ours:8.2f} ms", f"library {floor:8.2f} ms (x{floor / ours:.2f})"]
    if naive:
        cells.append(f"{label} {median_ms(naive):8.2f} ms (x{median_ms(naive) / ours:.1f})")
    print("  ".join(cells))

if __name__ == "__main__":
    main()
