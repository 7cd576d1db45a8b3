"""JSON as :func:`json.loads` and :func:`json.dumps` write and read it, through CPython's C codec (:mod:`_json`, the
one the json package itself uses) without importing the json package: its import compiles regular expressions
and so loads :mod:`re` (together a tenth of the instructions of a whole ``deskctl do`` process, which reads its
session's row of the ledger and writes one). A text that is not one JSON document goes to the json package, so
the error is json's own. tests/unit/test_jsonc.py holds both functions to json's results.
"""

from __future__ import annotations

from _json import encode_basestring_ascii as _ascii
from _json import make_encoder as _make_encoder
from _json import make_scanner as _make_scanner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


__all__ = ["dumps", "loads"]

_SPACE = " \t\n\r"


class _Defaults:
    """What :mod:`_json`'s scanner reads from a :class:`json.JSONDecoder`: :func:`json.loads`'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__
    memo: dict[str, Any] = {}


_scan = _make_scanner(_Defaults())  # type: ignore[arg-type]  # it reads these attributes of a JSONDecoder


def loads(text: str) -> Any:
    """``json.loads(text)``."""
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration:
        pass  # no JSON value there: json.loads raises its own error below
    else:
        if not text[end:].strip(_SPACE):
            return value
    import json

    return json.loads(text)


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """``json.dumps(value, sort_keys=sort_keys, default=str)``."""
    if isinstance(value, str):
        return str(_ascii(value))
    # a new encoder per call, as json.dumps: its markers (the circular-reference check) start empty
    encode = _make_encoder({}, str, _ascii, None, ": ", ", ", sort_keys, False, True)
    return "".join(encode(value, 0))
