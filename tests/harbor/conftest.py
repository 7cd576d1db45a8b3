"""Fixtures of the Harbor tests: a Docker SDK client to look at what the runs left (never to drive them), and a
sweep of what a failed test left behind."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def docker_sdk() -> Iterator[Any]:
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
    """A container a failed test left (its host directory is under this test's DESKCTL_HOME) is removed, as in
    tests/docker_provider; other runs' containers are not touched."""
    yield
    for raw in docker_sdk.api.containers(all=True, filters={"label": "deskctl.session"}):
        labels = raw.get("Labels") or {}
        if str(labels.get("deskctl.docker.dir", "")).startswith(str(deskctl_home)):
            with contextlib.suppress(Exception):
                docker_sdk.api.remove_container(raw["Id"], force=True)
