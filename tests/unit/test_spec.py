from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from deskctl.errors import UsageError
from deskctl.spec import STORED, DesktopSpec, Geometry, Platform, WindowGeometry, parse_duration


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


def test_platform_is_one_class_of_strings_without_enum() -> None:
    import deskctl.platforms
    from deskctl._strenum import StrEnum

    assert Platform is deskctl.platforms.Platform and issubclass(Platform, StrEnum)
    assert list(Platform) == ["ubuntu", "windows", "macos"] and len(Platform) == 3
    assert Platform.parse(Platform.MACOS) is Platform.MACOS is Platform("macos") is Platform(Platform.MACOS)
    assert {Platform.WINDOWS: 1}["windows"] == 1 and f"{Platform.WINDOWS}" == "windows"
    with pytest.raises(ValueError, match="'linux' is not a valid Platform"):
        Platform("linux")  # the alias is parse's, not the class's


#: ``python -c WATCH``: import deskctl.spec and print, for each module of ``BANNED`` the import loaded, the deskctl
#: module whose code asked for it (the innermost deskctl frame; as tests/_cli.IMPORTERS_RUNNER, without its json,
#: which loads re and enum first)
WATCH = """
import sys
banned, seen = set(sys.argv[1].split()), {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in banned and name not in seen:
            frame = sys._getframe(1)
            while frame is not None and not frame.f_globals.get("__name__", "").startswith("deskctl"):
                frame = frame.f_back
            seen[name] = frame.f_globals["__name__"] if frame is not None else None
sys.meta_path.insert(0, Watch())
import deskctl.spec
print(repr(seen))
"""


def test_spec_platforms_and_lifecycle_import_nothing_a_one_shot_cli_process_must_not_load() -> None:
    """`deskctl up` loads deskctl.spec, and every one-shot process loads deskctl.platforms and deskctl.lifecycle:
    none of them (nor deskctl._strenum) is the module that loads a standard module those processes must not."""
    import ast
    import subprocess
    import sys

    banned = "enum threading contextlib functools collections collections.abc weakref importlib warnings re typing"
    done = subprocess.run([sys.executable, "-c", WATCH, banned], capture_output=True, text=True, timeout=120,
                          check=True)
    importers = ast.literal_eval(done.stdout.strip())
    ours = {"deskctl.spec", "deskctl.platforms", "deskctl.lifecycle", "deskctl._strenum"}
    assert {name: importer for name, importer in importers.items() if importer in ours} == {}


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


# -- the contract the ledger, the providers and users rely on (pinned on the pydantic model it replaced) --------

#: a spec row as deskctl wrote it to the ledger before spec.py dropped pydantic (model_dump(mode="json"))
OLD_ROW = {"provider": "memory", "platform": "windows", "geometry": {"width": 800, "height": 600, "depth": 16},
           "window_geometry": {"width": 80, "height": 60, "x": 1, "y": -2}, "start_url": "http://x",
           "window_manager": True, "ttl_seconds": 3600.0, "max_minutes": 5.0, "max_usd": 0.5, "labels": {"a": "b"},
           "provider_options": {"k": [1, {"z": None}]}, "budget": "b", "unknown_cost": "allow"}

FULL = {"provider": "memory", "platform": "win", "geometry": "800x600x16", "window_geometry": "80x60+1-2",
        "start_url": "http://x", "window_manager": True, "ttl_seconds": "1h", "max_minutes": 5, "max_usd": "0.5",
        "labels": {"a": "b"}, "provider_options": {"k": [1, {"z": None}]}, "budget": "b", "unknown_cost": "Allow"}


def test_a_spec_dumps_to_the_ledger_row_of_older_versions_and_loads_from_it() -> None:
    spec = DesktopSpec.build(**FULL)
    assert spec.model_dump(mode="json") == OLD_ROW
    assert json.loads(json.dumps(spec.model_dump(mode="json"))) == OLD_ROW
    again = DesktopSpec.model_validate(json.loads(json.dumps(OLD_ROW)), context=STORED)
    assert again == spec and again.model_dump(mode="json") == OLD_ROW
    assert DesktopSpec.model_validate(OLD_ROW) == spec
    assert DesktopSpec.model_validate(spec) is spec
    native = DesktopSpec.build(geometry="native")
    assert native.model_dump(mode="json") == {
        "provider": "xvfb", "platform": "ubuntu", "geometry": None, "window_geometry": None, "start_url": None,
        "window_manager": False, "ttl_seconds": None, "max_minutes": None, "max_usd": None, "labels": {},
        "provider_options": {}, "budget": None, "unknown_cost": None}
    assert DesktopSpec.model_validate(native.model_dump(mode="json"), context=STORED).geometry is None
    python = spec.model_dump()
    assert python["platform"] is Platform.WINDOWS and python["geometry"] == OLD_ROW["geometry"]
    assert list(python) == list(OLD_ROW)


