"""Fixtures of the Harbor tests: the shared Docker fixtures (tests/_docker.py): an SDK client to look at what the
runs left, and a sweep of what a failed test left behind.

Unlike the other test folders this one is not a package: as ``harbor`` (tests/ is on pytest's pythonpath) it
would shadow Harbor itself."""

from __future__ import annotations

from _docker import docker_sdk, sweep_containers

__all__ = ["docker_sdk", "sweep_containers"]
