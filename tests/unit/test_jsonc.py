"""deskctl._jsonc: json.dumps / json.loads through CPython's C codec without the json package's import. It writes
and reads the ledger's rows (every CLI call), so it must give json's own text, values and errors, on every shape."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable

import pytest

from deskctl._jsonc import dumps, loads


def _outcome(function: Callable[..., object], *args: object, **kwargs: object) -> tuple[object, ...]:
    """What the call gives: its value's repr (NaN is not equal to itself), or its error's type and text."""
    try:
        return ("value", repr(function(*args, **kwargs)))
    except Exception as exc:
        return ("error", type(exc), str(exc))


_STRINGS = ["", "a", "é", "日本", "\x00\x1f", "\"\\/", "\ud800", "😀", "line\nbreak", " spaced ", "NaN", "1e5"]
_NUMBERS = [0, -1, 2**70, -(2**64), 0.0, -0.0, 1.5, 1e300, 5e-324, float("inf"), float("-inf"), float("nan"),
            True, False]


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 4)
    if kind == 0:
        return rng.choice(_STRINGS) + str(rng.randrange(3))
    if kind == 1:
        return rng.choice(_NUMBERS)
    if kind == 2:
        return None
    if kind == 3:
        return rng.choice([object, complex(1, 2), b"bytes", {1, 2}])  # not JSON: default=str writes its str()
    if kind in (4, 5):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    keys: list[object] = [rng.choice(_STRINGS) + str(i) for i in range(rng.randrange(4))]
    if kind == 8 and rng.random() < 0.3:
        keys.append(rng.choice([1, 2.5, True, None]))  # json converts (or, sorting mixed kinds, refuses) these
    return {key: _value(rng, depth + 1) for key in keys}


def test_dumps_and_loads_give_what_json_gives_on_a_generated_corpus() -> None:
    rng = random.Random(20261202)
    for _ in range(5000):
        value = _value(rng)
        for sort_keys in (True, False):
            assert _outcome(dumps, value, sort_keys=sort_keys) == _outcome(
                json.dumps, value, sort_keys=sort_keys, default=str), value
        text = json.dumps(value, default=str)
        for variant in (text, f"  {text}\n", f"\t{text} ", f"{text} x", f"{text}{text}", text[:-1], text[1:]):
            assert _outcome(loads, variant) == _outcome(json.loads, variant), variant


@pytest.mark.parametrize("text", ["", " ", "{", "[1,]", "nul", "\"a\x01\"", "{\"a\" 1}", "1 2", "\ufeff1", "[1]\n"])
def test_a_text_that_is_not_one_document_is_jsons_own_error(text: str) -> None:
    assert _outcome(loads, text) == _outcome(json.loads, text)


def test_a_circular_value_is_refused_as_json_refuses_it_and_the_next_call_is_unharmed() -> None:
    looped: list[object] = []
    looped.append(looped)
    assert _outcome(dumps, looped) == _outcome(json.dumps, looped, default=str)
    shared = [1]
    assert dumps([shared, shared]) == "[[1], [1]]"


def test_importing_it_loads_neither_json_nor_re() -> None:
    probe = ("import sys; from deskctl._jsonc import dumps, loads; assert loads(dumps({'a': [1.5]})) == {'a': [1.5]}; "
             "print(sorted(m for m in ('json', 're') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
