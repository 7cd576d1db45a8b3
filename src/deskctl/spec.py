"""What a desktop must be: :class:`DesktopSpec`, :class:`Geometry`, :class:`Platform`.

Everything here validates eagerly and raises :class:`deskctl.errors.UsageError` (exit 2) naming the bad value
and what is allowed, so a bad request never reaches a provider.

These are :class:`deskctl._record.Record` classes with the part of pydantic's model API deskctl and its users call
(``model_dump``, ``model_validate``, ``model_copy``, ``model_construct``), not pydantic models: pydantic's import
was most of a ``deskctl up`` process. They convert values as pydantic's lax mode did (``"5"`` for a number,
``"true"`` for a flag, a mapping for a geometry), ignore unknown fields, and dump the same ledger rows. A value of
the wrong type is ``usage.bad_spec`` naming the field and the type, never the value (it may hold a secret).
"""

from __future__ import annotations

import math
import sys

# collections.abc's very Mapping, from the module every interpreter has loaded at startup (os imports it):
# collections.abc itself pulls collections, and `deskctl up` loads this module
from _collections_abc import Mapping
from os import PathLike

from deskctl import _lax as lax
from deskctl._record import Record, field
from deskctl._strenum import StrEnum
from deskctl.errors import UsageError
from deskctl.limits import BOUNDS, check_number
from deskctl.platforms import Platform
from deskctl.providers import DEFAULT_PROVIDER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar

__all__ = ["MAX_SIDE", "MIN_SIDE", "STORED", "DesktopSpec", "Geometry", "Platform", "WindowGeometry", "parse_duration"]

#: smallest and largest side of a desktop deskctl accepts (Xvfb itself allows up to 32767): limits.py's screen_side
MIN_SIDE = int(BOUNDS["screen_side"].lo)
MAX_SIDE = int(BOUNDS["screen_side"].hi)
_DEPTHS = (8, 16, 24, 32)

#: the validation context of a spec read back from the ledger (``DesktopSpec.model_validate(row, context=STORED)``):
#: it was checked when its session was opened, perhaps under older bounds, and must stay readable (to end it)
STORED = {"stored": True}


# -- lax conversions (what pydantic's lax mode accepted for these field types) ----------------------------------

