"""The bounds of every number (and of the few strings whose length matters) that any surface of deskctl takes.

One table, :data:`BOUNDS`: a named :class:`Bound` per parameter, with its range and a short doc. Every surface
(the CLI's flags and ``[defaults]`` keys, :class:`~deskctl.Desktop` and ``deskctl.aio``, the MCP tools, the view's
``/input``, the in-desktop agent's requests, Harbor's ``--ek`` options) checks a value with :func:`check_number`
(or :func:`check_text`) under the parameter's name before anything runs; none keeps a bound of its own.

Why every number is bounded: one MCP ``scroll`` with ``dy=1e9`` held the X connection for hours, and a ``--ttl``
of 99999999999999h stored an expiry no ISO timestamp can show (``deskctl ls --json`` then failed for good). A
bound is the most anything sensible asks for; NaN and infinities are never in range.

A refused value is a :class:`~deskctl.errors.UsageError` (exit 2) with the bound's stable code:
``usage.out_of_range`` (a number outside its range) or ``usage.not_a_number`` (NaN, an infinity, a fraction where
a whole number is needed, or no number at all). A bound that was checked before this table existed keeps the code
it had (``usage.bad_limit`` for limits and timeouts, ``usage.bad_duration`` for the ttl, ``usage.bad_geometry``
for screen sizes, ``usage.bad_record_settle``, ``usage.bad_value`` for the MCP ``wait``), for NaN as for out of
range, since codes are API.
"""

from __future__ import annotations

from deskctl.errors import ConfigInvalid, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BOUNDS", "VIEW_WHEEL_STEP", "Bound", "check_number", "check_text", "describe"]

OUT_OF_RANGE = "usage.out_of_range"
NOT_A_NUMBER = "usage.not_a_number"
TOO_LONG = "usage.too_long"

_DAY = 86400.0
_YEAR_DAYS = 366.0


class Bound:
    """``lo <= value <= hi`` (``lo`` excluded when ``lo_open``); ``integer``: a whole number. ``code``: the error
    code of a refused value (``None``: ``usage.out_of_range`` / ``usage.not_a_number``). A plain class, not a
    dataclass: ``deskctl do`` loads this module for every action, and dataclasses' import is not free."""

    __slots__ = ("code", "doc", "hi", "integer", "lo", "lo_open", "unit")

    def __init__(self, lo: float, hi: float, doc: str, *, integer: bool = False, lo_open: bool = False,
                 unit: str = "", code: str | None = None) -> None:
        self.lo = lo
        self.hi = hi
        self.doc = doc
        self.integer = integer
        self.lo_open = lo_open
        self.unit = unit
        self.code = code

    def __repr__(self) -> str:
        return f"Bound({self.text()!r}, code={self.code!r})"

    def text(self) -> str:
        """The range as the docs and the error messages show it: ``0 < x <= 86400 seconds``."""
        low = f"{_fmt(self.lo)} < x" if self.lo_open else f"{_fmt(self.lo)} <= x"
        kind = "whole number, " if self.integer else ""
        return f"{kind}{low} <= {_fmt(self.hi)}" + (f" {self.unit}" if self.unit else "")


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


_LIMIT = "usage.bad_limit"

