"""The desktop's top-level windows: ``Desktop.windows()``, ``Desktop.focus(window)``, ``Desktop.move_window(...)``.

On a provider whose display this process drives with the X11 driver (``xvfb``, ``docker``, ``ssh``) the requests
go over that driver's connection: a few round trips, nothing run on the desktop. Where the display is reached
through the in-desktop agent (``docker`` on a remote engine, ``kubernetes``) the same code
(:mod:`deskctl.observe._xwindows`) runs inside the desktop with its ``python3`` and python-xlib, over exec.
A provider without the ``window_management`` capability refuses with ``usage.unsupported``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskctl.errors import NotFound, ProviderApiError, UsageError

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["Window", "find_window", "focus", "guest_call", "list_windows", "move_window"]


@dataclass(frozen=True)
class Window:
    """A top-level window: its X id, title, WM_CLASS class and instance, process id (``_NET_WM_PID``, None when
    the client does not say), client-area geometry (x, y, width, height) in screen pixels, and whether it has
    the input focus."""

    id: int
    title: str
    wm_class: str
    instance: str
    pid: int | None
    geometry: tuple[int, int, int, int]
    focused: bool

    @property
    def center(self) -> tuple[int, int]:
        x, y, w, h = self.geometry
        return x + w // 2, y + h // 2

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "class": self.wm_class, "instance": self.instance,
                "pid": self.pid, "geometry": list(self.geometry), "focused": self.focused}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Window:
        x, y, w, h = (int(v) for v in raw["geometry"])
        return cls(int(raw["id"]), str(raw["title"]), str(raw.get("class", "")), str(raw.get("instance", "")),
                   None if raw.get("pid") is None else int(raw["pid"]), (x, y, w, h), bool(raw.get("focused")))


def _unsupported(desk: Desktop, capability: str, what: str) -> UsageError:
    return UsageError(f"provider {desk.provider_name!r} cannot {what}", code="usage.unsupported",
                      provider=desk.provider_name,
                      remedy=f"use a provider whose capabilities include {capability} (deskctl providers --json)")


def guest_call(desk: Desktop, module: str, request: Mapping[str, Any], doing: str, timeout: float = 120.0) -> Any:
    """Run the guest module ``deskctl.observe.<module>`` inside the desktop with its ``python3``: its source goes
    on the command line, ``request`` as JSON in ``argv[1]``; gives the ``ok`` of the JSON it prints. A desktop
    without python3 (or the module's libraries) is ``usage.unsupported`` with what to install."""
    import base64
    import importlib.resources
    import shlex

    source = importlib.resources.files("deskctl.observe").joinpath(f"{module}.py").read_bytes()
    code = ("import base64,sys;exec(compile(base64.b64decode(" + repr(base64.b64encode(source).decode()) +
            f"),'deskctl-{module}','exec'),{{'__name__':'__main__'}})")
    # the system python3 first: a desktop's own packages (python3-gi, python3-xlib) live there, not in a pyenv
    command = (f'p=/usr/bin/python3; [ -x "$p" ] || p=python3; "$p" -c {shlex.quote(code)} '
               f"{shlex.quote(json.dumps(dict(request)))}")
    result = desk.provider.exec(desk._require_handle(), command, timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if "ok" in answer:
        return answer["ok"]
    problem = str(answer.get("error") or (result.stderr or result.stdout).strip()[-300:] or
                  f"exit code {result.exit_code}")
    if result.exit_code == 127 or any(m in problem for m in ("No module named", "cannot open the display",
                                                              "lacks AT-SPI", "Namespace Atspi not available")):
        raise UsageError(f"the desktop of {desk.id} cannot {doing}: {problem}", code="usage.unsupported",
                         provider=desk.provider_name, remedy="docs/observation.md lists what the desktop needs")
    raise ProviderApiError(f"the desktop of {desk.id} failed to {doing}: {problem}", provider=desk.provider_name)


def _call(desk: Desktop, request: Mapping[str, Any], doing: str) -> Any:
    provider = desk.provider
    if not getattr(provider.capabilities, "window_management", False):
        raise _unsupported(desk, "window_management", doing)
    from deskctl.core.x11 import X11Driver
    from deskctl.observe import _xwindows
    from deskctl.providers._x11provider import X11Provider

    handle = desk._require_handle()
    if isinstance(provider, X11Provider):
        def work(driver: Any) -> Any:
            from deskctl.core.x11wire import WireDriver

            if isinstance(driver, WireDriver):  # a `deskctl do` process's input-only driver: the full one reads windows
                driver = driver._to_full()
            if isinstance(driver, X11Driver):
                with driver._lock, driver._errors(doing):
                    return _xwindows.run(driver._display, dict(request))
            return guest_call(desk, "_xwindows", request, doing)

        return provider._call(handle, doing, work)
    return guest_call(desk, "_xwindows", request, doing)


def list_windows(desk: Desktop) -> list[Window]:
    """The top-level windows, bottom to top."""
    return [Window.from_dict(raw) for raw in _call(desk, {"op": "list"}, "list windows")]


def find_window(desk: Desktop, window: Any) -> Window:
    """The window named by ``window``: a :class:`Window`, its id (an int, or a string of one), or a title: the
    first window whose title is it, else the first whose title contains it. ``usage.not_found`` when none is."""
    found = list_windows(desk)
    if isinstance(window, Window):
        wanted: Any = window.id
    elif isinstance(window, Mapping) and "id" in window:
        wanted = int(window["id"])
    else:
        wanted = window
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        match = next((w for w in found if w.id == wanted), None)
    elif isinstance(wanted, str) and wanted:
        match = (next((w for w in found if w.title == wanted), None)
                 or next((w for w in found if wanted in w.title), None))
        if match is None:
            try:
                number = int(wanted, 0)
            except ValueError:
                number = None
            match = next((w for w in found if w.id == number), None)
    else:
        raise UsageError("a window is a Window, its id, or (part of) its title", code="usage.invalid")
    if match is None:
        titles = ", ".join(repr(w.title) for w in found if w.title)[:300] or "none"
        raise NotFound(f"no window {window!r} on the desktop (its windows: {titles})",
                       remedy="deskctl do ID list-windows")
    return match


def focus(desk: Desktop, window: Any) -> Window:
    """Raise the window and give it the input focus; the window as it is afterwards. A window that will not take
    the focus (the window manager refused) is ``provider.api_error``."""
    target = find_window(desk, window)
    if not _call(desk, {"op": "focus", "id": target.id}, "focus a window"):
        raise ProviderApiError(f"window {target.title or target.id!r} did not take the focus",
                               provider=desk.provider_name)
    return find_window(desk, target.id)


def move_window(desk: Desktop, window: Any, x: int, y: int, width: int, height: int) -> Window:
    """Put the window's client area at (x, y) with the given size; the window as it is afterwards (a window
    manager or the client may keep a size it prefers: the result says what it got)."""
    from deskctl.limits import check_number

    x, y = (check_number("window_offset", v, what=n, strings=False) for v, n in ((x, "x"), (y, "y")))
    width, height = (check_number("window_side", v, what=n, strings=False)
                     for v, n in ((width, "width"), (height, "height")))
    target = find_window(desk, window)
    _call(desk, {"op": "move", "id": target.id, "geometry": [x, y, width, height]}, "move a window")
    return find_window(desk, target.id)
