"""Session guarantees on the real host-Xvfb provider, with faults injected at each lifecycle step.

The faulty providers below are the real XvfbProvider with one step made to fail: a real Xvfb is started and
must be gone afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import deskctl
from _procs import alive as _alive
from _procs import wait_until
from deskctl.errors import (
    BudgetExceeded,
    GeometryMismatch,
    GeometryOutOfBounds,
    ProviderApiError,
    ReadinessTimeout,
    SessionClosed,
)
from deskctl.ledger import open_ledger
from deskctl.providers import PROVIDERS
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from deskctl.providers.xvfb import XvfbProvider
from deskctl.spec import DesktopSpec


def _xvfb_pids(handle: RemoteHandle) -> list[int]:
    pids = [int(p["pid"]) for p in handle.data.get("procs", [])]
    assert pids, f"the xvfb handle should name its processes: {handle.data}"
    return pids


made: list[RemoteHandle] = []


class FailsReadiness(XvfbProvider):
    name = "xvfb-fails-ready"

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        handle = super().create(spec, session_id, labels)
        made.append(handle)
        return handle

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        raise ReadinessTimeout("injected: the display never answered", provider=self.name)


class FailsAfterCreate(XvfbProvider):
    """Creates the desktop, then fails before a handle is returned (the "create sent, no answer" case)."""

    name = "xvfb-lost-handle"

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        made.append(super().create(spec, session_id, labels))
        raise ProviderApiError("injected: the create response was lost", provider=self.name)


class WrongSize(XvfbProvider):
    """Makes a real desktop of another size than pinned."""

    name = "xvfb-wrong-size"
    live: tuple[int | None, int | None] = (800, 600)  # None: that side as pinned

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        assert spec.geometry is not None
        width, height = self.live
        other = spec.model_copy(update={"geometry": deskctl.Geometry(width=width or spec.geometry.width,
                                                                     height=height or spec.geometry.height)})
        handle = super().create(other, session_id, labels)
        made.append(handle)
        return handle


class WrongHeight(WrongSize):
    """Only the height differs from the pinned size."""

    name = "xvfb-wrong-height"
    live = (None, 600)


class WrongWidth(WrongSize):
    """Only the width differs from the pinned size."""

    name = "xvfb-wrong-width"
    live = (800, None)


@pytest.fixture
def faulty() -> Iterator[None]:
    made.clear()
    added = {}
    for cls in (FailsReadiness, FailsAfterCreate, WrongSize, WrongHeight, WrongWidth):
        added[cls.name] = (f"{__name__}:{cls.__name__}", "")
    PROVIDERS.update(added)
    try:
        yield
    finally:
        for name in added:
            PROVIDERS.pop(name, None)
        for handle in made:
            XvfbProvider().destroy(handle)


def test_a_session_is_recorded_from_intent_to_end() -> None:
    with deskctl.open_desktop("xvfb", geometry="640x480") as desk:
        assert desk.size == (640, 480)
        shot = desk.screenshot()
        assert (shot.width, shot.height) == (640, 480)
        assert shot.png.startswith(b"\x89PNG")
        desk.click(10, 10)
        desk.key("ctrl+a")
        sid, handle = desk.id, desk.handle
        assert handle is not None
        pids = _xvfb_pids(handle)
        assert all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)
    with open_ledger() as book:
        record = book.get(sid)
        kinds = [e.kind for e in book.events(sid)]
    assert record is not None
    assert record.status == "ended"
    assert record.created_at is not None and record.ready_at is not None and record.ended_at is not None
    assert record.intent_at <= record.created_at <= record.ready_at <= record.ended_at
    assert record.billable_seconds is not None and record.billable_seconds > 0
    assert record.cost_usd == 0.0  # the local Xvfb is known to be free, which is not "unknown"
    assert record.action_counts.get("click") == 1 and record.action_counts.get("screenshot") == 1
    assert kinds.index("intent") < kinds.index("created") < kinds.index("ready") < kinds.index("ended")


def test_the_provider_backstop_never_comes_before_the_session_limit() -> None:
    """The expiry label the providers' backstops act on (Xvfb owner watch, docker reaper, cloud TTLs) is at or
    after the session's own deadline: a label rounded down ended short sessions while `up` still verified them."""
    from deskctl.providers.base import LABEL_EXPIRES

    with deskctl.open_desktop("xvfb", geometry="320x240", max_minutes=0.5) as desk:
        assert desk.handle is not None and desk.expires_at is not None
        assert int(desk.handle.labels[LABEL_EXPIRES]) >= desk.expires_at


def test_exception_in_the_body_still_destroys() -> None:
    with pytest.raises(RuntimeError), deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        assert desk.handle is not None
        pids = _xvfb_pids(desk.handle)
        raise RuntimeError("agent crashed")
    assert not any(_alive(p) for p in pids)
    with open_ledger() as book:
        record = book.get(desk.id)
    assert record is not None and record.status == "failed"
    assert record.reason == "RuntimeError"


def test_readiness_failure_rolls_back(faulty: None) -> None:
    with pytest.raises(ReadinessTimeout):
        deskctl.open_desktop("xvfb-fails-ready", geometry="320x240")
    (handle,) = made
    assert not any(_alive(p) for p in _xvfb_pids(handle))
    with open_ledger() as book:
        record = book.get(handle.session_id)
    assert record is not None and record.status == "failed" and record.reason == "readiness.timeout"


