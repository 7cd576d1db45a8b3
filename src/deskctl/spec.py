"""What a desktop must be: :class:`DesktopSpec`, :class:`Geometry`, :class:`Platform`.

Everything here validates eagerly and raises :class:`deskctl.errors.UsageError` (exit 2) naming the bad value
and what is allowed, so a bad request never reaches a provider.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from deskctl.errors import UsageError
from deskctl.limits import BOUNDS, check_number
from deskctl.platforms import Platform
from deskctl.providers import DEFAULT_PROVIDER

__all__ = ["MAX_SIDE", "MIN_SIDE", "STORED", "DesktopSpec", "Geometry", "Platform", "WindowGeometry", "parse_duration"]

#: smallest and largest side of a desktop deskctl accepts (Xvfb itself allows up to 32767): limits.py's screen_side
MIN_SIDE = int(BOUNDS["screen_side"].lo)
MAX_SIDE = int(BOUNDS["screen_side"].hi)
_DEPTHS = (8, 16, 24, 32)


_GEOMETRY_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*$")


class Geometry(BaseModel):
    """A screen size in pixels (plus colour depth). ``str(g)`` is ``"WxH"``; parse with :meth:`parse`."""

    model_config = ConfigDict(frozen=True)

    width: int
    height: int
    depth: int = 24

    @model_validator(mode="after")
    def _bounds(self) -> Geometry:
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
        return self

    @classmethod
    def parse(cls, value: str | Geometry | tuple[int, int]) -> Geometry:
        if isinstance(value, Geometry):
            return value
        if isinstance(value, tuple):
            return cls(width=value[0], height=value[1])
        match = _GEOMETRY_RE.match(str(value))
        if not match:
            raise UsageError(
                f"geometry {value!r} is not of the form WxH or WxHxDEPTH (for example 1024x768)",
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


_WINDOW_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?:([+-]\d+)\s*([+-]\d+))?\s*$")


class WindowGeometry(BaseModel):
    """The size and place of the start-URL browser window: ``WxH`` or ``WxH+X+Y``."""

    model_config = ConfigDict(frozen=True)

    width: int
    height: int
    x: int = 0
    y: int = 0

    @classmethod
    def parse(cls, value: str | WindowGeometry) -> WindowGeometry:
        if isinstance(value, WindowGeometry):
            return value
        match = _WINDOW_RE.match(str(value))
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


_DURATION_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: str | float | int, *, what: str = "duration", bounded: bool = True) -> float:
    """``"90s"``, ``"15m"``, ``"2h"``, ``"7d"`` or plain seconds -> seconds. Negative, malformed or (``bounded``)
    past the ``duration`` bound of :mod:`deskctl.limits`: usage error."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(value)
        if not match:
            raise UsageError(
                f"{what} {value!r} is not a duration such as 90s, 15m, 2h or 7d", code="usage.bad_duration"
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if not math.isfinite(seconds):
        raise UsageError(f"{what} {value!r} is not a finite duration", code="usage.bad_duration")
    if seconds < 0:
        raise UsageError(f"{what} {value!r} is negative", code="usage.bad_duration")
    if not bounded:
        return seconds
    return float(check_number("duration", seconds, what=f"{what} ({value!r} in seconds)" if isinstance(value, str)
                              else what))


#: the validation context of a spec read back from the ledger (``DesktopSpec.model_validate(row, context=STORED)``):
#: it was checked when its session was opened, perhaps under older bounds, and must stay readable (to end it)
STORED = {"stored": True}


def _stored(info: ValidationInfo) -> bool:
    return bool(isinstance(info.context, Mapping) and info.context.get("stored"))


class DesktopSpec(BaseModel):
    """Everything a session is asked to be. Immutable; build with :meth:`build` for friendly errors.

    ``geometry=None`` means *native*: accept the provider's fixed size and report it (``--geometry native``).
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    provider: str = DEFAULT_PROVIDER
    platform: Platform = Platform.UBUNTU
    geometry: Geometry | None = Field(default_factory=lambda: Geometry(width=1024, height=768))
    window_geometry: WindowGeometry | None = None
    start_url: str | None = None
    window_manager: bool = False
    ttl_seconds: float | None = None
    max_minutes: float | None = None
    max_usd: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    provider_options: dict[str, Any] = Field(default_factory=dict)
    #: the shared budget this session is charged to (else $DESKCTL_BUDGET)
    budget: str | None = None
    #: what a money cap does with an unknown price: "refuse" (the default under a cap) or "allow"
    unknown_cost: str | None = None

    @field_validator("unknown_cost")
    @classmethod
    def _policy(cls, value: str | None) -> str | None:
        if value is not None and value.strip().lower() not in ("refuse", "allow"):
            raise UsageError(f"unknown-cost policy {value!r} is not one of refuse, allow", code="usage.bad_policy")
        return value.strip().lower() if value else None

    @field_validator("platform", mode="before")
    @classmethod
    def _platform(cls, value: Any) -> Platform:
        return Platform.parse(value)

    @field_validator("geometry", mode="before")
    @classmethod
    def _geometry(cls, value: Any) -> Geometry | None:
        if value is None or (isinstance(value, str) and value.strip().lower() == "native"):
            return None
        if isinstance(value, Mapping):
            return Geometry(**value)
        return Geometry.parse(value)

    @field_validator("window_geometry", mode="before")
    @classmethod
    def _window(cls, value: Any) -> WindowGeometry | None:
        if value is None:
            return None
        if isinstance(value, Mapping):
            return WindowGeometry(**value)
        return WindowGeometry.parse(value)

    @field_validator("ttl_seconds", mode="before")
    @classmethod
    def _ttl(cls, value: Any, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        stored = _stored(info)
        seconds = parse_duration(value, what="ttl", bounded=not stored)
        if seconds <= 0:  # a zero lifetime would mean "expired at birth", not "no limit"
            raise UsageError(f"ttl {value!r} must be longer than 0", code="usage.bad_duration",
                             remedy="a duration such as 90s, 15m or 2h")
        if stored:
            return seconds
        # bounded, so that its expiry stays a date every output can show (99999999999999h broke `ls --json`)
        return float(check_number("ttl", seconds, what=f"ttl ({value!r} in seconds)" if isinstance(value, str)
                                  else "ttl"))

    @field_validator("max_minutes", "max_usd", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or isinstance(value, bool):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            return value  # pydantic reports the type error
        # inf and nan pass a "> 0" test (nan compares False to everything): both are refused here
        if not math.isfinite(number) or number <= 0:
            raise UsageError(f"{info.field_name} {value!r} must be a finite number greater than 0",
                             code="usage.bad_limit")
        assert info.field_name is not None
        if not _stored(info):
            check_number(info.field_name, number)  # and a most: limits.py's max_minutes, max_usd
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key.startswith("deskctl."):
                raise UsageError(
                    f"label {key!r} uses the reserved prefix 'deskctl.'", code="usage.reserved_label"
                )
        return value

    @field_validator("provider")
    @classmethod
    def _provider(cls, value: str) -> str:
        from deskctl.providers import resolve_name

        return resolve_name(value)

    @classmethod
    def build(cls, **fields: Any) -> DesktopSpec:
        """Like the constructor, but every validation failure is a :class:`UsageError` (never pydantic's)."""
        clean = {k: v for k, v in fields.items() if v is not None}
        try:
            return cls(**clean)
        except UsageError:
            raise
        except ValidationError as exc:
            for err in exc.errors():
                cause = err.get("ctx", {}).get("error")
                if isinstance(cause, UsageError):
                    raise cause from None
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "spec"
            raise UsageError(
                f"{where}: {first['msg']} (got {first.get('input')!r})", code="usage.bad_spec"
            ) from None

    def geometry_label(self) -> str:
        return "native" if self.geometry is None else str(self.geometry)
