"""The preflight engine: concurrency, per-check timeouts, error mapping, budget projection, the report."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskctl.checks import CheckResult
from deskctl.checks.runner import (
    DEFAULT_TIMEOUT,
    Check,
    PreflightRequest,
    default_timeout,
    error_for,
    preflight,
    raise_for_failures,
    run_checks,
    run_concurrently,
)
from deskctl.credentials import register_secret
from deskctl.errors import (
    BudgetExceeded,
    CapacityUnavailable,
    CompatError,
    CredentialsForbidden,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    GeometryUnsupported,
    PreflightError,
    ProviderUnreachable,
    QuotaExceeded,
    UsageError,
)
from deskctl.providers.base import Capabilities
from deskctl.spec import DesktopSpec, Platform
from unit._preflight_fakes import StubProvider, barrier_behaviour, blocking_behaviour


def _spec(**fields: object) -> DesktopSpec:
    return DesktopSpec.build(provider="xvfb", **fields)


@pytest.fixture
def prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user price catalog (real metering code reads it) that overrides the packaged xvfb rate."""
    path = tmp_path / "prices.json"
    monkeypatch.setenv("DESKCTL_PRICES", str(path))
    yield path


def _write_rate(path: Path, usd_per_hour: float | None) -> None:
    path.write_text(json.dumps({"rates": [{
        "provider": "xvfb", "platform": "*", "size": "*", "usd_per_hour": usd_per_hour,
        "granularity_seconds": 60, "minimum_seconds": 0, "source": "test catalog", "date": "2026-11-29",
    }]}))


def test_checks_of_several_providers_run_at_the_same_time() -> None:
    # each preflight can only return once all of them are running: sequential execution would time out
    barrier = threading.Barrier(4)
    checks = [
        Check(f"p{i}.preflight", lambda: StubProvider(barrier_behaviour(barrier)).preflight(_spec()), f"p{i}", 30)
        for i in range(4)
    ]
    groups = run_concurrently(checks)
    assert [g[0].code for g in groups] == ["stub.barrier"] * 4
    assert [g[0].provider for g in groups] == ["p0", "p1", "p2", "p3"]


def test_a_hanging_check_times_out_without_holding_the_others() -> None:
    release = threading.Event()
    try:
        hanging = StubProvider(blocking_behaviour(release))
        results = run_checks(_spec(), hanging, timeout=0.2)
    finally:
        release.set()
    timeout = next(r for r in results if r.code == "stub.preflight.timeout")
    assert timeout.status == "fail" and "did not answer within 0.2s" in timeout.message
    # the quick checks of the same provider still answered
    assert any(r.code == "compat.platform" and r.status == "pass" for r in results)
    with pytest.raises(ProviderUnreachable) as info:
        raise_for_failures(results, "stub")
    assert info.value.code == "provider.unreachable" and info.value.exit_code == 20
    assert info.value.details["check"] == "stub.preflight.timeout"


def test_a_check_that_raises_becomes_a_failed_result() -> None:
    def boom(spec: DesktopSpec) -> list[CheckResult]:
        raise CredentialsInvalid("key rejected", provider="stub", remedy="deskctl login stub")

    results = run_checks(_spec(), StubProvider(boom))
    failure = next(r for r in results if r.status == "fail")
    assert (failure.code, failure.message, failure.remedy) == ("credentials.invalid", "key rejected",
                                                               "deskctl login stub")

    def crash(spec: DesktopSpec) -> list[CheckResult]:
        raise OSError("socket closed")

    results = run_checks(_spec(), StubProvider(crash))
    failure = next(r for r in results if r.status == "fail")
    assert failure.code == "stub.preflight" and "OSError: socket closed" in failure.message


def test_results_carry_provider_and_elapsed_and_compat_comes_first() -> None:
    def own(spec: DesktopSpec) -> list[CheckResult]:
        return [CheckResult("pass", "stub.binary", "Xvfb found")]

    results = run_checks(_spec(), StubProvider(own), agent="computer-1")
    codes = [r.code for r in results]
    assert codes.index("compat.task_os") < codes.index("compat.platform") < codes.index("stub.binary")
    assert codes[-1].startswith("budget.")
    own_result = next(r for r in results if r.code == "stub.binary")
    assert own_result.provider == "stub" and own_result.elapsed_ms >= 0


