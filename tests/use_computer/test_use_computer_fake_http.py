"""The use-computer provider over real HTTP against the loopback fake (tests/fakes/use_computer), whose desktops are
real Xvfb servers: preflight, create rules, the idle reaper and keepalive, Retina scaling, actions, exec, destroy,
and that no failure injected during create leaves a sandbox behind."""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from typing import Any

import pytest

from deskctl.actions import Click, Drag, KeyPress, Scroll, TypeText
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CredentialsForbidden,
    CredentialsInvalid,
    DeskctlError,
    QuotaExceeded,
    RateLimited,
    SessionLost,
    UsageError,
)
from deskctl.providers.base import LABEL_DETACHED, LABEL_SESSION, RemoteHandle
from deskctl.providers.use_computer import UseComputerProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import pointer_at, ready_handle
from fakes.use_computer import FakeUseComputer

MACOS = DesktopSpec.build(provider="use-computer", platform="macos", geometry="1024x768")


def spec(platform: str = "macos", geometry: str | None = "1024x768", **kw: Any) -> DesktopSpec:
    return DesktopSpec.build(provider="use-computer", platform=platform, geometry=geometry or "native", **kw)


@pytest.fixture
def ready(provider: UseComputerProvider, fake: FakeUseComputer) -> Iterator[RemoteHandle]:
    """A ready macOS sandbox; destroyed (and checked gone) after the test."""

    def restore() -> None:
        fake.restore_key()
        fake.delete_ignored = False

    yield from ready_handle(provider, fake, MACOS, "dk-ready1", {LABEL_SESSION: "dk-ready1"}, restore=restore)


def pointer(fake: FakeUseComputer, handle: RemoteHandle) -> tuple[int, int]:
    return pointer_at(fake.display_of(handle.resource_id))


# -- preflight ---------------------------------------------------------------------------------------------------


def test_preflight_passes_and_only_reads(provider: UseComputerProvider, fake: FakeUseComputer) -> None:
    from deskctl.checks.runner import run_checks

    results = {r.code: r for r in run_checks(MACOS, provider)}
    assert {"use-computer.credentials", "use-computer.platform", "use-computer.capacity",
            "use-computer.leftovers", "geometry.listed"} <= set(results)  # the service's listing decides
    assert all(r.status in ("pass", "skip") for r in results.values()), results
    assert results["budget.projection"].message.startswith("cost: unknown")  # unknown price, never $0
    assert fake.log and {r.method for r in fake.log} == {"GET"}
    assert all(r.authorized for r in fake.log)
    assert fake.live() == []


def test_preflight_refuses_sizes_the_platform_does_not_offer(provider: UseComputerProvider,
                                                             fake: FakeUseComputer) -> None:
    from deskctl.checks.runner import run_checks

    for platform, wrong, right in (("macos", "1280x800", "1024x768"), ("ubuntu", "1024x768", "1920x1080"),
                                   ("windows", "1920x1080", "1024x768")):
        results = {r.code: r for r in run_checks(spec(platform, wrong), provider)}
        assert results["geometry.unsupported"].status == "fail", platform
        assert right in results["geometry.unsupported"].message
        native = {r.code: r.status for r in run_checks(spec(platform, None), provider)}
        assert native["geometry.native"] == "pass" and "fail" not in native.values(), native
    assert {r.method for r in fake.log} == {"GET"}


def test_preflight_checks_the_listed_display(provider: UseComputerProvider, fake: FakeUseComputer) -> None:
    fake.sizes["ubuntu"] = (1280, 720)  # the image lists another display than deskctl's model
    results = {r.code: r for r in provider.preflight(spec("ubuntu", "1920x1080"))}
    assert results["geometry.unsupported"].status == "fail"
    assert "1280x720" in results["geometry.unsupported"].message


