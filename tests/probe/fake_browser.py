"""A stand-in for chromium in tests: takes chromium's flags, opens one window where --window-position and
--window-size say, and writes what it was asked (the URL, the geometry) as JSON to $FAKE_BROWSER_LOG.

Run through a wrapper that names the interpreter: ``exec python fake_browser.py "$@"``.
"""

from __future__ import annotations

import json
import os
import sys

import Xlib.display
from Xlib import X


def main(argv: list[str]) -> None:
    x = y = 0
    width, height = 800, 600
    url = ""
    for arg in argv:
        if arg.startswith("--window-position="):
            x, y = (int(v) for v in arg.split("=", 1)[1].split(","))
        elif arg.startswith("--window-size="):
            width, height = (int(v) for v in arg.split("=", 1)[1].split(","))
        elif not arg.startswith("-"):
            url = arg
    display = Xlib.display.Display()
    screen = display.screen()
    window = screen.root.create_window(x, y, width, height, 0, screen.root_depth, X.InputOutput,
                                       X.CopyFromParent, background_pixel=screen.black_pixel,
                                       override_redirect=True, event_mask=X.StructureNotifyMask)
    with open(os.environ["FAKE_BROWSER_LOG"], "w") as fh:  # before the window shows: readiness implies it
        json.dump({"url": url, "geometry": [x, y, width, height], "argv": argv}, fh)
    window.map()
    display.sync()
    while True:  # live until killed, like a browser
        display.next_event()


if __name__ == "__main__":
    main(sys.argv[1:])