#: every bounded parameter, by the name its surfaces check it under
BOUNDS: dict[str, Bound] = {
    # -- where on the screen ---------------------------------------------------------------------------------
    "coordinate": Bound(-32768, 32767, "a screen coordinate (x, y, x1 ...): what X11 can carry; a point must also "
                        "be on the pinned screen (else geometry.out_of_bounds)", integer=True, unit="pixels"),
    "screen_side": Bound(64, 8192, "width or height of a desktop (--geometry WxH)", integer=True, unit="pixels",
                         code="usage.bad_geometry"),
    "window_side": Bound(1, 8192, "width or height of the start-URL window (--window-geometry WxH) or of a moved "
                         "window (move_window)", integer=True,
                         unit="pixels", code="usage.bad_geometry"),
    "window_offset": Bound(-8192, 8192, "position of the start-URL window (--window-geometry WxH+X+Y) or of a "
                           "moved window (move_window)",
                           integer=True, unit="pixels", code="usage.bad_geometry"),
    "a11y_depth": Bound(1, 1000, "levels of an accessibility tree below the desktop (max_depth)", integer=True),
    "a11y_nodes": Bound(1, 100_000, "nodes of one accessibility tree (max_nodes)", integer=True),
    "quiet_ms": Bound(0, 60_000, "milliseconds the screen must not change to count as stable (quiet_ms)",
                      integer=True, unit="ms"),
    # -- input -----------------------------------------------------------------------------------------------
    "click_count": Bound(1, 3, "clicks of one click action (2: double, 3: triple)", integer=True),
    "scroll_clicks": Bound(-1000, 1000, "wheel clicks of one scroll (dx, dy; negative: up / left)", integer=True),
    "view_point": Bound(-1e6, 1e6, "a pointer position on the view's image, in page pixels (clamped to the screen)",
                        unit="page pixels"),
    "view_shown_side": Bound(0, 1e6, "the shown width or height of the view's image", lo_open=True,
                             unit="page pixels"),
    "type_chars": Bound(0, 100_000, "characters of one `type` action (longer text: several calls, or the clipboard)",
                        integer=True, unit="characters"),
    "key_chars": Bound(1, 256, "characters of one key name or chord (ctrl+shift+t)", integer=True, unit="characters"),
    # -- time ------------------------------------------------------------------------------------------------
    "ttl": Bound(0, _YEAR_DAYS * _DAY, "lifetime of a desktop before its backstop may end it (--ttl)",
                 lo_open=True, unit="seconds", code="usage.bad_duration"),
    "max_minutes": Bound(0, _YEAR_DAYS * 24 * 60, "time limit of a session (--max-minutes)", lo_open=True,
                         unit="minutes", code=_LIMIT),
    "duration": Bound(0, 100 * 365 * _DAY, "a look-back window (--since, --window)", unit="seconds",
                      code="usage.bad_duration"),
    "ready_timeout": Bound(0, _DAY, "seconds to wait for a new desktop to be ready (--ready-timeout)", lo_open=True,
                           unit="seconds", code=_LIMIT),
    "preflight_timeout": Bound(0, 3600, "seconds each preflight check may take (--timeout)", lo_open=True,
                               unit="seconds", code=_LIMIT),
    "exec_timeout": Bound(0, 7 * _DAY, "seconds before a command on the desktop is killed (exit code 124)",
                          lo_open=True, unit="seconds", code=_LIMIT),
    "wait_timeout": Bound(0, _DAY, "seconds `wait_for` waits for a window", lo_open=True, unit="seconds",
                          code=_LIMIT),
    "wait_interval": Bound(0, 3600, "seconds between two looks of `wait_for`", lo_open=True, unit="seconds",
                           code=_LIMIT),
    "mcp_wait": Bound(0, 60, "seconds of one MCP `wait` (a longer pause is several calls)", unit="seconds",
                      code="usage.bad_value"),
    "mcp_wait_timeout": Bound(0, 60, "seconds of one MCP `wait_for`", lo_open=True, unit="seconds",
                              code="usage.bad_value"),
    "token_wait": Bound(0, _DAY, "seconds deskctl-agent waits for its token file (--token-wait)", unit="seconds"),
    "record_settle": Bound(0, 60, "seconds a recorded action's after shot may wait for the screen to change",
                           unit="seconds", code="usage.bad_record_settle"),
    "default_minutes": Bound(0, _YEAR_DAYS * 24 * 60, "minutes assumed for a running session without a limit",
                             lo_open=True, unit="minutes", code=_LIMIT),
    # -- money -----------------------------------------------------------------------------------------------
    "max_usd": Bound(0, 1e9, "money limit of a session (--max-usd)", lo_open=True, unit="USD", code=_LIMIT),
    "budget_usd": Bound(0, 1e9, "cap of a shared budget or of `budget check` (0: nothing may be spent)",
                        unit="USD", code=_LIMIT),
    "tokens": Bound(0, 10**12, "tokens of one metered model call (Desktop.meter's input_tokens, output_tokens)",
                    integer=True, code="usage.bad_meter"),
    "meter_usd": Bound(0, 1e9, "what one metered model call cost (Desktop.meter's usd), or a catalog price per "
                       "million tokens", unit="USD", code="usage.bad_meter"),
    # -- serving ---------------------------------------------------------------------------------------------
    "port": Bound(0, 65535, "a TCP port to listen on (0: a free one)", integer=True),
    "stream_port": Bound(1, 65535, "the port on a desktop's loopback an agent stream connects to", integer=True,
                         code="usage.bad_port"),
    "fps": Bound(0.1, 120, "most frames a second the view captures", unit="frames/s"),
    "quality": Bound(10, 95, "JPEG quality of the view", integer=True),
    "provider_option": Bound(0, 30 * _DAY, "a number among a provider's options (poll intervals, timeouts and "
                             "TTLs in seconds, counts)", code="config.invalid"),
    "create_lookup_seconds": Bound(0, 600, "how long a provider looks for a desktop whose create answer was lost "
                                   "(option create_lookup_seconds; 0 looks once)", unit="seconds",
                                   code="config.invalid"),
    "png_level": Bound(0, 9, "zlib level of a PNG screenshot (the agent's compress_level)", integer=True),
    "file_mode": Bound(0, 0o7777, "permission bits of a file written on the desktop", integer=True),
}

