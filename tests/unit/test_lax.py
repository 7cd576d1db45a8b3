"""deskctl._lax: the lax conversions a spec and the provider options share. Each refusal carries a neutral reason
(the callers word it: tests/unit/test_spec.py and test_provider_options.py pin their messages); both callers read
flags with the same words; the module stays standard-library only (it is on ``deskctl up``'s path)."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import pytest

from deskctl import _lax as lax
from deskctl.errors import UsageError


def _id(value: Any) -> str:
    """A case's name, the same in every xdist worker (a function by its name, not its address)."""
    return getattr(value, "__name__", None) or repr(value)[:40]


@pytest.mark.parametrize(("convert", "value", "expected"), [
    (lax.text, "a", "a"), (lax.text, b"caf\xc3\xa9", "café"), (lax.text, bytearray(b"x"), "x"),
    (lax.flag, True, True), (lax.flag, 0, False), (lax.flag, 1.0, True), (lax.flag, " ", None),
    (lax.flag, "YES", True), (lax.flag, b"off", False), (lax.flag, "t", True), (lax.flag, "N", False),
    (lax.whole, True, 1), (lax.whole, 7.0, 7), (lax.whole, " 1_000.00 ", 1000), (lax.whole, b"-5", -5),
    (lax.number, 2, 2.0), (lax.number, " 1e3 ", 1000.0), (lax.number, b"0.5", 0.5), (lax.number, "inf", math.inf),
], ids=_id)
def test_what_each_conversion_takes(convert: Any, value: Any, expected: Any) -> None:
    if expected is None:
        with pytest.raises(lax.Refused):
            convert(value)
        return
    got = convert(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("convert", "value", "reason"), [
    (lax.text, 5, lax.TYPE), (lax.text, b"\xff", lax.UTF8),
    (lax.flag, 2, lax.WORD), (lax.flag, 2.0, lax.WORD), (lax.flag, "maybe", lax.WORD), (lax.flag, "x" * 100, lax.WORD),
    (lax.flag, 1.5, lax.TYPE), (lax.flag, 2 ** 64, lax.TYPE), (lax.flag, None, lax.TYPE), (lax.flag, b"\xff", lax.UTF8),
    (lax.whole, math.inf, lax.FINITE), (lax.whole, 1.5, lax.FRACTION), (lax.whole, "5.5", lax.SYNTAX),
    (lax.whole, "\u0665", lax.SYNTAX), (lax.whole, [5], lax.TYPE), (lax.whole, b"\xff", lax.UTF8),
    (lax.number, "1.5x", lax.SYNTAX), (lax.number, "\u0661.\u0665", lax.SYNTAX), (lax.number, None, lax.TYPE),
], ids=_id)
def test_a_refusal_says_why_in_neutral_words_never_the_value(convert: Any, value: Any, reason: str) -> None:
    with pytest.raises(lax.Refused) as caught:
        convert(value)
    assert caught.value.reason == reason and str(caught.value) == reason


@pytest.mark.parametrize("word", sorted(lax.TRUE | lax.FALSE))
def test_a_spec_and_the_provider_options_read_the_same_flag_words(word: str) -> None:
    from deskctl.providers.xvfb.options import Options
    from deskctl.spec import DesktopSpec

    for given in (word, word.upper(), word.encode()):
        assert DesktopSpec.build(window_manager=given).window_manager is (word in lax.TRUE)
        assert Options.parse({"window_manager": given}).window_manager is (word in lax.TRUE)  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["maybe", 2, " true ", "tru"])
def test_a_spec_and_the_provider_options_refuse_the_same_flags_each_in_its_words(value: Any) -> None:
    from deskctl.providers.xvfb.options import Options
    from deskctl.spec import DesktopSpec

    with pytest.raises(UsageError) as spec:
        DesktopSpec.build(window_manager=value)
    assert spec.value.code == "usage.bad_spec" and spec.value.message.startswith("window_manager: expected a boolean")
    with pytest.raises(UsageError) as option:
        Options.parse({"window_manager": value})
    assert (option.value.code, option.value.message) == (
        "usage.bad_option", "provider options: option 'window_manager': Input should be a valid boolean, unable to "
        "interpret input")


def test_the_module_imports_the_standard_library_only() -> None:
    """deskctl up imports it: nothing of deskctl's, nothing heavy."""
    tree = ast.parse(Path(lax.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "math", "re", "typing"}, imported


def test_importing_it_loads_no_re() -> None:
    """re (with enum, functools and collections: ~20M instructions) loads when text is read as a whole number, not
    with the module: `deskctl up` imports it and reads no text."""
    import subprocess
    import sys

    code = ("import sys, deskctl._lax as lax; before = 're' in sys.modules; lax.flag('yes'); lax.number(' 1e3 ');"
            " print(before, 're' in sys.modules, lax.whole(' 1_000.0 '), 're' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "1000", "True"]