def test_the_first_failure_decides_the_error_and_all_failures_are_in_details() -> None:
    def own(spec: DesktopSpec) -> list[CheckResult]:
        return [CheckResult("fail", "stub.binary", "Xvfb not found", remedy="apt-get install xvfb")]

    results = run_checks(_spec(platform="windows"), StubProvider(own), agent="computer-1")
    with pytest.raises(CompatError) as info:
        raise_for_failures(results, "stub")
    err = info.value
    assert err.code == "compat.agent_unsupported" and err.exit_code == 3
    assert "Windows-capable agents: oracle, nop" in err.message and err.remedy
    assert [f["code"] for f in err.details["failures"]] == [
        "compat.agent_unsupported", "compat.platform_unsupported"]
    class WindowsStub(StubProvider):
        capabilities = Capabilities(platforms=frozenset({Platform.WINDOWS}))

    windows = WindowsStub(own)
    with pytest.raises(CompatError) as info:
        raise_for_failures(run_checks(_spec(platform="windows"), windows, agent="computer-1"), "stub")
    assert [f["code"] for f in info.value.details["failures"]] == ["compat.agent_unsupported", "stub.binary"]


def test_a_platform_the_provider_does_not_serve_is_answered_without_its_preflight() -> None:
    stub = StubProvider()
    results = {r.code: r for r in run_checks(_spec(platform="windows"), stub)}
    assert results["compat.platform_unsupported"].status == "fail"
    assert results["stub.api"].status == "skip" and "does not serve windows" in results["stub.api"].message
    assert stub.calls == 0  # the provider's API is not dialled


def test_nothing_failing_raises_nothing() -> None:
    results = run_checks(_spec(), StubProvider())
    assert all(r.status != "fail" for r in results)
    raise_for_failures(results, "stub")


@pytest.mark.parametrize(("code", "cls"), [
    ("credentials.missing", CredentialsMissing),
    ("credentials.invalid", CredentialsInvalid),
    ("credentials.expired", CredentialsInvalid),
    ("credentials.forbidden", CredentialsForbidden),
    ("quota.exceeded", QuotaExceeded),
    ("compat.platform_unsupported", CompatError),
    ("geometry.unsupported", GeometryUnsupported),
    ("budget.exceeded", BudgetExceeded),
    ("capacity.unavailable", CapacityUnavailable),
    ("provider.unreachable", ProviderUnreachable),
    ("docker.daemon", ProviderUnreachable),
    ("ssh.connect", ProviderUnreachable),
    ("xvfb.binary", PreflightError),
    ("usage.no_target", UsageError),
])
def test_error_mapping_is_most_specific(code: str, cls: type[DeskctlError]) -> None:
    err = error_for(CheckResult("fail", code, "what went wrong", remedy="what to do", provider="p"))
    assert type(err) is cls
    # an unreachable provider always carries the architecture's code; the check's own code is in the details
    expected = "provider.unreachable" if cls is ProviderUnreachable else code
    assert (err.code, err.message, err.remedy, err.provider) == (expected, "what went wrong", "what to do", "p")
    if cls is ProviderUnreachable:
        assert err.details["check"] == code


def test_budget_projection_over_the_cap_fails_with_the_way_out(prices: Path) -> None:
    _write_rate(prices, 6.0)
    results = run_checks(_spec(max_minutes=10, max_usd=0.5), StubProvider())
    budget = next(r for r in results if r.code.startswith("budget."))
    assert budget.status == "fail" and budget.code == "budget.exceeded"
    assert "projected $1.0000 for 10 min at $6/h" in budget.message
    assert budget.remedy == "--max-minutes 5 or --max-usd 1.00"
    with pytest.raises(BudgetExceeded) as info:
        raise_for_failures(results, "stub")
    assert info.value.exit_code == 4


def test_budget_projection_uses_the_earlier_of_max_minutes_and_ttl(prices: Path) -> None:
    _write_rate(prices, 6.0)
    by_ttl = run_checks(_spec(ttl_seconds="5m", max_usd=0.25), StubProvider())
    budget = next(r for r in by_ttl if r.code.startswith("budget."))
    assert budget.status == "fail" and "projected $0.5000 for 5 min" in budget.message
    both = run_checks(_spec(ttl_seconds="5m", max_minutes=2, max_usd=0.25), StubProvider())
    budget = next(r for r in both if r.code.startswith("budget."))
    assert budget.status == "pass" and "projected $0.2000 for 2 min" in budget.message


