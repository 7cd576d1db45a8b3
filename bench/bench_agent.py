"""Per-action overhead of the in-desktop agent (``deskctl-agent`` over loopback TCP, :class:`AgentDriver`) next
to the local X11 path (:class:`X11Driver` on the same Xvfb), in one run on one 1024x900 desktop showing
realistic content:

* click and key (one action, confirmed by a round trip either way);
* full screenshot as PNG; raw frame (uncompressed pixels);
* changed regions of a small change (a 40x20 rectangle repainted between two calls) vs a local raw capture.

Prints medians and ratios (agent / local: the price of the agent hop). Targets for the agent: click <= 2 ms,
full screenshot <= 20 ms.

    .venv/bin/python bench/bench_agent.py [--actions 300] [--shots 40]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from _common import desktop_wallpaper, median_ms, show_picture, timed

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "agent")]  # the fakes and the agent process helper

GEOMETRY = (1024, 900)


def show_picture_on(display_name: str, path: Path) -> object:
    """Cover the desktop with a window showing ``path`` (kept while the returned connection is open)."""
    from deskctl.providers._x11 import X11Address, connect_display

    return show_picture(connect_display(X11Address(display_name), None), path)


def line(name: str, agent: list[float], local: list[float], target: str = "") -> None:
    a, b = median_ms(agent), median_ms(local)
    print(f"{name:<15} agent {a:8.2f} ms   local X11 {b:8.2f} ms   (agent/local x{a / b:5.1f})"
          + (f"  [{target}]" if target else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actions", type=int, default=300)
    parser.add_argument("--shots", type=int, default=40)
    args = parser.parse_args()
    if shutil.which("Xvfb") is None:
        sys.exit("Xvfb is not installed")
    from _agent_proc import start_agent

    from deskctl.actions import Click, KeyPress
    from deskctl.agent.client import AgentDriver
    from fakes._desktop import XvfbDesktop

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-agent-"))
    desktop = XvfbDesktop(*GEOMETRY, provider="bench")
    running = None
    try:
        picture = work / "wallpaper.png"
        desktop_wallpaper(picture, GEOMETRY, lines=50)
        shown = show_picture_on(desktop.display, picture)
        running = start_agent(work, desktop.display)
        local = desktop.driver
        agent = AgentDriver.connect("127.0.0.1", running.port, running.token, provider="bench")
        print(f"deskctl agent benchmark: {GEOMETRY[0]}x{GEOMETRY[1]} Xvfb, agent on loopback TCP, medians\n")
        for driver in (agent, local):  # warm up: keymap, MIT-SHM segment, encoder pool
            driver.act(KeyPress(("shift",)))
            driver.screenshot()
        line("click", timed(lambda: agent.act(Click(500, 400)), args.actions),
             timed(lambda: local.act(Click(500, 400)), args.actions), "agent <= 2 ms")
        line("key", timed(lambda: agent.act(KeyPress(("shift",))), args.actions),
             timed(lambda: local.act(KeyPress(("shift",))), args.actions))
        line("screenshot PNG", timed(agent.screenshot, args.shots), timed(local.screenshot, args.shots),
             "agent <= 20 ms")
        line("raw frame", timed(agent.raw_frame, args.shots), timed(local.raw_frame, args.shots))

        from Xlib import X

        display: object = shown
        window = display.window  # type: ignore[attr-defined]
        colours = iter(range(1 << 30))

        def small_change() -> None:
            gc = window.create_gc(foreground=next(colours) & 0xFFFFFF, subwindow_mode=X.IncludeInferiors)
            window.fill_rectangle(gc, 300, 300, 40, 20)
            gc.free()
            display.sync()  # type: ignore[attr-defined]

        state = {"since": agent.changes(None).frame_id}

        def agent_changes() -> None:
            changes = agent.changes(state["since"])
            assert not changes.full and len(changes.regions) == 1
            state["since"] = changes.frame_id

        agent_samples, local_samples = [], []
        for _ in range(args.shots):
            small_change()
            agent_samples += timed(agent_changes, 1)
            small_change()
            local_samples += timed(local.raw_frame, 1)
        line("small change", agent_samples, local_samples)
        print("\n(small change: the agent's changed regions of a 40x20 repaint vs a local raw capture)")
        agent.close()
    finally:
        if running is not None:
            running.stop()
        desktop.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