def test_preflight_bad_key_and_wrong_environment(provider: UseComputerProvider, fake: FakeUseComputer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USE_COMPUTER_API_KEY", "uc_live_not_the_key")
    results = {r.code: r for r in UseComputerProvider().preflight(MACOS)}
    assert results["credentials.invalid"].status == "fail"
    assert "uc_live_not_the_key" not in str([r.to_dict() for r in results.values()])
    assert "USE_COMPUTER_API_KEY" in (results["credentials.invalid"].remedy or "")


def test_preflight_forbidden_platform_capacity_and_leftovers(provider: UseComputerProvider,
                                                             fake: FakeUseComputer) -> None:
    fake.inject("GET", r"^/v1/platforms$", 403, {"error": "reservation_expired"})
    assert {r.code: r.status for r in provider.preflight(MACOS)}["credentials.forbidden"] == "fail"
    fake.offered = frozenset({"macos"})
    results = {r.code: r for r in provider.preflight(spec("windows", None))}
    assert results["compat.platform_unavailable"].status == "fail"
    fake.capacity = 0
    assert {r.code: r.status for r in provider.preflight(MACOS)}["capacity.unavailable"] == "fail"
    fake.inject("GET", r"^/v1/platforms$", 429, {"error": "rate_limited"}, headers={"Retry-After": "1"}, times=2)
    assert {r.code: r.status for r in provider.preflight(MACOS)}["provider.rate_limited"] == "fail"
    assert {r.method for r in fake.log} == {"GET"}


def test_preflight_warns_about_ledger_leftovers(uc_env: FakeUseComputer) -> None:
    import deskctl

    desk = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                                provider_options={"poll_interval": 0.005, "ephemeral": False})
    try:
        with contextlib.closing(UseComputerProvider()) as prov:
            results = {r.code: r for r in prov.preflight(MACOS)}
            assert results["use-computer.leftovers"].status == "warn"
            assert desk.id in results["use-computer.leftovers"].message
            assert results["use-computer.leftovers"].remedy == "deskctl reap --provider use-computer"
            assert [h.session_id for h in prov.list_owned()] == [desk.id]
            assert [h.session_id for h in prov.list_owned({LABEL_SESSION: desk.id})] == [desk.id]
            assert prov.list_owned({LABEL_SESSION: "dk-other"}) == []
    finally:
        desk.close()
    assert uc_env.live() == []


# -- create --------------------------------------------------------------------------------------------------------


def test_create_body_and_handle(provider: UseComputerProvider, fake: FakeUseComputer) -> None:
    handle = provider.create(MACOS, "dk-body1", {LABEL_SESSION: "dk-body1", "team": "qa"})
    try:
        body = next(r.body for r in fake.log if r.method == "POST" and r.path == "/v1/sandboxes")
        assert body == {"type": "macos", "ephemeral": True}  # the API takes no labels: they stay in the ledger
        assert handle.labels == {LABEL_SESSION: "dk-body1", "team": "qa"}
        assert handle.data["base_url"] == fake.base_url and handle.data["ephemeral"] is True
        assert fake.api_key not in str(handle.to_dict())
    finally:
        provider.destroy(handle)
    options = UseComputerProvider({"version": "ubuntu-24.04", "resources": "cpus=4,memory_mb=4096,disk_gb=40",
                                   "host": "mm002"})
    assert options.create_body(spec("ubuntu", None)) == {
        "type": "ubuntu", "ephemeral": True, "host": "mm002", "version": "ubuntu-24.04",
        "resources": {"cpus": 4, "memory_mb": 4096, "disk_gb": 40}}
    assert UseComputerProvider({"reservation_id": "r-1", "version": "x"}).create_body(MACOS) == {
        "type": "macos", "ephemeral": True, "reservation_id": "r-1"}