#: one scroll event of the view's page passes on at most this many wheel clicks: a fast flick is cut to it, not
#: refused (a flick is not a mistake); the event's dx/dy are still checked against ``scroll_clicks``
VIEW_WHEEL_STEP = 20


def describe(name: str) -> str:
    """``name``'s range in words (for help texts and docs)."""
    return BOUNDS[name].text()


def _refuse(name: str, label: str, value: Any, bound: Bound, code: str, problem: str) -> UsageError:
    shown = repr(value)
    if len(shown) > 40:  # a megabyte of garbage is not echoed back
        shown = shown[:37] + "..."
    kind = ConfigInvalid if code.startswith("config.") else UsageError  # a provider option's family is config
    return kind(f"{label} {shown} {problem}; allowed: {bound.text()}", code=code,
                      remedy=f"{name}: {bound.doc}",
                      details={"parameter": name, "min": bound.lo, "max": bound.hi, "integer": bound.integer})


def check_number(name: str, value: Any, *, what: str | None = None, strings: bool = True) -> Any:
    """``value`` as the number parameter ``name`` accepts (an ``int`` for a whole-number bound, else a
    ``float``), or :class:`~deskctl.errors.UsageError` naming the bound. Accepts ints, floats and the strings of a
    number (a flag, a config value); refuses booleans, NaN, infinities, fractions where a whole number is
    needed, and anything out of range. ``what`` names the value in the message (default: ``name``). With
    ``strings`` False a string is no number (a field of JSON or of an action)."""
    bound = BOUNDS[name]
    label = what or name
    range_code = bound.code or OUT_OF_RANGE
    type_code = bound.code or NOT_A_NUMBER
    number: float | int
    if isinstance(value, bool) or not isinstance(value, int | float | str) or (isinstance(value, str) and not strings):
        raise _refuse(name, label, value, bound, type_code, f"is not a number ({type(value).__name__})")
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text) if bound.integer and text.lstrip("+-").isdigit() else float(text)
        except (ValueError, OverflowError):
            raise _refuse(name, label, value, bound, type_code, "is not a number") from None
    else:
        number = value
    if isinstance(number, float):
        if number - number != 0:  # NaN or an infinity (math.isfinite, without math's import on every action)
            raise _refuse(name, label, value, bound, type_code, "is not a finite number")
        if bound.integer and not number.is_integer():
            raise _refuse(name, label, value, bound, type_code, "is not a whole number")
    unit = f" {bound.unit}" if bound.unit else ""
    if bound.lo_open and not number > bound.lo:
        raise _refuse(name, label, value, bound, range_code, f"must be greater than {_fmt(bound.lo)}{unit}")
    if number < bound.lo:
        raise _refuse(name, label, value, bound, range_code, f"must be at least {_fmt(bound.lo)}{unit}")
    if number > bound.hi:
        raise _refuse(name, label, value, bound, range_code, f"must be at most {_fmt(bound.hi)}{unit}")
    return int(number) if bound.integer else float(number)


def check_text(name: str, value: Any, *, what: str | None = None) -> str:
    """``value`` if it is a string whose length is within the bound ``name`` (``usage.too_long`` beyond it,
    ``usage.invalid`` for no string), else :class:`~deskctl.errors.UsageError`."""
    bound = BOUNDS[name]
    label = what or name
    if not isinstance(value, str):
        raise UsageError(f"{label} must be a string, not {type(value).__name__}", code="usage.invalid")
    if not bound.lo <= len(value) <= bound.hi:
        code = TOO_LONG if len(value) > bound.hi else "usage.invalid"
        raise UsageError(f"{label} has {len(value)} characters; allowed: {bound.text()}", code=code,
                         remedy=f"{name}: {bound.doc}",
                         details={"parameter": name, "min": bound.lo, "max": bound.hi, "length": len(value)})
    return value
