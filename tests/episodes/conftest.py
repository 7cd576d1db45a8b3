"""Fixtures of the episodes tests: the docker ones (a real engine, and a sweep of what a failed test left)."""

from __future__ import annotations

from _docker import docker_sdk, sweep_containers

__all__ = ["docker_sdk", "sweep_containers"]
