"""Top-level X11 windows over a python-xlib ``Display``: list them (id, title, class, pid, geometry, focused), focus
one, move and resize one.

This module imports only the standard library and python-xlib, because it also runs inside a desktop that is
reached through an agent (``python3 -c`` over exec, :mod:`deskctl.observe.windows`): ``main`` reads a JSON
request from ``argv[1]`` and prints a JSON answer. With an EWMH window manager the requests go to it
(``_NET_ACTIVE_WINDOW``, ``_NET_MOVERESIZE_WINDOW``); without one the windows are changed directly.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

#: how long focus and move wait for the window manager to carry a request out (checked, then given up on)
SETTLE_SECONDS = 3.0


def _atom(display: Any, name: str) -> int:
    return int(display.intern_atom(name))


def _prop(display: Any, window: Any, name: str, kind: Any) -> Any:
    prop = window.get_full_property(_atom(display, name), kind)
    return None if prop is None or not prop.value else prop


def _title(display: Any, window: Any) -> str:
    from Xlib import X, Xatom

    for name, kind in (("_NET_WM_NAME", _atom(display, "UTF8_STRING")), ("WM_NAME", X.AnyPropertyType)):
        prop = _prop(display, window, name, kind)
        if prop is None or prop.format != 8:
            continue
        raw = prop.value if isinstance(prop.value, bytes) else str(prop.value).encode("latin-1", "replace")
        return raw.decode("latin-1" if prop.property_type == Xatom.STRING else "utf-8", errors="replace")
    return ""


def _wm_class(display: Any, window: Any) -> tuple[str, str]:
    from Xlib import Xatom

    prop = _prop(display, window, "WM_CLASS", Xatom.STRING)
    if prop is None:
        return "", ""
    raw = prop.value if isinstance(prop.value, bytes) else str(prop.value).encode("latin-1", "replace")
    parts = raw.decode("latin-1").split("\0")
    return parts[0], (parts[1] if len(parts) > 1 else "")


def _wm(display: Any) -> bool:
    """Whether an EWMH window manager runs (its client list is on the root)."""
    from Xlib import Xatom

    return _prop(display, display.screen().root, "_NET_CLIENT_LIST", Xatom.WINDOW) is not None


def _toplevels(display: Any) -> list[Any]:
    """The managed clients (bottom to top) with a window manager; else the viewable children of the root that are
    not override-redirect (menus, tooltips, a probe), and below an unnamed frame of a non-EWMH manager its first
    named child."""
    from Xlib import X, Xatom

    root = display.screen().root
    clients = _prop(display, root, "_NET_CLIENT_LIST", Xatom.WINDOW)
    if clients is not None:
        return [display.create_resource_object("window", int(wid)) for wid in clients.value]
    found: list[Any] = []

    def walk(window: Any, depth: int) -> None:
        for child in window.query_tree().children:
            attrs = child.get_attributes()
            if attrs.map_state != X.IsViewable or (depth == 0 and attrs.override_redirect):
                continue
            if _title(display, child) or _wm_class(display, child) != ("", ""):
                found.append(child)
            elif depth < 2:
                walk(child, depth + 1)

    walk(root, 0)
    return found


def _top_of(display: Any, window_id: int) -> int:
    """The top-level (child of the root) that holds ``window_id``."""
    root = display.screen().root
    window = display.create_resource_object("window", window_id)
    while True:
        tree = window.query_tree()
        if tree.parent == 0 or int(tree.parent.id) == int(root.id):
            return int(window.id)
        window = tree.parent


def _focused(display: Any) -> int:
    from Xlib import Xatom

    root = display.screen().root
    active = _prop(display, root, "_NET_ACTIVE_WINDOW", Xatom.WINDOW)
    if active is not None and int(active.value[0]):
        return int(active.value[0])
    focus = display.get_input_focus().focus
    if isinstance(focus, int) or int(focus.id) in (0, 1, int(root.id)):
        return 0
    return _top_of(display, int(focus.id))


def _geometry(display: Any, window: Any) -> list[int]:
    root = display.screen().root
    geo = window.get_geometry()
    at = window.translate_coords(root, 0, 0)
    return [-int(at.x), -int(at.y), int(geo.width), int(geo.height)]


def list_windows(display: Any) -> list[dict[str, Any]]:
    """Every top-level window as ``{"id", "title", "class", "instance", "pid", "geometry": [x, y, w, h],
    "focused"}``, bottom to top; a window that closes meanwhile is left out."""
    import Xlib.error
    from Xlib import Xatom

    focused = _focused(display)
    out: list[dict[str, Any]] = []
    for window in _toplevels(display):
        try:
            instance, klass = _wm_class(display, window)
            pid = _prop(display, window, "_NET_WM_PID", Xatom.CARDINAL)
            out.append({"id": int(window.id), "title": _title(display, window), "class": klass,
                        "instance": instance, "pid": int(pid.value[0]) if pid is not None else None,
                        "geometry": _geometry(display, window),
                        "focused": focused != 0 and (int(window.id) == focused
                                                     or _top_of(display, int(window.id)) == focused)})
        except (Xlib.error.BadWindow, Xlib.error.BadMatch, Xlib.error.BadDrawable):
            continue
    return out


def _client_message(display: Any, window: Any, name: str, data: list[int]) -> None:
    from Xlib import X
    from Xlib.protocol import event

    root = display.screen().root
    message = event.ClientMessage(window=window, client_type=_atom(display, name), data=(32, (data + [0] * 5)[:5]))
    root.send_event(message, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)


def _settle(condition: Any) -> bool:
    deadline = time.monotonic() + SETTLE_SECONDS
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def focus(display: Any, window_id: int) -> bool:
    """Raise ``window_id`` and give it the input focus; whether the focus is there afterwards."""
    from Xlib import X

    window = display.create_resource_object("window", window_id)
    if _wm(display):
        _client_message(display, window, "_NET_ACTIVE_WINDOW", [2, X.CurrentTime, 0])
    else:
        window.configure(stack_mode=X.Above)
        window.set_input_focus(X.RevertToParent, X.CurrentTime)
    display.sync()
    return _settle(lambda: _focused(display) == _top_of(display, window_id) or _focused(display) == window_id)


def move(display: Any, window_id: int, x: int, y: int, width: int, height: int) -> list[int]:
    """Put the window's client area at (x, y) with size width x height; the geometry it has afterwards."""
    window = display.create_resource_object("window", window_id)
    if _wm(display):
        # gravity static (10): x, y are the client's own position, not its frame's; flags: x, y, w, h given; source 2
        _client_message(display, window, "_NET_MOVERESIZE_WINDOW", [10 | (0xF << 8) | (2 << 12), x, y, width, height])
    else:  # a window's position is its border's: the client area starts border_width further in
        border = int(window.get_geometry().border_width)
        window.configure(x=x - border, y=y - border, width=width, height=height)
    display.sync()
    _settle(lambda: _geometry(display, window) == [x, y, width, height])
    return _geometry(display, window)


