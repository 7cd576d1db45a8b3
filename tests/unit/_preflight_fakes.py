"""Small in-process providers for the preflight engine tests: real :class:`Provider` subclasses whose
``preflight`` does what a test needs (wait on a barrier, block until released, raise, return fixed results).

They are implementations of the contract, not mocks: the engine calls them exactly as it calls xvfb or daytona.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from deskctl.checks import CheckResult
from deskctl.providers.base import Capabilities, Provider, RemoteHandle, Screenshot
from deskctl.spec import DesktopSpec, Platform


class StubProvider(Provider):
    """A provider whose preflight runs ``behaviour`` (default: one passing check)."""

    name: ClassVar[str] = "stub"
    capabilities: ClassVar[Capabilities] = Capabilities(platforms=frozenset({Platform.UBUNTU}))

    def __init__(self, behaviour: Callable[[DesktopSpec], list[CheckResult]] | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.behaviour = behaviour
        self.calls = 0

    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        self.calls += 1
        if self.behaviour is None:
            return [CheckResult("pass", f"{self.name}.ready", "ready")]
        return self.behaviour(spec)

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        raise AssertionError("preflight must never create")

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        raise AssertionError("not used")

    def destroy(self, handle: RemoteHandle) -> None:
        raise AssertionError("not used")

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        return []

    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        raise AssertionError("not used")

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        raise AssertionError("not used")

    def act(self, handle: RemoteHandle, action: Any) -> None:
        raise AssertionError("not used")


class FixedSizeProvider(StubProvider):
    name: ClassVar[str] = "fixed"
    capabilities: ClassVar[Capabilities] = Capabilities(
        platforms=frozenset({Platform.UBUNTU, Platform.WINDOWS}),
        settable_geometry=False,
        fixed_sizes={Platform.WINDOWS: ((1024, 768), (1280, 800))},
        hidpi_scale=1.0,
    )


class RetinaProvider(StubProvider):
    name: ClassVar[str] = "retina"
    capabilities: ClassVar[Capabilities] = Capabilities(
        platforms=frozenset({Platform.MACOS}), hidpi_scale=2.0, min_size=(640, 480), max_size=(2560, 1600),
    )


def barrier_behaviour(barrier: threading.Barrier) -> Callable[[DesktopSpec], list[CheckResult]]:
    """Passes only if every party reaches the barrier: proves the checks ran at the same time."""

    def run(spec: DesktopSpec) -> list[CheckResult]:
        barrier.wait(timeout=30)
        return [CheckResult("pass", "stub.barrier", "all checks were running together")]

    return run


def blocking_behaviour(release: threading.Event) -> Callable[[DesktopSpec], list[CheckResult]]:
    """Hangs until ``release`` is set: a daemon or host that never answers."""

    def run(spec: DesktopSpec) -> list[CheckResult]:
        release.wait(timeout=60)
        return [CheckResult("pass", "stub.late", "answered after the deadline")]

    return run
