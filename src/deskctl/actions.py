"""The action model every provider executes, and key-name normalisation.

Actions are small frozen value objects: equal, hashed and shown by their fields, in order, as frozen dataclasses
are (``Click(x=1, y=2, button='left', count=1)``), matched by ``case Click(x=x, y=y)``; :func:`action_values`
gives their fields. Written out rather than made by ``@dataclass``, whose generated methods cost a whole-process
``deskctl do`` more than the rest of this module. Key chords are normalised once, here, to canonical names
(``ctrl``, ``alt``, ``shift``, ``super``, ``enter``, ``pageup``, ``f5``, ``a``, ``é`` ...); each provider maps
canonical names to its own wire names (X keysyms in ``providers/_x11.py``, the toolbox names for Daytona).
"""

from __future__ import annotations

from deskctl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Literal

__all__ = [
    "MODIFIERS",
    "NAMED_KEYS",
    "Action",
    "Click",
    "Drag",
    "KeyDown",
    "KeyPress",
    "KeyUp",
    "MouseDown",
    "MouseUp",
    "Move",
    "Scroll",
    "TypeText",
    "action_values",
    "check_action",
    "normalize_chord",
    "normalize_key",
]

if TYPE_CHECKING:
    Button = Literal["left", "middle", "right"]
BUTTONS: tuple[Button, ...] = ("left", "middle", "right")


class _Action:
    """Equality, hash, repr, pickling and immutability from a subclass's ``__slots__`` (its fields, in order)."""

    __slots__: ClassVar[tuple[str, ...]] = ()

    def _set(self, *values: Any) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Action)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())


class Click(_Action):
    __slots__ = __match_args__ = ("x", "y", "button", "count")
    x: int
    y: int
    button: Button
    count: int  # 2 = double click, 3 = triple click

    def __init__(self, x: int, y: int, button: Button = "left", count: int = 1) -> None:
        self._set(x, y, button, count)


class Move(_Action):
    __slots__ = __match_args__ = ("x", "y")
    x: int
    y: int

    def __init__(self, x: int, y: int) -> None:
        self._set(x, y)


class Drag(_Action):
    __slots__ = __match_args__ = ("x1", "y1", "x2", "y2", "button")
    x1: int
    y1: int
    x2: int
    y2: int
    button: Button

    def __init__(self, x1: int, y1: int, x2: int, y2: int, button: Button = "left") -> None:
        self._set(x1, y1, x2, y2, button)


class Scroll(_Action):
    """Scroll at (x, y): ``dy`` > 0 scrolls down, ``dx`` > 0 right, in wheel clicks."""

    __slots__ = __match_args__ = ("x", "y", "dx", "dy")
    x: int
    y: int
    dx: int
    dy: int

    def __init__(self, x: int, y: int, dx: int = 0, dy: int = 0) -> None:
        self._set(x, y, dx, dy)


class MouseDown(_Action):
    __slots__ = __match_args__ = ("x", "y", "button")
    x: int
    y: int
    button: Button

    def __init__(self, x: int, y: int, button: Button = "left") -> None:
        self._set(x, y, button)


class MouseUp(_Action):
    __slots__ = __match_args__ = ("x", "y", "button")
    x: int
    y: int
    button: Button

    def __init__(self, x: int, y: int, button: Button = "left") -> None:
        self._set(x, y, button)


class TypeText(_Action):
    __slots__ = __match_args__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        self._set(text)


class KeyPress(_Action):
    """A chord pressed and released: ``keys`` are canonical names, modifiers first."""

    __slots__ = __match_args__ = ("keys",)
    keys: tuple[str, ...]

    def __init__(self, keys: tuple[str, ...]) -> None:
        self._set(keys)


class KeyDown(_Action):
    __slots__ = __match_args__ = ("key",)
    key: str

    def __init__(self, key: str) -> None:
        self._set(key)


class KeyUp(_Action):
    __slots__ = __match_args__ = ("key",)
    key: str

    def __init__(self, key: str) -> None:
        self._set(key)


def action_values(action: Action) -> dict[str, Any]:
    """An action's fields by name, in order (what ``dataclasses.asdict`` gave)."""
    return {name: getattr(action, name) for name in action.__slots__}


Action = Click | Move | Drag | Scroll | MouseDown | MouseUp | TypeText | KeyPress | KeyDown | KeyUp

MODIFIERS = ("ctrl", "alt", "shift", "super")

NAMED_KEYS = frozenset(
    {
        "enter", "escape", "tab", "backspace", "delete", "space", "home", "end", "pageup", "pagedown",
        "insert", "up", "down", "left", "right", "capslock", "menu", "printscreen", "pause", "numlock",
        "scrolllock",
        *(f"f{i}" for i in range(1, 25)),
        *MODIFIERS,
    }
)

