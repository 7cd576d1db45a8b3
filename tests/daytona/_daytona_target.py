"""The Daytona provider's conformance targets (``windows`` and ``ubuntu`` against the loopback fake); the
conformance conftest appends ``Target(**kwargs)`` for each of :data:`DAYTONA_TARGETS_KWARGS`. Not a test module.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for fakes.daytona

from deskctl.providers._x11 import X11Address
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from fakes.daytona import FakeDaytona

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["DAYTONA_TARGETS_KWARGS", "FAST_OPTIONS", "daytona_environment", "daytona_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 60}

_current: list[FakeDaytona] = []


@contextlib.contextmanager
def daytona_environment() -> Iterator[Mapping[str, str]]:
    """A fresh fake for one test, and the variables that point deskctl (and its child processes) at it."""
    fake = FakeDaytona()
    fake.start()
    _current.append(fake)
    try:
        yield {**fake.env(), "DESKCTL_HTTP_RETRY_SCALE": "0"}
    finally:
        _current.remove(fake)
        fake.stop()


def _fake() -> FakeDaytona:
    if not _current:
        raise RuntimeError("no Daytona fake is running (the target's environment was not entered)")
    return _current[-1]


def daytona_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    assert desk.handle is not None
    return X11Address(display=_fake().display_of(desk.handle.resource_id)), None


def daytona_leftovers(handle: RemoteHandle) -> list[str]:
    """Sandboxes of the session still on the fake (by id and by label), with their Xvfb."""
    left: list[str] = []
    for sandbox in _fake().live():
        if sandbox["id"] == handle.resource_id or sandbox["labels"].get(LABEL_SESSION) == handle.session_id:
            left.append(f"sandbox {sandbox['id']} ({sandbox['state']})")
    return left


DAYTONA_TARGETS_KWARGS: list[dict[str, Any]] = [
    {
        "name": f"daytona-{platform}",
        "open_kwargs": {"provider": "daytona", "platform": platform, "provider_options": dict(FAST_OPTIONS)},
        "probe_address": daytona_probe_address,
        "leftovers": daytona_leftovers,
        "environment": daytona_environment,
        "geometry": "1024x768",
    }
    for platform in ("windows", "ubuntu")
]
