"""Fixtures of the docker provider tests: a real Docker engine (scripts/setup.d/20-docker.sh starts it and builds
the images), and a sweep that removes any container a failed test left behind."""

from __future__ import annotations

import pytest

from _docker import docker_sdk, sweep_containers  # the fixtures, registered for this folder

pytestmark = pytest.mark.docker

__all__ = ["docker_sdk", "sweep_containers"]
