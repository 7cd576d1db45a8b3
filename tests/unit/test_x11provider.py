"""X11Provider, the base of the xvfb, docker and ssh providers, through a minimal subclass whose display is a real
Xvfb: one driver per session, opened once even when threads ask at the same moment; a lost display drops it, the
subclass's ``_lost`` says why, and the next call opens a new one; reads go through ``_read``, input never does."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from deskctl.actions import Move
from deskctl.errors import DeskctlError, ProviderApiError, SessionLost
from deskctl.platforms import Platform
from deskctl.providers._x11 import X11Driver
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import Capabilities, RemoteHandle

if TYPE_CHECKING:
    from deskctl.providers._x11provider import DisplayDriver

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")

T = TypeVar("T")


class OneDisplay(X11Provider):
    """The base's hooks over an Xvfb the test started (``handle.data["display"]``); the lifecycle is the test's."""

    name = "xvfb"
    capabilities = Capabilities(platforms=frozenset({Platform.UBUNTU}))

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.opened = 0
        self.reads: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def _open_driver(self, handle: RemoteHandle) -> X11Driver:
        self.gate.wait(10)  # lets a test hold every thread inside the first open
        self.opened += 1
        return X11Driver.open(str(handle.data["display"]), provider=self.name)

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        return ProviderApiError(f"the display of {handle.session_id} is gone while we tried to {doing}",
                                provider=self.name)

    def _read(self, handle: RemoteHandle, doing: str, work: Callable[[DisplayDriver], T]) -> T:
        self.reads.append(doing)
        return super()._read(handle, doing, work)

    def preflight(self, spec: Any) -> list[Any]:
        return []

    def create(self, spec: Any, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        raise NotImplementedError("the test starts the display")

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        pass

    def destroy(self, handle: RemoteHandle) -> None:
        self._drop_driver(handle.session_id)

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        return []


Start = Callable[[], tuple[subprocess.Popen[bytes], str]]


@pytest.fixture
def xvfb() -> Iterator[Start]:
    """Starts an Xvfb (``-displayfd``: it picks a free display) and returns it with its display name; all end
    with the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> tuple[subprocess.Popen[bytes], str]:
        read_fd, write_fd = os.pipe()
        # -noreset: a server whose last client left resets, and refuses the connections made meanwhile
        proc = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "320x200x24", "-nolisten",
                                 "tcp", "-noreset"], pass_fds=(write_fd,), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        started.append(proc)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            number = pipe.readline().strip()
        assert number, "Xvfb exited before it announced its display"
        return proc, f":{int(number)}"

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def handle_on(display: str) -> RemoteHandle:
    return RemoteHandle(provider="xvfb", session_id="s-1", resource_id=display, data={"display": display})


def test_threads_asking_at_once_share_one_driver(xvfb: Start) -> None:
    handle = handle_on(xvfb()[1])
    provider = OneDisplay()
    provider.gate.clear()
    sizes: list[tuple[int, int]] = []
    threads = [threading.Thread(target=lambda: sizes.append(provider.display_size(handle))) for _ in range(8)]
    for thread in threads:
        thread.start()
    provider.gate.set()
    for thread in threads:
        thread.join(30)
    try:
        assert sizes == [(320, 200)] * 8
        assert provider.opened == 1
        assert provider.screenshot(handle).width == 320 and provider.cursor_position(handle) == (160, 100)
        assert provider.opened == 1
    finally:
        provider.close()
    assert provider._drivers == {}


def test_a_lost_display_is_the_subclass_error_and_the_next_call_reconnects(xvfb: Start) -> None:
    proc, display = xvfb()
    handle = handle_on(display)
    provider = OneDisplay()
    try:
        provider.act(handle, Move(5, 6))
        assert provider.reads == [] and provider.cursor_position(handle) == (5, 6)
        assert provider.reads == ["read the pointer position"]
        proc.kill()
        proc.wait()
        with pytest.raises(ProviderApiError, match="gone while we tried to send input") as caught:
            provider.act(handle, Move(1, 1))
        assert isinstance(caught.value.__cause__, SessionLost)
        assert provider._drivers == {}
        # a new display under the same session: the next call opens a new driver on it
        handle.data["display"] = xvfb()[1]
        assert provider.display_size(handle) == (320, 200) and provider.opened == 2
    finally:
        provider.close()


def test_dropping_a_stale_driver_keeps_the_newer_one(xvfb: Start) -> None:
    handle = handle_on(xvfb()[1])
    provider = OneDisplay()
    try:
        stale = provider._driver(handle)
        stale.close()
        fresh = provider._driver(handle)  # a closed driver is replaced
        assert fresh is not stale and provider.opened == 2
        provider._drop_driver(handle.session_id, stale)  # what a thread that saw the old one lost would do
        assert provider._driver(handle) is fresh and not fresh.closed
        provider._drop_driver(handle.session_id)
        assert fresh.closed and provider._drivers == {}
    finally:
        provider.close()
