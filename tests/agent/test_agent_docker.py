"""The desktop image runs deskctl-agent when DESKCTL_SERVE_AGENT=1: a real container on the default bridge network,
its token put in before start (put_archive), reached at the container's IP; the image's hash covers the agent."""

from __future__ import annotations

import io
import os
import tarfile
import time
from typing import Any

import pytest

from deskctl.actions import Click, TypeText
from deskctl.agent import DEFAULT_PORT, TOKEN_FILE
from deskctl.agent.client import AgentDriver, wait_ready

pytestmark = pytest.mark.docker

BASE = os.environ.get("DESKCTL_TEST_DOCKER_BASE", "deskctl-base:bookworm")
TOKEN = "container-token-7a2c1f0e94"


def _token_tar(token: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(os.path.basename(TOKEN_FILE))
        info.size, info.uid, info.gid, info.mode = len(token), 1000, 1000, 0o400
        tar.addfile(info, io.BytesIO(token.encode()))
    return buffer.getvalue()


def test_the_image_hash_covers_the_agent_files_and_nothing_else_of_deskctl() -> None:
    from deskctl.providers.docker.images import AGENT_FILES, context_files

    names = [name for name, _ in context_files()]
    assert {f"agent/{name}" for name in AGENT_FILES} <= set(names)
    assert {"Dockerfile", "entrypoint.sh"} <= set(names)
    assert not [n for n in names if n.startswith("agent/") and n[len("agent/"):] not in AGENT_FILES]


def test_the_agent_in_a_real_container_on_the_bridge_network(docker_sdk: Any) -> None:
    from deskctl.providers.docker.images import build_image

    tag = build_image("minimal", BASE, client=docker_sdk).tag
    container = docker_sdk.containers.create(
        tag, environment={"DESKCTL_GEOMETRY": "1024x900x24", "DESKCTL_SERVE_AGENT": "1"}, init=True,
        labels={"deskctl.test": "agent"},
    )
    try:
        container.put_archive(os.path.dirname(TOKEN_FILE), _token_tar(TOKEN))
        container.start()
        container.reload()
        ip = container.attrs["NetworkSettings"]["IPAddress"]
        assert ip
        wait_ready(ip, DEFAULT_PORT, TOKEN, provider="docker", deadline=time.monotonic() + 60)
        with AgentDriver.connect(ip, DEFAULT_PORT, TOKEN, provider="docker") as driver:
            assert driver.size() == (1024, 900)
            driver.act(Click(12, 34))
            assert driver.cursor_position() == (12, 34)
            shot = driver.screenshot()
            assert (shot.width, shot.height) == (1024, 900) and shot.png.startswith(b"\x89PNG")
            driver.act(TypeText("é✓"))
            who = driver.exec("id -u; echo $DISPLAY")
            assert who.stdout == "1000\n:0\n"
            # the capture goes through MIT-SHM inside the container: the X server maps the agent's segment, a
            # memfd passed to it as a descriptor
            mapped = driver.exec("grep -l memfd:deskctl-capture /proc/[0-9]*/maps 2>/dev/null; true").stdout
            assert len(mapped.split()) >= 2, mapped  # the agent and the X server
        logs = container.logs().decode(errors="replace")
        assert "listening on 0.0.0.0:7390" in logs
        assert TOKEN not in logs
        assert TOKEN not in str(container.attrs["Config"])
    finally:
        container.remove(force=True)
