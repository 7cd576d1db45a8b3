"""deskctl.aio on the real host-Xvfb provider: the sync session's guarantees under asyncio, cancellation included.

Each test runs its coroutine with plain ``asyncio.run`` and checks, after it, that the ledger row ended and that
no Xvfb process of the desktop is left. The slow providers below are the real XvfbProvider with one step held
on a threading.Event, so a cancel can be sent while that step runs.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import deskctl
from _procs import alive as _alive
from deskctl import aio, session
from deskctl.errors import SessionClosed
from deskctl.ledger import SessionRecord, open_ledger
from deskctl.providers import PROVIDERS
from deskctl.providers.base import RemoteHandle
from deskctl.providers.xvfb import XvfbProvider
from deskctl.spec import DesktopSpec


def _pids(handle: RemoteHandle | None) -> list[int]:
    assert handle is not None
    pids = [int(p["pid"]) for p in handle.data.get("procs", [])]
    assert pids, f"the xvfb handle should name its processes: {handle.data}"
    return pids


def _record(session_id: str) -> SessionRecord:
    with open_ledger() as book:
        record = book.get(session_id)
    assert record is not None, f"no ledger row for {session_id}"
    return record


def _assert_gone(session_id: str, handle: RemoteHandle | None, status: str, reason: str) -> None:
    assert not any(_alive(p) for p in _pids(handle)), "an Xvfb process of the desktop is left"
    record = _record(session_id)
    assert (record.status, record.reason) == (status, reason)
    assert record.ended_at is not None


# -- providers with one step held --------------------------------------------------------------------------------
made: list[RemoteHandle] = []
ready_entered = threading.Event()
ready_release = threading.Event()
destroy_entered = threading.Event()
destroy_release = threading.Event()


class SlowReady(XvfbProvider):
    name = "xvfb-slow-ready"

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        handle = super().create(spec, session_id, labels)
        made.append(handle)
        return handle

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        ready_entered.set()
        ready_release.wait(120)
        super().wait_ready(handle, deadline)


class SlowDestroy(XvfbProvider):
    name = "xvfb-slow-destroy"

    def destroy(self, handle: RemoteHandle) -> None:
        destroy_entered.set()
        destroy_release.wait(120)
        super().destroy(handle)


@pytest.fixture
def held() -> Iterator[None]:
    made.clear()
    for event in (ready_entered, ready_release, destroy_entered, destroy_release):
        event.clear()
    added = {cls.name: (f"{__name__}:{cls.__name__}", "") for cls in (SlowReady, SlowDestroy)}
    PROVIDERS.update(added)
    try:
        yield
    finally:
        ready_release.set()
        destroy_release.set()
        for name in added:
            PROVIDERS.pop(name, None)
        for handle in made:
            XvfbProvider().destroy(handle)


async def _until(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 120), "the held step was never reached"


async def _settle() -> None:
    """Let the loop run the task's reaction to what just happened (no timer: a few turns of the loop)."""
    for _ in range(20):
        await asyncio.sleep(0)


