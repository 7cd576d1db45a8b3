"""Input on a cua guest, which has no input endpoints: a short pyautogui program run by ``POST /execute``
(on Linux with a python-xlib + XTEST fallback for what pyautogui cannot type)."""

from __future__ import annotations

from importlib import resources
from typing import Any

from deskctl.actions import (
    Action,
    Click,
    Drag,
    KeyDown,
    KeyPress,
    KeyUp,
    MouseDown,
    MouseUp,
    Move,
    Scroll,
    TypeText,
)
from deskctl.errors import UsageError

# A Linux guest's input program. The guest contract is pyautogui (OSWorld's own clients send
# `python -c "import pyautogui; ..."`), so the pyautogui program (argv[2]) runs whenever pyautogui imports and
# can express the action. Only without pyautogui, or for what pyautogui cannot type (characters outside its key
# table, keys it has no name for), the fallback drives XTEST through python-xlib (argv[1]: operations). Keysyms
# the keymap lacks are bound to an unused keycode and left bound, so that the receiving client translates the
# events with the mapping they were sent with, and a later character finds its keycode again.
_LINUX_INPUT = resources.files(__package__).joinpath("guest_scripts", "linux_input.py.txt").read_text(encoding="utf-8")

_BUTTONS = {"left": 1, "middle": 2, "right": 3}
_SCROLL = {"up": 4, "down": 5, "left": 6, "right": 7}

#: deskctl canonical key names -> pyautogui names (its key table is the same on Windows and X11)
_PYAUTOGUI_KEYS: dict[str, str] = {
    "ctrl": "ctrl", "shift": "shift", "alt": "alt", "super": "win", "enter": "enter", "escape": "esc",
    "tab": "tab", "backspace": "backspace", "delete": "delete", "space": "space", "home": "home", "end": "end",
    "pageup": "pageup", "pagedown": "pagedown", "insert": "insert", "up": "up", "down": "down", "left": "left",
    "right": "right", "capslock": "capslock", "menu": "apps",
    **{f"f{i}": f"f{i}" for i in range(1, 25)},
}


def _keysym(name: str) -> int:
    from deskctl.providers._x11 import keysym_for_key

    try:
        return keysym_for_key(name)
    except KeyError:
        raise UsageError(f"no X keysym for key {name!r}", code="usage.unknown_key", provider="cua-cloud") from None