def test_budget_within_the_cap_passes(prices: Path) -> None:
    _write_rate(prices, 6.0)
    results = run_checks(_spec(max_minutes=4, max_usd=0.5), StubProvider())
    budget = next(r for r in results if r.code.startswith("budget."))
    assert budget.status == "pass" and "within $0.5" in budget.message


def test_an_unknown_rate_is_reported_as_unknown_never_free(prices: Path) -> None:
    _write_rate(prices, None)
    results = run_checks(_spec(max_minutes=10, max_usd=0.5), StubProvider())
    budget = next(r for r in results if r.code.startswith("budget."))
    assert budget.status == "warn" and budget.message.startswith("cost: unknown") and "$0/h" not in budget.message
    no_cap = run_checks(_spec(max_minutes=10), StubProvider())
    assert "cost: unknown" in next(r for r in no_cap if r.code.startswith("budget.")).message


def test_report_for_windows_with_computer_1_is_not_ready_with_exit_3() -> None:
    report = preflight(PreflightRequest(DesktopSpec(platform=Platform.WINDOWS), agent="computer-1"))
    assert report.exit_code == 3 and not report.ok and report.ready == []
    first = report.first_failure()
    assert first is not None and first.code == "compat.agent_unsupported"
    assert report.verdict.startswith("not ready: computer-1 cannot run Windows tasks")
    document = report.to_dict()
    assert document["exit_code"] == 3 and document["results"][0]["provider"] is None
    with pytest.raises(CompatError):
        report.raise_for_failures()


def test_unknown_provider_names_suggest_the_closest() -> None:
    with pytest.raises(UsageError) as info:
        preflight(PreflightRequest(providers=("xvbf",)))
    assert info.value.code == "usage.unknown_provider" and "did you mean 'xvfb'" in info.value.message


def test_a_spec_checks_its_own_provider_and_secrets_never_reach_the_report() -> None:
    secret = "sk-test-preflight-7f3a9c"
    register_secret(secret)
    spec = _spec(labels={"note": f"uses {secret}"})
    report = preflight(spec)
    assert report.considered == ["xvfb"]
    assert secret not in json.dumps(report.to_dict())


