"""The compatibility matrix: data integrity, agent x task OS, task OS x platform, platform x provider, geometry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deskctl.checks import compat
from deskctl.errors import CompatError, ConfigInvalid, UsageError
from deskctl.providers import known_provider_names, load_provider_class
from deskctl.spec import DesktopSpec, Platform, WindowGeometry
from unit._preflight_fakes import FixedSizeProvider, RetinaProvider, StubProvider

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# Imported while the module is collected, not in a test: CPython 3.11 fails to parse a module (SystemError "AST
# constructor recursion depth mismatch") when the garbage collector, during the parse, logs an earlier test's
# unretrieved future exception (the traceback printer parses source too).
PROVIDER_CLASSES = [load_provider_class(name) for name in known_provider_names()]


def _spec(platform: str = "ubuntu", geometry: str | None = "1024x768") -> DesktopSpec:
    # provider "xvfb" only satisfies the spec validator; the checks look at the provider object passed in
    return DesktopSpec.model_construct(
        provider="xvfb", platform=Platform.parse(platform),
        geometry=None if geometry is None else DesktopSpec.build(geometry=geometry).geometry,
        max_minutes=None, max_usd=None, provider_options={}, labels={},
    )


def test_every_row_names_a_known_source_and_a_date() -> None:
    matrix = compat.load_matrix()
    for source in matrix.sources.values():
        assert source["ref"] and _DATE.match(source["date"])
    tables = ["platform_provider", "agents", "task_os_platform", "geometry", "hidpi"]
    rows = [row for table in tables for row in matrix.rows(table)]
    rows += [matrix.raw["default_agent_task_os"], matrix.raw["model_downscale"]]
    for row in rows:
        assert row["source"] in matrix.sources, row
        assert _DATE.match(row["date"]), row


def test_every_source_is_one_a_user_can_read() -> None:
    """A citation names a public place (a repository and path, a package, a vendor's docs, a man page) or a
    deskctl module a user has installed: never a file of the development tree that is not shipped."""
    public = re.compile(r"github\.com/|PyPI |docs|\.io\b|\.ai\b|\.computer\b|Xvfb\(1\)|^deskctl\.")
    refs = [source["ref"] for source in compat.load_matrix().sources.values()]
    refs += [cls.credentials.source for cls in PROVIDER_CLASSES if cls.credentials.variables]
    for ref in refs:
        assert not re.search(r"(^|[\s;(])(shared|src|tests)/", ref), ref
        assert public.search(ref), ref


def test_platform_rows_cover_the_brief() -> None:
    served = {r["provider"]: set(r["platforms"]) for r in compat.platform_table()}
    assert served["xvfb"] == served["docker"] == served["ssh"] == {"ubuntu"}
    assert served["daytona"] == {"ubuntu", "windows"}
    assert "windows" in served["cua-cloud"] and "windows" in served["use-computer"]
    assert "macos" in served["use-computer"]


def test_the_data_file_does_not_repeat_what_a_provider_class_declares() -> None:
    """Platforms and sizes of deskctl's own providers live on their classes only; their rows keep the vendors'
    notes and the sources, and the effective tables give the classes' facts."""
    from deskctl.providers import PROVIDERS

    matrix = compat.load_matrix()
    for row in matrix.rows("platform_provider"):
        if row["provider"] in PROVIDERS:
            assert "platforms" not in row, row
            assert row["source"] in matrix.sources and row.get("note"), row
    for row in matrix.rows("geometry"):
        if row["provider"] not in PROVIDERS:
            continue
        caps = load_provider_class(row["provider"]).capabilities
        if Platform(row["platform"]) in caps.platforms:
            assert not {"settable", "min", "max", "default", "fixed"} & set(row), row
    table = {(r["provider"], r["platform"]): r for r in compat.geometry_table()}
    assert table[("daytona", "windows")]["fixed"] == ["1024x768"] and not table[("daytona", "windows")]["settable"]
    assert (table[("daytona", "ubuntu")]["min"], table[("daytona", "ubuntu")]["max"]) == ("640x480", "3840x2160")
    assert table[("cua-cloud", "ubuntu")]["fixed"] == ["1920x1080"]
    assert table[("cua-cloud", "ubuntu")]["note"].startswith("OSWorld guest")  # the data file's note, kept


def test_a_macos_request_is_pointed_at_the_provider_that_serves_it() -> None:
    # cua's macOS preview is a vendor fact, not something the cua-cloud provider serves: not suggested
    assert compat.serving_providers(Platform.MACOS) == ["use-computer"]
    assert compat.serving_providers(Platform.WINDOWS) == ["daytona", "cua-cloud", "use-computer"]
    failure = compat.provider_checks(_spec("macos"), StubProvider())[0]
    assert failure.remedy == "--provider use-computer"


def test_computer_1_cannot_run_windows_tasks_and_the_way_out_is_given() -> None:
    results = compat.request_checks(Platform.WINDOWS, "computer-1", None)
    failure = next(r for r in results if r.status == "fail")
    assert failure.code == "compat.agent_unsupported"
    assert failure.message.startswith(
        "computer-1 cannot run Windows tasks (Windows-capable agents: oracle, nop); "
        "a Linux task can still drive a remote Windows desktop through deskctl"
    )
    assert failure.remedy is not None and "--task-os linux" in failure.remedy and "--agent oracle" in failure.remedy


def test_a_linux_task_may_drive_a_windows_desktop_as_a_tool() -> None:
    results = compat.request_checks(Platform.WINDOWS, "computer-1", "linux")
    assert [r.status for r in results] == ["pass", "pass"]
    assert "as a tool" in results[0].message


@pytest.mark.parametrize("agent", ["oracle", "nop"])
def test_windows_capable_agents_pass(agent: str) -> None:
    assert all(r.status == "pass" for r in compat.request_checks(Platform.WINDOWS, agent, None))


def test_a_windows_task_with_a_linux_desktop_is_a_warning_with_the_remedy() -> None:
    results = compat.request_checks(Platform.UBUNTU, "oracle", "windows")
    task_os = next(r for r in results if r.code == "compat.task_os")
    assert task_os.status == "warn" and task_os.remedy == "--task-os linux"


def test_a_typo_in_an_agent_name_is_a_usage_error_suggesting_the_closest() -> None:
    with pytest.raises(UsageError) as info:
        compat.request_checks(Platform.UBUNTU, "computer1", None)
    assert info.value.code == "usage.unknown_agent" and "did you mean 'computer-1'" in info.value.message
    assert info.value.exit_code == 2


def test_an_unlisted_agent_is_assumed_linux_only_like_harbor_does() -> None:
    linux = compat.request_checks(Platform.UBUNTU, "my-own-agent", None)
    assert next(r for r in linux if r.code == "compat.agent").status == "warn"
    windows = compat.request_checks(Platform.WINDOWS, "my-own-agent", None)
    assert any(r.code == "compat.agent_unsupported" for r in windows)


def test_unknown_task_os_suggests() -> None:
    with pytest.raises(UsageError) as info:
        compat.normalize_task_os("windoze")
    assert "did you mean 'windows'" in info.value.message
    assert compat.normalize_task_os("win") == "windows"


def test_a_provider_that_does_not_serve_the_platform_names_who_does() -> None:
    results = compat.provider_checks(_spec("windows"), StubProvider())
    assert len(results) == 1
    failure = results[0]
    assert failure.code == "compat.platform_unsupported" and failure.provider == "stub"
    assert "daytona" in failure.message and failure.remedy == "--provider daytona"


def test_create_refuses_a_platform_with_the_check_preflight_makes() -> None:
    """One platform check: a provider's create (a session made without preflight) raises what preflight reports."""
    from deskctl.providers.docker import DockerProvider

    row = compat.platform_check(StubProvider(), Platform.WINDOWS)
    with pytest.raises(CompatError) as info:
        compat.require_platform(StubProvider(), Platform.WINDOWS)
    assert (info.value.code, info.value.message, info.value.remedy, info.value.exit_code) == (
        row.code, row.message, row.remedy, 3)
    compat.require_platform(StubProvider(), Platform.UBUNTU)
    # docker refuses before it dials the engine
    spec = DesktopSpec.build(provider="docker", platform="windows", geometry="1024x768")
    with pytest.raises(CompatError, match=r"^docker cannot serve windows desktops") as refused:
        DockerProvider().create(spec, "dk-windows", {})
    assert refused.value.code == "compat.platform_unsupported"
    # so does kubernetes, before it reads a kubeconfig
    from deskctl.providers.kubernetes import KubernetesProvider

    spec = DesktopSpec.build(provider="kubernetes", platform="windows", geometry="1024x768")
    with pytest.raises(CompatError, match=r"^kubernetes cannot serve windows desktops") as refused:
        KubernetesProvider({"kubeconfig": "/nonexistent/kubeconfig"}).create(spec, "k8s-windows", {})
    assert refused.value.code == "compat.platform_unsupported"


def test_fixed_sizes_refuse_others_listing_what_is_offered() -> None:
    results = compat.provider_checks(_spec("windows", "1920x1080"), FixedSizeProvider())
    failure = next(r for r in results if r.status == "fail")
    assert failure.code == "geometry.unsupported"
    assert "1024x768, 1280x800" in failure.message
    assert failure.remedy == "--geometry 1024x768 or --geometry 1280x800 (or native)"
    ok = compat.provider_checks(_spec("windows", "1280x800"), FixedSizeProvider())
    assert all(r.status == "pass" for r in ok)
    native = compat.provider_checks(_spec("windows", None), FixedSizeProvider())
    assert any(r.code == "geometry.native" and r.status == "pass" for r in native)


def test_a_settable_range_is_enforced() -> None:
    results = compat.provider_checks(_spec("macos", "320x200"), RetinaProvider())
    failure = next(r for r in results if r.status == "fail")
    assert failure.code == "geometry.unsupported" and "640x480..2560x1600" in failure.message


def test_hidpi_scale_is_reported_and_large_screens_warn_about_model_downscaling() -> None:
    results = compat.provider_checks(_spec("macos", "2560x1600"), RetinaProvider())
    codes = {r.code: r for r in results}
    assert codes["geometry.hidpi"].status == "pass" and "scale 2" in codes["geometry.hidpi"].message
    assert codes["geometry.model_downscale"].status == "warn"
    small = compat.provider_checks(_spec("macos", "1280x800"), RetinaProvider())
    assert "geometry.model_downscale" not in {r.code for r in small}


def test_platforms_of_a_provider_come_from_its_capabilities_or_the_data() -> None:
    assert compat.platforms_for("xvfb") == frozenset({Platform.UBUNTU})
    assert compat.platforms_for("no-such-provider") == frozenset()


def test_a_browser_window_that_does_not_fill_the_desktop_warns_like_harbor() -> None:
    base = _spec("ubuntu", "1024x900")
    partial = base.model_copy(update={"window_geometry": WindowGeometry.parse("800x600")})
    warning = next(r for r in compat.provider_checks(partial, StubProvider()) if r.code == "geometry.window_fill")
    assert warning.status == "warn" and warning.message.startswith(
        "browser window (800x600 at 0,0) does not fill the 1024x900 desktop; "
        "screenshots will include exposed desktop background")
    assert warning.remedy == "--window-geometry 1024x900+0+0"
    outside = base.model_copy(update={"window_geometry": WindowGeometry.parse("1024x900+10+0")})
    assert "geometry.window_outside" in {r.code for r in compat.provider_checks(outside, StubProvider())}
    filled = base.model_copy(update={"window_geometry": WindowGeometry.parse("1024x900")})
    assert not {r.code for r in compat.provider_checks(filled, StubProvider())} & {
        "geometry.window_fill", "geometry.window_outside"}


def test_a_user_file_declares_an_in_house_agent_windows_capable(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "compat.json"
    monkeypatch.setenv("DESKCTL_COMPAT", str(path))
    assert any(r.code == "compat.agent_unsupported" for r in compat.request_checks(Platform.WINDOWS, "acme-agent",
                                                                                  None))
    path.write_text(json.dumps({"agents": [
        {"agent": "acme-agent", "task_os": ["linux", "windows"], "source": "acme runbook", "date": "2026-11-01"},
        {"agent": "oracle", "task_os": ["linux"], "source": "acme runbook", "date": "2026-11-01"},
    ]}))
    results = compat.request_checks(Platform.WINDOWS, "acme-agent", None)
    agent = next(r for r in results if r.code == "compat.agent")
    assert agent.status == "pass" and f"[{path} (2026-11-01)]" in agent.message
    # a user row replaces the packaged row with the same key
    assert any(r.code == "compat.agent_unsupported" for r in compat.request_checks(Platform.WINDOWS, "oracle", None))
    assert "computer-1" in compat.known_agents()


@pytest.mark.parametrize("content", [
    "{not json",
    json.dumps({"agents": {"agent": "x"}}),
    json.dumps({"agents": [{"agent": "x", "task_os": ["linux"]}]}),
])
def test_a_broken_user_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str) -> None:
    path = tmp_path / "compat.json"
    path.write_text(content)
    monkeypatch.setenv("DESKCTL_COMPAT", str(path))
    with pytest.raises(ConfigInvalid) as info:
        compat.load_matrix()
    assert info.value.exit_code == 2 and str(path) in info.value.message
