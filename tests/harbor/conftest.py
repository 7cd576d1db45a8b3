"""Fixtures of the Harbor tests: a Docker SDK client to look at what the runs left (never to drive them)."""

from __future__ import annotations

from collections.abc import Iterator
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
