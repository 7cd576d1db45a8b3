"""Lax conversions of scalar values, as pydantic's lax mode made them: text from a str or UTF-8 bytes, a flag from
``"yes"``/``"off"``/``1``, a whole number from ``"7"`` or ``7.0``, a number from ``" 1e3 "``.

One place for :mod:`deskctl.spec` and :mod:`deskctl.providers.options`, which word a refusal each their own way
(a spec: ``usage.bad_spec`` naming the field and the type; an option: pydantic's words naming the key and the
rule). So a conversion here raises :class:`Refused` with a neutral :attr:`~Refused.reason` (one of the constants
below), never the value, and the caller says it. Standard library only (``math``, and ``re`` imported where text is
read as a whole number): this is on ``deskctl up``'s path, which otherwise loads no ``re`` (with it ``enum``,
``functools`` and ``collections``).
"""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FALSE", "FINITE", "FRACTION", "SYNTAX", "TRUE", "TYPE", "UTF8", "WORD", "Refused", "flag", "number",
           "text", "whole"]

#: why a value was refused: not of a type the conversion reads at all
TYPE = "type"
#: bytes that are not UTF-8 where text is read
UTF8 = "utf8"
#: a float with a fractional part where a whole number is wanted
FRACTION = "fraction"
#: an infinite or nan float where a whole number is wanted
FINITE = "finite"
#: text that is not a number (or not a whole one) in the grammar read
SYNTAX = "syntax"
#: a number other than 0 and 1, or text that is neither a true nor a false word, where a flag is wanted
WORD = "word"

#: the words of a flag (compared in lower case)
TRUE = frozenset(("1", "on", "t", "true", "y", "yes"))
FALSE = frozenset(("0", "off", "f", "false", "n", "no"))

_WHOLE = r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?"  # an integer as text, with a zero fraction allowed
_I64 = 2 ** 63  # a flag reads numbers of 64 bits only (a larger one is no number to it)


class Refused(Exception):
    """A value a conversion does not take; :attr:`reason` says why (never the value, which may be a secret)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def text(value: Any) -> str:
    """A str as it is (a subclass too), or bytes or a bytearray read as UTF-8. Refused: :data:`UTF8`,
    :data:`TYPE`."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            raise Refused(UTF8) from None
    raise Refused(TYPE)


def flag(value: Any) -> bool:
    """A bool as it is; 0 or 1 (an int, or a float of one); a word of :data:`TRUE` or :data:`FALSE` in any case.
    Refused: :data:`WORD` (another number of 64 bits, other text), :data:`TYPE`, :data:`UTF8`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < _I64:
        value = int(value)
    if isinstance(value, int) and -_I64 <= value < _I64:
        if value in (0, 1):
            return value == 1
        raise Refused(WORD)
    word = text(value)
    if len(word) <= 8:  # no longer text is a word (nor is made one by lower())
        word = word.lower()
        if word in TRUE:
            return True
        if word in FALSE:
            return False
    raise Refused(WORD)


def whole(value: Any) -> int:
    """An int from an int (True is 1), a float without a fraction, or text of one: digits with a sign,
    underscores between them and a fraction of zeros (``" 1_000.0 "``); an int of more digits than Python
    converts is its ``ValueError``. Refused: :data:`FINITE`, :data:`FRACTION`, :data:`SYNTAX`, :data:`TYPE`,
    :data:`UTF8`."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refused(FINITE)
        if not value.is_integer():
            raise Refused(FRACTION)
        return int(value)
    digits = text(value).strip()
    import re

    if not re.fullmatch(_WHOLE, digits):
        raise Refused(SYNTAX)
    return int(digits.partition(".")[0])


def number(value: Any) -> float:
    """A float from an int or a float (an int too large for one is its ``OverflowError``), or from ASCII text
    ``float()`` reads (``" 1e3 "``, ``"inf"``, ``"nan"``). Refused: :data:`SYNTAX`, :data:`TYPE`,
    :data:`UTF8`."""
    if isinstance(value, int | float):
        return float(value)
    digits = text(value).strip()
    try:
        if not digits.isascii():
            raise ValueError(digits)
        return float(digits)
    except ValueError:
        raise Refused(SYNTAX) from None
