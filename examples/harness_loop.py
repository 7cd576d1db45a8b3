"""A computer-use harness loop on a deskctl desktop.

Run: .venv/bin/python examples/harness_loop.py [--provider xvfb] [--geometry 1024x768] [--steps 5]

The "agent" here is a stand-in policy that clicks around the screen; put your model call in `decide`.
Whatever happens inside the `with` block (an exception, Ctrl-C, SIGTERM), the desktop is destroyed and its
time and cost are recorded in the ledger (`deskctl ls --all`, `deskctl cost`).
"""

from __future__ import annotations

import argparse
import sys

import deskctl


def decide(step: int, png: bytes, width: int, height: int) -> tuple[str, tuple[int, ...]]:
    """Your model goes here: it sees a screenshot whose pixels are the action coordinates."""
    if step % 2 == 0:
        return "click", (width // (step + 2), height // (step + 2))
    return "type", ()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", default="xvfb")
    parser.add_argument("--platform", default="ubuntu")
    parser.add_argument("--geometry", default="1024x768")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-minutes", type=float, default=10)
    args = parser.parse_args()

    report = deskctl.preflight(deskctl.DesktopSpec.build(provider=args.provider, platform=args.platform,
                                                         geometry=args.geometry))
    if not report.ok:
        print(report.verdict, file=sys.stderr)
        return report.exit_code

    try:
        with deskctl.open_desktop(args.provider, platform=args.platform, geometry=args.geometry,
                                  max_minutes=args.max_minutes, labels={"example": "harness_loop"}) as desk:
            width, height = desk.size
            for step in range(args.steps):
                shot = desk.screenshot()
                action, params = decide(step, shot.png, width, height)
                if action == "click":
                    desk.click(*params)
                else:
                    desk.type(f"step {step} ")
                print(f"{desk.id} step {step}: {action} {params}")
    except deskctl.DeskctlError as err:
        print(f"{err.code}: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