def test_a_spec_goes_through_the_ledger_and_comes_back_equal() -> None:
    import deskctl

    desk = deskctl.open_desktop("memory", geometry="320x200", preflight=False, detached=True, window_manager=True,
                                ttl="2h", max_usd=3, labels={"run": "7"}, provider_options={"k": [1, 2]})
    try:
        desk.release()
        with deskctl.attach(desk.id) as again:
            assert again.spec == desk.spec
            assert again.spec.provider_options == {"k": [1, 2]} and again.spec.ttl_seconds == 7200.0
    finally:
        deskctl.attach(desk.id).close()


def test_provider_options_dump_as_json_values() -> None:
    import enum

    from deskctl.lifecycle import SessionStatus

    class Level(enum.IntEnum):
        HIGH = 2

    options = {"st": SessionStatus.READY, "lv": Level.HIGH, Platform.UBUNTU: "key",
               "t": (1, 2), "s": {3}, "p": Path("/a"), "b": b"hi", "e": Platform.MACOS, "inf": float("inf"),
               "dt": datetime.datetime(2024, 1, 2, 3, 4, 5), "d": datetime.date(2024, 1, 2),
               "utc": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC), "n": {"k": (Platform.MACOS,)}}
    dumped = DesktopSpec.build(provider_options=options).model_dump(mode="json")["provider_options"]
    assert dumped == {"st": "ready", "lv": 2, "ubuntu": "key",
                      "t": [1, 2], "s": [3], "p": "/a", "b": "hi", "e": "macos", "inf": None,
                      "dt": "2024-01-02T03:04:05", "d": "2024-01-02", "utc": "2024-01-02T03:04:05Z",
                      "n": {"k": ["macos"]}}
    assert {type(dumped[k]) for k in ("st", "e")} == {str} and {type(k) for k in dumped} == {str}


@pytest.mark.parametrize(("fields", "code"), [
    ({"geometry": "10x10"}, "usage.bad_geometry"),
    ({"geometry": {"width": 99999, "height": 600}}, "usage.bad_geometry"),
    ({"geometry": 5}, "usage.bad_geometry"), ({"window_geometry": "99999x600"}, "usage.bad_geometry"),
    ({"window_geometry": "big"}, "usage.bad_geometry"), ({"ttl_seconds": "soon"}, "usage.bad_duration"),
    ({"ttl_seconds": 0}, "usage.bad_duration"), ({"ttl_seconds": "99999999999999h"}, "usage.bad_duration"),
    ({"max_minutes": 0}, "usage.bad_limit"), ({"max_usd": 1e300}, "usage.bad_limit"),
    ({"max_usd": "nan"}, "usage.bad_limit"), ({"labels": {"deskctl.x": "a"}}, "usage.reserved_label"),
    ({"unknown_cost": "maybe"}, "usage.bad_policy"), ({"unknown_cost": ""}, "usage.bad_policy"),
    ({"provider": "xvbf"}, "usage.unknown_provider"), ({"platform": 5}, "usage.unknown_platform"),
    ({"provider": 5}, "usage.bad_spec"), ({"start_url": 5}, "usage.bad_spec"), ({"budget": 5}, "usage.bad_spec"),
    ({"unknown_cost": 5}, "usage.bad_spec"), ({"window_manager": "maybe"}, "usage.bad_spec"),
    ({"window_manager": 2}, "usage.bad_spec"), ({"window_manager": " true "}, "usage.bad_spec"),
    ({"window_manager": [1]}, "usage.bad_spec"), ({"max_minutes": "abc"}, "usage.bad_spec"),
    ({"max_minutes": [5]}, "usage.bad_spec"), ({"labels": {"a": 1}}, "usage.bad_spec"),
    ({"labels": {1: "a"}}, "usage.bad_spec"), ({"labels": [("a", "b")]}, "usage.bad_spec"),
    ({"labels": "a=b"}, "usage.bad_spec"), ({"provider_options": {1: "x"}}, "usage.bad_spec"),
    ({"geometry": {"width": 800}}, "usage.bad_spec"), ({"window_geometry": {"width": "a", "height": 600}},
                                                         "usage.bad_spec"),
    ({"geometry": {"width": 800.5, "height": 600}}, "usage.bad_spec"),
    # a type error is reported once the validators that raise at once have had their say, as pydantic did
    ({"start_url": 5, "labels": {"deskctl.x": "a"}}, "usage.reserved_label"),
    ({"start_url": 5, "geometry": "bad"}, "usage.bad_geometry"),
], ids=lambda value: repr(value)[:60])
def test_every_bad_field_is_a_usage_error_with_its_code(fields: dict[str, Any], code: str) -> None:
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(**fields)
    assert caught.value.code == code and caught.value.exit_code == 2
    if code == "usage.bad_spec":
        assert caught.value.message.startswith(next(iter(fields)))


