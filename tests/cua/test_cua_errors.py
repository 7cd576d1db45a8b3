"""Every HTTP answer the cua-cloud provider maps to a deskctl error, one by one (pytest-httpx as the server)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_httpx import HTTPXMock

from deskctl.actions import Click
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CredentialsForbidden,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    RateLimited,
    SessionLost,
)
from deskctl.providers._http import RetryPolicy
from deskctl.providers.base import RemoteHandle
from deskctl.providers.cua_cloud import CuaCloudProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import provider_in_env

BASE = "http://cua.test"
TOKEN_URL = "http://auth.test/realms/r/protocol/openid-connect/token"
CLAIMS = f"{BASE}/api/k8s/apis/osgym.cua.ai/v1alpha1/namespaces/harbor-ubuntu/osgymsandboxclaims"
SVC = f"{BASE}/api/svc/harbor-ubuntu/sb-1-server"
SECRET = "cs-unit-secret-000111"
UBUNTU = DesktopSpec.build(provider="cua-cloud", platform="ubuntu", geometry="1920x1080")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message,
            "code": code}


def claim(phase: str = "Bound", **status_extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"phase": phase, **status_extra}
    if phase == "Bound":
        body["sandbox"] = {"name": "sb-1"}
    return {"apiVersion": "osgym.cua.ai/v1alpha1", "kind": "OSGymSandboxClaim",
            "metadata": {"name": "dk-err", "namespace": "harbor-ubuntu", "labels": {"deskctl.session": "dk-err"},
                         "annotations": {"deskctl.session": "dk-err"}},
            "spec": {"warmpool": "harbor-ubuntu"}, "status": body}


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[CuaCloudProvider]:
    yield from provider_in_env(monkeypatch, CuaCloudProvider,
                               {"poll_interval": 0.0, "retry_attempts": 2, "destroy_timeout": 5,
                                "create_lookup_seconds": 0},
                               {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
                                "CUA_CLIENT_ID": "ukey-unit-0001", "CUA_CLIENT_SECRET": SECRET, "CUA_BASE_URL": BASE,
                                "CUA_TOKEN_URL": TOKEN_URL},
                               unset=("CUA_API_KEY", "CUA_CLOUD_NAMESPACE"))


@pytest.fixture
def handle() -> RemoteHandle:
    return RemoteHandle("cua-cloud", "dk-err", "dk-err",
                        data={"base_url": BASE, "namespace": "harbor-ubuntu", "sandbox": "sb-1", "platform": "ubuntu"})


def token(httpx_mock: HTTPXMock, value: str = "tok-unit-1", *, reusable: bool = True) -> None:
    httpx_mock.add_response(method="POST", url=TOKEN_URL, json={"access_token": value, "expires_in": 300},
                            is_reusable=reusable)


def api_requests(httpx_mock: HTTPXMock, method: str | None = None) -> list[Any]:
    return [r for r in httpx_mock.get_requests() if r.url.host == "cua.test" and method in (None, r.method)]


def no_claim_left(httpx_mock: HTTPXMock) -> None:
    """What the sweep after an ambiguous create reads: no claim by name, none by label."""
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", status_code=404,
                            json=status(404, "NotFound", "not found"))
    httpx_mock.add_response(method="GET", url=re.compile(rf"{re.escape(CLAIMS)}\?.*"),
                            json={"items": [], "metadata": {"continue": ""}})


def test_token_request_is_a_client_credentials_form(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                    handle: RemoteHandle) -> None:
    token(httpx_mock)
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", json=claim())
    assert provider.is_alive(handle)
    sent = httpx_mock.get_requests()[0]
    assert sent.headers["Content-Type"] == "application/x-www-form-urlencoded"
    form = dict(pair.split("=", 1) for pair in sent.read().decode().split("&"))
    assert form == {"grant_type": "client_credentials", "client_id": "ukey-unit-0001", "client_secret": SECRET}
    assert api_requests(httpx_mock)[0].headers["Authorization"] == "Bearer tok-unit-1"


@pytest.mark.parametrize("body", [
    {"error": "invalid_client", "error_description": "Invalid client or Invalid client credentials"},
    {"error": "unauthorized_client", "error_description": "Client not enabled"},
])
def test_refused_client_credentials_are_credentials_invalid(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                            handle: RemoteHandle, body: dict[str, str]) -> None:
    httpx_mock.add_response(method="POST", url=TOKEN_URL, status_code=401, json=body)
    with pytest.raises(CredentialsInvalid) as info:
        provider.is_alive(handle)
    assert body["error"] in info.value.message
    assert "CUA_CLIENT_ID" in (info.value.remedy or "")
    assert SECRET not in json.dumps(info.value.to_dict())


def test_missing_credentials_name_both_variables_and_the_legacy_key(provider: CuaCloudProvider,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   handle: RemoteHandle) -> None:
    monkeypatch.delenv("CUA_CLIENT_SECRET")
    monkeypatch.setenv("CUA_API_KEY", "sk-legacy-0001")
    with pytest.raises(CredentialsMissing) as info:
        provider.is_alive(handle)
    assert "CUA_CLIENT_SECRET missing" in info.value.message
    assert "CUA_API_KEY" in info.value.message and "legacy" in info.value.message


@pytest.mark.parametrize("first", [302, 401])
def test_an_expired_token_is_reminted_once(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                           handle: RemoteHandle, first: int) -> None:
    token(httpx_mock, "tok-old", reusable=False)
    token(httpx_mock, "tok-new", reusable=False)
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", status_code=first,
                            headers={"Location": "http://auth.test/login"} if first == 302 else {},
                            json=None if first == 302 else status(401, "Unauthorized", "Unauthorized"))
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", json=claim())
    assert provider.is_alive(handle)
    auths = [r.headers["Authorization"] for r in api_requests(httpx_mock)]
    assert auths == ["Bearer tok-old", "Bearer tok-new"]


@pytest.mark.parametrize("answer", [302, 401])
def test_a_token_refused_twice_is_credentials_invalid(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                      handle: RemoteHandle, answer: int) -> None:
    token(httpx_mock)
    for _ in range(2):
        httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", status_code=answer,
                                headers={"Location": "http://auth.test/login"} if answer == 302 else {},
                                json=None if answer == 302 else status(401, "Unauthorized", "Unauthorized"))
    with pytest.raises(CredentialsInvalid) as info:
        provider.is_alive(handle)
    assert info.value.code == "credentials.invalid"
    assert len(api_requests(httpx_mock)) == 2
    assert "tok-unit-1" not in json.dumps(info.value.to_dict())


@pytest.mark.parametrize(
    ("code", "body", "expected", "swept"),
    [
        (403, status(403, "Forbidden", "osgymsandboxclaims is forbidden: User cannot create resource"),
         CredentialsForbidden, False),
        (429, status(429, "TooManyRequests", "rate limit exceeded"), RateLimited, False),
        (409, status(409, "AlreadyExists", 'osgymsandboxclaims "dk-err" already exists'), ProviderApiError, False),
        (422, status(422, "Invalid", "spec.warmpool: Not found"), ProviderApiError, False),
        (503, {"error": "NO_CAPACITY"}, CapacityUnavailable, True),
        (500, status(500, "InternalError", "etcdserver: request timed out"), ProviderApiError, True),
        # its answer lost (a gateway's 502) and nothing found: it may still come, so cleanup is incomplete
        (502, None, CleanupIncomplete, True),
    ],
)
def test_create_answers_are_mapped_never_retried_and_ambiguous_ones_swept(
        provider: CuaCloudProvider, httpx_mock: HTTPXMock, code: int, body: Any, expected: type[DeskctlError],
        swept: bool) -> None:
    token(httpx_mock)
    provider.retry = RetryPolicy(attempts=2, scale=0.0)
    for _ in range(2 if code == 429 else 1):  # a 429 was refused before it was acted on: one retry is fine
        httpx_mock.add_response(method="POST", url=CLAIMS, status_code=code, json=body,
                                content=b"" if body is None else None)
    if swept:
        no_claim_left(httpx_mock)
    with pytest.raises(expected) as info:
        provider.create(UBUNTU, "dk-err", {})
    assert info.value.provider == "cua-cloud"
    posts = api_requests(httpx_mock, "POST")
    assert len(posts) == (2 if code == 429 else 1)
    assert len(api_requests(httpx_mock, "GET")) == (2 if swept else 0)
    if isinstance(body, dict) and "message" in body:
        assert body["message"] in info.value.message


def test_create_429_honours_retry_after(provider: CuaCloudProvider, httpx_mock: HTTPXMock) -> None:
    token(httpx_mock)
    delays: list[float] = []
    provider.retry = RetryPolicy(attempts=2, scale=1.0, sleep=delays.append)
    for _ in range(2):
        httpx_mock.add_response(method="POST", url=CLAIMS, status_code=429, headers={"Retry-After": "7"},
                                json=status(429, "TooManyRequests", "slow down"))
    with pytest.raises(RateLimited) as info:
        provider.create(UBUNTU, "dk-err", {})
    assert info.value.retry_after == 7.0
    assert delays == [7.0]


def test_a_create_that_failed_after_the_claim_existed_releases_it(provider: CuaCloudProvider,
                                                                  httpx_mock: HTTPXMock) -> None:
    token(httpx_mock)
    httpx_mock.add_response(method="POST", url=CLAIMS, status_code=500,
                            json=status(500, "InternalError", "timeout"))
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", json=claim("Pending"))
    httpx_mock.add_response(method="GET", url=re.compile(rf"{re.escape(CLAIMS)}\?.*"),
                            json={"items": [claim("Pending")], "metadata": {}})
    httpx_mock.add_response(method="DELETE", url=f"{CLAIMS}/dk-err", json=claim("Pending"))
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", status_code=404,
                            json=status(404, "NotFound", "gone"))
    with pytest.raises(ProviderApiError):
        provider.create(UBUNTU, "dk-err", {})
    assert [r.method for r in api_requests(httpx_mock)] == ["POST", "GET", "GET", "DELETE", "GET"]


def test_a_failed_claim_is_capacity_unavailable(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                handle: RemoteHandle) -> None:
    token(httpx_mock)
    failed = claim("Failed", conditions=[{"type": "Bound", "status": "False",
                                          "message": "no available sandbox in warm pool harbor-ubuntu"}])
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", json=failed)
    provider.rebind_attempts = 0
    with pytest.raises(CapacityUnavailable) as info:
        provider.wait_ready(handle, float("inf"))
    assert "no available sandbox" in info.value.message
    assert [r.method for r in api_requests(httpx_mock)] == ["GET"]  # nothing made again when told not to


def test_a_failed_claim_is_released_and_made_again_from_its_own_spec(provider: CuaCloudProvider,
                                                                     httpx_mock: HTTPXMock,
                                                                     handle: RemoteHandle) -> None:
    token(httpx_mock)
    failed = claim("Failed", conditions=[{"message": "no available sandbox in warm pool harbor-ubuntu"}])
    failed["spec"] = {"warmpool": "harbor-ubuntu", "sandboxTemplateRef": {"name": "harbor-ubuntu-template"},
                      "lifecycle": {"shutdownTime": "2030-01-01T00:00:00Z", "shutdownPolicy": "Retain"}}
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", json=failed)
    httpx_mock.add_response(method="DELETE", url=f"{CLAIMS}/dk-err", json=failed)
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", status_code=404,
                            json=status(404, "NotFound", "gone"))
    httpx_mock.add_response(method="POST", url=CLAIMS, status_code=201, json=claim("Pending"))
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", json=failed)
    provider.rebind_attempts = 1
    with pytest.raises(CapacityUnavailable) as info:
        provider.wait_ready(handle, float("inf"))
    assert "claims made: 2" in info.value.message
    assert [r.method for r in api_requests(httpx_mock)] == ["GET", "DELETE", "GET", "POST", "GET"]
    again = json.loads(api_requests(httpx_mock, "POST")[0].read())
    assert again["metadata"]["name"] == "dk-err"
    assert again["spec"] == failed["spec"]  # the same pool, template and shutdownTime


def test_idempotent_reads_retry_5xx_but_actions_never(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                      handle: RemoteHandle) -> None:
    token(httpx_mock)
    httpx_mock.add_response(method="POST", url=f"{SVC}/screen_size", status_code=502, content=b"")
    httpx_mock.add_response(method="POST", url=f"{SVC}/screen_size", json={"width": 1920, "height": 1080})
    assert provider.display_size(handle) == (1920, 1080)
    httpx_mock.add_response(method="POST", url=f"{SVC}/execute", status_code=502, content=b"")
    with pytest.raises(ProviderApiError) as info:
        provider.act(handle, Click(1, 2))
    assert info.value.status == 502
    assert len(api_requests(httpx_mock, "POST")) == 3


def test_a_guest_whose_claim_is_gone_is_session_lost(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                     handle: RemoteHandle) -> None:
    token(httpx_mock)
    httpx_mock.add_response(method="GET", url=f"{SVC}/screenshot", status_code=404,
                            json=status(404, "NotFound", 'services "sb-1-server" not found'))
    httpx_mock.add_response(method="GET", url=f"{CLAIMS}/dk-err", status_code=404,
                            json=status(404, "NotFound", "gone"))
    with pytest.raises(SessionLost):
        provider.screenshot(handle)
    httpx_mock.add_response(method="PATCH", url=f"{CLAIMS}/dk-err", status_code=404,
                            json=status(404, "NotFound", "gone"))
    with pytest.raises(SessionLost):
        provider.keepalive(handle)


def test_exec_past_the_guest_cap_is_exit_124(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                             handle: RemoteHandle) -> None:
    token(httpx_mock)
    httpx_mock.add_response(method="POST", url=f"{SVC}/execute", status_code=500,
                            json={"status": "error", "message": "Command 'x' timed out after 120 seconds"})
    assert provider.exec(handle, "sleep 500", timeout=500).exit_code == 124
    sent = json.loads(api_requests(httpx_mock, "POST")[0].read())
    assert sent["command"][:4] == ["timeout", "-k", "5", "115"]  # capped under the guest's 120 s


@pytest.mark.parametrize(
    ("code", "body", "expected"),
    [
        (403, status(403, "Forbidden", "User cannot delete resource"), CredentialsForbidden),
        (500, status(500, "InternalError", "boom"), ProviderApiError),
    ],
)
def test_destroy_failures_are_cleanup_incomplete_naming_the_claim(
        provider: CuaCloudProvider, httpx_mock: HTTPXMock, handle: RemoteHandle, code: int, body: Any,
        expected: type[DeskctlError]) -> None:
    token(httpx_mock)
    for _ in range(2 if code == 500 else 1):  # DELETE is idempotent: a 5xx is retried
        httpx_mock.add_response(method="DELETE", url=f"{CLAIMS}/dk-err", status_code=code, json=body)
    with pytest.raises(CleanupIncomplete) as info:
        provider.destroy(handle)
    assert "dk-err" in info.value.message
    assert info.value.details["cause"] == expected.code
    assert info.value.details["left"] == ["claim harbor-ubuntu/dk-err"]


def test_destroy_of_a_claim_already_gone_is_success(provider: CuaCloudProvider, httpx_mock: HTTPXMock,
                                                    handle: RemoteHandle) -> None:
    token(httpx_mock)
    for method in ("DELETE", "GET"):
        httpx_mock.add_response(method=method, url=f"{CLAIMS}/dk-err", status_code=404,
                                json=status(404, "NotFound", "gone"))
    provider.destroy(handle)


@pytest.mark.parametrize(("platform", "waited"), [("ubuntu", 31.0), ("windows", 150.0)])
def test_exec_waits_for_the_guest_as_long_as_the_command_may_run(provider: CuaCloudProvider,
                                                                 httpx_mock: HTTPXMock, handle: RemoteHandle,
                                                                 platform: str, waited: float) -> None:
    # Linux ends the command at its timeout (coreutils timeout); on Windows only the guest's 120 s cap ends it
    handle.data["platform"] = platform
    token(httpx_mock)
    httpx_mock.add_response(method="POST", url=f"{SVC}/execute",
                            json={"status": "success", "output": "", "error": "", "returncode": 0})
    assert provider.exec(handle, "ping -n 30 localhost", timeout=1).exit_code == 0
    sent = api_requests(httpx_mock, "POST")[-1]
    assert sent.extensions["timeout"]["read"] == waited
    assert json.loads(sent.read())["timeout"] == 1
