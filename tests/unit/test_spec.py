from __future__ import annotations

import pytest

from deskctl.errors import UsageError
from deskctl.spec import DesktopSpec, Geometry, Platform, WindowGeometry, parse_duration


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1024x768", (1024, 768, 24)), ("1280X800x16", (1280, 800, 16)), (" 800 x 600 ", (800, 600, 24))],
)
def test_geometry_parses(raw: str, expected: tuple[int, int, int]) -> None:
    g = Geometry.parse(raw)
    assert (g.width, g.height, g.depth) == expected
    assert str(g) == f"{expected[0]}x{expected[1]}"


@pytest.mark.parametrize("raw", ["0x0", "100000x10", "abc", "1024x", "10x10", "1024x768x7", "-5x100"])
def test_bad_geometry_is_a_usage_error_naming_the_value(raw: str) -> None:
    with pytest.raises(UsageError) as info:
        Geometry.parse(raw)
    assert info.value.exit_code == 2
    assert info.value.code == "usage.bad_geometry"
    assert raw.strip().split("x")[0] in info.value.message or repr(raw) in info.value.message


@pytest.mark.parametrize(("alias", "platform"), [("linux", "ubuntu"), ("win", "windows"), ("osx", "macos"),
                                                  ("mac", "macos"), ("Ubuntu", "ubuntu")])
def test_platform_aliases(alias: str, platform: str) -> None:
    assert Platform.parse(alias).value == platform


def test_unknown_platform_suggests_the_closest() -> None:
    with pytest.raises(UsageError) as info:
        Platform.parse("windws")
    assert info.value.code == "usage.unknown_platform"
    assert "did you mean 'windows'" in info.value.message


def test_unknown_provider_lists_known_ones() -> None:
    with pytest.raises(UsageError) as info:
        DesktopSpec.build(provider="xvbf")
    assert info.value.code == "usage.unknown_provider"
    assert "'xvfb'" in info.value.message


def test_negative_ttl_and_limits_are_refused() -> None:
    with pytest.raises(UsageError, match="negative"):
        DesktopSpec.build(ttl_seconds="-5")
    with pytest.raises(UsageError, match="greater than 0"):
        DesktopSpec.build(max_minutes=-1)


def test_native_geometry_and_window_geometry() -> None:
    spec = DesktopSpec.build(geometry="native", window_geometry="800x600+10+20")
    assert spec.geometry is None
    assert spec.geometry_label() == "native"
    assert spec.window_geometry == WindowGeometry(width=800, height=600, x=10, y=20)


def test_reserved_labels_are_refused() -> None:
    with pytest.raises(UsageError) as info:
        DesktopSpec.build(labels={"deskctl.session": "x"})
    assert info.value.code == "usage.reserved_label"


def test_spec_round_trips_through_json() -> None:
    spec = DesktopSpec.build(platform="win", geometry="1280x800", ttl_seconds="2h", labels={"run": "7"})
    again = DesktopSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec
    assert again.ttl_seconds == 7200


@pytest.mark.parametrize(("raw", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("7d", 604800), ("30", 30)])
def test_durations(raw: str, seconds: float) -> None:
    assert parse_duration(raw) == seconds


def test_bad_duration() -> None:
    with pytest.raises(UsageError):
        parse_duration("soon")


@pytest.mark.parametrize("field", ["max_minutes", "max_usd"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 0, "inf"])
def test_limits_must_be_finite_and_positive(field: str, value: object) -> None:
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(**{field: value})
    assert caught.value.code == "usage.bad_limit" and field in caught.value.message


@pytest.mark.parametrize("ttl", ["0", 0, "0s", "0m"])
def test_a_zero_ttl_is_refused(ttl: object) -> None:
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(ttl_seconds=ttl)
    assert caught.value.code == "usage.bad_duration"
    assert DesktopSpec.build(ttl_seconds="90s").ttl_seconds == 90


@pytest.mark.parametrize(("ttl", "seconds"), [("1s", 1), (1, 1), ("0.5", 0.5)])
def test_the_shortest_ttls_are_accepted(ttl: object, seconds: float) -> None:
    assert DesktopSpec.build(ttl_seconds=ttl).ttl_seconds == seconds


@pytest.mark.parametrize("field", ["max_minutes", "max_usd"])
def test_the_smallest_positive_limits_are_accepted(field: str) -> None:
    assert getattr(DesktopSpec.build(**{field: 0.001}), field) == 0.001
