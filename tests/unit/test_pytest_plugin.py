"""The pytest plugin (entry point ``pytest11``), run the way users run it: inner test files in a pytest subprocess
(pytester), with real desktops, and the ledger and the machine checked afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _procs import alive as _alive
from deskctl.ledger import SessionRecord, open_ledger

pytest_plugins = ["pytester"]

needs_xvfb = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")

INNER = '''
import json, os

import pytest


def _note(desktop, name):
    with open(os.path.join(os.environ["INNER_OUT"], name), "w") as fh:
        json.dump({"id": desktop.id, "provider": desktop.provider_name, "size": list(desktop.size),
                   "display": (desktop.handle.data or {}).get("display")}, fh)


def test_uses_the_desktop(desktop):
    _note(desktop, "passed.json")
    desktop.click(10, 10)
    shot = desktop.screenshot()
    assert (shot.width, shot.height) == desktop.size


def test_fails_and_still_gets_cleaned_up(desktop):
    _note(desktop, "failed.json")
    assert False, "this inner test fails on purpose"


@pytest.mark.deskctl(geometry="320x200")
def test_marker_sets_the_geometry(desktop):
    _note(desktop, "marked.json")
    assert desktop.size == (320, 200)
'''


def _sessions() -> dict[str, SessionRecord]:
    with open_ledger() as book:
        return {r.session_id: r for r in book.sessions(active=None)}


def _xvfb_left(record: SessionRecord) -> list[int]:
    data = (record.handle or {}).get("data", {})
    return [int(p["pid"]) for p in data.get("procs", []) if _alive(int(p["pid"]))]


@pytest.fixture
def inner_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "inner-out"
    out.mkdir()
    monkeypatch.setenv("INNER_OUT", str(out))
    monkeypatch.delenv("CI", raising=False)
    for var in ("DESKCTL_PROVIDER", "DESKCTL_PLATFORM", "DESKCTL_GEOMETRY"):
        monkeypatch.delenv(var, raising=False)
    return out


@needs_xvfb
def test_the_fixture_gives_a_desktop_at_the_chosen_geometry_and_destroys_it_pass_or_fail(
        pytester: pytest.Pytester, inner_out: Path) -> None:
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("--deskctl-geometry", "640x480", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*this inner test fails on purpose*"])
    seen = {name: json.loads((inner_out / f"{name}.json").read_text()) for name in ("passed", "failed", "marked")}
    assert seen["passed"]["size"] == [640, 480] and seen["failed"]["size"] == [640, 480]
    assert seen["marked"]["size"] == [320, 200]  # the marker wins over the command line
    assert {s["provider"] for s in seen.values()} == {"xvfb"}
    records = _sessions()
    for name, info in seen.items():
        record = records[info["id"]]
        assert record.status == "ended", (name, record.status, record.reason)
        assert record.ended_at is not None
        assert _xvfb_left(record) == [], name


@needs_xvfb
def test_the_environment_variable_is_the_default_and_the_option_wins(pytester: pytest.Pytester, inner_out: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("DESKCTL_GEOMETRY", "400x300")
    pytester.runpytest_subprocess("-k", "uses_the_desktop", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert json.loads((inner_out / "passed.json").read_text())["size"] == [400, 300]
    result = pytester.runpytest_subprocess("-k", "uses_the_desktop", "--deskctl-geometry", "500x300",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert json.loads((inner_out / "passed.json").read_text())["size"] == [500, 300]


@pytest.mark.docker
def test_the_provider_option_chooses_the_provider(pytester: pytest.Pytester, inner_out: Path) -> None:
    from deskctl.providers.docker.images import connect

    try:
        connect(timeout=5).ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine answers: {exc}")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-k", "uses_the_desktop", "--deskctl-provider", "docker",
                                           "--deskctl-geometry", "800x600", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    info = json.loads((inner_out / "passed.json").read_text())
    assert (info["provider"], info["size"]) == ("docker", [800, 600])
    record = _sessions()[info["id"]]
    assert record.status == "ended"
    engine = connect(timeout=30)
    assert engine.containers.list(all=True, filters={"label": f"deskctl.session={info['id']}"}) == []


def _without_daytona_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"):
        monkeypatch.delenv(var, raising=False)


def test_a_provider_that_is_not_ready_skips_with_the_preflight_reason(
        pytester: pytest.Pytester, inner_out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without_daytona_credentials(monkeypatch)
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-k", "uses_the_desktop", "--deskctl-provider", "daytona", "-rs",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*deskctl: daytona is not ready: daytona requires DAYTONA_API_KEY*"
                                 "(credentials.missing)*"])
    assert not (inner_out / "passed.json").exists()
    assert _sessions() == {}


def test_under_ci_a_provider_that_is_not_ready_fails_the_test(
        pytester: pytest.Pytester, inner_out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without_daytona_credentials(monkeypatch)
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-k", "uses_the_desktop", "--deskctl-provider", "daytona",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*deskctl: daytona is not ready*(credentials.missing)*"
                                 "[CI is set: a desktop test may not be skipped]*"])
    assert _sessions() == {}


def test_an_unsupported_platform_skips_with_the_compat_reason(pytester: pytest.Pytester, inner_out: Path) -> None:
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-k", "uses_the_desktop", "--deskctl-platform", "windows", "-rs",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*deskctl: xvfb is not ready:*(compat.*"])


def test_a_bad_marker_is_a_usage_error(pytester: pytest.Pytester, inner_out: Path) -> None:
    pytester.makepyfile(test_inner='''
import pytest

@pytest.mark.deskctl(geometri="800x600")
def test_typo(desktop):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*@pytest.mark.deskctl takes keywords of deskctl.open_desktop, not geometri*"])


def test_the_plugin_is_registered_cheap_and_inert_when_unused(pytester: pytest.Pytester) -> None:
    # registered through the pytest11 entry point of the installed package
    from importlib.metadata import entry_points

    assert [ep.value for ep in entry_points(group="pytest11") if ep.name == "deskctl"] == ["deskctl.pytest_plugin"]
    # importing it loads no deskctl module beyond the package and the plugin (no session, no provider, no pydantic)
    code = ("import sys, deskctl.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('deskctl') or m == 'pydantic'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['deskctl', 'deskctl.errors', 'deskctl.pytest_plugin']"
    # a run that does not use the fixture is unchanged: same outcome with the plugin disabled
    pytester.makepyfile(test_plain="def test_a():\n    assert 1\n\ndef test_b():\n    assert 0\n")
    with_plugin = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    without = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:deskctl")
    with_plugin.assert_outcomes(passed=1, failed=1)
    without.assert_outcomes(passed=1, failed=1)
    assert _sessions() == {}
