"""The shared HTTP plumbing (deskctl.providers._http): error mapping, Retry-After, and the retry rule.

pytest-httpx stands in for the server: these tests are about how answers are read, not about a service.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pytest_httpx import HTTPXMock

from deskctl.credentials import register_secret
from deskctl.errors import (
    CredentialsForbidden,
    CredentialsInvalid,
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    QuotaExceeded,
    RateLimited,
)
from deskctl.providers._http import (
    HttpErrorContext,
    RetryPolicy,
    make_client,
    parse_retry_after,
    send,
)

URL = "http://api.test/api/thing"
CTX = HttpErrorContext("testprov", "do the thing", credentials_remedy="export TEST_KEY=...")


class Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


def policy(recorder: Recorder | None = None, attempts: int = 3) -> RetryPolicy:
    return RetryPolicy(attempts=attempts, initial=1.0, multiplier=2.0, maximum=8.0, scale=1.0,
                       sleep=recorder or Recorder())


def call(client: httpx.Client, *, idempotent: bool = True, rec: Recorder | None = None, attempts: int = 3,
         method: str = "GET", **kw: Any) -> httpx.Response:
    return send(client, method, URL, CTX, policy=policy(rec, attempts), idempotent=idempotent, **kw)


@pytest.mark.parametrize(
    ("status", "body", "expected", "code"),
    [
        (401, {"statusCode": 401, "message": "Invalid API key", "error": "Unauthorized"}, CredentialsInvalid,
         "credentials.invalid"),
        (403, {"statusCode": 403, "message": "Forbidden resource"}, CredentialsForbidden, "credentials.forbidden"),
        (400, {"statusCode": 400, "message": "Total CPU limit exceeded. Maximum allowed: 10."}, QuotaExceeded,
         "quota.exceeded"),
        (400, {"statusCode": 400, "message": ["name must be a string", "labels must be an object"]},
         ProviderApiError, "provider.api_error"),
        (404, {"statusCode": 404, "message": "Sandbox not found"}, ProviderApiError, "provider.api_error"),
        (409, {"statusCode": 409, "message": "Sandbox state change in progress"}, ProviderApiError,
         "provider.api_error"),
    ],
)
def test_status_mapping(httpx_mock: HTTPXMock, client: httpx.Client, status: int, body: dict[str, Any],
                        expected: type[DeskctlError], code: str) -> None:
    httpx_mock.add_response(url=URL, status_code=status, json=body)
    with pytest.raises(expected) as info:
        call(client)
    err = info.value
    assert err.code == code
    assert err.provider == "testprov"
    assert err.details["status"] == status
    message = body["message"] if isinstance(body["message"], str) else ", ".join(body["message"])
    assert message in err.message  # the server's own words are kept
    if status == 401:
        assert err.remedy == "export TEST_KEY=..."
    assert len(httpx_mock.get_requests()) == 1  # none of these is retried


def test_429_honours_throttler_retry_after_then_gives_up(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    for _ in range(3):
        httpx_mock.add_response(
            url=URL, status_code=429,
            json={"statusCode": 429, "message": "Rate limit exceeded", "error": "Too Many Requests"},
            headers={"Retry-After-sandbox-create": "7", "X-RateLimit-Remaining-sandbox-create": "0"},
        )
    rec = Recorder()
    with pytest.raises(RateLimited) as info:
        call(client, idempotent=False, rec=rec, method="POST")
    assert info.value.code == "provider.rate_limited"
    assert info.value.retry_after == 7.0
    assert rec.delays == [7.0, 7.0]  # the server's wait, not the computed backoff
    assert len(httpx_mock.get_requests()) == 3


def test_429_then_success_even_for_non_idempotent(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    httpx_mock.add_response(url=URL, status_code=429, json={"statusCode": 429, "message": "Rate limit exceeded"},
                            headers={"Retry-After": "2"})
    httpx_mock.add_response(url=URL, json={"ok": True})
    rec = Recorder()
    response = call(client, idempotent=False, rec=rec, method="POST")
    assert response.json() == {"ok": True}
    assert rec.delays == [2.0]


def test_bare_502_is_api_error_and_retried_only_when_idempotent(httpx_mock: HTTPXMock,
                                                                  client: httpx.Client) -> None:
    httpx_mock.add_response(url=URL, status_code=502, content=b"")
    with pytest.raises(ProviderApiError) as info:
        call(client, idempotent=False, method="POST")
    assert info.value.status == 502
    assert "empty body" in info.value.message
    assert len(httpx_mock.get_requests()) == 1


def test_5xx_retried_with_backoff_when_idempotent(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    httpx_mock.add_response(url=URL, status_code=502, content=b"")
    httpx_mock.add_response(url=URL, status_code=500,
                            json={"statusCode": 500, "message": "An unexpected error occurred."})
    httpx_mock.add_response(url=URL, json={"ok": 1})
    rec = Recorder()
    assert call(client, rec=rec).json() == {"ok": 1}
    assert rec.delays == [1.0, 2.0]


def test_5xx_exhausted_raises_last_error(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    for _ in range(2):
        httpx_mock.add_response(url=URL, status_code=503,
                                json={"message": "Computer-use functionality is not available"})
    with pytest.raises(ProviderApiError) as info:
        call(client, attempts=2)
    assert info.value.status == 503
    assert "Computer-use functionality" in info.value.message


def test_ok_statuses_pass_through(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    httpx_mock.add_response(url=URL, status_code=404, json={"statusCode": 404, "message": "Sandbox not found"})
    assert call(client, ok_statuses=frozenset({404})).status_code == 404


def test_connect_error_is_unreachable_and_retried_even_for_posts(httpx_mock: HTTPXMock,
                                                                  client: httpx.Client) -> None:
    httpx_mock.add_exception(httpx.ConnectError("connection refused"), url=URL)
    httpx_mock.add_response(url=URL, json={"id": "x"})
    assert call(client, idempotent=False, method="POST").json() == {"id": "x"}


def test_read_timeout_is_not_retried_for_non_idempotent(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    httpx_mock.add_exception(httpx.ReadTimeout("timed out"), url=URL)
    with pytest.raises(ProviderUnreachable) as info:
        call(client, idempotent=False, method="POST")
    assert info.value.details["sent"] is True
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)
    assert "timed out" in info.value.message


def test_classify_hook_claims_first(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    from deskctl.errors import CompatError

    def classify(status: int, message: str, body: Any) -> DeskctlError | None:
        return CompatError(message, code="compat.region_unavailable") if status == 403 else None

    httpx_mock.add_response(url=URL, status_code=403,
                            json={"message": "Region us is not available to the organization for class windows"})
    ctx = HttpErrorContext("p", "create", classify=classify)
    with pytest.raises(CompatError) as info:
        send(client, "POST", URL, ctx, policy=policy(), idempotent=False)
    assert info.value.code == "compat.region_unavailable"
    assert info.value.details["status"] == 403


def test_secrets_never_in_messages(httpx_mock: HTTPXMock, client: httpx.Client) -> None:
    secret = "dtn_supersecretvalue123"
    register_secret(secret)
    httpx_mock.add_response(url=URL, status_code=401, json={"message": f"key {secret} is invalid"})
    with pytest.raises(CredentialsInvalid) as info:
        call(client, headers={"Authorization": f"Bearer {secret}"})
    assert secret not in info.value.message
    assert secret not in str(info.value.to_dict())


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-sandbox-lifecycle": "4", "Retry-After-authenticated": "9"}) == 9.0
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"X-Other": "1"}) is None


def test_policy_from_options_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HTTP_RETRY_SCALE", "0")
    p = RetryPolicy.from_options({"retry_attempts": 2, "retry_initial": 0.1})
    assert (p.attempts, p.initial, p.scale) == (2, 0.1, 0.0)
    assert RetryPolicy.from_options({"retry_scale": 0.5}).scale == 0.5
    assert p.delay(1) == 0.1 and p.delay(2) == 0.2 and p.delay(3, retry_after=500) == p.max_retry_after