def test_deskctl_preflight_is_the_function_whatever_was_imported_first() -> None:
    # a fresh interpreter: in this one every module is imported already
    probe = (
        "import inspect\n"
        "import deskctl.checks.compat, deskctl.checks.runner, deskctl\n"
        "from deskctl.checks.runner import preflight\n"
        "assert deskctl.preflight is preflight and inspect.isfunction(deskctl.preflight)\n"
        "from deskctl.checks.runner import PreflightRequest\n"
        "from deskctl.spec import DesktopSpec\n"
        "report = deskctl.preflight(PreflightRequest(DesktopSpec(platform='windows'), agent='nop', "
        "providers=('xvfb',)))\n"
        "print(report.considered, report.first_failure().code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['xvfb'] compat.platform_unsupported"


def test_built_provider_instances_are_checked_together_and_all_must_be_ready() -> None:
    barrier = threading.Barrier(2)
    ready = StubProvider(barrier_behaviour(barrier))

    class Broken(StubProvider):
        name = "broken"

    def missing_binary(spec: DesktopSpec) -> list[CheckResult]:
        barrier.wait(timeout=30)  # both providers' checks are in flight together
        return [CheckResult("fail", "broken.binary", "Xvfb missing", remedy="apt-get install xvfb")]

    broken = Broken(missing_binary)
    report = preflight(PreflightRequest(), instances=[ready, broken])
    assert report.considered == ["stub", "broken"] and report.ready == ["stub"]
    assert report.exit_code == 3 and report.verdict.startswith("not ready: broken")


def test_the_providers_own_credential_check_supersedes_the_presence_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring.core

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    keyring.core.init_backend()  # never the developer's own keyring
    monkeypatch.delenv("USE_COMPUTER_API_KEY", raising=False)

    class UseComputerLike(StubProvider):
        name = "use-computer"

    presence_only = run_checks(_spec(), UseComputerLike())
    assert "credentials.missing" in [r.code for r in presence_only]

    def rejected(spec: DesktopSpec) -> list[CheckResult]:
        return [CheckResult("fail", "credentials.invalid", "401 from GET /v1/sandboxes", remedy="new key")]

    monkeypatch.setenv("USE_COMPUTER_API_KEY", "uc_live_refused_by_the_service")  # present, so the API is asked
    results = run_checks(_spec(), UseComputerLike(rejected))
    codes = [r.code for r in results]
    assert "credentials.invalid" in codes and "credentials.present" not in codes


def test_a_provider_whose_credentials_are_missing_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring.core

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    keyring.core.init_backend()
    monkeypatch.delenv("USE_COMPUTER_API_KEY", raising=False)
    asked: list[DesktopSpec] = []

    class UseComputerLike(StubProvider):
        name = "use-computer"

    def dials(spec: DesktopSpec) -> list[CheckResult]:
        asked.append(spec)
        return [CheckResult("fail", "provider.unreachable", "could not connect")]

    results = {r.code: r for r in run_checks(_spec(), UseComputerLike(dials))}
    assert asked == []
    assert results["credentials.missing"].status == "fail"
    assert results["use-computer.api"].status == "skip" and "not contacted" in results["use-computer.api"].message


def test_a_bad_agent_name_given_to_run_checks_is_a_usage_error_not_a_failed_check() -> None:
    with pytest.raises(UsageError) as info:
        run_checks(_spec(), StubProvider(), agent="oracel")
    assert info.value.exit_code == 2 and "did you mean 'oracle'" in info.value.message


def test_a_check_that_exits_the_interpreter_is_contained() -> None:
    def exits(spec: DesktopSpec) -> list[CheckResult]:
        raise SystemExit(7)

    results = run_checks(_spec(), StubProvider(exits))
    failure = next(r for r in results if r.status == "fail")
    assert failure.code == "stub.preflight" and "SystemExit" in failure.message


def test_the_text_table_and_the_json_document_say_the_same() -> None:
    def own(spec: DesktopSpec) -> list[CheckResult]:
        return [CheckResult("fail", "stub.binary", "Xvfb not found", remedy="apt-get install xvfb", elapsed_ms=3)]

    report = preflight(PreflightRequest(agent="computer-1"), instances=[StubProvider(own)])
    lines = report.to_text().splitlines()
    assert lines[0] == "request" and "stub  (not ready)" in lines
    assert "  FAIL  stub.binary                  Xvfb not found  [3 ms]" in lines
    assert "        remedy: apt-get install xvfb" in lines
    assert lines[-1] == "not ready: Xvfb not found" == report.to_dict()["verdict"]
    text_codes = [line.split()[1] for line in lines if line[2:6] in ("ok  ", "WARN", "FAIL", "skip")]
    assert text_codes == [r["code"] for r in report.to_dict()["results"]]


def test_a_spec_keeps_its_ttl_and_window_for_the_checks(prices: Path) -> None:
    _write_rate(prices, 6.0)
    spec = _spec(geometry="1024x900", window_geometry="800x600", ttl_seconds="10m", max_usd=0.5)
    report = preflight(spec)
    codes = {r.code for r in report.results}
    assert {"geometry.window_fill", "budget.exceeded"} <= codes
    assert report.exit_code == 3


def test_the_preflight_before_up_takes_its_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DESKCTL_PREFLIGHT_TIMEOUT", raising=False)
    assert default_timeout() == DEFAULT_TIMEOUT == 10.0
    monkeypatch.setenv("DESKCTL_PREFLIGHT_TIMEOUT", " 45 ")
    assert default_timeout() == 45.0
    for bad in ("0", "-1", "nan", "soon", "1e9"):
        monkeypatch.setenv("DESKCTL_PREFLIGHT_TIMEOUT", bad)
        with pytest.raises(UsageError) as refused:
            default_timeout()
        assert refused.value.code == "usage.bad_limit" and "DESKCTL_PREFLIGHT_TIMEOUT" in str(refused.value)
    # the session's preflight waits as long as that says: a check slower than 0.2 s is a timeout
    monkeypatch.setenv("DESKCTL_PREFLIGHT_TIMEOUT", "0.2")
    release = threading.Event()
    try:
        results = run_checks(_spec(), StubProvider(blocking_behaviour(release)), default_timeout())
    finally:
        release.set()
    assert any(r.code == "stub.preflight.timeout" and "0.2s" in r.message for r in results)
