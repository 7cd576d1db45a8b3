"""The Daytona provider over real HTTP against the loopback fake (tests/fakes/daytona), whose desktops are
real Xvfb servers: preflight, create rules, readiness, actions, exec, destroy, listing, and that no failure
injected during create leaves a sandbox behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from deskctl.actions import Click, KeyDown, KeyUp, Move, Scroll, TypeText
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CompatError,
    CredentialsForbidden,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    QuotaExceeded,
    RateLimited,
    ReadinessTimeout,
    SessionLost,
)
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from deskctl.providers.daytona import LABEL_MANAGED, DaytonaProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import pointer_at, ready_handle
from fakes.daytona import FakeDaytona

WINDOWS = DesktopSpec.build(provider="daytona", platform="windows", geometry="1024x768")


def spec(platform: str = "windows", geometry: str | None = "1024x768", **kw: Any) -> DesktopSpec:
    return DesktopSpec.build(provider="daytona", platform=platform, geometry=geometry or "native", **kw)


@pytest.fixture
def ready(provider: DaytonaProvider, fake: FakeDaytona) -> Iterator[RemoteHandle]:
    """A started, ready windows sandbox; destroyed (and checked gone) after the test."""
    yield from ready_handle(provider, fake, WINDOWS, "dk-ready1", {LABEL_SESSION: "dk-ready1"},
                            restore=fake.restore_key)


def pointer(fake: FakeDaytona, handle: RemoteHandle) -> tuple[int, int]:
    return pointer_at(fake.display_of(handle.resource_id))


def pressed_keysyms(fake: FakeDaytona, handle: RemoteHandle) -> set[int]:
    from Xlib import display as xdisplay

    conn = xdisplay.Display(fake.display_of(handle.resource_id))
    try:
        keymap = conn.query_keymap()
        codes = [i * 8 + b for i, byte in enumerate(keymap) for b in range(8) if byte & (1 << b)]
        return {conn.keycode_to_keysym(code, 0) for code in codes}
    finally:
        conn.close()


# -- preflight ---------------------------------------------------------------------------------------------


def test_preflight_passes_and_only_reads(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    results = provider.preflight(WINDOWS)
    by_code = {r.code: r for r in results}
    assert all(r.status in ("pass", "skip") for r in results), results
    assert {"daytona.reachable", "daytona.credentials", "daytona.leftovers"} <= set(by_code)
    assert fake.log, "preflight sent nothing"
    assert {r.method for r in fake.log} == {"GET"}
    assert fake.live() == []
    assert all(r.provider == "daytona" for r in results)


def test_preflight_checks_quota_when_the_organization_is_known(provider: DaytonaProvider, fake: FakeDaytona,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_ORGANIZATION_ID", fake.org_id)
    assert {r.code: r.status for r in provider.preflight(WINDOWS)}["daytona.quota"] == "pass"
    # one windows sandbox (2 vCPU / 8 GiB / 30 GiB) fills Tier 1: a second has no room
    handle = provider.create(WINDOWS, "dk-quota1", {})
    try:
        results = {r.code: r for r in provider.preflight(WINDOWS)}
        assert results["quota.exceeded"].status == "fail"
        assert "memory" in results["quota.exceeded"].message
        assert results["daytona.leftovers"].status == "warn"
        assert results["daytona.leftovers"].remedy == "deskctl reap --provider daytona"
        assert "dk-quota1" in results["daytona.leftovers"].message
    finally:
        provider.destroy(handle)
    assert {r.method for r in fake.log if r.path != "/api/sandbox" or r.method != "POST"} <= {"GET", "DELETE"}


def test_preflight_refuses_a_size_windows_does_not_offer(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    from deskctl.checks.runner import run_checks

    results = {r.code: r for r in run_checks(spec("windows", "1280x800"), provider)}
    failure = results["geometry.unsupported"]
    assert failure.status == "fail"
    assert "1024x768" in failure.message and "native" in failure.message
    native = {r.code: r.status for r in run_checks(spec("windows", None), provider)}
    assert native["geometry.native"] == "pass"
    assert "fail" not in native.values(), native
    ubuntu = {r.code: r.status for r in run_checks(spec("ubuntu", "1280x800"), provider)}
    assert ubuntu["geometry.pinned"] == "pass"
    assert {r.method for r in fake.log} == {"GET"}
    assert fake.live() == []


def test_preflight_bad_key_is_credentials_invalid(provider: DaytonaProvider, monkeypatch: pytest.MonkeyPatch,
                                                  fake: FakeDaytona) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "dtn_not_the_key_000")
    results = {r.code: r for r in provider.preflight(WINDOWS)}
    assert results["credentials.invalid"].status == "fail"
    assert "dtn_not_the_key_000" not in str([r.to_dict() for r in results.values()])
    assert "DAYTONA_API_KEY" in (results["credentials.invalid"].remedy or "")


def test_preflight_missing_key_is_credentials_missing(provider: DaytonaProvider, fake: FakeDaytona,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY")
    results = {r.code: r for r in provider.preflight(WINDOWS)}
    assert results["credentials.missing"].status == "fail"
    assert fake.log == []  # not even the public GET /config: nothing is dialled without credentials
    with pytest.raises(CredentialsMissing):
        provider.create(WINDOWS, "dk-nokey", {})


def test_preflight_maintenance_and_unreachable(provider: DaytonaProvider, fake: FakeDaytona,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fake.maintenance = True
    assert {r.code: r.status for r in provider.preflight(WINDOWS)}["provider.maintenance"] == "fail"
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        monkeypatch.setenv("DAYTONA_API_URL", f"http://127.0.0.1:{port}/api")
        results = {r.code: r for r in DaytonaProvider({"retry_attempts": 1}).preflight(WINDOWS)}
    assert results["provider.unreachable"].status == "fail"


def test_preflight_retries_little_and_keeps_the_error_code(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.inject("GET", r"^/api/config$", 502, raw=b"", times=2)
    results = {r.code: r for r in provider.preflight(WINDOWS)}
    assert results["provider.api_error"].status == "fail"
    assert [r.status for r in fake.log] == [502, 502]  # two attempts, then a verdict
    fake.inject("GET", r"^/api/sandbox$", 429, {"statusCode": 429, "message": "Rate limit exceeded"},
                headers={"Retry-After-authenticated": "1"}, times=2)
    results = {r.code: r for r in provider.preflight(WINDOWS)}
    assert results["provider.rate_limited"].status == "fail"


def test_jwt_needs_the_organization_header(fake: FakeDaytona, daytona_env: FakeDaytona,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake.jwt = "eyJfake.jwt.token"
    monkeypatch.delenv("DAYTONA_API_KEY")
    monkeypatch.setenv("DAYTONA_JWT_TOKEN", fake.jwt)
    with pytest.raises(CredentialsMissing) as info:
        DaytonaProvider().list_owned()
    assert "DAYTONA_ORGANIZATION_ID" in info.value.message
    monkeypatch.setenv("DAYTONA_ORGANIZATION_ID", fake.org_id)
    assert DaytonaProvider().list_owned() == []
    monkeypatch.setenv("DAYTONA_ORGANIZATION_ID", "org-other")
    with pytest.raises(CredentialsForbidden):
        DaytonaProvider().list_owned()


# -- create --------------------------------------------------------------------------------------------------


def test_create_body_follows_the_rules(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    limited = spec("windows", max_minutes=30)
    handle = provider.create(limited, "dk-body1", {LABEL_SESSION: "dk-body1", "team": "qa"})
    try:
        body = next(r.body for r in fake.log if r.method == "POST" and r.path == "/api/sandbox")
        assert body["name"] == "dk-body1"
        assert body["snapshot"] == "windows" and body["target"] == "us"
        assert body["labels"] == {LABEL_SESSION: "dk-body1", "team": "qa", LABEL_MANAGED: "1"}
        assert body["autoDeleteInterval"] == 0
        assert 1 <= body["autoStopInterval"] <= 15
        assert body["ttlMinutes"] >= 30
        assert not {"cpu", "memory", "disk", "gpu"} & set(body)
        assert handle.data["toolbox_url"] == fake.toolbox_url
        assert (handle.data["cpu"], handle.data["memory"], handle.data["disk"]) == (2, 8, 30)
        assert not any(fake.api_key in str(v) for v in handle.to_dict().values())
    finally:
        provider.destroy(handle)


def test_lifetime_backstops_follow_the_session() -> None:
    from deskctl.providers.base import LABEL_DETACHED, LABEL_EXPIRES

    prov = DaytonaProvider()
    in_two_hours = {LABEL_EXPIRES: str(int(time.time()) + 7200)}
    attached = prov.create_body(spec("windows"), "dk-a", in_two_hours)
    assert (attached["autoStopInterval"], attached["autoDeleteInterval"]) == (15, 0)
    assert 120 < attached["ttlMinutes"] <= 126  # a little after the session's own expiry, never before
    detached = prov.create_body(spec("windows"), "dk-d", {**in_two_hours, LABEL_DETACHED: "1"})
    assert 119 <= detached["autoStopInterval"] <= 121  # no keepalive: idle up to its lifetime is use
    short = prov.create_body(spec("ubuntu", "800x600", max_minutes=5), "dk-s", in_two_hours)
    assert (short["autoStopInterval"], short["ttlMinutes"]) == (5, 10)
    assert short["env"] == {"VNC_RESOLUTION": "800x600"}
    assert "snapshot" not in short and "target" not in short  # Daytona's defaults for Linux
    bare = prov.create_body(spec("windows"), "dk-b", {})
    assert (bare["autoStopInterval"], bare["ttlMinutes"]) == (15, 1440)
    chosen = DaytonaProvider({"auto_stop_minutes": 3, "ttl_minutes": 0, "snapshot": "win-custom", "target": "eu"})
    body = chosen.create_body(spec("windows"), "dk-c", in_two_hours)
    assert (body["autoStopInterval"], body["ttlMinutes"], body["snapshot"], body["target"]) == (3, 0, "win-custom",
                                                                                                "eu")


def test_ubuntu_size_is_settable(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.cu_unavailable = 3  # the plugin answers 503 a few times after start
    wanted = spec("ubuntu", "800x600")
    handle = provider.create(wanted, "dk-ubu1", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        assert provider.display_size(handle) == (800, 600)
        shot = provider.screenshot(handle)
        assert (shot.width, shot.height) == (800, 600)
        statuses = [r.status for r in fake.requests("/toolbox") if r.path.endswith("/computeruse/status")]
        assert statuses.count(503) == 3 and statuses[-1] == 200
    finally:
        provider.destroy(handle)


def test_windows_native_accepts_the_service_size(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.windows_size = (1280, 720)
    handle = provider.create(spec("windows", None), "dk-native1", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        assert provider.display_size(handle) == (1280, 720)
    finally:
        provider.destroy(handle)


def test_region_without_windows_is_compat_error(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    eu = DaytonaProvider({"target": "eu"})
    try:
        with pytest.raises(CompatError) as info:
            eu.create(WINDOWS, "dk-eu1", {})
    finally:
        eu.close()
    assert info.value.code == "compat.region_unavailable"
    assert "Region eu is not available" in info.value.message
    assert fake.live() == []


# every failure injected during create: the error is the right one and nothing is left on the fake
CREATE_FAILURES = [
    ("failed_to_start", None, ProviderApiError),
    ("bare_502", None, ProviderApiError),
    ("drop", None, ProviderUnreachable),
    ("hang", {"create_timeout": 0.3}, ProviderUnreachable),
    # nothing was made, but a 502's answer is lost: looked for over the window, then "may still exist"
    ("inject_502", {"create_lookup_seconds": 0.2}, CleanupIncomplete),
    ("inject_429", {"retry_attempts": 2}, RateLimited),
    ("quota", None, QuotaExceeded),
    ("no_runners", None, CapacityUnavailable),
    ("forbidden", None, CredentialsForbidden),
    ("revoked", None, CredentialsInvalid),
]


@pytest.mark.parametrize(("failure", "options", "expected"), CREATE_FAILURES, ids=[f[0] for f in CREATE_FAILURES])
def test_no_failure_during_create_leaves_a_sandbox(fake: FakeDaytona, daytona_env: FakeDaytona, failure: str,
                                                   options: dict[str, Any] | None,
                                                   expected: type[DeskctlError]) -> None:
    if failure in ("failed_to_start", "bare_502", "drop", "hang"):
        fake.create_failure = failure
    elif failure == "inject_502":
        fake.inject("POST", r"^/api/sandbox$", 502, raw=b"")
    elif failure == "inject_429":
        fake.inject("POST", r"^/api/sandbox$", 429, {"statusCode": 429, "message": "Rate limit exceeded"},
                    headers={"Retry-After-sandbox-create": "3"}, times=5)
    elif failure == "quota":
        fake.quota = (10, 4, 30)
    elif failure == "no_runners":
        fake.inject("POST", r"^/api/sandbox$", 400, {"statusCode": 400, "message": "No available runners"})
    elif failure == "forbidden":
        fake.scopes = frozenset({"delete:sandboxes"})
        fake.inject("POST", r"^/api/sandbox$", 403, {"statusCode": 403, "message": "Forbidden resource"})
    elif failure == "revoked":
        fake.revoke_key()
    prov = DaytonaProvider({"poll_interval": 0.005, **(options or {})})
    try:
        with pytest.raises(expected):
            prov.create(WINDOWS, f"dk-fail-{failure.replace('_', '')}", {})
        assert fake.live() == []
        if failure in ("failed_to_start", "bare_502", "drop", "hang"):
            # the sandbox existed and was found and destroyed (by name, then by label)
            assert any(r.method == "DELETE" for r in fake.log)
        if failure == "inject_429":
            assert [r.status for r in fake.log if r.method == "POST"] == [429, 429]
        assert len([r for r in fake.log if r.method == "POST" and r.path == "/api/sandbox" and r.status != 429]) <= 1
    finally:
        fake.create_failure = None
        prov.close()


def test_429_then_create_succeeds_once(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.inject("POST", r"^/api/sandbox$", 429, {"statusCode": 429, "message": "Rate limit exceeded"},
                headers={"Retry-After-sandbox-create": "1"})
    handle = provider.create(WINDOWS, "dk-rl1", {})
    try:
        assert [r.status for r in fake.log if r.method == "POST"] == [429, 200]
        assert len(fake.live()) == 1
    finally:
        provider.destroy(handle)


# -- readiness ------------------------------------------------------------------------------------------------


def test_readiness_waits_for_started(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.start_polls = 3
    handle = provider.create(WINDOWS, "dk-slow1", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        states = [r.status for r in fake.log if r.method == "GET" and r.path == f"/api/sandbox/{handle.resource_id}"]
        assert len(states) >= 3
        assert any(r.path.endswith("/computeruse/screenshot") for r in fake.log)  # the test screenshot
    finally:
        provider.destroy(handle)


def test_windows_computer_use_start_is_advisory(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.inject("POST", r"/computeruse/start$", 400, {"error": "not implemented on windows"})
    handle = provider.create(WINDOWS, "dk-winstart", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)  # status says active: ready
        assert [r.status for r in fake.log if r.path.endswith("/computeruse/start")] == [400]
    finally:
        provider.destroy(handle)
    ubuntu = provider.create(spec("ubuntu"), "dk-ubustart", {})
    fake.inject("POST", r"/computeruse/start$", 400, {"error": "failed to start: [xvfb]"})
    try:
        with pytest.raises(ProviderApiError):
            provider.wait_ready(ubuntu, time.monotonic() + 30)
    finally:
        provider.destroy(ubuntu)


def test_readiness_fails_fast_on_error_state(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.start_polls = 1000
    handle = provider.create(WINDOWS, "dk-err1", {})
    fake.sandboxes[handle.resource_id].update(state="error", errorReason="disk image corrupt")
    with pytest.raises(ProviderApiError) as info:
        provider.wait_ready(handle, time.monotonic() + 600)
    assert "disk image corrupt" in info.value.message
    provider.destroy(handle)
    assert fake.live() == []


def test_readiness_timeout_names_the_last_state(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.start_polls = 10**9
    handle = provider.create(WINDOWS, "dk-to1", {})
    with pytest.raises(ReadinessTimeout) as info:
        provider.wait_ready(handle, time.monotonic() + 0.2)
    assert "creating" in info.value.message
    fake.sandboxes[handle.resource_id]["state"] = "started"
    provider.destroy(handle)
    assert fake.live() == []


# -- the desktop ----------------------------------------------------------------------------------------------


def test_actions_reach_the_real_display(provider: DaytonaProvider, fake: FakeDaytona, ready: RemoteHandle) -> None:
    provider.act(ready, Move(321, 123))
    assert pointer(fake, ready) == (321, 123)
    provider.act(ready, Click(10, 20, button="middle", count=3))
    assert pointer(fake, ready) == (10, 20)
    provider.act(ready, Scroll(50, 60, dx=-2, dy=3))
    assert pointer(fake, ready) == (50, 60)
    provider.act(ready, KeyDown("shift"))
    assert 0xFFE1 in pressed_keysyms(fake, ready)  # Shift_L held
    provider.act(ready, KeyUp("shift"))
    assert 0xFFE1 not in pressed_keysyms(fake, ready)
    provider.act(ready, TypeText("hi\tthere\n"))
    bodies = [(r.path.rsplit("/", 2)[-2:], r.body) for r in fake.log if r.path.endswith(("/type", "/key"))]
    assert bodies == [(["keyboard", "type"], {"text": "hi", "delay": 0}), (["keyboard", "key"], {"key": "tab"}),
                      (["keyboard", "type"], {"text": "there", "delay": 0}), (["keyboard", "key"], {"key": "enter"})]
    clicks = [r.body for r in fake.log if r.path.endswith("/mouse/click")]
    assert clicks == [{"x": 10, "y": 20, "button": "middle", "double": False, "clicks": 3}]
    scrolls = [r.body["direction"] for r in fake.log if r.path.endswith("/mouse/scroll")]
    assert scrolls == ["down", "left"]


def test_windows_exec_output_is_merged_and_timeouts_are_124(provider: DaytonaProvider, ready: RemoteHandle) -> None:
    result = provider.exec(ready, "echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.stdout, result.stderr, result.merged) == (7, "out\nerr\n", "", True)
    assert provider.exec(ready, "sleep 30", timeout=1).exit_code == 124


def test_keepalive_records_activity_and_notices_auto_stop(provider: DaytonaProvider, fake: FakeDaytona,
                                                          ready: RemoteHandle) -> None:
    before = fake.sandboxes[ready.resource_id]["lastActivityAt"]
    provider.keepalive(ready)
    assert fake.sandboxes[ready.resource_id]["lastActivityAt"] >= before
    assert any(r.path.endswith("/last-activity") and r.status == 201 for r in fake.log)
    fake.auto_stop(ready.resource_id)  # idle timer fired; autoDeleteInterval 0 deletes it
    with pytest.raises(SessionLost):
        provider.keepalive(ready)
    with pytest.raises(SessionLost):
        provider.act(ready, Click(1, 1))
    provider.destroy(ready)  # gone already: success


def test_stopped_sandbox_toolbox_answer_is_session_lost(provider: DaytonaProvider, fake: FakeDaytona,
                                                        ready: RemoteHandle) -> None:
    fake.sandboxes[ready.resource_id]["state"] = "stopped"
    with pytest.raises(SessionLost) as info:
        provider.screenshot(ready)
    assert "Is the Sandbox started" in info.value.message
    fake.sandboxes[ready.resource_id]["state"] = "started"


def test_bare_502_on_an_action_is_not_retried(provider: DaytonaProvider, fake: FakeDaytona,
                                              ready: RemoteHandle) -> None:
    fake.inject("POST", r"/mouse/click$", 502, raw=b"")
    with pytest.raises(ProviderApiError) as info:
        provider.act(ready, Click(5, 5))
    assert info.value.status == 502
    assert len([r for r in fake.log if r.path.endswith("/mouse/click")]) == 1
    fake.inject("GET", r"/computeruse/screenshot$", 502, raw=b"")
    assert provider.screenshot(ready).width == 1024  # a read is retried


def test_key_revoked_mid_session(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    handle = provider.create(WINDOWS, "dk-revoke1", {})
    provider.wait_ready(handle, time.monotonic() + 30)
    fake.revoke_key()
    with pytest.raises(CredentialsInvalid):
        provider.act(handle, Click(1, 1))
    with pytest.raises(CleanupIncomplete) as info:
        provider.destroy(handle)
    assert handle.resource_id in info.value.details["left"]
    assert len(fake.live()) == 1  # still there, with its auto-stop/auto-delete/TTL backstops set
    fake.restore_key()
    provider.destroy(handle)
    assert fake.live() == []


# -- destroy and listing ----------------------------------------------------------------------------------------


def test_destroy_retries_conflicts_then_confirms(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    handle = provider.create(WINDOWS, "dk-409a", {})
    fake.conflict_deletes = 3
    fake.destroy_polls = 2
    provider.destroy(handle)
    deletes = [r.status for r in fake.log if r.method == "DELETE"]
    assert deletes == [409, 409, 409, 200]
    gets = [r.status for r in fake.log if r.method == "GET" and r.path.endswith(handle.resource_id)]
    assert gets[-1] == 404 and 200 in gets
    assert fake.live() == []
    provider.destroy(handle)  # idempotent: already gone
    assert [r.status for r in fake.log if r.method == "DELETE"][-1] == 404


def test_destroy_during_a_transition(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.start_polls = 4  # still creating: the service answers 409 until it has started
    handle = provider.create(WINDOWS, "dk-409b", {})
    provider.destroy(handle)
    assert 409 in [r.status for r in fake.log if r.method == "DELETE"]
    assert fake.live() == []


def test_destroy_gives_up_with_cleanup_incomplete(fake: FakeDaytona, daytona_env: FakeDaytona) -> None:
    prov = DaytonaProvider({"poll_interval": 0.001, "poll_max_interval": 0.001, "destroy_timeout": 0.2})
    handle = prov.create(WINDOWS, "dk-stuck1", {})
    fake.conflict_deletes = 10**9
    with pytest.raises(CleanupIncomplete) as info:
        prov.destroy(handle)
    assert info.value.details["left"] == [handle.resource_id]
    assert info.value.exit_code == 5
    fake.conflict_deletes = 0
    prov.destroy(handle)
    prov.close()


@pytest.mark.parametrize("shape", ["items", "array"])
def test_list_owned_pages_and_both_shapes(provider: DaytonaProvider, fake: FakeDaytona, shape: str) -> None:
    fake.list_shape = shape
    fake.page_size = 2
    ubuntu = spec("ubuntu")
    handles = [provider.create(ubuntu, f"dk-list{i}", {LABEL_SESSION: f"dk-list{i}"}) for i in range(5)]
    try:
        owned = provider.list_owned()
        assert sorted(h.session_id for h in owned) == [f"dk-list{i}" for i in range(5)]
        assert {h.resource_id for h in owned} == {h.resource_id for h in handles}
        one = provider.list_owned({LABEL_SESSION: "dk-list3"})
        assert [h.session_id for h in one] == ["dk-list3"]
        if shape == "items":
            assert len([r for r in fake.log if r.path == "/api/sandbox" and r.method == "GET"]) >= 3 + 1
    finally:
        for handle in handles:
            provider.destroy(handle)
    assert provider.list_owned() == []
    assert not provider.is_alive(handles[0])


def test_a_ghost_in_the_eventually_consistent_list_is_not_a_leftover(provider: DaytonaProvider,
                                                                     fake: FakeDaytona) -> None:
    fake.ghost_lists = 2  # two list answers after its deletion still show it, started (daytona#5138)
    handle = provider.create(WINDOWS, "dk-ghost1", {})
    provider.destroy(handle)
    # preflight: the listed sandbox is confirmed by GET (404) before it is called a billing leftover
    results = {r.code: r for r in provider.preflight(WINDOWS)}
    assert results["daytona.leftovers"].status == "pass", results["daytona.leftovers"].message
    assert provider.list_owned() == []  # what reap sees: nothing to destroy
    confirmations = [r for r in fake.log if r.method == "GET" and r.path == f"/api/sandbox/{handle.resource_id}"
                     and r.status == 404]
    assert len(confirmations) >= 2
    assert not [r for r in fake.log if r.method == "DELETE" and r.status == 404]  # no delete of a ghost


def test_reap_confirms_a_listed_leftover_and_destroys_what_is_real(provider: DaytonaProvider,
                                                                   fake: FakeDaytona) -> None:
    from deskctl.ledger import open_ledger
    from deskctl.providers.base import LABEL_EXPIRES
    from deskctl.reaper import reap

    fake.ghost_lists = 1
    expired = {LABEL_EXPIRES: "1"}  # both past their expiry: each would be reaped if it were there
    gone = provider.create(spec("ubuntu"), "dk-ghost2", expired)
    provider.destroy(gone)
    provider.create(spec("ubuntu"), "dk-real2", expired)  # no ledger record: --everything reaps it
    with open_ledger() as book:
        results = reap(book, providers=["daytona"], everything=True)
    assert [r.session_id for r in results] == ["dk-real2"]  # the ghost is not "reaped" (nor billed)
    assert fake.live() == []


def test_secrets_are_redacted_from_errors(provider: DaytonaProvider, fake: FakeDaytona) -> None:
    fake.inject("GET", r"^/api/sandbox$", 400, {"statusCode": 400, "message": f"bad key {fake.api_key}"})
    with pytest.raises(DeskctlError) as info:
        provider.list_owned()
    assert fake.api_key not in info.value.message
    assert fake.api_key not in str(info.value.to_dict())


# -- permissions and quota from the key (issue 10 item 12) --------------------------------------------------------


@pytest.mark.parametrize(("scopes", "missing", "why"), [
    (frozenset(), "write:sandboxes and delete:sandboxes", "read-only"),
    (frozenset({"write:sandboxes"}), "delete:sandboxes", "cannot delete"),
])
def test_preflight_detects_a_key_that_cannot_create_or_delete(provider: DaytonaProvider, fake: FakeDaytona,
                                                              scopes: frozenset[str], missing: str, why: str) -> None:
    fake.scopes = scopes
    results = {r.code: r for r in provider.preflight(WINDOWS)}
    failure = results["credentials.forbidden"]
    assert failure.status == "fail" and f"lacks {missing}" in failure.message and why in failure.message
    assert "delete:sandboxes" in (failure.remedy or "")
    assert {r.method for r in fake.log} == {"GET"}  # found out without trying a create


def test_preflight_reads_the_quota_without_an_organization_id(provider: DaytonaProvider, fake: FakeDaytona,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_ORGANIZATION_ID", raising=False)
    results = {r.code: r for r in provider.preflight(WINDOWS)}  # no sandbox listed to learn the org from
    assert results["daytona.permissions"].status == "pass"
    assert results["daytona.quota"].status == "pass", results["daytona.quota"].message
    assert [r for r in fake.log if r.path == f"/api/organizations/{fake.org_id}/usage"]


def test_a_delete_refused_for_the_scope_names_it_and_the_ttl_that_ends_the_sandbox(provider: DaytonaProvider,
                                                                                   fake: FakeDaytona) -> None:
    handle = provider.create(spec("ubuntu"), "dk-noscope", {})
    fake.scopes = frozenset({"write:sandboxes"})
    try:
        with pytest.raises(CleanupIncomplete) as info:
            provider.destroy(handle)
        error = info.value
        assert "delete:sandboxes" in error.message and "TTL" in error.message
        sandbox = fake.sandboxes[handle.resource_id]
        created = datetime.fromisoformat(sandbox["createdAt"].replace("Z", "+00:00"))
        assert error.details["missing_scope"] == "delete:sandboxes"
        assert error.details["ttl_minutes"] == sandbox["ttlMinutes"] > 0
        ends = datetime.fromisoformat(str(error.details["auto_destroy_at"]).replace("Z", "+00:00"))
        assert ends == created + timedelta(minutes=sandbox["ttlMinutes"])
        assert "delete:sandboxes" in (error.remedy or "") and "dk-noscope" in (error.remedy or "")
    finally:
        fake.scopes = frozenset({"write:sandboxes", "delete:sandboxes"})
        provider.destroy(handle)
    assert fake.live() == []