def test_a_detached_ephemeral_session_is_refused_before_anything_is_sent(provider: UseComputerProvider,
                                                                         fake: FakeUseComputer) -> None:
    with pytest.raises(UsageError) as info:
        provider.create(MACOS, "dk-det1", {LABEL_DETACHED: "1"})
    assert info.value.code == "usage.detached_unsupported"
    assert "ephemeral=false" in (info.value.remedy or "")
    assert fake.log == []
    persistent = UseComputerProvider({"ephemeral": "false", "poll_interval": 0.005})
    handle = persistent.create(MACOS, "dk-det2", {LABEL_DETACHED: "1"})
    try:
        assert fake.live()[0]["ephemeral"] is False
    finally:
        persistent.destroy(handle)
        persistent.close()


def test_ubuntu_and_windows_run_at_their_size(provider: UseComputerProvider, fake: FakeUseComputer) -> None:
    for platform, size in (("ubuntu", (1920, 1080)), ("windows", (1024, 768))):
        handle = provider.create(spec(platform, None), f"dk-{platform}", {})
        try:
            provider.wait_ready(handle, time.monotonic() + 30)
            assert provider.display_size(handle) == size
            result = provider.exec(handle, "echo $0")
            assert result.exit_code == 0
        finally:
            provider.destroy(handle)
    shells = [r.body.get("shell") for r in fake.log if r.path.endswith("/exec")]
    # Ubuntu in bash; Windows in PowerShell, named because deskctl's own lines (cwd, env, files) are PowerShell
    assert shells == ["bash", "powershell"]


# every failure injected during create: the error is the right one, create is sent once, nothing is left on the fake
CREATE_FAILURES = [
    ("error_500", CleanupIncomplete, True),
    ("drop", CleanupIncomplete, True),
    ("hang", CleanupIncomplete, True),
    ("no_id", CleanupIncomplete, True),
    ("inject_502", CleanupIncomplete, False),
    ("inject_429", RateLimited, False),
    ("capacity", CapacityUnavailable, False),
    ("billing", QuotaExceeded, False),
    ("forbidden", CredentialsForbidden, False),
    ("revoked", CredentialsInvalid, False),
]


@pytest.mark.parametrize(("failure", "expected", "made"), CREATE_FAILURES, ids=[f[0] for f in CREATE_FAILURES])
def test_no_failure_during_create_leaves_a_sandbox(fake: FakeUseComputer, uc_env: FakeUseComputer, failure: str,
                                                   expected: type[DeskctlError], made: bool) -> None:
    fake.idle_timeout = 0.5  # the service's own backstop, short
    options: dict[str, Any] = {"poll_interval": 0.005, "retry_attempts": 2}
    if failure in ("error_500", "drop", "hang", "no_id"):
        fake.create_failure = failure
        options["create_timeout"] = 0.5
    elif failure == "inject_502":
        fake.inject("POST", r"^/v1/sandboxes$", 502, raw=b"")
    elif failure == "inject_429":
        fake.inject("POST", r"^/v1/sandboxes$", 429, {"error": "rate_limited"}, headers={"Retry-After": "2"},
                    times=5)
    elif failure == "capacity":
        fake.capacity = 0
    elif failure == "billing":
        fake.inject("POST", r"^/v1/sandboxes$", 402, {"error": "billing_required"})
    elif failure == "forbidden":
        fake.offered = frozenset({"ubuntu"})
    elif failure == "revoked":
        fake.revoke_key()
    prov = UseComputerProvider(options)
    try:
        with pytest.raises(expected) as info:
            prov.create(MACOS, f"dk-fail-{failure.replace('_', '')}", {})
        posts = [r for r in fake.log if r.method == "POST" and r.path == "/v1/sandboxes"]
        assert len([r for r in posts if r.status != 429]) <= 1  # never retried blindly
        if failure == "inject_429":
            assert [r.status for r in posts] == [429, 429]
        if made:
            # the sandbox exists and the API cannot find it: deskctl says so, and the idle reaper removes it
            assert info.value.details["left"] == [f"an unknown sandbox of dk-fail-{failure.replace('_', '')}"]
            assert len(fake.reaped) + len(fake.live()) == 1
        fake.wait_until(lambda: fake.live() == [], 30, "no sandbox left")
        assert not any(r.method == "POST" and "/keepalive" in r.path for r in fake.log)
    finally:
        fake.create_failure = None
        prov.close()


