"""The accessibility tree of a Linux desktop through AT-SPI, walked inside the desktop.

Runs with the desktop's system ``python3`` (Debian: ``python3-gi`` and ``gir1.2-atspi-2.0``), started over exec by
:mod:`deskctl.observe.accessibility`; imports only the standard library and ``gi``. ``argv[1]`` is a JSON request:

- ``{"op": "enable"}``: make sure the desktop has an accessibility bus (a D-Bus session and
  ``at-spi-bus-launcher``, which puts the bus address on the X root window as ``AT_SPI_BUS`` for every client of
  the display); answers whether one was there already. Applications started before the bus are not in the tree.
- ``{"op": "tree", "window": title or null, "max_depth": N, "max_nodes": N}`` (the bus started first where there
  is none): the tree as nested JSON nodes
  (role, name, description, value, states, bounds [x, y, w, h] in screen pixels or null, children), under a
  root of role ``desktop``; ``truncated`` says whether a limit cut it.

It prints one JSON line: ``{"ok": ...}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

#: the states worth a caller's attention (AT-SPI has ~40; most say nothing here)
_STATES = ("active", "checked", "editable", "enabled", "expanded", "focusable", "focused", "pressed", "selected",
           "sensitive", "showing", "visible", "multi-line", "indeterminate", "modal", "read-only")
_TEXT_CHARS = 500
#: roles whose text is their value (a container's text is its children's, shown as U+FFFC placeholders)
_TEXT_ROLES = ("entry", "password text", "text", "spin button", "combo box", "terminal")
#: roles whose number is their value
_VALUE_ROLES = ("slider", "scroll bar", "progress bar", "spin button", "level bar", "dial")


def _bus_address() -> str:
    """The AT_SPI_BUS property of the X root window (empty when none)."""
    try:
        out = subprocess.run(["xprop", "-root", "AT_SPI_BUS"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.split('"')[1] if out.count('"') >= 2 else ""


def enable() -> dict[str, Any]:
    if _bus_address():
        return {"started": False}
    launcher = next((p for p in ("/usr/libexec/at-spi-bus-launcher", "/usr/lib/at-spi2-core/at-spi-bus-launcher")
                     if os.path.exists(p)), None)
    if launcher is None or shutil.which("dbus-launch") is None:
        raise RuntimeError("the desktop lacks AT-SPI: install at-spi2-core and dbus-x11")
    # dbus-launch gives the launcher a session bus that ends with the X display; the launcher publishes the
    # accessibility bus on the root window, where every application of the display finds it
    subprocess.Popen(["dbus-launch", "--exit-with-x11", launcher, "--launch-immediately"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    deadline = time.monotonic() + 15
    while not _bus_address():
        if time.monotonic() > deadline:
            raise RuntimeError("at-spi-bus-launcher did not publish AT_SPI_BUS on the root window")
        time.sleep(0.05)
    return {"started": True}


#: how long one call into an application may take (ms), and for an application started in the last few seconds:
#: libatspi's own default for a new application is 15 s a call, so one unresponsive dialog made a tree take minutes
_CALL_TIMEOUT_MS = 2000
_STARTUP_TIMEOUT_MS = 5000
#: how long a whole walk may take (s): past it the tree is cut (``truncated``) and given as far as it got
_WALK_SECONDS = 20.0


class _Walk:
    def __init__(self, atspi: Any, max_depth: int, max_nodes: int) -> None:
        self.atspi = atspi
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.count = 0
        self.truncated = False
        self.deadline = time.monotonic() + _WALK_SECONDS

    def node(self, acc: Any, depth: int) -> dict[str, Any] | None:
        atspi = self.atspi
        if self.count >= self.max_nodes or time.monotonic() > self.deadline:
            self.truncated = True
            return None
        self.count += 1
        try:
            role = atspi.role_get_name(acc.get_role()) or ""  # the name locally: get_role_name is a round trip
            name = acc.get_name() or ""
            description = acc.get_description() or ""
            held = {state.value_nick for state in acc.get_state_set().get_states()}
            states = [s for s in _STATES if s in held]
        except Exception:  # the application went away meanwhile
            return None
        bounds = None
        component = acc.get_component_iface() if hasattr(acc, "get_component_iface") else None
        if component is not None:
            try:
                box = component.get_extents(atspi.CoordType.SCREEN)
                if box.width > 0 and box.height > 0:
                    bounds = [int(box.x), int(box.y), int(box.width), int(box.height)]
            except Exception:
                bounds = None
        value = None
        try:
            if role in _TEXT_ROLES or "editable" in states:
                text = acc.get_text_iface()
                if text is not None:
                    value = text.get_text(0, min(text.get_character_count(), _TEXT_CHARS)).replace("\ufffc", "")
            elif role in _VALUE_ROLES:
                numeric = acc.get_value_iface()
                if numeric is not None:
                    value = numeric.get_current_value()
        except Exception:
            value = None
        out: dict[str, Any] = {"role": role, "name": name, "description": description, "value": value,
                               "states": states, "bounds": bounds, "children": []}
        if depth >= self.max_depth:
            if acc.get_child_count() > 0:
                self.truncated = True
            return out
        try:
            count = acc.get_child_count()
        except Exception:
            count = 0
        for index in range(count):
            try:
                child = acc.get_child_at_index(index)
            except Exception:
                continue
            if child is None:
                continue
            made = self.node(child, depth + 1)
            if made is not None:
                out["children"].append(made)
            if self.count >= self.max_nodes:
                self.truncated = self.truncated or index < count - 1
                break
        return out


def tree(window: str | None, max_depth: int, max_nodes: int) -> dict[str, Any]:
    if not os.environ.get("AT_SPI_BUS_ADDRESS"):
        enable()  # no application can be on a bus started now: the tree is then empty
    import gi  # type: ignore[import-not-found]

    gi.require_version("Atspi", "2.0")
    from gi.repository import Atspi  # type: ignore[import-not-found]

    if hasattr(Atspi, "set_timeout"):
        Atspi.set_timeout(_CALL_TIMEOUT_MS, _STARTUP_TIMEOUT_MS)
    walk = _Walk(Atspi, max_depth, max_nodes)
    desktop = Atspi.get_desktop(0)
    root: dict[str, Any] = {"role": "desktop", "name": "", "description": "", "value": None, "states": [],
                            "bounds": None, "children": []}
    for index in range(desktop.get_child_count()):
        app = desktop.get_child_at_index(index)
        if app is None:
            continue
        if window is None:
            made = walk.node(app, 1)
            if made is not None:
                root["children"].append(made)
            continue
        try:
            tops = app.get_child_count()
        except Exception:  # the application went away (or does not answer)
            continue
        for top_index in range(tops):  # the application's windows: keep the one named
            try:
                top = app.get_child_at_index(top_index)
                named = top is not None and window in (top.get_name() or "")
            except Exception:
                named = False
            if named:
                made = walk.node(top, 1)
                if made is not None:
                    root["children"].append(made)
        if walk.count >= max_nodes or time.monotonic() > walk.deadline:
            walk.truncated = True
            break
    return {"tree": root, "nodes": walk.count, "truncated": walk.truncated}


def main(argv: list[str]) -> int:
    try:
        request = json.loads(argv[1])
        if request.get("op") == "enable":
            answer: Any = enable()
        else:
            answer = tree(request.get("window"), int(request.get("max_depth", 40)), int(request.get("max_nodes", 5000)))
        print(json.dumps({"ok": answer}))
    except Exception as exc:  # reported as data: the caller maps it to a deskctl error
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