# -- the surface ---------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _every_outcome_read(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A future whose exception nobody read is logged by asyncio when it is collected (at a random later
    moment, in another test, where CPython 3.11 has been seen to fail): none may be left behind."""
    yield
    gc.collect()
    unread = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert unread == []


def test_the_async_surface_mirrors_the_sync_one() -> None:
    def public(cls: type) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for klass in reversed(cls.__mro__[:-1]):  # Desktop's state and properties are on its base, SessionState
            found.update(vars(klass))
        return {name: value for name, value in found.items() if not name.startswith("_")}

    sync, asynchronous = public(session.Desktop), public(aio.AsyncDesktop)
    sync_methods = {n for n, v in sync.items() if inspect.isfunction(v)} - {"open"}  # aio.open_desktop opens
    sync_properties = {n for n, v in sync.items() if isinstance(v, property)}
    assert sync_methods <= set(asynchronous), f"missing in AsyncDesktop: {sync_methods - set(asynchronous)}"
    for name in sorted(sync_methods):
        # the one difference: wait_for's predicate is given the desktop of its own kind (AsyncDesktop here)
        async_signature = str(inspect.signature(asynchronous[name])).replace("AsyncDesktop", "Desktop")
        assert async_signature == str(inspect.signature(sync[name])), name
        assert inspect.iscoroutinefunction(asynchronous[name]) == (name != "labels"), name
    assert sync_properties <= {n for n, v in asynchronous.items() if isinstance(v, property)}
    extra = set(asynchronous) - sync_methods - sync_properties
    # the attributes the sync session sets in __init__ are properties here, plus `sync` itself
    assert extra == {"sync", "id", "state", "handle", "detached", "end_reason"}
    assert inspect.signature(aio.open_desktop).parameters == inspect.signature(session.open_desktop).parameters
    assert inspect.signature(aio.attach).parameters == inspect.signature(session.attach).parameters


def test_import_deskctl_does_not_import_aio_or_asyncio() -> None:
    code = "import sys, deskctl; print(sorted(m for m in ('deskctl.aio', 'asyncio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert deskctl.aio is aio


# -- return, exception ---------------------------------------------------------------------------------------------
def test_async_with_destroys_on_return_and_counts_the_actions() -> None:
    async def run() -> tuple[str, RemoteHandle | None]:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            assert desk.size == (320, 240) and desk.state is session.State.READY
            assert all(_alive(p) for p in _pids(desk.handle))
            shot = await desk.screenshot()
            assert (shot.width, shot.height) == (320, 240) and shot.png.startswith(b"\x89PNG")
            await desk.click(10, 20)
            await desk.move(30, 40)
            assert await desk.cursor_position() == (30, 40)
            assert (await desk.exec("echo $DISPLAY")).stdout.strip() == desk.handle.data["display"]  # type: ignore[union-attr]
            return desk.id, desk.handle

    session_id, handle = asyncio.run(run())
    _assert_gone(session_id, handle, "ended", "closed")
    counts = _record(session_id).action_counts
    assert counts.get("click") == 1 and counts.get("screenshot") == 1 and counts.get("exec") == 1


def test_an_exception_in_the_body_destroys_and_goes_on() -> None:
    seen: dict[str, Any] = {}

    async def run() -> None:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            seen.update(id=desk.id, handle=desk.handle, desk=desk)
            raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError, match="agent crashed"):
        asyncio.run(run())
    _assert_gone(seen["id"], seen["handle"], "failed", "RuntimeError")

    async def use_after() -> None:
        await seen["desk"].click(1, 1)

    with pytest.raises(SessionClosed):
        asyncio.run(use_after())


def test_calls_on_one_desktop_keep_their_order_under_gather() -> None:
    async def run() -> list[tuple[int, int]]:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            results = await asyncio.gather(*(step for i in range(20)
                                             for step in (desk.move(i, i), desk.cursor_position())))
            return [r for r in results if r is not None]

    assert asyncio.run(run()) == [(i, i) for i in range(20)]


# -- cancellation --------------------------------------------------------------------------------------------------
@pytest.mark.timeout(150, method="thread")  # a regression hangs: end the run, not wait forever
def test_a_cancel_mid_action_destroys_without_waiting_for_the_action(tmp_path: Path) -> None:
    """The body is cancelled while exec runs a command that never ends: the destroy must not queue behind it
    (it would hang until pytest's timeout), and it ends the command."""
    started = tmp_path / "started"
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            seen.update(id=desk.id, handle=desk.handle)
            await desk.exec(f"touch {started}; exec sleep infinity", timeout=3600)

    async def run() -> None:
        task = asyncio.create_task(body())
        while not started.exists():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(run())
    _assert_gone(seen["id"], seen["handle"], "failed", "cancelled")


@pytest.mark.timeout(150, method="thread")  # a regression hangs: end the run, not wait forever
def test_close_ends_a_running_call_and_a_queued_one_gets_session_closed(tmp_path: Path) -> None:
    started = tmp_path / "started"

    seen: dict[str, Any] = {}

    async def run() -> tuple[Any, ...]:
        desk = await aio.open_desktop("xvfb", geometry="320x240")
        seen.update(id=desk.id, handle=desk.handle)
        running = asyncio.create_task(desk.exec(f"touch {started}; exec sleep infinity", timeout=3600))
        queued = asyncio.create_task(desk.click(1, 1))
        while not started.exists():
            await asyncio.sleep(0.01)
        await desk.close()
        return tuple(await asyncio.gather(running, queued, return_exceptions=True))

    _, queued_outcome = asyncio.run(run())
    assert isinstance(queued_outcome, SessionClosed), queued_outcome
    session_id, handle = seen["id"], seen["handle"]
    _assert_gone(session_id, handle, "ended", "closed")


@pytest.mark.timeout(150, method="thread")  # a regression hangs: end the run, not wait forever
def test_a_cancel_while_readiness_waits_destroys_what_was_made(held: None) -> None:
    async def run() -> None:
        entered_body = False

        async def body() -> None:
            nonlocal entered_body
            async with aio.open_desktop("xvfb-slow-ready", geometry="320x240"):
                entered_body = True

        task = asyncio.create_task(body())
        await _until(ready_entered)
        task.cancel()
        await _settle()
        assert not task.done(), "the cancel went on while the desktop was still being made"
        ready_release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not entered_body

    asyncio.run(run())
    (handle,) = made
    _assert_gone(handle.session_id, handle, "failed", "cancelled")


@pytest.mark.timeout(150, method="thread")  # a regression hangs: end the run, not wait forever
def test_a_second_cancel_during_create_does_not_leave_the_desktop(held: None) -> None:
    async def run() -> None:
        task = asyncio.create_task(aio.open_desktop("xvfb-slow-ready", geometry="320x240").__aenter__())
        await _until(ready_entered)
        task.cancel()
        await _settle()
        task.cancel()
        await _settle()
        assert not task.done()
        ready_release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    (handle,) = made
    _assert_gone(handle.session_id, handle, "failed", "cancelled")


@pytest.mark.timeout(150, method="thread")  # a regression hangs: end the run, not wait forever
def test_a_second_cancel_during_the_destroy_does_not_cut_it_short(held: None) -> None:
    seen: dict[str, Any] = {}

    async def run() -> None:
        ready = asyncio.Event()

        async def body() -> None:
            async with aio.open_desktop("xvfb-slow-destroy", geometry="320x240") as desk:
                seen.update(id=desk.id, handle=desk.handle)
                ready.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(body())
        await ready.wait()
        task.cancel()
        await _until(destroy_entered)
        task.cancel()
        await _settle()
        assert not task.done(), "the second cancel ended the task while its desktop was being destroyed"
        assert all(_alive(p) for p in _pids(seen["handle"]))
        destroy_release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    _assert_gone(seen["id"], seen["handle"], "failed", "cancelled")


@pytest.mark.timeout(150, method="thread")  # a regression hangs: end the run, not wait forever
def test_a_cancel_during_close_still_destroys_then_is_delivered(held: None) -> None:
    seen: dict[str, Any] = {}

    async def run() -> None:
        async def body() -> None:
            desk = await aio.open_desktop("xvfb-slow-destroy", geometry="320x240")
            seen.update(id=desk.id, handle=desk.handle)
            await desk.close()
            seen["after_close"] = True

        task = asyncio.create_task(body())
        await _until(destroy_entered)
        task.cancel()
        await _settle()
        assert not task.done()
        destroy_release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert "after_close" not in seen

    asyncio.run(run())
    _assert_gone(seen["id"], seen["handle"], "ended", "closed")


# -- many desktops ------------------------------------------------------------------------------------------------
def test_eight_desktops_under_gather() -> None:
    async def one(i: int) -> tuple[str, RemoteHandle | None, str]:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            await desk.move(i, i)
            await desk.type("a")
            shot = await desk.screenshot()
            assert (shot.width, shot.height) == (320, 240)
            assert await desk.cursor_position() == (i, i)
            assert desk.handle is not None
            return desk.id, desk.handle, str(desk.handle.data["display"])

    async def run() -> list[tuple[str, RemoteHandle | None, str]]:
        return await asyncio.gather(*(one(i) for i in range(8)))

    results = asyncio.run(run())
    assert len({display for _, _, display in results}) == 8
    for session_id, handle, _ in results:
        _assert_gone(session_id, handle, "ended", "closed")


def test_one_failure_in_a_task_group_leaves_no_desktop() -> None:
    async def one(i: int) -> None:
        async with aio.open_desktop("xvfb", geometry="320x240"):
            if i == 2:
                raise ValueError("one agent failed")
            await asyncio.Event().wait()

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            for i in range(4):
                group.create_task(one(i))

    with pytest.raises(ExceptionGroup):
        asyncio.run(run())
    with open_ledger() as book:
        records = book.sessions()
    assert records, "no session was recorded"
    for record in records:  # the failing one, and the others, cancelled open or in their body
        assert record.status == "failed" and record.ended_at is not None, record
        assert record.reason in ("ValueError", "cancelled"), record
        if record.handle is not None:
            assert not any(_alive(p) for p in _pids(RemoteHandle.from_dict(record.handle)))
    assert "ValueError" in {record.reason for record in records}


# -- attach --------------------------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_attach_reaches_a_detached_deskctl_up_session_releases_it_then_closes_it() -> None:
    session_id = json.loads(_cli("up", "--json", "--provider", "xvfb", "--geometry", "320x240").stdout)["id"]

    async def run() -> RemoteHandle | None:
        async with aio.attach(session_id) as desk:
            assert desk.size == (320, 240) and desk.detached
            await desk.move(7, 8)
            assert await desk.cursor_position() == (7, 8)
            handle = desk.handle
        assert all(_alive(p) for p in _pids(handle)), "leaving async with of an attached session destroyed it"
        again = await aio.attach(session_id)
        await again.close()
        return handle

    try:
        handle = asyncio.run(run())
    finally:
        subprocess.run([sys.executable, "-m", "deskctl", "down", session_id], capture_output=True, timeout=180)
    _assert_gone(session_id, handle, "ended", "closed")


# -- signals -------------------------------------------------------------------------------------------------------
def test_the_loop_handles_sigterm_only_while_a_desktop_is_open() -> None:
    # a sync session earlier in this process leaves deskctl's own handler installed: start from the default
    inherited = signal.signal(signal.SIGTERM, signal.SIG_DFL)

    async def run() -> Any:
        async with aio.open_desktop("xvfb", geometry="320x240"):
            return signal.getsignal(signal.SIGTERM)

    try:
        during = asyncio.run(run())
        assert during is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, inherited)


