"""The Daytona provider's conformance targets (``windows`` and ``ubuntu`` against the loopback fake); the
conformance conftest appends ``Target(**kwargs)`` for each of :data:`DAYTONA_TARGETS_KWARGS`. Not a test module.
"""

from __future__ import annotations

import os
from typing import Any

from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from fakes._cloud import FakePerTest
from fakes.daytona import FakeDaytona

__all__ = ["DAYTONA_TARGETS_KWARGS", "FAST_OPTIONS", "daytona_environment", "daytona_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 60}

_fakes = FakePerTest(FakeDaytona, "Daytona")
daytona_environment = _fakes.environment
daytona_probe_address = _fakes.probe_address


def daytona_leftovers(handle: RemoteHandle) -> list[str]:
    """Sandboxes of the session still on the fake (by id and by label), with their Xvfb and their folder."""
    fake = _fakes.current()
    left: list[str] = []
    for sandbox in fake.live():
        if sandbox["id"] == handle.resource_id or sandbox["labels"].get(LABEL_SESSION) == handle.session_id:
            left.append(f"sandbox {sandbox['id']} ({sandbox['state']})")
    root = fake.roots.get(handle.resource_id)
    if root is not None and os.path.exists(root):
        left.append(f"folder {root} of sandbox {handle.resource_id}")
    return left


DAYTONA_TARGETS_KWARGS: list[dict[str, Any]] = [
    {
        "name": f"daytona-{platform}",
        "open_kwargs": {"provider": "daytona", "platform": platform, "provider_options": dict(FAST_OPTIONS)},
        "probe_address": daytona_probe_address,
        "leftovers": daytona_leftovers,
        "environment": daytona_environment,
        "geometry": "1024x768",
        # the windows fake's guest is this host's bash, not cmd.exe: its shell lines are checked by what the
        # provider sends (tests/daytona/test_daytona_harness.py), not by the Linux harness suite
        "extra": {"guest": "windows"} if platform == "windows" else {},
    }
    for platform in ("windows", "ubuntu")
]
