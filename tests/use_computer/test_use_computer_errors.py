"""Every HTTP answer the use-computer provider maps to a deskctl error, one by one (pytest-httpx as the server)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pytest_httpx import HTTPXMock

from deskctl.actions import Click, KeyDown, MouseDown
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CredentialsForbidden,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    QuotaExceeded,
    RateLimited,
    SessionLost,
    UsageError,
)
from deskctl.providers._http import RetryPolicy
from deskctl.providers.base import RemoteHandle
from deskctl.providers.use_computer import UseComputerProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import provider_in_env

BASE = "http://uc.test"
KEY = "uc_live_unit_key_0000"
MACOS = DesktopSpec.build(provider="use-computer", platform="macos", geometry="1024x768")
SB = f"{BASE}/v1/sandboxes/sb-1"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[UseComputerProvider]:
    yield from provider_in_env(monkeypatch, UseComputerProvider, {"poll_interval": 0.0, "retry_attempts": 3},
                               {"USE_COMPUTER_API_KEY": KEY, "USE_COMPUTER_BASE_URL": BASE})


@pytest.fixture
def handle() -> RemoteHandle:
    return RemoteHandle("use-computer", "dk-err", "sb-1", data={"base_url": BASE, "platform": "macos"})


def _no_secret(error: DeskctlError) -> None:
    assert KEY not in str(error.to_dict()) and KEY not in str(error)


# -- create: definite refusals are mapped, never retried and never "swept" -----------------------------------------
REFUSALS = [
    (401, {"error": "unauthorized"}, CredentialsInvalid, "credentials.invalid"),
    (403, {"error": "forbidden", "message": "windows sandboxes are not enabled"}, CredentialsForbidden,
     "credentials.forbidden"),
    (403, {"error": "reservation_expired"}, CredentialsForbidden, "credentials.forbidden"),
    (402, {"error": "billing_required"}, QuotaExceeded, "quota.billing_required"),
    (409, {"error": "macos_reservation_required"}, QuotaExceeded, "quota.reservation_required"),
    (503, {"error": "unavailable"}, CapacityUnavailable, "capacity.unavailable"),
    # a concurrency limit (UNVERIFIED wording): a 429 that waiting does not cure, so never retried
    (429, {"error": "sandbox_limit_reached"}, CapacityUnavailable, "capacity.unavailable"),
    (501, {"error": "not supported on iOS sandbox", "sandbox_type": "ios", "action": "x", "hint": "y"},
     UsageError, "usage.unsupported"),
    (400, {"error": "invalid_request", "message": "unknown field(s): labels"}, ProviderApiError,
     "provider.api_error"),
]


@pytest.mark.parametrize(("status", "body", "expected", "code"), REFUSALS,
                         ids=[f"{r[0]}-{r[1]['error']}" for r in REFUSALS])
def test_create_refusals_are_mapped(provider: UseComputerProvider, httpx_mock: HTTPXMock, status: int,
                                    body: dict[str, Any], expected: type[DeskctlError], code: str) -> None:
    httpx_mock.add_response(method="POST", url=f"{BASE}/v1/sandboxes", status_code=status, json=body)
    with pytest.raises(expected) as info:
        provider.create(MACOS, "dk-err", {})
    assert info.value.code == code
    assert info.value.provider == "use-computer"
    assert str(body.get("message") or body["error"]) in info.value.message  # the server's words are kept
    assert len(httpx_mock.get_requests()) == 1  # a refusal: not retried, nothing to look for
    request = httpx_mock.get_requests()[0]
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    _no_secret(info.value)
    if status == 401:
        assert "USE_COMPUTER_API_KEY" in (info.value.remedy or "")
    if body["error"] == "reservation_expired":
        assert "reservation" in info.value.message and "renew" in (info.value.remedy or "")


def test_create_429_honours_retry_after_then_raises(provider: UseComputerProvider, httpx_mock: HTTPXMock) -> None:
    delays: list[float] = []
    provider.retry = RetryPolicy(attempts=2, scale=1.0, sleep=delays.append)  # records, never sleeps
    for _ in range(2):
        httpx_mock.add_response(method="POST", url=f"{BASE}/v1/sandboxes", status_code=429,
                                json={"error": "rate_limited"}, headers={"Retry-After": "7"})
    with pytest.raises(RateLimited) as info:
        provider.create(MACOS, "dk-err", {})
    assert info.value.code == "provider.rate_limited"
    assert info.value.retry_after == 7.0
    assert delays == [7.0]  # the server's wait, not the computed backoff


@pytest.mark.parametrize("status", [500, 502, 504])
def test_create_5xx_is_never_retried_and_says_a_sandbox_may_exist(provider: UseComputerProvider,
                                                                   httpx_mock: HTTPXMock, status: int) -> None:
    httpx_mock.add_response(method="POST", url=f"{BASE}/v1/sandboxes", status_code=status,
                            json={"error": "internal"})
    with pytest.raises(CleanupIncomplete) as info:
        provider.create(MACOS, "dk-err", {})
    assert len(httpx_mock.get_requests()) == 1  # never retried blindly
    assert isinstance(info.value.__cause__, ProviderApiError)
    assert info.value.details["cause"] == "provider.api_error"
    assert info.value.details["ephemeral"] is True and info.value.details["backstop_seconds"] == 120
    assert "no list" in info.value.message


def test_create_read_timeout_is_ambiguous(provider: UseComputerProvider, httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_exception(httpx.ReadTimeout("timed out"), method="POST", url=f"{BASE}/v1/sandboxes")
    with pytest.raises(CleanupIncomplete) as info:
        provider.create(MACOS, "dk-err", {})
    assert info.value.details["cause"] == "provider.unreachable"
    assert len(httpx_mock.get_requests()) == 1


def test_create_connect_error_is_retried_then_unreachable(provider: UseComputerProvider,
                                                           httpx_mock: HTTPXMock) -> None:
    for _ in range(3):
        httpx_mock.add_exception(httpx.ConnectError("refused"), method="POST", url=f"{BASE}/v1/sandboxes")
    with pytest.raises(ProviderUnreachable) as info:
        provider.create(MACOS, "dk-err", {})
    assert info.value.details["sent"] is False  # never reached the service: nothing can exist
    assert len(httpx_mock.get_requests()) == 3


def test_missing_key_is_credentials_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("USE_COMPUTER_API_KEY", raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    with pytest.raises(CredentialsMissing) as info:
        UseComputerProvider().create(MACOS, "dk-err", {})
    assert "USE_COMPUTER_API_KEY" in info.value.message


# -- the data plane --------------------------------------------------------------------------------------------
DATA_PLANE = [
    (404, {"error": "sandbox_not_found"}, SessionLost, "provider.session_lost"),
    (401, {"error": "unauthorized"}, CredentialsInvalid, "credentials.invalid"),
    # the end of a reservation destroys its sandboxes: the session is lost, not merely refused
    (403, {"error": "reservation_expired"}, SessionLost, "provider.session_lost"),
    (403, {"error": "forbidden"}, CredentialsForbidden, "credentials.forbidden"),
    (501, {"error": "not supported on iOS sandbox"}, UsageError, "usage.unsupported"),
    (400, {"error": "invalid_request", "message": "x must be an integer"}, ProviderApiError, "provider.api_error"),
    (500, {"error": "internal"}, ProviderApiError, "provider.api_error"),
]


@pytest.mark.parametrize(("status", "body", "expected", "code"), DATA_PLANE,
                         ids=[f"{r[0]}-{r[1]['error']}" for r in DATA_PLANE])
def test_action_answers(provider: UseComputerProvider, handle: RemoteHandle, httpx_mock: HTTPXMock, status: int,
                        body: dict[str, Any], expected: type[DeskctlError], code: str) -> None:
    httpx_mock.add_response(method="POST", url=f"{SB}/mouse/click", status_code=status, json=body)
    if status == 404:  # the sandbox's own GET decides a 404: gone
        httpx_mock.add_response(method="GET", url=SB, status_code=404, json={"error": "sandbox_not_found"})
    with pytest.raises(expected) as info:
        provider.act(handle, Click(1, 2))
    assert info.value.code == code
    # an action is not idempotent: a 5xx is not retried
    assert len([r for r in httpx_mock.get_requests() if r.method == "POST"]) == 1


def test_idempotent_reads_retry_5xx(provider: UseComputerProvider, handle: RemoteHandle,
                                    httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="GET", url=f"{SB}/display/info", status_code=502, content=b"")
    httpx_mock.add_response(method="GET", url=f"{SB}/display/info", status_code=503, json={"error": "busy"})
    httpx_mock.add_response(method="GET", url=f"{SB}/display/info", json={"width": 1024, "height": 768,
                                                                          "scale": 1.0})
    assert provider.display_size(handle) == (1024, 768)
    assert len(httpx_mock.get_requests()) == 3


def test_429_on_an_action_is_retried(provider: UseComputerProvider, handle: RemoteHandle,
                                     httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="POST", url=f"{SB}/mouse/click", status_code=429, json={"error": "slow down"},
                            headers={"Retry-After": "1"})
    httpx_mock.add_response(method="POST", url=f"{SB}/mouse/click", json={"status": "ok"})
    provider.act(handle, Click(1, 2))
    assert len(httpx_mock.get_requests()) == 2


def test_keepalive_of_a_reaped_sandbox_is_session_lost(provider: UseComputerProvider, handle: RemoteHandle,
                                                       httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="POST", url=f"{SB}/keepalive", status_code=404,
                            json={"error": "sandbox_not_found"})
    httpx_mock.add_response(method="GET", url=SB, status_code=404, json={"error": "sandbox_not_found"})
    with pytest.raises(SessionLost) as info:
        provider.keepalive(handle)
    assert "2 minutes" in info.value.message


def test_hold_actions_are_unsupported_without_a_request(provider: UseComputerProvider, handle: RemoteHandle) -> None:
    for action in (MouseDown(1, 2), KeyDown("shift")):
        with pytest.raises(UsageError) as info:
            provider.act(handle, action)
        assert info.value.code == "usage.unsupported"


def test_exec_answer_shapes(provider: UseComputerProvider, handle: RemoteHandle, httpx_mock: HTTPXMock) -> None:
    for key in ("return_code", "exit_code", "returncode"):
        httpx_mock.add_response(method="POST", url=f"{SB}/exec", json={key: 3, "stdout": "o", "stderr": "e"})
        result = provider.exec(handle, "true")
        assert (result.exit_code, result.stdout, result.stderr, result.merged) == (3, "o", "e", False)


# -- destroy: the DELETE status is checked (the SDK ignores it) ----------------------------------------------------
def test_destroy_404_is_success(provider: UseComputerProvider, handle: RemoteHandle, httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="DELETE", url=SB, status_code=404, json={"error": "sandbox_not_found"})
    httpx_mock.add_response(method="GET", url=SB, status_code=404, json={"error": "sandbox_not_found"})
    provider.destroy(handle)


def test_destroy_retries_5xx_then_confirms(provider: UseComputerProvider, handle: RemoteHandle,
                                           httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="DELETE", url=SB, status_code=500, json={"error": "internal"})
    httpx_mock.add_response(method="DELETE", url=SB, json={"status": "ok"})
    httpx_mock.add_response(method="GET", url=SB, status_code=404, json={"error": "sandbox_not_found"})
    provider.destroy(handle)
    assert [r.method for r in httpx_mock.get_requests()] == ["DELETE", "DELETE", "GET"]


@pytest.mark.parametrize(("status", "body"), [(401, {"error": "unauthorized"}), (403, {"error": "forbidden"}),
                                              (500, {"error": "internal"})])
def test_destroy_refused_is_cleanup_incomplete(provider: UseComputerProvider, handle: RemoteHandle,
                                               httpx_mock: HTTPXMock, status: int, body: dict[str, Any]) -> None:
    httpx_mock.add_response(method="DELETE", url=SB, status_code=status, json=body, is_reusable=True)
    with pytest.raises(CleanupIncomplete) as info:
        provider.destroy(handle)
    assert info.value.details["left"] == ["sb-1"]
    assert "sb-1" in info.value.message and "deskctl down dk-err" in (info.value.remedy or "")
    _no_secret(info.value)


def test_preflight_maps_the_one_read(provider: UseComputerProvider, httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="GET", url=re.compile(rf"{BASE}/v1/platforms.*"), status_code=401,
                            json={"error": "unauthorized"})
    results = {r.code: r for r in provider.preflight(MACOS)}
    assert results["credentials.invalid"].status == "fail"
    assert KEY not in str([r.to_dict() for r in results.values()])