_HOLDER = r"""
import asyncio, json, sys
import deskctl
from deskctl import aio

async def one(i):
    async with aio.open_desktop("xvfb", geometry="320x240") as desk:
        print(json.dumps({"id": desk.id, "handle": desk.handle.to_dict()}), flush=True)
        await asyncio.Event().wait()

async def main():
    await asyncio.gather(one(0), one(1))

try:
    if sys.argv[1] == "asyncio.run":
        asyncio.run(main())
    else:  # a loop run by hand: SIGINT still has Python's default handler
        loop = asyncio.new_event_loop()
        loop.run_until_complete(main())
except deskctl.DeskctlError as err:
    print(json.dumps(err.to_dict()), file=sys.stderr, flush=True)
    sys.exit(err.exit_code)
"""


@pytest.mark.parametrize(("runner", "signum"), [("asyncio.run", signal.SIGTERM), ("asyncio.run", signal.SIGINT),
                                               ("asyncio.run", signal.SIGHUP), ("by hand", signal.SIGINT)],
                         ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGINT-loop-by-hand"])
def test_a_signal_to_an_asyncio_program_destroys_its_desktops(runner: str, signum: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, runner], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    assert proc.stdout is not None
    try:
        opened = [json.loads(proc.stdout.readline()) for _ in range(2)]
        proc.send_signal(signum)
        code = proc.wait(timeout=120)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.communicate()
    if signum == signal.SIGINT and runner == "asyncio.run":
        # asyncio.run's own handler: the main task is cancelled, then KeyboardInterrupt ends the process
        assert code == -signal.SIGINT, err
    else:  # deskctl's handler through the loop: Interrupted, exit 128 + signal after the cleanup
        assert code == 128 + signum, err
        assert json.loads(err.strip().splitlines()[-1])["error"]["code"] == "interrupted"
    for desk in opened:
        handle = RemoteHandle.from_dict(desk["handle"])
        assert not any(_alive(p) for p in _pids(handle))
        record = _record(desk["id"])
        assert record.status == "failed" and record.ended_at is not None


def test_wait_for_polls_without_a_thread_and_takes_async_predicates() -> None:
    from deskctl.errors import UsageError, WaitTimeout

    async def run() -> tuple[Any, Any, str, str]:
        async with aio.open_desktop("xvfb", geometry="320x240") as desk:
            title = "deskctl-aio-wait"
            pid = await desk.launch("xmessage", "-title", title, "hi")
            try:
                found = await desk.wait_for(title, timeout=60)
                polls: list[int] = []

                async def third_time(d: aio.AsyncDesktop) -> bool:
                    assert d is desk
                    polls.append(1)
                    await asyncio.sleep(0)
                    return len(polls) >= 3

                flag = await desk.wait_for(third_time, timeout=60, interval=0.01)
            finally:
                await desk.exec(f"kill {pid}")
            with pytest.raises(WaitTimeout) as late:
                await desk.wait_for("no such window", timeout=0.5, interval=0.1)
            with pytest.raises(UsageError) as bad:
                await desk.wait_for("", timeout=1)
            return found, flag, late.value.code, bad.value.code

    assert asyncio.run(run()) == ("deskctl-aio-wait", True, "wait.timeout", "usage.invalid")