def run(display: Any, request: dict[str, Any]) -> Any:
    """One request: ``{"op": "list"}``, ``{"op": "focus", "id": N}``, ``{"op": "move", "id": N, "geometry": [..]}``."""
    op = request.get("op")
    if op == "list":
        return list_windows(display)
    if op == "focus":
        return focus(display, int(request["id"]))
    if op == "move":
        return move(display, int(request["id"]), *(int(v) for v in request["geometry"]))
    raise ValueError(f"unknown op {op!r}")


def _cookie_from_file(sock: Any, dname: Any, protocol: Any, host: Any, dno: int) -> tuple[bytes, bytes]:
    """The MIT-MAGIC-COOKIE-1 of display ``dno`` in ``$XAUTHORITY``, whatever host name the entry names (python-xlib
    matches only this host's name, and a container's differs from that of the host that wrote the file)."""
    import os
    import struct

    path = os.environ.get("XAUTHORITY") or os.path.expanduser("~/.Xauthority")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return b"", b""
    at = 0
    while at + 2 <= len(data):
        at += 2  # the family: any
        fields = []
        for _ in range(4):
            (size,) = struct.unpack(">H", data[at:at + 2])
            fields.append(data[at + 2:at + 2 + size])
            at += 2 + size
        _, number, name, cookie = fields
        if name == b"MIT-MAGIC-COOKIE-1" and number in (b"", str(dno).encode()):
            return name, cookie
    return b"", b""


def main(argv: list[str]) -> int:
    """The guest side: connect to ``$DISPLAY``, run the request in ``argv[1]``, print ``{"ok": ..}`` or
    ``{"error": ..}``."""
    try:
        from Xlib import display as xdisplay
        from Xlib.support import connect

        connect.get_auth = _cookie_from_file
        connection = xdisplay.Display()
    except Exception as exc:  # the guest's own failure, reported as data: the caller maps it to a deskctl error
        print(json.dumps({"error": f"cannot open the display: {exc}"}))
        return 0
    try:
        print(json.dumps({"ok": run(connection, json.loads(argv[1]))}))
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    finally:
        connection.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