def linux_input_ops(action: Action) -> list[list[Any]]:
    """The operations of the Linux guest's input program for ``action`` (keysyms are numbers)."""
    from deskctl.providers._x11 import keysym_for_char

    match action:
        case Click(x=x, y=y, button=button, count=count):
            number = _BUTTONS[button]
            return [["move", x, y], *([["button", number, 1], ["button", number, 0]] * max(1, count))]
        case Move(x=x, y=y):
            return [["move", x, y]]
        case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
            number = _BUTTONS[button]
            steps = [["move", x1 + (x2 - x1) * i // 8, y1 + (y2 - y1) * i // 8] for i in range(1, 9)]
            return [["move", x1, y1], ["button", number, 1], *steps, ["button", number, 0]]
        case Scroll(x=x, y=y, dx=dx, dy=dy):
            ops: list[list[Any]] = [["move", x, y]]
            for amount, negative, positive in ((dy, "up", "down"), (dx, "left", "right")):
                number = _SCROLL[positive if amount > 0 else negative]
                ops += [["button", number, 1], ["button", number, 0]] * abs(amount)
            return ops
        case MouseDown(x=x, y=y, button=button):
            return [["move", x, y], ["button", _BUTTONS[button], 1]]
        case MouseUp(x=x, y=y, button=button):
            return [["move", x, y], ["button", _BUTTONS[button], 0]]
        case TypeText(text=text):
            out: list[list[Any]] = []
            previous = ""
            for char in text:
                if not (char == "\n" and previous == "\r"):
                    if (ord(char) < 32 and char not in "\n\r\t\b\x1b") or ord(char) == 127:
                        raise UsageError(f"cannot type the control character {char!r}; use key instead",
                                         code="usage.bad_text", provider="cua-cloud")
                    out.append(["chord", [keysym_for_char(char)]])
                previous = char
            return out
        case KeyPress(keys=keys):
            return [["chord", [_keysym(k) for k in keys]]]
        case KeyDown(key=key):
            return [["key", _keysym(key), 1]]
        case KeyUp(key=key):
            return [["key", _keysym(key), 0]]
    raise UsageError(f"cua-cloud cannot perform {action!r}", code="usage.unsupported", provider="cua-cloud")


def _pyautogui_key(name: str, keep_case: bool = False) -> str:
    if len(name) == 1:
        # pyautogui presses shift for an upper-case letter itself (isShiftCharacter)
        return name if keep_case or not name.isalpha() else name.lower()
    key = _PYAUTOGUI_KEYS.get(name)
    if key is None:
        raise UsageError(f"pyautogui has no key {name!r}", code="usage.unknown_key", provider="cua-cloud")
    return key


def windows_input_code(action: Action) -> str:
    """The pyautogui program a Windows guest runs for ``action`` (pyautogui types ASCII only)."""
    return pyautogui_code(action)


def linux_pyautogui_code(action: Action) -> str:
    """The pyautogui program a Linux guest runs for ``action``, or ``""`` when pyautogui cannot express it
    (text beyond its key table, a key it has no name for): the input program then falls back to XTEST."""
    try:
        return pyautogui_code(action, keep_case=True)
    except UsageError as err:
        if err.code in ("usage.bad_text", "usage.unknown_key"):
            return ""
        raise


def pyautogui_code(action: Action, *, keep_case: bool = False) -> str:
    """The pyautogui program for ``action`` (pyautogui types printable ASCII, newline and tab only).
    ``keep_case`` sends an upper-case letter of a chord as such (pyautogui adds shift for it)."""
    lines = ["import pyautogui", "pyautogui.FAILSAFE = False", "pyautogui.PAUSE = 0"]
    match action:
        case Click(x=x, y=y, button=button, count=count):
            lines.append(f"pyautogui.click({x}, {y}, clicks={max(1, count)}, interval=0, button={button!r})")
        case Move(x=x, y=y):
            lines.append(f"pyautogui.moveTo({x}, {y})")
        case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
            lines += [f"pyautogui.moveTo({x1}, {y1})", f"pyautogui.mouseDown(button={button!r})",
                      f"pyautogui.moveTo({x2}, {y2})", f"pyautogui.mouseUp(button={button!r})"]
        case Scroll(x=x, y=y, dx=dx, dy=dy):
            lines.append(f"pyautogui.moveTo({x}, {y})")
            if dy:
                lines.append(f"pyautogui.scroll({-dy})")  # pyautogui: positive is up
            if dx:
                lines.append(f"pyautogui.hscroll({dx})")
        case MouseDown(x=x, y=y, button=button):
            lines.append(f"pyautogui.mouseDown({x}, {y}, button={button!r})")
        case MouseUp(x=x, y=y, button=button):
            lines.append(f"pyautogui.mouseUp({x}, {y}, button={button!r})")
        case TypeText(text=text):
            bad = sorted({c for c in text if not (32 <= ord(c) < 127 or c in "\n\t")})
            if bad:
                raise UsageError(
                    f"pyautogui cannot type {''.join(bad)!r} (ASCII only)",
                    code="usage.bad_text", provider="cua-cloud", remedy="type ASCII, or paste through exec",
                )
            lines.append(f"pyautogui.write({text!r})")
        case KeyPress(keys=keys):
            lines.append("pyautogui.hotkey(" + ", ".join(repr(_pyautogui_key(k, keep_case)) for k in keys) + ")")
        case KeyDown(key=key):
            lines.append(f"pyautogui.keyDown({_pyautogui_key(key, keep_case)!r})")
        case KeyUp(key=key):
            lines.append(f"pyautogui.keyUp({_pyautogui_key(key, keep_case)!r})")
        case _:
            raise UsageError(f"cua-cloud cannot perform {action!r}", code="usage.unsupported",
                             provider="cua-cloud")
    return "\n".join(lines)


