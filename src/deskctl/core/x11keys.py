"""Key names, keysyms and mouse buttons of the X11 driver (no X connection needed)."""

from __future__ import annotations

from deskctl.actions import normalize_key
from deskctl.errors import UsageError

_BUTTONS = {"left": 1, "middle": 2, "right": 3}
_SCROLL_UP, _SCROLL_DOWN, _SCROLL_LEFT, _SCROLL_RIGHT = 4, 5, 6, 7

#: canonical key name (deskctl.actions) -> X keysym name
_KEYSYM_NAMES: dict[str, str] = {
    "ctrl": "Control_L",
    "alt": "Alt_L",
    "shift": "Shift_L",
    "super": "Super_L",
    "enter": "Return",
    "escape": "Escape",
    "tab": "Tab",
    "backspace": "BackSpace",
    "delete": "Delete",
    "space": "space",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
    "insert": "Insert",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "capslock": "Caps_Lock",
    "menu": "Menu",
    "printscreen": "Print",
    "pause": "Pause",
    "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    **{f"f{i}": f"F{i}" for i in range(1, 25)},
}

#: keysym values of the names above (the X11 keysymdef.h numbers), so no Xlib import is needed to map keys
_KEYSYM_VALUES: dict[str, int] = {
    "Control_L": 0xFFE3,
    "Alt_L": 0xFFE9,
    "Shift_L": 0xFFE1,
    "Super_L": 0xFFEB,
    "Return": 0xFF0D,
    "Escape": 0xFF1B,
    "Tab": 0xFF09,
    "BackSpace": 0xFF08,
    "Delete": 0xFFFF,
    "space": 0x0020,
    "Home": 0xFF50,
    "End": 0xFF57,
    "Prior": 0xFF55,
    "Next": 0xFF56,
    "Insert": 0xFF63,
    "Up": 0xFF52,
    "Down": 0xFF54,
    "Left": 0xFF51,
    "Right": 0xFF53,
    "Caps_Lock": 0xFFE5,
    "Menu": 0xFF67,
    "Print": 0xFF61,
    "Pause": 0xFF13,
    "Num_Lock": 0xFF7F,
    "Scroll_Lock": 0xFF14,
    **{f"F{i}": 0xFFBE + i - 1 for i in range(1, 25)},
}

_SHIFT = _KEYSYM_VALUES["Shift_L"]
#: bytes of one XTEST FakeInput request (9 words)
_FAKE_INPUT_SIZE = 36
#: characters typed between two round trips. Typed text is encoded here and handed to python-xlib as one
#: pre-encoded block per batch: its own request queue joins queued requests by repeated bytes concatenation
#: (quadratic in the number queued before a round trip). The round trip per batch bounds how far we run ahead of
#: the server, re-arms the watchdog (a long text is many operations, each with its own deadline) and keeps the
#: requests between two replies far below python-xlib's 16-bit sequence window.
_TYPE_BATCH = 4096
_BORROWED_PROPERTY = "_DESKCTL_BORROWED_KEYCODES"
_CONTROL_CHARS = {"\n": "Return", "\r": "Return", "\t": "Tab", "\b": "BackSpace", "\x1b": "Escape"}


def keysym_for_char(char: str) -> int:
    """The X keysym of one character: Latin-1 keysyms equal the code point, the rest are Unicode keysyms."""
    if char in _CONTROL_CHARS:
        return _KEYSYM_VALUES[_CONTROL_CHARS[char]]
    code = ord(char)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x01000000 | code


def keysym_for_key(name: str) -> int:
    """The X keysym of a key name (canonical or any alias :func:`deskctl.actions.normalize_key` accepts)."""
    canonical = normalize_key(name)
    if len(canonical) == 1:
        return keysym_for_char(canonical)
    return _KEYSYM_VALUES[_KEYSYM_NAMES[canonical]]


def _button_number(button: str) -> int:
    try:
        return _BUTTONS[button]
    except KeyError:
        raise UsageError(f"unknown mouse button {button!r}; allowed: left, middle, right",
                         code="usage.bad_button") from None
