"""Remake docs/observation.png: a real Xvfb desktop with a Chromium form page and a zenity dialog; on the left the
screenshot with the bounds of the accessibility tree's named nodes drawn on it, on the right those nodes as the tree
gives them (role, name, bounds), indented by depth.

    .venv/bin/python docs/make_observation_png.py    # needs scripts/setup.d/60-observe.sh's packages
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

import deskctl
from deskctl.observe.accessibility import AccessibleNode

ROOT = Path(__file__).resolve().parent.parent
PAGE = """<!doctype html><html><head><title>Order form</title><style>
body { font: 18px sans-serif; margin: 30px; } input, button { font-size: 18px; margin: 8px 0; }
</style></head><body><h2>Order</h2>
<label>Email <input value="ann@example.com"></label><br>
<label><input type="checkbox" checked> Gift wrap</label><br>
<button>Place order</button></body></html>"""


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    for path in ("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",):
        if os.path.exists(path):
            return ImageFont.truetype(path, size)
    return ImageFont.load_default()


def _named(node: AccessibleNode, depth: int, out: list[tuple[int, AccessibleNode]]) -> None:
    """The nodes worth showing: named ones with bounds (and the path to them)."""
    keep = bool(node.name) and node.bounds is not None and node.role not in ("static", "label", "notification")
    if keep:
        out.append((depth, node))
    for child in node.children:
        _named(child, depth + (1 if keep else 0), out)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="deskctl-observation-"))
    page = work / "form.html"
    page.write_text(PAGE)
    with deskctl.open_desktop("xvfb", geometry="1024x768", window_manager=True) as desk:
        desk.accessibility_tree()
        desk.exec(f"ACCESSIBILITY_ENABLED=1 chromium --no-sandbox --no-first-run --disable-gpu "
                  f"--force-renderer-accessibility --user-data-dir={work / 'profile'} --window-position=0,0 "
                  f"--window-size=620,520 --app=file://{page}", background=True)
        desk.wait_for("Order form", timeout=90)
        desk.wait_for(lambda d: d.find(role="push button", name="Place order", window="Order form"), timeout=60)
        desk.exec("zenity --question --title 'Confirm' --text 'Place the order?'", background=True)
        desk.wait_for("Confirm", timeout=60)
        desk.move_window("Confirm", 640, 160, 300, 140)
        desk.wait_until_stable(quiet_ms=500)
        shot = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
        rows: list[tuple[int, AccessibleNode]] = []
        for window in ("Order form", "Confirm"):
            _named(desk.accessibility_tree(window=window).root, 0, rows)
    draw = ImageDraw.Draw(shot)
    for _, node in rows:
        assert node.bounds is not None
        x, y, w, h = node.bounds
        draw.rectangle((x, y, x + w - 1, y + h - 1), outline=(230, 0, 90), width=2)
    font = _font(15)
    panel = Image.new("RGB", (560, shot.height), (250, 250, 250))
    text = ImageDraw.Draw(panel)
    text.text((16, 12), "desk.accessibility_tree(window=...)", font=_font(17), fill=(0, 0, 0))
    for index, (depth, node) in enumerate(rows[:36]):
        line = f"{'  ' * depth}{node.role} {node.name[:28]!r} {list(node.bounds or ())}"
        text.text((16, 44 + index * 20), line, font=font, fill=(30, 30, 30))
    out = Image.new("RGB", (shot.width + panel.width, shot.height))
    out.paste(shot, (0, 0))
    out.paste(panel, (shot.width, 0))
    out.save(ROOT / "docs" / "observation.png", optimize=True)


if __name__ == "__main__":
    main()