def test_the_first_type_error_in_field_order_is_the_one_reported() -> None:
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(budget=6, start_url=5)
    assert caught.value.message.startswith("start_url")
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(geometry={"width": 800}, window_geometry={"width": "a", "height": 1})
    assert caught.value.message.startswith("geometry.height")


def test_a_wrong_type_never_echoes_a_secret() -> None:
    with pytest.raises(UsageError) as caught:
        DesktopSpec.build(provider_options="token=s3cr3t")
    assert caught.value.code == "usage.bad_spec" and "provider_options" in caught.value.message
    assert "s3cr3t" not in caught.value.message


@pytest.mark.parametrize(("fields", "field", "value"), [
    ({"window_manager": "true"}, "window_manager", True), ({"window_manager": "yes"}, "window_manager", True),
    ({"window_manager": "T"}, "window_manager", True), ({"window_manager": "off"}, "window_manager", False),
    ({"window_manager": 1}, "window_manager", True), ({"window_manager": 0.0}, "window_manager", False),
    ({"max_minutes": "5"}, "max_minutes", 5.0), ({"max_minutes": " 5 "}, "max_minutes", 5.0),
    ({"max_minutes": 5}, "max_minutes", 5.0), ({"max_usd": b"0.5"}, "max_usd", 0.5),
    ({"max_usd": True}, "max_usd", 1.0), ({"ttl_seconds": 5}, "ttl_seconds", 5.0),
    ({"ttl_seconds": " 5m "}, "ttl_seconds", 300.0), ({"ttl_seconds": True}, "ttl_seconds", 1.0),
    ({"unknown_cost": " Allow "}, "unknown_cost", "allow"), ({"provider": "Use_Computer"}, "provider", "use-computer"),
    ({"platform": "win"}, "platform", Platform.WINDOWS), ({"geometry": " NATIVE "}, "geometry", None),
    ({"geometry": (800, 600)}, "geometry", Geometry(width=800, height=600)),
    ({"geometry": (800, 600, 16)}, "geometry", Geometry(width=800, height=600)),
    ({"geometry": {"width": "800", "height": 600.0, "x": 1}}, "geometry", Geometry(width=800, height=600)),
    ({"geometry": Geometry(width=800, height=600)}, "geometry", Geometry(width=800, height=600)),
    ({"window_geometry": {"width": 80, "height": 60}}, "window_geometry", WindowGeometry(width=80, height=60)),
    ({"window_geometry": Geometry(width=800, height=600)}, "window_geometry", WindowGeometry(width=800, height=600)),
], ids=lambda value: repr(value)[:60])
def test_lax_values_are_converted_as_before(fields: dict[str, Any], field: str, value: object) -> None:
    got = getattr(DesktopSpec.build(**fields), field)
    assert got == value and type(got) is type(value)


def test_fields_defaults_and_what_a_spec_is_made_of() -> None:
    spec = DesktopSpec()
    assert repr(spec) == (
        "DesktopSpec(provider='xvfb', platform=<Platform.UBUNTU: 'ubuntu'>, geometry=Geometry(width=1024, "
        "height=768, depth=24), window_geometry=None, start_url=None, window_manager=False, ttl_seconds=None, "
        "max_minutes=None, max_usd=None, labels={}, provider_options={}, budget=None, unknown_cost=None)")
    assert str(spec).startswith("provider='xvfb' platform=<Platform.UBUNTU: 'ubuntu'> geometry=Geometry(")
    assert spec == DesktopSpec() == DesktopSpec.build() and spec != DesktopSpec(provider="memory") and spec != 5
    assert DesktopSpec(no_such_field=1) == spec == DesktopSpec.build(no_such_field=1)  # extra fields: ignored
    assert DesktopSpec.model_validate({"no_such_field": 1}) == spec
    with pytest.raises(TypeError):
        DesktopSpec("xvfb")  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(spec)  # it holds dicts
    labels = {"a": "b"}
    assert DesktopSpec.build(labels=labels).labels is not labels  # a copy: changing the caller's dict changes nothing
    assert repr(Geometry(width=800, height=600)) == "Geometry(width=800, height=600, depth=24)"
    assert repr(WindowGeometry(width=8, height=6)) == "WindowGeometry(width=8, height=6, x=0, y=0)"
    assert str(WindowGeometry.parse("800x600-5+7")) == "800x600+-5+7"
    assert Geometry(width="800", height=600, depth="16") == Geometry(width=800, height=600, depth=16)
    assert hash(Geometry(width=800, height=600)) == hash(Geometry.parse("800x600x24"))
    assert Geometry(width=800, height=600) != (800, 600)
    assert hash(WindowGeometry(width=8, height=6)) == hash(WindowGeometry.parse("8x6+0+0"))
    assert Geometry(width=800, height=600).contains(799, 0) and not Geometry(width=800, height=600).contains(800, 0)


