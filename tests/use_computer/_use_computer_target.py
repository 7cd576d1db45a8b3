"""The use-computer provider's conformance targets against the loopback fake; the conformance conftest appends
``Target(**kwargs)`` for each of :data:`USE_COMPUTER_TARGETS_KWARGS`. Not a test module.

``use-computer-ubuntu`` runs the whole contract, the harness part included (its fake runs guest commands in
bash on this host, as an Ubuntu sandbox would). ``use-computer-macos`` runs the desktop contract only
(``extra["guest"] = "macos"``): its fake also runs bash on Linux, so the macOS side of exec, files and the
clipboard is checked by what the provider sends (tests/use_computer/test_use_computer_guest.py).

Both run with ``ephemeral=false``: the contract suite's ``deskctl up`` makes a detached session, which
use-computer refuses for ephemeral sandboxes (nobody would send keepalives). The API has no mouse down/up and no
key down/up: those two contract tests are expected to fail with ``usage.unsupported`` (``extra["xfail"]``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from deskctl.providers.base import RemoteHandle
from fakes._cloud import FakePerTest
from fakes.use_computer import FakeUseComputer

__all__ = ["FAST_OPTIONS", "USE_COMPUTER_TARGETS_KWARGS", "use_computer_environment", "use_computer_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 30}

_fakes = FakePerTest(FakeUseComputer, "use.computer")
use_computer_environment = _fakes.environment
use_computer_probe_address = _fakes.probe_address


def use_computer_leftovers(handle: RemoteHandle) -> list[str]:
    """Sandboxes of the handle still on the fake (each with its Xvfb and its home directory)."""
    fake = _fakes.current()
    left = [f"sandbox {s['sandbox_id']}" for s in fake.live() if s["sandbox_id"] == handle.resource_id]
    left.extend(str(p) for p in Path(tempfile.gettempdir()).glob(f"fake-uc-{handle.resource_id}-*"))
    return left


_NO_HOLD = "use.computer has no endpoint to hold a button or key (usage.unsupported)"

_XFAIL = {"test_move_and_mouse_down_up": _NO_HOLD, "test_key_down_holds_a_modifier_until_key_up": _NO_HOLD}


def _target(platform: str, geometry: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"use-computer-{platform}",
        "open_kwargs": {"provider": "use-computer", "platform": platform,
                        "provider_options": {**FAST_OPTIONS, "ephemeral": False}},
        "probe_address": use_computer_probe_address,
        "leftovers": use_computer_leftovers,
        "environment": use_computer_environment,
        "geometry": geometry,
        "extra": {"cost_known": False, "xfail": _XFAIL, **extra},
    }


USE_COMPUTER_TARGETS_KWARGS: list[dict[str, Any]] = [
    _target("macos", "1024x768", guest="macos"),
    # the fake runs exec as root on this host: "nobody" is another user there, as the contract's default
    _target("ubuntu", "1920x1080"),
]
