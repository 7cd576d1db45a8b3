"""The cua-cloud provider's conformance target (ubuntu, against the loopback fake); the conformance conftest
appends ``Target(**CUA_TARGET_KWARGS)``. Not a test module."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for fakes.cua

from deskctl.providers._x11 import X11Address
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from fakes.cua import FakeCua

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["CUA_TARGET_KWARGS", "FAST_OPTIONS", "cua_environment", "cua_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 60}

_current: list[FakeCua] = []


@contextlib.contextmanager
def cua_environment() -> Iterator[Mapping[str, str]]:
    """A fresh fake for one test, and the variables that point deskctl (and its child processes) at it."""
    fake = FakeCua()
    fake.start()
    _current.append(fake)
    try:
        yield {**fake.env(), "DESKCTL_HTTP_RETRY_SCALE": "0"}
    finally:
        _current.remove(fake)
        fake.stop()


def _fake() -> FakeCua:
    if not _current:
        raise RuntimeError("no cua fake is running (the target's environment was not entered)")
    return _current[-1]


def cua_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    assert desk.handle is not None
    return X11Address(display=_fake().display_of(desk.handle.resource_id)), None


def cua_leftovers(handle: RemoteHandle) -> list[str]:
    """Claims of the session still on the fake (by name and by label)."""
    return [f"claim {c['metadata']['namespace']}/{c['metadata']['name']} ({c['status'].get('phase')})"
            for c in _fake().live()
            if c["metadata"]["name"] == handle.resource_id
            or c["metadata"]["labels"].get(LABEL_SESSION) == handle.session_id]


CUA_TARGET_KWARGS: dict[str, Any] = {
    "name": "cua-cloud-ubuntu",
    "open_kwargs": {"provider": "cua-cloud", "platform": "ubuntu", "provider_options": dict(FAST_OPTIONS)},
    "probe_address": cua_probe_address,
    "leftovers": cua_leftovers,
    "environment": cua_environment,
    "geometry": "1920x1080",
    "extra": {"cost_known": False},
}
