"""A stand-in for pyautogui inside the fake's Windows guests: the functions deskctl's Windows input programs
call, with pyautogui's names and argument conventions, performed on the guest's real Xvfb (``DISPLAY``).

As strict as the real library where it matters: ``write`` types only characters pyautogui has keys for (it
silently skips the rest, as the real one does), and key names are pyautogui's.
"""

from __future__ import annotations

import os
import string
from typing import Any

from deskctl.providers._x11 import X11Driver

FAILSAFE = True
PAUSE = 0.1

_NAMED = {
    "ctrl": "ctrl", "ctrlleft": "ctrl", "shift": "shift", "shiftleft": "shift", "alt": "alt", "altleft": "alt",
    "win": "super", "winleft": "super", "enter": "enter", "return": "enter", "esc": "escape", "escape": "escape",
    "tab": "tab", "backspace": "backspace", "delete": "delete", "del": "delete", "space": "space", "home": "home",
    "end": "end", "pageup": "pageup", "pgup": "pageup", "pagedown": "pagedown", "pgdn": "pagedown",
    "insert": "insert", "up": "up", "down": "down", "left": "left", "right": "right", "capslock": "capslock",
    "apps": "menu", **{f"f{i}": f"f{i}" for i in range(1, 25)},
}
_TYPABLE = set(string.printable) - {"\r", "\x0b", "\x0c"}
_driver: X11Driver | None = None


def _d() -> X11Driver:
    global _driver
    if _driver is None:
        _driver = X11Driver.open(os.environ["DISPLAY"], provider="cua-fake-guest", use_shm=False)
    return _driver


def _key(name: str) -> str | None:
    if len(name) == 1:
        return name
    return _NAMED.get(name.lower())


def _pos(x: Any, y: Any) -> tuple[int, int]:
    if x is None or y is None:
        root = _d()._display.screen().root.query_pointer()
        return int(root.root_x), int(root.root_y)
    return int(x), int(y)


def moveTo(x: int, y: int, duration: float = 0.0) -> None:
    _d().move(int(x), int(y))


def click(x: Any = None, y: Any = None, clicks: int = 1, interval: float = 0.0, button: str = "left") -> None:
    px, py = _pos(x, y)
    _d().click(px, py, button, int(clicks))


def mouseDown(x: Any = None, y: Any = None, button: str = "left") -> None:
    px, py = _pos(x, y)
    _d().mouse_down(px, py, button)


def mouseUp(x: Any = None, y: Any = None, button: str = "left") -> None:
    px, py = _pos(x, y)
    _d().mouse_up(px, py, button)


def scroll(clicks: int, x: Any = None, y: Any = None) -> None:
    px, py = _pos(x, y)
    _d().scroll(px, py, dy=-int(clicks))  # pyautogui: positive scrolls up


def hscroll(clicks: int, x: Any = None, y: Any = None) -> None:
    px, py = _pos(x, y)
    _d().scroll(px, py, dx=int(clicks))


def write(message: str, interval: float = 0.0) -> None:
    _d().type_text("".join(c for c in message if c in _TYPABLE))


typewrite = write


def press(keys: str, presses: int = 1, interval: float = 0.0) -> None:
    name = _key(keys)
    if name is not None:
        for _ in range(presses):
            _d().key(name)


def hotkey(*keys: str, interval: float = 0.0) -> None:
    names = [n for n in (_key(k) for k in keys) if n is not None]
    if names:
        _d().key(*names)


def keyDown(key: str) -> None:
    name = _key(key)
    if name is not None:
        _d().key_down(name)


def keyUp(key: str) -> None:
    name = _key(key)
    if name is not None:
        _d().key_up(name)
