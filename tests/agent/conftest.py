"""The agent as a real ``deskctl-agent`` process on loopback TCP against a real Xvfb on this host."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from _docker import docker_sdk  # the fixture, registered for this folder
from agent._agent_proc import RunningAgent, start_agent
from fakes._desktop import XvfbDesktop

__all__ = ["docker_sdk"]


@pytest.fixture(scope="module")
def desktop() -> Iterator[XvfbDesktop]:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed")
    desk = XvfbDesktop(1024, 900, provider="agent-test")
    try:
        yield desk
    finally:
        desk.stop()


@pytest.fixture(scope="module")
def agent(desktop: XvfbDesktop, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    running = start_agent(tmp_path_factory.mktemp("agent"), desktop.display)
    try:
        yield running
    finally:
        running.stop()