class _Bad(Exception):
    """A value of the wrong type at ``where``: collected (the first in field order is reported), as pydantic
    reported type errors after the checks that raise at once."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(where, message)
        self.where = where
        self.message = message

    def under(self, prefix: str) -> _Bad:
        return _Bad(f"{prefix}.{self.where}", self.message)

    def usage(self) -> UsageError:
        return UsageError(f"{self.where}: {self.message}", code="usage.bad_spec")


def _kind(value: Any) -> str:
    return type(value).__name__


def _shown(value: Any) -> str:
    """A short value (a number, a word) as a message shows it; anything else by its type only."""
    if isinstance(value, int | float | str) and len(text := repr(value)) <= 40:
        return text
    return f"a value of type {_kind(value)}"


def _text(value: Any, where: str) -> str:
    try:
        return str.__str__(lax.text(value))  # a str subclass (a StrEnum member) as a plain str
    except lax.Refused as refused:
        raise _Bad(where, "expected a string, got bytes that are not UTF-8" if refused.reason == lax.UTF8
                   else f"expected a string, got {_kind(value)}") from None


def _whole(value: Any, where: str) -> int:
    try:
        if not isinstance(value, str | bytes | bytearray):
            return lax.whole(value)  # True is 1, as pydantic had it
        if len(value) <= 64:
            return int(value)  # text as int() reads it (not the options' grammar: "5.0" is no whole number here)
    except (lax.Refused, ValueError):
        pass
    raise _Bad(where, f"expected a whole number, got {_shown(value)}")


def _number(value: Any, where: str) -> float:
    """A float from a number, a string or bytes of one, or an object with ``__float__`` (Decimal, Fraction); a
    number too large for a float is infinite (the callers refuse it)."""
    if isinstance(value, str | bytes | bytearray) or hasattr(type(value), "__float__"):
        try:
            return float(value.strip() if isinstance(value, str | bytes | bytearray) else value)
        except OverflowError:
            return math.inf
        except (TypeError, ValueError):
            pass
    raise _Bad(where, f"expected a number, got {_shown(value)}")


def _flag(value: Any, where: str) -> bool:
    try:
        return lax.flag(value)
    except lax.Refused:
        raise _Bad(where, f"expected a boolean (true/false, yes/no, on/off, 1/0), got {_shown(value)}") from None


def _mapping(value: Any, where: str, item: Callable[[Any, str], Any] | None) -> dict[str, Any]:
    """A copy of a mapping with string keys (and ``item`` applied to each value)."""
    if not isinstance(value, Mapping):
        raise _Bad(where, f"expected a mapping, got {_kind(value)}")
    out: dict[str, Any] = {}
    for key, element in value.items():
        name = _text(key, f"{where}.[key]")
        out[name] = element if item is None else item(element, f"{where}.{name}")
    return out


def _jsonable(value: Any, where: str) -> Any:
    """``value`` as pydantic's ``model_dump(mode="json")`` wrote a field of type Any (a type it had no JSON for
    was an error there too)."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, StrEnum):  # deskctl's own (Platform, SessionStatus)
        return _jsonable(value.value, where)
    enum = sys.modules.get("enum")  # not imported here: a value cannot be an Enum unless enum was loaded
    if enum is not None and isinstance(value, enum.Enum):
        return _jsonable(value.value, where)
    if isinstance(value, Mapping):
        return {str(_jsonable(k, where)): _jsonable(v, where) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode()
    if isinstance(value, _Model):
        return value.model_dump(mode="json")
    if isinstance(value, PathLike):
        return str(value.__fspath__())
    for plain in (bool, int, str, float):  # a subclass of one, as the plain value
        if isinstance(value, plain):
            return _jsonable(plain(value), where)
    from datetime import date, datetime, time

    if isinstance(value, datetime | date | time):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if type(value).__name__ in ("Decimal", "UUID"):
        return str(value)
    raise UsageError(f"{where}: a value of type {_kind(value)} cannot be stored in the ledger", code="usage.bad_spec")


# -- the record base with pydantic's model API -------------------------------------------------------------------

class _Model(Record, frozen=True):
    """A frozen record made from keyword arguments only, each field checked and converted by :meth:`_convert`
    (unknown names ignored), then the whole checked by :meth:`_verify`."""

    #: the fields without a default
    _required: ClassVar[frozenset[str]] = frozenset()
    #: each field's conversion, (value, stored) -> value, in field order (the order type errors are found in)
    _fields: ClassVar[Mapping[str, Callable[[Any, bool], Any]]] = {}

    def __init__(self, /, **data: Any) -> None:
        try:
            values = self._checked(data, stored=False)
        except _Bad as bad:
            raise bad.usage() from None
        Record.__init__(self, **values)
        self._verify()

    @classmethod
    def _convert(cls, data: Mapping[str, Any], stored: bool, bad: list[_Bad]) -> dict[str, Any]:
        """The fields of ``data`` converted; a type error goes to ``bad``; a failed check raises at once."""
        values: dict[str, Any] = {}
        for name, convert in cls._fields.items():
            if name in data:
                try:
                    values[name] = convert(data[name], stored)
                except _Bad as problem:
                    bad.append(problem)
        return values

    def _verify(self) -> None:
        """Checks of the whole, once every field is converted."""

    @classmethod
    def _checked(cls, data: Mapping[str, Any], *, stored: bool, where: str = "") -> dict[str, Any]:
        bad: list[_Bad] = [_Bad(name, "field required") for name in cls._record_names
                           if name in cls._required and name not in data]
        values = cls._convert(data, stored, bad)
        if bad:
            raise bad[0].under(where) if where else bad[0]
        return values

    @classmethod
    def _make(cls: type[_M], data: Mapping[str, Any], *, stored: bool = False, where: str = "") -> _M:
        """Like the constructor; a type error is a :class:`_Bad` under ``where`` (a field of an outer model)."""
        made = cls.__new__(cls)
        Record.__init__(made, **cls._checked(data, stored=stored, where=where))
        made._verify()
        return made

    @classmethod
    def model_validate(cls: type[_M], obj: Any, *, context: Any = None) -> _M:
        """``obj`` (a mapping of fields, or an instance, returned as it is) checked; ``context=STORED`` for a spec
        read back from the ledger (the upper bounds of limits and ttl do not apply to it)."""
        if isinstance(obj, cls):
            return obj
        if not isinstance(obj, Mapping):
            raise UsageError(f"a {cls.__name__} is a mapping of its fields, not a {_kind(obj)}",
                             code="usage.bad_spec")
        try:
            return cls._make(obj, stored=bool(isinstance(context, Mapping) and context.get("stored")))
        except _Bad as bad:
            raise bad.usage() from None

    @classmethod
    def model_construct(cls: type[_M], **values: Any) -> _M:
        """An instance of ``values`` as given: nothing checked, defaults for the rest, unknown names ignored."""
        made = cls.__new__(cls)
        Record.__init__(made, **{name: values[name] for name in cls._record_names if name in values})
        return made

    def model_copy(self: _M, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> _M:
        """A copy with ``update`` applied as given, unchecked, as pydantic's was (the preflight runner copies a
        spec for provider instances no registry knows); a name that is no field is a TypeError."""
        values = {name: getattr(self, name) for name in self._record_names}
        if deep:
            import copy

            values = copy.deepcopy(values)
        for name, value in (update or {}).items():
            if name not in values:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            values[name] = value
        return type(self).model_construct(**values)

    def model_dump(self, *, mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        """The fields as a dict (a geometry as a dict); ``mode="json"``: JSON values only (the platform's name,
        lists for tuples and sets, strings for paths and dates): the row the ledger stores."""
        out: dict[str, Any] = {}
        for name in self._record_names:
            value = getattr(self, name)
            if exclude_none and value is None:
                continue
            if isinstance(value, _Model):
                value = value.model_dump(mode=mode, exclude_none=exclude_none)
            elif mode == "json":
                value = _jsonable(value, name)
            out[name] = value
        return out


if TYPE_CHECKING:  # only annotations name it: no typing import at run time
    _M = TypeVar("_M", bound=_Model)


def _wholes(*names: str) -> dict[str, Callable[[Any, bool], int]]:
    """The conversions of fields that are whole numbers."""
    def whole(name: str) -> Callable[[Any, bool], int]:
        return lambda value, stored: _whole(value, name)
    return {name: whole(name) for name in names}


# -- geometries ---------------------------------------------------------------------------------------------------

#: patterns, compiled by re on first use (and cached there): most processes parse one geometry and no window or ttl
_GEOMETRY_RE = r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*$"


class Geometry(_Model, frozen=True):
    """A screen size in pixels (plus colour depth). ``str(g)`` is ``"WxH"``; parse with :meth:`parse`."""

    _required = frozenset({"width", "height"})
    _fields = _wholes("width", "height", "depth")

    width: int
    height: int
    depth: int = 24

    def _verify(self) -> None:
        for side, value in (("width", self.width), ("height", self.height)):
            if not MIN_SIDE <= value <= MAX_SIDE:
                raise UsageError(
                    f"geometry {self.width}x{self.height}: {side} {value} is outside {MIN_SIDE}..{MAX_SIDE}",
                    code="usage.bad_geometry",
                    remedy="ask for a size such as 1024x768 or 1280x800",
                )
        if self.depth not in _DEPTHS:
            raise UsageError(
                f"geometry {self.width}x{self.height}x{self.depth}: depth {self.depth} is not one of "
                f"{', '.join(map(str, _DEPTHS))}",
                code="usage.bad_geometry",
            )

    @classmethod
    def parse(cls, value: str | Geometry | tuple[int, int]) -> Geometry:
        if isinstance(value, Geometry):
            return value
        if isinstance(value, tuple) and len(value) >= 2:  # (a third item, as before, is not read)
            return cls(width=value[0], height=value[1])
        import re  # here, not at module level: `deskctl up` with its defaults parses no text (re loads enum)

        match = re.match(_GEOMETRY_RE, str(value))
        if not match:
            raise UsageError(
                f"geometry {_shown(value) if not isinstance(value, str) else repr(value)} is not of the form WxH or "
                "WxHxDEPTH (for example 1024x768)",
                code="usage.bad_geometry",
            )
        width, height, depth = match.groups()
        # a side of thousands of digits (int() refuses past 4300) is refused by the bound, without int()
        return cls(width=int(width) if len(width) < 10 else check_number("screen_side", width, what="width"),
                   height=int(height) if len(height) < 10 else check_number("screen_side", height, what="height"),
                   # a depth of more digits than any real one is refused as depth 0 (int() of 5000 digits raises)
                   depth=24 if not depth else int(depth) if len(depth) <= 4 else 0)

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"

    def contains(self, x: int, y: int) -> bool:
        return 0 <= x < self.width and 0 <= y < self.height


_WINDOW_RE = r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?:([+-]\d+)\s*([+-]\d+))?\s*$"


class WindowGeometry(_Model, frozen=True):
    """The size and place of the start-URL browser window: ``WxH`` or ``WxH+X+Y``."""

    _required = frozenset({"width", "height"})
    _fields = _wholes("width", "height", "x", "y")

    width: int
    height: int
    x: int = 0
    y: int = 0

    @classmethod
    def parse(cls, value: str | WindowGeometry) -> WindowGeometry:
        if isinstance(value, WindowGeometry):
            return value
        import re  # here, not at module level: `deskctl up` with its defaults parses no text (re loads enum)

        match = re.match(_WINDOW_RE, str(value))
        if not match:
            raise UsageError(
                f"window geometry {value!r} is not of the form WxH or WxH+X+Y", code="usage.bad_geometry"
            )
        w, h, x, y = match.groups()
        return cls(width=check_number("window_side", w, what="window width"),
                   height=check_number("window_side", h, what="window height"),
                   x=check_number("window_offset", x or "0", what="window x"),
                   y=check_number("window_offset", y or "0", what="window y"))

    def __str__(self) -> str:
        return f"{self.width}x{self.height}+{self.x}+{self.y}"


_DURATION_RE = r"^\s*(-?\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: str | float | int, *, what: str = "duration", bounded: bool = True) -> float:
    """``"90s"``, ``"15m"``, ``"2h"``, ``"7d"`` or plain seconds -> seconds. Negative, malformed or (``bounded``)
    past the ``duration`` bound of :mod:`deskctl.limits`: usage error."""
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        import re  # here, not at module level: `deskctl up` with its defaults parses no text (re loads enum)

        match = re.match(_DURATION_RE, value)
        if not match:
            raise UsageError(
                f"{what} {value!r} is not a duration such as 90s, 15m, 2h or 7d", code="usage.bad_duration"
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    else:
        try:
            seconds = _number(value, what)  # a Decimal, a Fraction
        except _Bad:
            raise UsageError(f"{what}: a {_kind(value)} is not a duration such as 90s, 15m, 2h or 7d",
                             code="usage.bad_duration") from None
    if not math.isfinite(seconds):
        raise UsageError(f"{what} {value!r} is not a finite duration", code="usage.bad_duration")
    if seconds < 0:
        raise UsageError(f"{what} {value!r} is negative", code="usage.bad_duration")
    if not bounded:
        return seconds
    return float(check_number("duration", seconds, what=f"{what} ({value!r} in seconds)" if isinstance(value, str)
                              else what))


def _limit(value: Any, name: str, stored: bool) -> float:
    number = _number(value, name)
    # inf and nan pass a "> 0" test (nan compares False to everything): both are refused here
    if not math.isfinite(number) or number <= 0:
        raise UsageError(f"{name} {_shown(value)} must be a finite number greater than 0", code="usage.bad_limit")
    if not stored:
        check_number(name, number)  # and a most: limits.py's max_minutes, max_usd
    return number


def _ttl(value: Any, stored: bool) -> float:
    seconds = parse_duration(value, what="ttl", bounded=not stored)
    if seconds <= 0:  # a zero lifetime would mean "expired at birth", not "no limit"
        raise UsageError(f"ttl {value!r} must be longer than 0", code="usage.bad_duration",
                         remedy="a duration such as 90s, 15m or 2h")
    if stored:
        return seconds
    # bounded, so that its expiry stays a date every output can show (99999999999999h broke `ls --json`)
    return float(check_number("ttl", seconds, what=f"ttl ({value!r} in seconds)" if isinstance(value, str)
                              else "ttl"))


def _geometry(value: Any) -> Geometry | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "native"):
        return None
    if isinstance(value, Mapping):
        return Geometry._make(value, where="geometry")
    return Geometry.parse(value)


def _window(value: Any) -> WindowGeometry | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return WindowGeometry._make(value, where="window_geometry")
    return WindowGeometry.parse(value)


def _labels(value: Any) -> dict[str, str]:
    labels = _mapping(value, "labels", _text)
    for key in labels:
        if key.startswith("deskctl."):
            raise UsageError(f"label {key!r} uses the reserved prefix 'deskctl.'", code="usage.reserved_label")
    return labels


def _policy(value: Any) -> str | None:
    if value is None:
        return None
    text = _text(value, "unknown_cost")
    if text.strip().lower() not in ("refuse", "allow"):
        raise UsageError(f"unknown-cost policy {_shown(text)} is not one of refuse, allow", code="usage.bad_policy")
    return text.strip().lower()


def _provider(value: Any) -> str:
    from deskctl.providers import resolve_name

    return resolve_name(_text(value, "provider"))


def _optional_text(name: str) -> Callable[[Any, bool], str | None]:
    return lambda value, stored: None if value is None else _text(value, name)


def _limit_of(name: str) -> Callable[[Any, bool], float | None]:
    return lambda value, stored: None if value is None else _limit(value, name, stored)


#: each field's conversion, in field order (the order errors are found in): value, stored -> value
_SPEC_FIELDS: dict[str, Callable[[Any, bool], Any]] = {
    "provider": lambda value, stored: _provider(value),
    "platform": lambda value, stored: Platform.parse(value),
    "geometry": lambda value, stored: _geometry(value),
    "window_geometry": lambda value, stored: _window(value),
    "start_url": _optional_text("start_url"),
    "window_manager": lambda value, stored: _flag(value, "window_manager"),
    "ttl_seconds": lambda value, stored: None if value is None else _ttl(value, stored),
    "max_minutes": _limit_of("max_minutes"),
    "max_usd": _limit_of("max_usd"),
    "labels": lambda value, stored: _labels(value),
    "provider_options": lambda value, stored: _mapping(value, "provider_options", None),
    "budget": _optional_text("budget"),
    "unknown_cost": lambda value, stored: _policy(value),
}


def _default_geometry() -> Geometry:
    return Geometry(width=1024, height=768)


class DesktopSpec(_Model, frozen=True):
    """Everything a session is asked to be. Immutable; build with :meth:`build` (``None`` means the default).

    ``geometry=None`` means *native*: accept the provider's fixed size and report it (``--geometry native``).
    """

    _fields = _SPEC_FIELDS

    provider: str = DEFAULT_PROVIDER
    platform: Platform = Platform.UBUNTU
    geometry: Geometry | None = field(default_factory=_default_geometry)
    window_geometry: WindowGeometry | None = None
    start_url: str | None = None
    window_manager: bool = False
    ttl_seconds: float | None = None
    max_minutes: float | None = None
    max_usd: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    provider_options: dict[str, Any] = field(default_factory=dict)
    #: the shared budget this session is charged to (else $DESKCTL_BUDGET)
    budget: str | None = None
    #: what a money cap does with an unknown price: "refuse" (the default under a cap) or "allow"
    unknown_cost: str | None = None

    @classmethod
    def build(cls, **fields: Any) -> DesktopSpec:
        """The spec of ``fields`` whose value is not None (the others keep their defaults); every failure is a
        :class:`UsageError`."""
        return cls(**{k: v for k, v in fields.items() if v is not None})

    def __str__(self) -> str:
        return " ".join(f"{name}={getattr(self, name)!r}" for name in self._record_names)

    def geometry_label(self) -> str:
        return "native" if self.geometry is None else str(self.geometry)
