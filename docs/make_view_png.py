"""Remake docs/view.png: a real headless Chromium showing ``deskctl view --control`` of a real Xvfb desktop
(openbox, the benchmark's wallpaper on the root window, an xterm), with an xterm click and two commands typed on
the page.

    .venv/bin/python docs/make_view_png.py    # needs Debian's chromium and chromium-driver (scripts/setup --dev)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
SIZE = (1024, 768)


def deskctl(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout


def wallpaper_on_root(data: dict[str, object], path: Path) -> None:
    from PIL import Image
    from Xlib import X

    from deskctl.core.x11 import X11Address, connect_display, read_cookie

    display = connect_display(X11Address(str(data["display"])), read_cookie(str(data["cookie_file"])))
    screen = display.screen()
    raw = Image.open(path).convert("RGBX").tobytes("raw", "BGRX")
    pixmap = screen.root.create_pixmap(SIZE[0], SIZE[1], screen.root_depth)
    gc = pixmap.create_gc()
    stride = SIZE[0] * 4
    rows = 200_000 // stride
    for top in range(0, SIZE[1], rows):
        chunk = raw[top * stride : min(SIZE[1], top + rows) * stride]
        pixmap.put_image(gc, 0, top, SIZE[0], len(chunk) // stride, X.ZPixmap, screen.root_depth, 0, chunk)
    screen.root.change_attributes(background_pixmap=pixmap)
    screen.root.clear_area(0, 0, SIZE[0], SIZE[1])
    display.sync()
    display.close()


def main() -> None:
    from _common import desktop_wallpaper
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains

    from deskctl.ledger import open_ledger

    work = Path(tempfile.mkdtemp(prefix="deskctl-docs-"))
    os.environ["DESKCTL_HOME"] = str(work / "home")
    sid = json.loads(deskctl("up", "--geometry", f"{SIZE[0]}x{SIZE[1]}", "--window-manager", "--json"))["id"]
    try:
        with open_ledger() as book:
            record = book.get(sid)
        assert record is not None and record.handle is not None
        desktop_wallpaper(work / "wallpaper.png", SIZE, 48)
        wallpaper_on_root(record.handle["data"], work / "wallpaper.png")
        deskctl("exec", sid, "--", "sh", "-c",
                "setsid xterm -fa DejaVuSansMono -fs 11 -geometry 62x12+150+330 -bg '#1d2026' -fg '#d0d4da' "
                "-T 'xterm on the desktop' -e env PS1='$ ' sh >/dev/null 2>&1 &")
        time.sleep(2)  # the xterm maps and its shell starts; only the picture depends on it
        view = subprocess.Popen([sys.executable, "-m", "deskctl", "view", sid, "--control"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        assert view.stdout is not None
        url = view.stdout.readline().strip()
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                     "--disable-background-networking", "--disable-dev-shm-usage",
                     f"--user-data-dir={work / 'profile'}", "--window-size=1040,940"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
        try:
            driver.get(url)
            while driver.execute_script("return document.getElementById('screen').naturalWidth") != SIZE[0]:
                time.sleep(0.1)
            screen = driver.find_element("id", "screen")
            rect = screen.rect
            ActionChains(driver).move_to_element_with_offset(
                screen, 350 - rect["width"] / 2, 420 - rect["height"] / 2).click().perform()
            lines = ["echo typed in Chromium, run on the desktop\n", "uname -sm; date -u +%H:%M:%S\n"]
            expected = 2  # the click's press and release, then one event per key
            for line in lines:
                ActionChains(driver).send_keys(line).perform()
                expected += len(line)
                while driver.execute_script("return window.deskctlInputsDone") != expected:
                    time.sleep(0.1)
                time.sleep(1.0)  # the shell answers before the next line (no typeahead in the picture)
            driver.save_screenshot(str(ROOT / "docs" / "view.png"))
        finally:
            driver.quit()
            view.terminate()
            view.wait(timeout=30)
    finally:
        deskctl("down", sid)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
