"""Docker fixtures shared by the folders whose tests use a real engine (tests/docker_provider, tests/harbor):
import them into a folder's conftest. A plain SDK client to look at what deskctl did (never to drive it), and a
sweep of the containers a failed test left."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deskctl.providers.base import LABEL_SESSION


@pytest.fixture(scope="session")
def docker_sdk() -> Iterator[Any]:
    """A plain SDK client for inspecting what the provider did (never used to drive the provider)."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); run scripts/setup.d/20-docker.sh or deselect -m 'not docker'")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(autouse=True)
def sweep_containers(docker_sdk: Any, deskctl_home: Path) -> Iterator[None]:
    """Containers this test made (their host directory is under its own DESKCTL_HOME) and did not remove, which
    happens only when it failed: removed, so failed runs never pile up. Other runs' containers are not touched."""
    yield
    for raw in docker_sdk.api.containers(all=True, filters={"label": LABEL_SESSION}):
        labels = raw.get("Labels") or {}
        if str(labels.get("deskctl.docker.dir", "")).startswith(str(deskctl_home)):
            with contextlib.suppress(Exception):
                docker_sdk.api.remove_container(raw["Id"], force=True)
            if labels.get("deskctl.docker.fb"):
                shutil.rmtree(labels["deskctl.docker.fb"], ignore_errors=True)
