"""The cua-cloud provider's conformance target (ubuntu, against the loopback fake); the conformance conftest
appends ``Target(**CUA_TARGET_KWARGS)``. Not a test module."""

from __future__ import annotations

from typing import Any

from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from fakes._cloud import FakePerTest
from fakes.cua import FakeCua

__all__ = ["CUA_TARGET_KWARGS", "FAST_OPTIONS", "cua_environment", "cua_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 60}

_fakes = FakePerTest(FakeCua, "cua")
cua_environment = _fakes.environment
cua_probe_address = _fakes.probe_address


def cua_leftovers(handle: RemoteHandle) -> list[str]:
    """Claims of the session still on the fake (by name and by label)."""
    return [f"claim {c['metadata']['namespace']}/{c['metadata']['name']} ({c['status'].get('phase')})"
            for c in _fakes.current().live()
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