_ALIASES = {
    "control": "ctrl", "ctl": "ctrl", "lctrl": "ctrl", "rctrl": "ctrl", "control_l": "ctrl",
    "cmd": "super", "command": "super", "meta": "super", "win": "super", "windows": "super",
    "super_l": "super",
    "option": "alt", "opt": "alt", "alt_l": "alt",
    "shift_l": "shift",
    "return": "enter", "ret": "enter", "kp_enter": "enter",
    "esc": "escape",
    "del": "delete",
    "bksp": "backspace", "back_space": "backspace",
    "pgup": "pageup", "prior": "pageup", "page_up": "pageup",
    "pgdn": "pagedown", "next": "pagedown", "page_down": "pagedown",
    "ins": "insert",
    "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right",
    "caps_lock": "capslock", "print": "printscreen", "prtsc": "printscreen",
    "spacebar": "space", "plus": "+", "minus": "-",
}


def normalize_key(name: str) -> str:
    """One key name to its canonical form; a single character is kept as it is (case kept)."""
    if len(name) == 1:
        return name
    if len(name) > 256 or not isinstance(name, str):
        from deskctl.limits import check_text

        check_text("key_chars", name, what="key")
    raw = name.strip()
    if len(raw) == 1:
        return raw
    low = raw.lower()
    low = _ALIASES.get(low, low)
    if low in NAMED_KEYS or len(low) == 1:
        return low
    raise UsageError(
        f"unknown key {name!r}; use a single character or one of: {', '.join(sorted(NAMED_KEYS))}",
        code="usage.unknown_key",
    )


def normalize_chord(chord: str) -> tuple[str, ...]:
    """``"ctrl+s"`` -> ``("ctrl", "s")``; ``"cmd+shift+t"`` -> ``("super", "shift", "t")``.

    ``+`` alone, or as the last key (``"ctrl++"``), is the plus key. Modifiers keep their order and come
    before the main key; a chord of modifiers only (``"shift"``) is allowed.
    """
    if not isinstance(chord, str) or len(chord) > 256:
        from deskctl.limits import check_text

        check_text("key_chars", chord, what="key chord")  # a chord of a megabyte is refused, not echoed back
    if not chord or not chord.strip():
        raise UsageError("empty key chord", code="usage.unknown_key")
    text = chord.strip()
    if text == "+":
        return ("+",)
    parts: list[str]
    parts = [*text[:-2].split("+"), "+"] if text.endswith("++") else text.split("+")
    if any(p == "" for p in parts):
        raise UsageError(f"malformed key chord {chord!r}", code="usage.unknown_key")
    keys = tuple(normalize_key(p) for p in parts)
    return keys


def validate_button(button: str) -> Button:
    low = button.lower()
    if low not in BUTTONS:
        raise UsageError(f"unknown mouse button {button!r}; allowed: left, middle, right", code="usage.bad_button")
    return low  # type: ignore[return-value]


def action_points(action: Action) -> list[tuple[int, int]]:
    """The screen points an action touches, for bounds checking."""
    match action:
        case Click(x=x, y=y) | Move(x=x, y=y) | Scroll(x=x, y=y) | MouseDown(x=x, y=y) | MouseUp(x=x, y=y):
            return [(x, y)]
        case Drag(x1=x1, y1=y1, x2=x2, y2=y2):
            return [(x1, y1), (x2, y2)]
        case _:
            return []


def action_kind(action: Action) -> str:
    """A short name for counting actions in the ledger (``click``, ``type``, ``key`` ...)."""
    return {
        Click: "click", Move: "move", Drag: "drag", Scroll: "scroll", MouseDown: "mouse_down",
        MouseUp: "mouse_up", TypeText: "type", KeyPress: "key", KeyDown: "key_down", KeyUp: "key_up",
    }[type(action)]


def check_action(action: Any) -> None:
    """Check the fields of one action against :data:`deskctl.limits.BOUNDS` (coordinates, click count, scroll
    clicks, text length): what :class:`~deskctl.Desktop` and the in-desktop agent run before an action."""
    from deskctl.limits import check_number, check_text

    for field, value in action_values(action).items():
        if field in ("x", "y", "x1", "y1", "x2", "y2"):
            check_number("coordinate", value, what=field, strings=False)
        elif field == "count":
            check_number("click_count", value, what="count", strings=False)
        elif field in ("dx", "dy"):
            check_number("scroll_clicks", value, what=field, strings=False)
        elif field == "text":
            check_text("type_chars", value, what="text")
        elif field == "key":
            check_text("key_chars", value, what="key")
        elif field == "keys":
            if not isinstance(value, tuple) or not value:
                raise UsageError("keys must be a non-empty list of key names", code="usage.invalid")
            for key in value:
                check_text("key_chars", key, what="key")
