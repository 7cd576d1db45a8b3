"""Every HTTP answer the Daytona provider maps to a deskctl error, one by one (pytest-httpx as the server)."""

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
    CompatError,
    CredentialsForbidden,
    CredentialsInvalid,
    DeskctlError,
    ProviderApiError,
    QuotaExceeded,
    RateLimited,
    SessionLost,
)
from deskctl.providers.base import RemoteHandle
from deskctl.providers.daytona import DaytonaProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import provider_in_env

API = "http://daytona.test/api"
TOOLBOX = "http://proxy.test/toolbox"
WINDOWS = DesktopSpec.build(provider="daytona", platform="windows", geometry="1024x768")


def nest(status: int, message: str) -> dict[str, Any]:
    return {"path": "/api/sandbox", "timestamp": "2026-11-29T00:00:00Z", "statusCode": status, "error": "x",
            "message": message}


def sandbox(state: str = "started", **extra: Any) -> dict[str, Any]:
    return {"id": "sb-1", "name": "dk-err", "organizationId": "org", "labels": {"deskctl.session": "dk-err"},
            "state": state, "toolboxProxyUrl": TOOLBOX, "cpu": 2, "memory": 8, "disk": 30, "target": "us",
            "snapshot": "windows", "sandboxClass": "windows", **extra}


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[DaytonaProvider]:
    yield from provider_in_env(monkeypatch, DaytonaProvider, {"poll_interval": 0.0, "retry_attempts": 2},
                               {"DAYTONA_API_KEY": "dtn_unit_key_0000", "DAYTONA_API_URL": API},
                               unset=("DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_TARGET"))


@pytest.fixture
def handle() -> RemoteHandle:
    return RemoteHandle("daytona", "dk-err", "sb-1", data={"api_url": API, "toolbox_url": TOOLBOX})


@pytest.mark.parametrize(
    ("status", "message", "expected", "code"),
    [
        (401, "Invalid credentials", CredentialsInvalid, "credentials.invalid"),
        (403, "Forbidden resource", CredentialsForbidden, "credentials.forbidden"),
        (403, "Region eu is not available to the organization for class windows", CompatError,
         "compat.region_unavailable"),
        (400, "Total CPU limit exceeded. Maximum allowed: 10.", QuotaExceeded, "quota.exceeded"),
        (400, "Total memory limit exceeded. Maximum allowed: 10GiB.", QuotaExceeded, "quota.exceeded"),
        (400, "CPU request 8 exceeds maximum allowed per sandbox (4)", QuotaExceeded, "quota.exceeded"),
        (400, "No available runners", CapacityUnavailable, "capacity.unavailable"),
    ],
)
def test_create_refusals_are_mapped_and_not_swept(provider: DaytonaProvider, httpx_mock: HTTPXMock, status: int,
                                                  message: str, expected: type[DeskctlError], code: str) -> None:
    httpx_mock.add_response(method="POST", url=f"{API}/sandbox", status_code=status, json=nest(status, message))
    if expected is CapacityUnavailable:  # ambiguous enough to look for what was made
        httpx_mock.add_response(method="GET", url=f"{API}/sandbox/dk-err", status_code=404,
                                json=nest(404, "not found"))
        httpx_mock.add_response(method="GET", url=re.compile(rf"{API}/sandbox\?.*"), json={"items": []})
    with pytest.raises(expected) as info:
        provider.create(WINDOWS, "dk-err", {})
    assert info.value.code == code
    assert message in info.value.message  # the server's words are kept
    assert info.value.provider == "daytona"
    if expected is not CapacityUnavailable:
        assert len(httpx_mock.get_requests()) == 1  # a definite refusal: nothing to look for, nothing retried


def test_create_429_honours_retry_after_then_raises(provider: DaytonaProvider, httpx_mock: HTTPXMock) -> None:
    delays: list[float] = []
    provider.retry = provider.retry.__class__(attempts=2, scale=1.0, sleep=delays.append)  # records, never sleeps
    for _ in range(2):
        httpx_mock.add_response(method="POST", url=f"{API}/sandbox", status_code=429,
                                json={"statusCode": 429, "message": "Rate limit exceeded"},
                                headers={"Retry-After-sandbox-create": "12"})
    with pytest.raises(RateLimited) as info:
        provider.create(WINDOWS, "dk-err", {})
    assert info.value.retry_after == 12.0
    assert info.value.code == "provider.rate_limited"
    assert delays == [12.0]  # the throttler's own wait, not the computed backoff


