"""The cua-cloud provider over real HTTP against the loopback fake (tests/fakes/cua), whose sandboxes are real
Xvfb servers: preflight, the claim and its lifetime backstop, token expiry, readiness, actions on both guest
kinds, exec, destroy, listing, and that no failure injected during create leaves a claim behind."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

import deskctl
from deskctl.actions import Click, KeyPress, Scroll, TypeText
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CredentialsForbidden,
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    RateLimited,
    SessionLost,
    UsageError,
)
from deskctl.providers._x11 import X11Address
from deskctl.providers.base import LABEL_DETACHED, LABEL_EXPIRES, LABEL_OWNER, LABEL_SESSION, RemoteHandle
from deskctl.providers.cua_cloud import LABEL_MANAGED, CuaCloudProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import pointer_at, ready_handle
from fakes.cua import FakeCua, Pool
from probe.keys import KeyRecorder

UBUNTU = DesktopSpec.build(provider="cua-cloud", platform="ubuntu", geometry="1920x1080")
WINDOWS = DesktopSpec.build(provider="cua-cloud", platform="windows", geometry="native")
CLAIMS = "/api/k8s/apis/osgym.cua.ai/v1alpha1/namespaces/harbor-ubuntu/osgymsandboxclaims"


def spec(platform: str = "ubuntu", geometry: str = "1920x1080", **kw: Any) -> DesktopSpec:
    return DesktopSpec.build(provider="cua-cloud", platform=platform, geometry=geometry, **kw)


def shutdown_time(fake: FakeCua, name: str) -> float:
    raw = fake.claim(name)["spec"]["lifecycle"]["shutdownTime"]
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def ready(provider: CuaCloudProvider, fake: FakeCua) -> Iterator[RemoteHandle]:
    """A bound, ready ubuntu claim; released (and checked gone) after the test."""

    def restore() -> None:
        fake.restore_client()
        fake.can_write = True

    yield from ready_handle(provider, fake, UBUNTU, "dk-ready1", {LABEL_SESSION: "dk-ready1"}, restore=restore)


def pointer(fake: FakeCua, claim: str) -> tuple[int, int]:
    return pointer_at(fake.display_of(claim))


# -- preflight ---------------------------------------------------------------------------------------------


def test_preflight_passes_and_sends_only_reads(provider: CuaCloudProvider, fake: FakeCua) -> None:
    results = {r.code: r for r in provider.preflight(UBUNTU)}
    assert {r.status for r in results.values()} == {"pass"}, results
    assert {"cua.credentials", "cua.capacity", "cua.leftovers"} == set(results)
    api = [r for r in fake.log if r.path.startswith("/api/")]
    assert api and {r.method for r in api} == {"GET"}
    # the one POST is the OAuth client-credentials exchange, which creates nothing
    assert [r.path for r in fake.log if r.method != "GET"] == ["/realms/cyclops-cs/protocol/openid-connect/token"]
    assert fake.live() == []


def test_preflight_warns_of_leftovers_and_an_empty_pool(provider: CuaCloudProvider, fake: FakeCua) -> None:
    fake.pools["harbor-ubuntu"].capacity = 1
    handle = provider.create(UBUNTU, "dk-left1", {LABEL_SESSION: "dk-left1", LABEL_EXPIRES: "1"})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        results = {r.code: r for r in provider.preflight(UBUNTU)}
        assert results["cua.leftovers"].status == "warn"
        assert "dk-left1" in results["cua.leftovers"].message and "1 past their expiry" in \
            results["cua.leftovers"].message
        assert results["cua.leftovers"].remedy == "deskctl reap --provider cua-cloud"
        assert results["cua.capacity"].status == "warn"
    finally:
        provider.destroy(handle)


def test_preflight_bad_secret_is_credentials_invalid_and_redacted(provider: CuaCloudProvider, fake: FakeCua,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUA_CLIENT_SECRET", "cs-not-the-secret-777")
    results = {r.code: r for r in provider.preflight(UBUNTU)}
    assert results["credentials.invalid"].status == "fail"
    assert "cs-not-the-secret-777" not in json.dumps([r.to_dict() for r in results.values()])
    assert "CUA_CLIENT_SECRET" in (results["credentials.invalid"].remedy or "")


def test_preflight_an_unknown_pool_fails_before_anything_is_paid(provider: CuaCloudProvider,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUA_CLOUD_NAMESPACE", "harbor-nowhere")
    results = {r.code: r for r in provider.preflight(UBUNTU)}
    assert results["compat.pool_unavailable"].status == "fail"
    assert "harbor-nowhere" in results["compat.pool_unavailable"].message


def test_preflight_refuses_sizes_the_pools_do_not_offer(provider: CuaCloudProvider, fake: FakeCua) -> None:
    from deskctl.checks.runner import run_checks

    refused = {r.code: r for r in run_checks(spec("ubuntu", "1280x800"), provider)}
    assert refused["geometry.unsupported"].status == "fail"
    assert "1920x1080" in refused["geometry.unsupported"].message
    windows = {r.code: r.status for r in run_checks(spec("windows", "1024x768"), provider)}
    assert windows["geometry.unsupported"] == "fail"  # the pool's template fixes a size deskctl cannot know
    native = {r.code: r.status for r in run_checks(spec("windows", "native"), provider)}
    assert "fail" not in native.values(), native
    assert fake.live() == []


# -- create and the lifetime backstop ----------------------------------------------------------------------


def test_the_claim_carries_the_session_and_a_shutdown_time_renewed_by_keepalive(
        provider: CuaCloudProvider, fake: FakeCua) -> None:
    labels = {LABEL_SESSION: "dk-ttl1", LABEL_OWNER: "host:123", LABEL_EXPIRES: str(int(time.time()) + 7200)}
    handle = provider.create(UBUNTU, "dk-ttl1", labels)
    try:
        claim = fake.claim("dk-ttl1")
        assert claim["metadata"]["labels"] == {LABEL_SESSION: "dk-ttl1", LABEL_MANAGED: "1",
                                               "app.kubernetes.io/created-by": "deskctl"}
        assert claim["metadata"]["annotations"][LABEL_OWNER] == "host:123"  # not a valid label value: annotated
        assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Retain"
        first = shutdown_time(fake, "dk-ttl1")
        assert time.time() + 500 < first <= time.time() + 601  # an attached claim: claim_ttl, renewed
        handle.data["claim_ttl"] = 1200.0
        provider.keepalive(handle)
        assert shutdown_time(fake, "dk-ttl1") > first + 500
        assert [r for r in fake.log if r.method == "PATCH"][-1].status == 200
        assert fake.reap_expired(time.time() + 1000) == []
        assert fake.reap_expired(time.time() + 1300) == ["dk-ttl1"]  # the backstop fires when nobody renews
    finally:
        provider.destroy(handle)
    assert fake.live() == []


def test_a_detached_claim_lasts_its_whole_lifetime(provider: CuaCloudProvider, fake: FakeCua) -> None:
    expires = int(time.time()) + 4 * 3600
    handle = provider.create(UBUNTU, "dk-det1", {LABEL_DETACHED: "1", LABEL_EXPIRES: str(expires)})
    try:
        assert expires + 200 < shutdown_time(fake, "dk-det1") <= expires + 301
        provider.keepalive(handle)  # renewal never moves it past the session's own expiry (and a margin)
        assert shutdown_time(fake, "dk-det1") <= expires + 301
    finally:
        provider.destroy(handle)


@pytest.mark.parametrize("failure", ["status_500", "bare_502", "drop", "no_capacity_503", "rate_limited",
                                     "forbidden"])
def test_no_failure_during_create_leaves_a_claim(provider: CuaCloudProvider, fake: FakeCua, failure: str) -> None:
    expected: type[DeskctlError] = ProviderApiError
    if failure == "no_capacity_503":
        fake.inject("POST", "osgymsandboxclaims$", 503, {"error": "NO_CAPACITY"})
        expected = CapacityUnavailable
    elif failure == "rate_limited":
        fake.inject("POST", "osgymsandboxclaims$", 429, {"message": "slow down"}, headers={"Retry-After": "1"},
                    times=10)
        expected = RateLimited
    elif failure == "forbidden":
        fake.can_write = False
        expected = CredentialsForbidden
    else:
        fake.create_failure = failure
        if failure == "drop":
            expected = ProviderUnreachable
    with pytest.raises(expected):
        provider.create(UBUNTU, "dk-fail1", {LABEL_SESSION: "dk-fail1"})
    assert fake.live() == []
    assert fake.displays() == []
    posts = [r.status for r in fake.log if r.method == "POST" and r.path == CLAIMS]
    if failure == "rate_limited":
        assert set(posts) == {429} and len(posts) == provider.retry.attempts  # refused each time, so retried
    else:
        assert len(posts) == 1  # never retried blindly


def test_a_drained_pool_fails_the_session_and_leaves_nothing(cua_env: FakeCua) -> None:
    cua_env.pools["harbor-ubuntu"].capacity = 0
    with pytest.raises(CapacityUnavailable) as info:
        deskctl.open_desktop("cua-cloud", platform="ubuntu", geometry="1920x1080",
                             provider_options={"poll_interval": 0.005, "rebind_attempts": 2})
    assert "no available sandbox in warm pool harbor-ubuntu" in info.value.message
    assert "claims made: 3" in info.value.message
    assert cua_env.live() == []


def test_a_pool_that_scales_up_binds_a_claim_made_again(provider: CuaCloudProvider, fake: FakeCua) -> None:
    fake.pools["harbor-ubuntu"].capacity = 0
    fake.pools["harbor-ubuntu"].scale_after_failures = 2  # two failed claims, then one sandbox more
    handle = provider.create(UBUNTU, "dk-scale1", {LABEL_SESSION: "dk-scale1"})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        assert provider.display_size(handle) == (1920, 1080)
        assert [r.status for r in fake.log if r.method == "POST" and r.path == CLAIMS] == [201, 201, 201]
        assert [c["metadata"]["name"] for c in fake.live()] == ["dk-scale1"]
    finally:
        provider.destroy(handle)
    assert fake.live() == [] and fake.displays() == []


# -- while open --------------------------------------------------------------------------------------------


def test_token_expiry_mid_session_is_reminted_without_failing(provider: CuaCloudProvider, fake: FakeCua,
                                                              ready: RemoteHandle) -> None:
    fake.expire_tokens()
    provider.act(ready, Click(30, 40))
    assert pointer(fake, ready.resource_id) == (30, 40)
    last = [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.log[-3:]]
    assert last == [("execute", 302), ("token", 200), ("execute", 200)]  # redirected, token minted, resent


def test_actions_arrive_on_the_real_display(provider: CuaCloudProvider, fake: FakeCua,
                                            ready: RemoteHandle) -> None:
    provider.act(ready, Click(123, 45))
    assert pointer(fake, ready.resource_id) == (123, 45)
    provider.act(ready, Scroll(300, 200, dy=2))
    assert pointer(fake, ready.resource_id) == (300, 200)
    shot = provider.screenshot(ready)
    assert (shot.width, shot.height) == provider.display_size(ready) == (1920, 1080)


def test_exec_has_separate_streams_and_times_out_with_124(provider: CuaCloudProvider,
                                                          ready: RemoteHandle) -> None:
    result = provider.exec(ready, "echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.merged) == (3, "out\n", "err\n", False)
    assert provider.exec(ready, "sleep 30", timeout=1).exit_code == 124


def test_a_claim_lost_mid_session_is_session_lost_and_destroy_is_still_success(
        provider: CuaCloudProvider, fake: FakeCua) -> None:
    handle = provider.create(UBUNTU, "dk-lost1", {})
    provider.wait_ready(handle, time.monotonic() + 30)
    fake.lose_claim("dk-lost1")
    with pytest.raises(SessionLost):
        provider.screenshot(handle)
    with pytest.raises(SessionLost):
        provider.keepalive(handle)
    assert not provider.is_alive(handle)
    provider.destroy(handle)
    provider.destroy(handle)  # idempotent
    assert fake.live() == [] and fake.displays() == []


def test_windows_guest_takes_pyautogui_programs_and_refuses_non_ascii(provider: CuaCloudProvider,
                                                                      fake: FakeCua) -> None:
    handle = provider.create(WINDOWS, "dk-win1", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        assert provider.display_size(handle) == (1024, 768)
        provider.act(handle, Click(200, 100))
        assert pointer(fake, "dk-win1") == (200, 100)
        provider.act(handle, TypeText("ab"))
        provider.act(handle, KeyPress(("ctrl", "s")))
        sent = [r.body for r in fake.log if r.path.endswith("/execute")]
        assert sent[0]["command"][0] == "python" and "pyautogui.click(200, 100" in sent[0]["command"][2]
        assert "pyautogui.hotkey('ctrl', 's')" in sent[-1]["command"][2]
        with pytest.raises(UsageError) as info:
            provider.act(handle, TypeText("héllo"))
        assert info.value.code == "usage.bad_text"
        ran = provider.exec(handle, "echo hi")
        assert (ran.exit_code, ran.stdout) == (0, "hi\n")
        assert [r.body for r in fake.log if r.path.endswith("/execute")][-1] == {
            "command": "echo hi", "shell": True, "timeout": 60}  # the shell of the guest (cmd.exe on Windows)
    finally:
        provider.destroy(handle)
    assert fake.live() == []


def test_a_pool_of_the_wrong_platform_is_refused(provider: CuaCloudProvider, fake: FakeCua,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake.pools["harbor-windows"] = Pool("harbor-windows", "Linux", (1024, 768))
    handle = provider.create(WINDOWS, "dk-wrong1", {})
    try:
        with pytest.raises(DeskctlError) as info:
            provider.wait_ready(handle, time.monotonic() + 30)
        assert info.value.code == "compat.platform_mismatch"
    finally:
        provider.destroy(handle)


# -- destroy and listing -----------------------------------------------------------------------------------


def test_destroy_waits_for_the_claim_to_go_and_list_owned_finds_by_label(provider: CuaCloudProvider,
                                                                         fake: FakeCua) -> None:
    fake.destroy_polls = 3
    one = provider.create(UBUNTU, "dk-list1", {LABEL_SESSION: "dk-list1"})
    two = provider.create(UBUNTU, "dk-list2", {LABEL_SESSION: "dk-list2"})
    try:
        assert sorted(h.session_id for h in provider.list_owned()) == ["dk-list1", "dk-list2"]
        assert [h.resource_id for h in provider.list_owned({LABEL_SESSION: "dk-list2"})] == ["dk-list2"]
        provider.destroy(one)
        assert [c["metadata"]["name"] for c in fake.live()] == ["dk-list2"]
        assert [h.session_id for h in provider.list_owned()] == ["dk-list2"]
    finally:
        provider.destroy(two)
    assert fake.live() == []


def test_destroy_refused_is_cleanup_incomplete_then_succeeds(provider: CuaCloudProvider, fake: FakeCua) -> None:
    handle = provider.create(UBUNTU, "dk-stuck1", {})
    fake.can_write = False
    with pytest.raises(CleanupIncomplete) as info:
        provider.destroy(handle)
    assert "dk-stuck1" in info.value.message
    fake.can_write = True
    fake.revoke_client()
    fake.expire_tokens()
    with pytest.raises(CleanupIncomplete):
        provider.destroy(handle)
    fake.restore_client()
    provider.destroy(handle)
    assert fake.live() == []


def test_no_secret_reaches_the_handle_or_the_ledger(cua_env: FakeCua) -> None:
    from deskctl.ledger import open_ledger

    with deskctl.open_desktop("cua-cloud", platform="ubuntu", geometry="1920x1080",
                              provider_options={"poll_interval": 0.005}) as desk:
        desk.click(5, 5)
        session_id = desk.id
        assert desk.handle is not None
        dumped = json.dumps(desk.handle.to_dict())
    with open_ledger() as book:
        record = book.get(session_id)
    assert record is not None and record.status == "ended"
    stored = json.dumps([record.handle, record.spec])
    tokens = list(cua_env.tokens)
    assert tokens
    for secret in (cua_env.client_secret, cua_env.client_id, *tokens):
        assert secret not in dumped and secret not in stored
    assert cua_env.live() == []


# -- hardening (issue 10 item 13) ---------------------------------------------------------------------------


def _linux_handle(provider: CuaCloudProvider, fake: FakeCua, name: str, missing: tuple[str, ...]) -> RemoteHandle:
    fake.pools["harbor-ubuntu"].guest_missing = missing
    handle = provider.create(UBUNTU, name, {})
    provider.wait_ready(handle, time.monotonic() + 30)
    return handle


def test_linux_input_is_pyautogui_and_needs_no_python_xlib_in_the_guest(provider: CuaCloudProvider,
                                                                        fake: FakeCua) -> None:
    from deskctl.actions import Drag, KeyDown, KeyUp

    handle = _linux_handle(provider, fake, "dk-noxlib", ("Xlib",))  # the guest's programs get no python-xlib
    try:
        provider.act(handle, Click(321, 54))
        assert pointer(fake, "dk-noxlib") == (321, 54)
        provider.act(handle, Drag(10, 10, 400, 300))
        assert pointer(fake, "dk-noxlib") == (400, 300)
        provider.act(handle, Scroll(50, 60, dy=-2))
        assert pointer(fake, "dk-noxlib") == (50, 60)
        with KeyRecorder.open(X11Address(fake.display_of("dk-noxlib")), None) as keys:
            provider.act(handle, TypeText("hello\tworld\n"))
            assert keys.text() == "hello\tworld\n"  # what reached the desktop, not only what was sent
        for action in (KeyPress(("ctrl", "s")), KeyDown("shift"), KeyUp("shift")):
            provider.act(handle, action)
        programs = [r.body["command"] for r in fake.log if r.path.endswith("/execute")
                    and isinstance(r.body["command"], list) and r.body["command"][0] == "python3"]
        assert len(programs) == 7 and all(p[4].startswith("import pyautogui") for p in programs)
        assert "pyautogui.click(321, 54" in programs[0][4] and "pyautogui.hotkey('ctrl', 's')" in programs[4][4]
        # what pyautogui cannot type needs XTEST, which this guest's programs cannot reach: said plainly
        with pytest.raises(ProviderApiError) as info:
            provider.act(handle, TypeText("héllo"))
        assert "no python-xlib" in info.value.message
    finally:
        provider.destroy(handle)
    assert fake.live() == []


def test_without_pyautogui_linux_input_falls_back_to_xtest(provider: CuaCloudProvider, fake: FakeCua) -> None:
    handle = _linux_handle(provider, fake, "dk-nopyag", ("pyautogui",))
    try:
        provider.act(handle, Click(222, 111))
        assert pointer(fake, "dk-nopyag") == (222, 111)
        with KeyRecorder.open(X11Address(fake.display_of("dk-nopyag")), None) as keys:
            provider.act(handle, TypeText("héllo"))  # any character, through XTEST
            assert keys.text() == "héllo"
    finally:
        provider.destroy(handle)
    assert fake.live() == []


def test_a_dropped_create_answer_whose_claim_was_released_does_not_blame_the_network(provider: CuaCloudProvider,
                                                                                      fake: FakeCua) -> None:
    fake.create_failure = "drop"
    with pytest.raises(ProviderUnreachable) as info:
        provider.create(UBUNTU, "dk-drop2", {LABEL_SESSION: "dk-drop2"})
    error = info.value
    assert "found and released" in error.message and "nothing is left" in error.message
    assert "network" not in (error.remedy or "") and "try again" in (error.remedy or "")
    assert error.details["released"] == ["dk-drop2"]
    assert fake.live() == [] and fake.displays() == []