def test_a_desktop_made_before_a_lost_create_response_is_found_by_label_and_destroyed(faulty: None) -> None:
    with pytest.raises(ProviderApiError):
        deskctl.open_desktop("xvfb-lost-handle", geometry="320x240")
    (handle,) = made
    assert handle.labels[LABEL_SESSION] == handle.session_id
    assert not any(_alive(p) for p in _xvfb_pids(handle))
    assert XvfbProvider().list_owned({LABEL_SESSION: handle.session_id}) == []


def test_a_display_of_the_wrong_size_is_a_mismatch_and_is_destroyed(faulty: None) -> None:
    with pytest.raises(GeometryMismatch) as info:
        deskctl.open_desktop("xvfb-wrong-size", geometry="1024x768")
    assert info.value.exit_code == 20
    assert "800x600" in info.value.message and "1024x768" in info.value.message
    (handle,) = made
    assert not any(_alive(p) for p in _xvfb_pids(handle))


@pytest.mark.parametrize(("provider", "live"), [("xvfb-wrong-height", "1024x600"), ("xvfb-wrong-width", "800x768")])
def test_a_display_wrong_in_one_side_only_is_a_mismatch(faulty: None, provider: str, live: str) -> None:
    with pytest.raises(GeometryMismatch) as info:
        deskctl.open_desktop(provider, geometry="1024x768")
    assert info.value.code == "geometry.mismatch" and info.value.details == {"live": live, "pinned": "1024x768"}
    (handle,) = made
    assert not any(_alive(p) for p in _xvfb_pids(handle))


def test_the_last_pixel_is_on_the_screen_and_one_past_it_is_not() -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        desk.click(319, 239)
        assert desk.cursor_position() == (319, 239)
        desk.move(0, 0)
        assert desk.cursor_position() == (0, 0)
        for x, y in ((320, 0), (0, 240), (-1, 0), (0, -1)):
            with pytest.raises(GeometryOutOfBounds):
                desk.move(x, y)


def test_use_after_close_and_out_of_bounds_are_refused() -> None:
    desk = deskctl.open_desktop("xvfb", geometry="320x240")
    try:
        with pytest.raises(GeometryOutOfBounds) as info:
            desk.click(320, 10)
        assert info.value.exit_code == 2
        with pytest.raises(GeometryOutOfBounds):
            desk.drag(0, 0, 10, 240)
    finally:
        desk.close()
    desk.close()  # idempotent
    with pytest.raises(SessionClosed):
        desk.click(1, 1)
    with pytest.raises(SessionClosed):
        desk.screenshot()


def test_watchdog_ends_the_session_at_its_max_minutes() -> None:
    desk = deskctl.open_desktop("xvfb", geometry="320x240", max_minutes=0.01)
    assert desk.handle is not None
    pids = _xvfb_pids(desk.handle)
    wait_until(lambda: desk.state.value == "ended")
    assert not any(_alive(p) for p in pids)
    with pytest.raises(BudgetExceeded) as info:
        desk.click(1, 1)
    assert info.value.exit_code == 4
    with open_ledger() as book:
        record = book.get(desk.id)
    assert record is not None and record.reason == "budget.exceeded"
    desk.close()


def test_a_detached_session_survives_release_and_is_reached_by_attach() -> None:
    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True)
    desk.release()
    assert desk.handle is not None
    pids = _xvfb_pids(desk.handle)
    assert all(_alive(p) for p in pids)
    again = deskctl.attach(desk.id)
    try:
        assert again.size == (320, 240)
        again.click(5, 5)
    finally:
        again.close()
    assert not any(_alive(p) for p in pids)
    with open_ledger() as book:
        record = book.get(desk.id)
    assert record is not None and record.status == "ended" and record.detached


def test_a_desktop_is_made_from_its_ledger_record_and_an_ended_one_is_refused() -> None:
    from deskctl.errors import SessionClosed
    from deskctl.session import Desktop

    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True)
    desk.release()
    with open_ledger() as book:
        record = book.get(desk.id)
        assert record is not None
        again = Desktop.from_record(record, ledger=book)
        try:
            assert (again.id, again.size, again.state.value) == (desk.id, (320, 240), "ready")
            again.click(5, 5)
        finally:
            again.close()
        ended = book.get(desk.id)
        assert ended is not None and ended.status == "ended"
        with pytest.raises(SessionClosed):
            Desktop.from_record(ended, ledger=book)


def test_attach_to_an_unknown_session_is_a_usage_error() -> None:
    with pytest.raises(deskctl.UsageError) as info:
        deskctl.attach("dk-nope")
    assert info.value.code == "usage.not_found"




def test_an_unreachable_provider_is_reported_as_such_not_as_a_leak(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Any) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(deskctl.InfrastructureError) as info:
        deskctl.open_desktop("docker", geometry="320x240", preflight=False)
    assert info.value.code == "provider.unreachable" and info.value.exit_code == 20
    with open_ledger() as book:
        (record,) = book.sessions()
        kinds = [e.kind for e in book.events(record.session_id)]
    assert record.status == "failed" and "orphan_sweep_skipped" in kinds