# -- the idle reaper and keepalive ---------------------------------------------------------------------------------


def test_without_keepalive_the_idle_reaper_takes_the_sandbox(provider: UseComputerProvider,
                                                            fake: FakeUseComputer) -> None:
    fake.idle_timeout = 0.3
    handle = provider.create(MACOS, "dk-idle1", {})
    provider.wait_ready(handle, time.monotonic() + 30)
    fake.wait_until(lambda: handle.resource_id in fake.reaped, 30, "the idle reaper")
    with pytest.raises(SessionLost) as info:
        provider.screenshot(handle)
    assert "2 minutes" in info.value.message
    with pytest.raises(SessionLost):
        provider.keepalive(handle)
    provider.destroy(handle)  # already gone is success


def test_keepalive_holds_a_session_past_the_idle_reaper(uc_env: FakeUseComputer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import deskctl
    from deskctl import supervisor  # the keepalive loop lives there

    fake = uc_env
    fake.idle_timeout = 1.0
    monkeypatch.setattr(supervisor, "KEEPALIVE_SECONDS", 0.1)  # the session's 30 s against the service's 120 s
    desk = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                                provider_options={"poll_interval": 0.005})
    try:
        assert desk.handle is not None
        sandbox_id = desk.handle.resource_id
        started = time.monotonic()
        # idle from the agent's side for three idle timeouts: only keepalives reach the service
        fake.wait_until(lambda: len(fake.requests(rf"/{sandbox_id}/keepalive$")) >= 3
                        and time.monotonic() - started > 3 * fake.idle_timeout, 60, "three idle timeouts")
        assert fake.reaped == []
        assert desk.screenshot().width == 1024
    finally:
        desk.close()
    assert fake.live() == []


# -- the desktop -------------------------------------------------------------------------------------------------


def test_actions_arrive(provider: UseComputerProvider, fake: FakeUseComputer, ready: RemoteHandle) -> None:
    provider.act(ready, Click(10, 20))
    assert pointer(fake, ready) == (10, 20)
    provider.act(ready, Drag(30, 40, 50, 60))
    assert pointer(fake, ready) == (50, 60)
    provider.act(ready, Scroll(5, 6, dx=-1, dy=2))
    provider.act(ready, TypeText("a\nb"))
    provider.act(ready, KeyPress(("super", "s")))
    provider.act(ready, Click(1, 1, "left", 3))
    sent = [(r.path.rsplit(ready.resource_id, 1)[1], r.body) for r in fake.log if r.method == "POST"
            and ready.resource_id in r.path]
    assert sent == [
        ("/mouse/click", {"x": 10, "y": 20, "button": "left", "double": False}),
        ("/mouse/drag", {"startX": 30, "startY": 40, "endX": 50, "endY": 60, "button": "left"}),
        ("/mouse/scroll", {"x": 5, "y": 6, "direction": "down", "amount": 2}),
        ("/mouse/scroll", {"x": 5, "y": 6, "direction": "left", "amount": 1}),
        ("/keyboard/type", {"text": "a"}),
        ("/keyboard/press", {"key": "enter"}),
        ("/keyboard/type", {"text": "b"}),
        ("/keyboard/press", {"key": "s", "modifiers": ["cmd"]}),
        ("/mouse/click", {"x": 1, "y": 1, "button": "left", "double": True}),
        ("/mouse/click", {"x": 1, "y": 1, "button": "left", "double": False}),
    ]
    assert all(r.status == 200 for r in fake.log)


