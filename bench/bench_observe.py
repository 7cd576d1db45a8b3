"""What observation costs, in one run on a host-Xvfb desktop (scripts/setup.d/60-observe.sh's packages):

* ``a11y tree``: ``desk.accessibility_tree(window=...)`` of a Chromium page of ~500 nodes (a form of labelled
  inputs, checkboxes and buttons), against what one writes by hand: ``python3 -c`` with pyatspi in the desktop,
  walking the same window (role, name, states, extents, children) and printing JSON;
* ``windows``: ``desk.windows()`` against ``xprop``/``xwininfo`` by hand for each window (what a shell harness does);
* ``shot 1280``: ``desk.screenshot(max_size=(1280, 800))`` of a 1920x1200 screen against a full screenshot
  decoded and resized with Pillow by hand.

Rounds of the two ways are interleaved. Prints medians and ratios (by hand / deskctl).

    .venv/bin/python bench/bench_observe.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
from pathlib import Path

from _common import row, timed

import deskctl

BY_HAND_TREE = r"""
import json, pyatspi
def walk(a):
    try:
        box = a.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
        bounds = [box.x, box.y, box.width, box.height]
    except NotImplementedError:
        bounds = None
    return {"role": a.getRoleName(), "name": a.name, "states": [str(s) for s in a.getState().getStates()],
            "bounds": bounds, "children": [walk(c) for c in a if c is not None]}
out = []
for app in pyatspi.Registry.getDesktop(0):
    for top in app:
        if top is not None and "Bench form" in (top.name or ""):
            out.append(walk(top))
print(json.dumps(out))
"""

BY_HAND_WINDOWS = ("for id in $(xprop -root _NET_CLIENT_LIST | sed 's/.*# //; s/,//g'); do "
                   "xprop -id $id _NET_WM_NAME WM_CLASS _NET_WM_PID; "
                   "xwininfo -id $id | grep -E 'Absolute|Width|Height'; done")


def page(path: Path, controls: int) -> None:
    rows = "\n".join(f'<p><label>Field {i} <input value="value {i}"></label> <input type="checkbox" '
                     f'aria-label="Check {i}"> <button>Go {i}</button></p>' for i in range(controls))
    path.write_text(f"<!doctype html><html><head><title>Bench form</title></head><body>{rows}</body></html>")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--controls", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-observe-"))
    page(work / "form.html", args.controls)
    try:
        with deskctl.open_desktop("xvfb", geometry="1920x1200", window_manager=True) as desk:
            desk.accessibility_tree()
            desk.exec(f"ACCESSIBILITY_ENABLED=1 chromium --no-sandbox --no-first-run --disable-gpu "
                      f"--force-renderer-accessibility --user-data-dir={work / 'profile'} --window-size=1200,1100 "
                      f"--app=file://{work / 'form.html'}", background=True)
            desk.wait_for("Bench form", timeout=120)
            desk.wait_for(lambda d: d.find(role="push button", name=f"Go {args.controls - 1}", window="Bench form"),
                          timeout=120)
            tree = desk.accessibility_tree(window="Bench form")
            script = work / "by_hand.py"
            script.write_text(BY_HAND_TREE)
            print(f"Chromium page: {tree.nodes} nodes in the tree of its window; {args.rounds} rounds each")
            ours, naive = [], []
            for _ in range(args.rounds):
                ours += timed(lambda: desk.accessibility_tree(window="Bench form"), 1)
                naive += timed(lambda: desk.exec(f"/usr/bin/python3 {script}", timeout=300), 1)
            row("a11y tree", ours, {"pyatspi by hand": naive})
            ours, naive = [], []
            for _ in range(args.rounds * 4):
                ours += timed(desk.windows, 1)
                naive += timed(lambda: desk.exec(BY_HAND_WINDOWS), 1)
            row("windows", ours, {"xprop/xwininfo": naive})

            def by_hand_shot() -> None:
                from PIL import Image

                image = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
                image.resize((1280, 800), Image.Resampling.LANCZOS).save(io.BytesIO(), "PNG", compress_level=1)

            ours, naive = [], []
            for _ in range(args.rounds * 4):
                ours += timed(lambda: desk.screenshot(max_size=(1280, 800)), 1)
                naive += timed(by_hand_shot, 1)
            row("shot 1280", ours, {"full PNG+resize": naive})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