def test_create_bare_502_is_api_error_and_swept(provider: DaytonaProvider, httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="POST", url=f"{API}/sandbox", status_code=502, content=b"")
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/dk-err", json=sandbox("creating"))
    httpx_mock.add_response(method="GET", url=re.compile(rf"{API}/sandbox\?.*"), json=[sandbox("creating")])
    httpx_mock.add_response(method="DELETE", url=f"{API}/sandbox/sb-1", json=sandbox("destroying"))
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", status_code=404, json=nest(404, "gone"))
    with pytest.raises(ProviderApiError) as info:
        provider.create(WINDOWS, "dk-err", {})
    assert info.value.status == 502
    posts = [r for r in httpx_mock.get_requests() if r.method == "POST"]
    assert len(posts) == 1  # never retried blindly


def test_create_failed_to_start_destroys_the_errored_sandbox(provider: DaytonaProvider,
                                                             httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="POST", url=f"{API}/sandbox", status_code=400,
                            json=nest(400, "Sandbox failed to start: no space left"))
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/dk-err", json=sandbox("error"))
    httpx_mock.add_response(method="GET", url=re.compile(rf"{API}/sandbox\?.*"),
                            json={"items": [sandbox("error")], "nextCursor": None})
    httpx_mock.add_response(method="DELETE", url=f"{API}/sandbox/sb-1", json=sandbox("error"))
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", status_code=404, json=nest(404, "gone"))
    with pytest.raises(ProviderApiError) as info:
        provider.create(WINDOWS, "dk-err", {})
    assert "no space left" in info.value.message


@pytest.mark.parametrize(
    ("status", "body", "state", "expected"),
    [
        (400, {"error": "failed to resolve container IP: no IP. Is the Sandbox started?"}, "stopped", SessionLost),
        (404, {"statusCode": 404, "message": "sandbox container not found", "code": "NOT_FOUND"}, "archived",
         SessionLost),
        (404, {"statusCode": 404, "message": "sandbox container not found", "code": "NOT_FOUND"}, None,
         SessionLost),
        # the words do not decide: the sandbox's own state does
        (404, {"statusCode": 404, "message": "Not Found", "code": "NOT_FOUND"}, "started", ProviderApiError),
        (400, {"error": "failed to resolve container IP: no IP. Is the Sandbox started?"}, "started",
         ProviderApiError),
        (401, {"statusCode": 401, "message": "authentication failed: bad token", "code": "UNAUTHORIZED"}, "",
         CredentialsInvalid),
        (503, {"message": "Computer-use functionality is not available", "details": "x", "solution": "y"}, "",
         ProviderApiError),
        (400, {"error": "unsupported mouse button: foo"}, "started", ProviderApiError),
    ],
)
def test_toolbox_answers(provider: DaytonaProvider, handle: RemoteHandle, httpx_mock: HTTPXMock, status: int,
                         body: dict[str, Any], state: str | None, expected: type[DeskctlError]) -> None:
    httpx_mock.add_response(method="POST", url=f"{TOOLBOX}/sb-1/computeruse/mouse/click", status_code=status,
                            json=body)
    if state is None:
        httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", status_code=404,
                                json=nest(404, "Sandbox with ID or name sb-1 not found"))
    elif state:
        httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", json=sandbox(state))
    with pytest.raises(expected) as info:
        provider.act(handle, Click(1, 2))
    assert len([r for r in httpx_mock.get_requests() if r.method == "POST"]) == 1  # an action is never retried
    text = body.get("message") or body.get("error")
    assert str(text) in info.value.message


def test_exec_timeout_408_is_exit_124(provider: DaytonaProvider, handle: RemoteHandle,
                                      httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="POST", url=f"{TOOLBOX}/sb-1/process/execute", status_code=408,
                            json={"statusCode": 408, "message": "request timeout: command execution timeout",
                                  "code": "PROCESS_EXECUTION_TIMEOUT"})
    result = provider.exec(handle, "sleep 100", timeout=2)
    assert (result.exit_code, result.stdout, result.stderr) == (124, "", "")
    sent = json.loads(httpx_mock.get_requests()[0].read())
    assert sent["timeout"] == 2 and "'sleep 100'" in sent["command"]


