"""Fixtures of the docker provider tests: a real Docker engine (scripts/setup.d/20-docker.sh starts it and builds
the images), and a sweep that removes any container a failed test left behind. (A ``pytestmark`` here would mark
nothing: each test module of this folder says ``pytestmark = pytest.mark.docker`` itself.)"""

from __future__ import annotations

from _docker import docker_sdk, sweep_containers  # the fixtures, registered for this folder

__all__ = ["docker_sdk", "sweep_containers"]