def test_retina_screenshots_and_clicks_share_the_point_space(provider: UseComputerProvider,
                                                             fake: FakeUseComputer) -> None:
    fake.macos_scale = 2  # the Xvfb is 2048x1536; display/info says 1024x768 at scale 2
    handle = provider.create(MACOS, "dk-retina", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        assert provider.display_size(handle) == (1024, 768)
        shot = provider.screenshot(handle)
        assert (shot.width, shot.height) == (1024, 768)
        from PIL import Image

        assert Image.open(io.BytesIO(shot.png)).size == (1024, 768)
        provider.act(handle, Click(100, 50))
        assert pointer(fake, handle) == (200, 100)  # the service's own point-to-pixel mapping
    finally:
        provider.destroy(handle)


def test_exec_streams_are_separate(provider: UseComputerProvider, ready: RemoteHandle) -> None:
    result = provider.exec(ready, "echo out; echo err >&2; exit 4")
    assert (result.exit_code, result.stdout, result.stderr, result.merged) == (4, "out\n", "err\n", False)
    with pytest.raises(UsageError):
        provider.exec(ready, "  ")


# -- destroy -----------------------------------------------------------------------------------------------------


def test_destroy_is_idempotent_and_confirmed(provider: UseComputerProvider, fake: FakeUseComputer) -> None:
    handle = provider.create(MACOS, "dk-del1", {})
    fake.inject("DELETE", r"^/v1/sandboxes/", 503, {"error": "busy"})
    provider.destroy(handle)
    assert [r.status for r in fake.log if r.method == "DELETE"] == [503, 200]
    assert fake.live() == []
    provider.destroy(handle)
    assert not provider.is_alive(handle)


def test_a_delete_that_does_not_take_is_cleanup_incomplete(provider: UseComputerProvider,
                                                           fake: FakeUseComputer) -> None:
    handle = provider.create(MACOS, "dk-del2", {})
    quick = UseComputerProvider({"poll_interval": 0.005, "destroy_timeout": 0.3})
    try:
        fake.delete_ignored = True  # 200, and the sandbox is still there: the SDK would call that success
        with pytest.raises(CleanupIncomplete) as info:
            quick.destroy(handle)
        assert info.value.details["left"] == [handle.resource_id]
        fake.revoke_key()
        with pytest.raises(CleanupIncomplete) as refused:
            quick.destroy(handle)
        assert refused.value.details["cause"] == "credentials.invalid"
        assert fake.api_key not in str(refused.value.to_dict())
    finally:
        fake.delete_ignored = False
        fake.restore_key()
        quick.destroy(handle)
        quick.close()
    assert fake.live() == []


def test_bad_option_is_config_invalid(uc_env: FakeUseComputer) -> None:
    from deskctl.errors import ConfigInvalid

    with pytest.raises(ConfigInvalid):
        UseComputerProvider({"ephemeral": "maybe"})
    with pytest.raises(ConfigInvalid):
        UseComputerProvider({"resources": "gpus=1"}).create_body(spec("ubuntu", None))
    with pytest.raises(ConfigInvalid):
        UseComputerProvider({"version": "a", "snapshot": "b"}).create_body(spec("windows", None))


# -- hardening (issue 10 item 11) ----------------------------------------------------------------------------------


def test_a_listed_display_is_the_size_both_checks_accept(uc_env: FakeUseComputer) -> None:
    import deskctl
    from deskctl.checks.runner import run_checks

    fake = uc_env
    fake.sizes["ubuntu"] = (1280, 720)  # the image lists another display than deskctl's modelled 1920x1080
    with contextlib.closing(UseComputerProvider()) as prov:
        modelled = {r.code: r for r in run_checks(spec("ubuntu", "1920x1080"), prov)}
        assert modelled["geometry.unsupported"].status == "fail"
        assert modelled["geometry.unsupported"].remedy == "--geometry 1280x720 (or native)"
        listed = {r.code: r for r in run_checks(spec("ubuntu", "1280x720"), prov)}
    assert [r for r in listed.values() if r.status == "fail"] == []  # the size the first check suggested passes
    assert listed["geometry.listed"].status == "pass"
    desk = deskctl.open_desktop("use-computer", platform="ubuntu", geometry="1280x720",
                                provider_options={"poll_interval": 0.005})
    try:
        assert desk.size == (1280, 720) and desk.screenshot().width == 1280
    finally:
        desk.close()
    assert fake.live() == []


def test_the_concurrent_sandbox_limit_is_capacity_not_a_rate_limit(provider: UseComputerProvider,
                                                                   fake: FakeUseComputer) -> None:
    fake.inject("POST", r"^/v1/sandboxes$", 429,
                {"error": "sandbox_limit_reached", "message": "concurrent sandbox limit reached (2)"},
                headers={"Retry-After": "1"}, times=5)
    with pytest.raises(CapacityUnavailable) as info:
        provider.create(MACOS, "dk-limit1", {})
    assert info.value.code == "capacity.unavailable" and info.value.exit_code == 20
    assert "concurrent" in info.value.message and "deskctl reap" in (info.value.remedy or "")
    assert len(fake.requests(r"^/v1/sandboxes$")) == 1  # waiting does not free a sandbox: never retried
    assert fake.live() == []


def test_a_keepalive_answered_after_close_raises_nothing(uc_env: FakeUseComputer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import deskctl
    from deskctl import supervisor  # the keepalive loop lives there
    from deskctl.ledger import open_ledger

    fake = uc_env
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    monkeypatch.setattr(supervisor, "KEEPALIVE_SECONDS", 0.05)
    fake.keepalive_hold = threading.Event()
    book = open_ledger()
    desk = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768", ledger=book,
                                provider_options={"poll_interval": 0.005})
    keepalive = next(t for t in threading.enumerate() if t.name == f"deskctl-keepalive-{desk.id}")
    fake.wait_until(fake.keepalive_held.is_set, 30, "a keepalive in flight")
    desk.close()  # destroys the sandbox while the keepalive waits at the service
    assert book.get(desk.id).status == "ended"  # type: ignore[union-attr]
    book.close()  # the caller's ledger is closed, as a program does when it is done
    fake.keepalive_hold.set()  # the keepalive's answer (404: the sandbox is gone) arrives now
    keepalive.join(30)
    assert not keepalive.is_alive()
    assert raised == []
    assert fake.live() == []


def test_a_session_whose_reservation_expired_ends_in_the_ledger(uc_env: FakeUseComputer) -> None:
    import deskctl
    from deskctl.ledger import open_ledger

    fake = uc_env
    desk = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                                provider_options={"poll_interval": 0.005})
    fake.expire_reservation()
    with pytest.raises(SessionLost) as info:
        desk.screenshot()
    assert "reservation" in info.value.message
    desk.close()  # nothing left to destroy, and no "cleanup incomplete" for it
    with open_ledger() as book:
        record = book.get(desk.id)
    assert record is not None and record.status == "failed" and record.ended_at is not None


def test_an_expired_reservation_found_by_close_or_keepalive_ends_the_session(
        uc_env: FakeUseComputer, monkeypatch: pytest.MonkeyPatch) -> None:
    import deskctl
    from deskctl import supervisor  # the keepalive loop lives there
    from deskctl.ledger import open_ledger

    fake = uc_env
    first = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                                 provider_options={"poll_interval": 0.005})
    fake.expire_reservation()
    first.close()  # DELETE and GET answer 403 reservation_expired: the sandbox went with the reservation
    fake.reservation_expired = False
    monkeypatch.setattr(supervisor, "KEEPALIVE_SECONDS", 0.05)
    second = deskctl.open_desktop("use-computer", platform="macos", geometry="1024x768",
                                  provider_options={"poll_interval": 0.005})
    fake.expire_reservation()  # nobody calls: the keepalive finds out

    def ended() -> bool:
        with open_ledger() as book:
            record = book.get(second.id)
        return record is not None and record.status == "failed"

    fake.wait_until(ended, 30, "the session's end in the ledger")
    with pytest.raises(SessionLost):
        second.screenshot()
    second.close()
    with open_ledger() as book:
        assert book.get(first.id).status == "ended"  # type: ignore[union-attr]