def test_wait_ready_retries_503_until_computer_use_is_active(provider: DaytonaProvider, handle: RemoteHandle,
                                                             httpx_mock: HTTPXMock) -> None:
    import base64

    png = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x04\x00\x00\x00\x03\x00" + b"\0" * 8)
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", json=sandbox("started"))
    for _ in range(2):
        httpx_mock.add_response(method="POST", url=f"{TOOLBOX}/sb-1/computeruse/start", status_code=503,
                                json={"message": "Computer-use functionality is not available"})
    httpx_mock.add_response(method="POST", url=f"{TOOLBOX}/sb-1/computeruse/start",
                            json={"message": "ok", "status": {"xvfb": {"Running": True}}})
    httpx_mock.add_response(method="GET", url=f"{TOOLBOX}/sb-1/computeruse/status", json={"status": "partial"})
    httpx_mock.add_response(method="GET", url=f"{TOOLBOX}/sb-1/computeruse/status", json={"status": "active"})
    httpx_mock.add_response(method="GET", url=re.compile(rf"{TOOLBOX}/sb-1/computeruse/screenshot.*"),
                            json={"screenshot": png.decode(), "cursorPosition": {"x": 0, "y": 0}})
    httpx_mock.add_response(method="GET", url=f"{TOOLBOX}/sb-1/computeruse/display/info",
                            json={"displays": [{"id": 0, "x": 0, "y": 0, "width": 1024, "height": 768}]})
    import time

    provider.wait_ready(handle, time.monotonic() + 30)
    starts = [r for r in httpx_mock.get_requests() if r.url.path.endswith("/computeruse/start")]
    assert len(starts) == 3


def test_destroy_404_is_success_and_409_is_retried(provider: DaytonaProvider, handle: RemoteHandle,
                                                   httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="DELETE", url=f"{API}/sandbox/sb-1", status_code=409,
                            json=nest(409, "Sandbox state change in progress"))
    httpx_mock.add_response(method="DELETE", url=f"{API}/sandbox/sb-1", json=sandbox("destroying",
                                                                                     desiredState="destroyed"))
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", json=sandbox("destroyed"))
    provider.destroy(handle)  # "destroyed" counts as gone (queue timeouts and spot evictions stay readable)
    httpx_mock.add_response(method="DELETE", url=f"{API}/sandbox/sb-1", status_code=404, json=nest(404, "gone"))
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", status_code=404, json=nest(404, "gone"))
    provider.destroy(handle)


def test_destroy_with_a_revoked_key_is_cleanup_incomplete(provider: DaytonaProvider, handle: RemoteHandle,
                                                          httpx_mock: HTTPXMock) -> None:
    from deskctl.errors import CleanupIncomplete

    httpx_mock.add_response(method="DELETE", url=f"{API}/sandbox/sb-1", status_code=401,
                            json=nest(401, "Invalid credentials"))
    with pytest.raises(CleanupIncomplete) as info:
        provider.destroy(handle)
    assert info.value.details["left"] == ["sb-1"]
    assert info.value.details["cause"] == "credentials.invalid"
    assert "dk-err" in (info.value.remedy or "")


def test_list_accepts_a_bare_array_and_skips_destroyed(provider: DaytonaProvider, httpx_mock: HTTPXMock) -> None:
    managed = {"deskctl.managed": "1", "deskctl.session": "dk-a"}
    httpx_mock.add_response(method="GET", url=re.compile(rf"{API}/sandbox\?.*"), json=[
        {**sandbox(), "id": "sb-a", "labels": managed},
        {**sandbox("destroyed"), "id": "sb-b", "labels": {**managed, "deskctl.session": "dk-b"}},
        {**sandbox(), "id": "sb-c", "labels": {"other": "1"}},  # an old server that ignored the filter
    ])
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-a", json={**sandbox(), "id": "sb-a",
                                                                         "labels": managed})  # confirmed by GET
    owned = provider.list_owned()
    assert [(h.resource_id, h.session_id) for h in owned] == [("sb-a", "dk-a")]
    query = httpx_mock.get_requests()[0].url.params
    assert query["labels"] == '{"deskctl.managed": "1"}'


def test_keepalive_on_a_gone_sandbox_is_session_lost(provider: DaytonaProvider, handle: RemoteHandle,
                                                     httpx_mock: HTTPXMock) -> None:
    httpx_mock.add_response(method="POST", url=f"{API}/sandbox/sb-1/last-activity", status_code=404,
                            json=nest(404, "Sandbox not found"))
    httpx_mock.add_response(method="GET", url=f"{API}/sandbox/sb-1", status_code=404,
                            json=nest(404, "Sandbox with ID or name sb-1 not found"))
    with pytest.raises(SessionLost):
        provider.keepalive(handle)


def test_key_names_map_to_toolbox_names() -> None:
    from deskctl.actions import KeyPress, normalize_chord
    from deskctl.errors import UsageError

    def body(chord: str) -> dict[str, Any]:
        return DaytonaProvider.action_requests(KeyPress(normalize_chord(chord)))[0][1]

    assert body("cmd+shift+t") == {"key": "t", "modifiers": ["cmd", "shift"]}
    assert body("Return") == {"key": "enter"}
    assert body("ctrl++") == {"key": "+", "modifiers": ["ctrl"]}
    assert body("pgdn") == {"key": "pagedown"}
    with pytest.raises(UsageError):
        body("printscreen")