@pytest.mark.parametrize("make", [lambda: DesktopSpec(), lambda: Geometry(width=800, height=600),
                                  lambda: WindowGeometry(width=8, height=6)], ids=["spec", "geometry", "window"])
def test_specs_are_immutable(make: Any) -> None:
    value = make()
    name = next(iter(value.model_dump()))
    before = getattr(value, name)
    with pytest.raises(Exception):  # noqa: B017 (pydantic raised its ValidationError, a record an AttributeError)
        setattr(value, name, before)
    with pytest.raises(Exception):  # noqa: B017
        delattr(value, name)
    assert getattr(value, name) == before


def test_a_copy_takes_updates_without_validating_them_and_construct_takes_values_as_given() -> None:
    """model_copy(update=) and model_construct check nothing, as pydantic's did: the preflight runner copies a
    spec for a provider instance whose name is in no registry."""
    spec = DesktopSpec.build(labels={"a": "b"})
    other = spec.model_copy(update={"provider": "no-such-provider", "geometry": Geometry(width=640, height=480)})
    assert other.provider == "no-such-provider" and other.geometry == Geometry(width=640, height=480)
    assert other.labels == spec.labels and spec.provider == "xvfb"
    assert spec.model_copy() == spec and spec.model_copy() is not spec
    assert spec.model_copy(deep=True).labels is not spec.labels
    built = DesktopSpec.model_construct(provider="zz", ttl_seconds=-5)
    assert (built.provider, built.ttl_seconds, built.geometry) == ("zz", -5, Geometry(width=1024, height=768))
    assert DesktopSpec.model_construct() == DesktopSpec()


def test_a_stored_spec_skips_the_upper_bounds_only() -> None:
    stored = DesktopSpec.model_validate({"ttl_seconds": "99999999999999h", "max_minutes": 1e300, "max_usd": 1e300},
                                        context=STORED)
    assert (stored.max_minutes, stored.max_usd) == (1e300, 1e300) and stored.ttl_seconds == 3.599999999999964e+17
    for row, code in [({"max_minutes": -1}, "usage.bad_limit"), ({"max_usd": "inf"}, "usage.bad_limit"),
                      ({"ttl_seconds": 0}, "usage.bad_duration"),
                      ({"geometry": {"width": 99999, "height": 5}}, "usage.bad_geometry")]:
        with pytest.raises(UsageError) as caught:
            DesktopSpec.model_validate(row, context=STORED)
        assert caught.value.code == code, row


def test_the_constructors_themselves_answer_a_wrong_value_with_a_usage_error() -> None:
    """Without pydantic, Geometry(...) and DesktopSpec(...) raise deskctl's errors (pydantic's ValidationError
    escaped them); values pydantic let through as a TypeError or OverflowError are usage errors too."""
    for make, code in [(lambda: Geometry(width=800.5, height=600), "usage.bad_spec"),
                       (lambda: Geometry(width=800), "usage.bad_spec"),
                       (lambda: Geometry(width="9" * 5000, height=600), "usage.bad_spec"),
                       (lambda: DesktopSpec(window_manager=None), "usage.bad_spec"),
                       (lambda: DesktopSpec.model_validate([1]), "usage.bad_spec"),
                       (lambda: DesktopSpec.build(ttl_seconds=[1]), "usage.bad_duration"),
                       (lambda: DesktopSpec.build(max_usd=10**400), "usage.bad_limit"),
                       (lambda: DesktopSpec.build(max_minutes=False), "usage.bad_limit"),
                       (lambda: DesktopSpec.build(provider_options={"x": object()}).model_dump(mode="json"),
                        "usage.bad_spec")]:
        with pytest.raises(UsageError) as caught:
            make()
        assert caught.value.code == code
        assert len(caught.value.message) < 200
    with pytest.raises(TypeError):
        DesktopSpec().model_copy(update={"no_such_field": 1})
