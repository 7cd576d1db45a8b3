"""deskctl.limits: the one table of bounds. How a value is checked, that the docs show the table as it is, and that
a spec stored before a bound existed stays readable (so its session can still be ended)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from deskctl.errors import UsageError
from deskctl.limits import BOUNDS, check_number, check_text
from deskctl.spec import STORED, DesktopSpec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("scroll_clicks", 5, 5), ("scroll_clicks", "-5", -5), ("scroll_clicks", 5.0, 5), ("fps", "2.5", 2.5),
    ("port", 0, 0), ("max_usd", 1e9, 1e9), ("mcp_wait", 0, 0.0),
])
def test_values_in_range_come_back_as_the_bound_wants_them(name: str, value: object, expected: float) -> None:
    got = check_number(name, value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("name", "value", "code"), [
    ("scroll_clicks", 10**9, "usage.out_of_range"), ("scroll_clicks", 2**63, "usage.out_of_range"),
    ("scroll_clicks", 1.5, "usage.not_a_number"), ("scroll_clicks", float("nan"), "usage.not_a_number"),
    ("fps", float("inf"), "usage.not_a_number"), ("fps", "nan", "usage.not_a_number"),
    ("fps", 0, "usage.out_of_range"), ("port", True, "usage.not_a_number"), ("port", None, "usage.not_a_number"),
    ("port", "9" * 5000, "usage.not_a_number"), ("port", [80], "usage.not_a_number"),
    ("max_usd", 0, "usage.bad_limit"), ("max_usd", float("nan"), "usage.bad_limit"),
    ("ttl", 1e20, "usage.bad_duration"), ("screen_side", 9000, "usage.bad_geometry"),
])
def test_values_out_of_range_or_no_numbers_are_usage_errors_with_the_bounds_code(name: str, value: object,
                                                                                 code: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_number(name, value)
    assert caught.value.code == code and caught.value.exit_code == 2
    assert len(caught.value.message) < 300  # a megabyte of garbage is not echoed back


def test_a_string_is_no_number_where_strings_are_off_and_text_has_a_length() -> None:
    with pytest.raises(UsageError, match="is not a number"):
        check_number("coordinate", "5", strings=False)
    with pytest.raises(UsageError) as caught:
        check_text("type_chars", "x" * 100_001)
    assert caught.value.code == "usage.too_long"
    assert check_text("type_chars", "x" * 100_000) == "x" * 100_000


def test_the_docs_show_every_bound_as_the_table_has_it() -> None:
    text = DOCS.read_text()
    for name, bound in BOUNDS.items():
        assert f"| `{name}` | {bound.text()} |" in text, name


def test_a_spec_stored_before_the_bounds_stays_readable_but_a_new_one_is_refused() -> None:
    stored = DesktopSpec.build(ttl_seconds="1h").model_dump(mode="json")
    stored.update(ttl_seconds=3.6e17, max_minutes=1e300, max_usd=1e300)
    assert DesktopSpec.model_validate(stored, context=STORED).ttl_seconds == 3.6e17
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(ttl_seconds="99999999999999h")
    assert caught.value.code == "usage.bad_duration"


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_the_library_and_aio_check_before_acting_and_the_desktop_goes_on() -> None:
    """Desktop and deskctl.aio on a real Xvfb desktop: each bad value is a usage error before anything is sent."""
    import deskctl
    import deskctl.aio

    calls: list[tuple[str, Any]] = [
        ("scroll_clicks", lambda d: d.scroll(10, 10, dy=10**9)), ("scroll_clicks", lambda d: d.scroll(10, 10, dx=2.5)),
        ("click_count", lambda d: d.click(10, 10, count=0)), ("coordinate", lambda d: d.move(float("nan"), 1)),
        ("type_chars", lambda d: d.type("x" * 100_001)), ("key_chars", lambda d: d.key("a" * 300)),
        ("exec_timeout", lambda d: d.exec("true", timeout=0)), ("exec_timeout", lambda d: d.exec("true", timeout=-1)),
        ("exec_timeout", lambda d: d.exec("true", timeout=float("inf"))),
        ("wait_timeout", lambda d: d.wait_for("x", timeout=float("nan"))),
        ("wait_interval", lambda d: d.wait_for("x", timeout=1, interval=0)),
    ]
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        for name, call in calls:
            with pytest.raises(UsageError) as caught:
                call(desk)
            assert caught.value.details.get("parameter") == name, (name, caught.value)
        desk.scroll(10, 10, dy=1000)  # the most that is allowed runs
        assert desk.size == (320, 240)

    async def main() -> None:
        async with deskctl.aio.open_desktop("xvfb", geometry="320x240") as adesk:
            with pytest.raises(UsageError, match="must be at most 1000"):
                await adesk.scroll(10, 10, dy=10**9)
            with pytest.raises(UsageError, match="not a finite number"):
                await adesk.exec("true", timeout=float("nan"))

    asyncio.run(main())
    with pytest.raises(UsageError) as caught:
        deskctl.open_desktop("xvfb", geometry="320x240", ready_timeout=float("nan"))
    assert caught.value.code == "usage.bad_limit"
