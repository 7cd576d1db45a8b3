"""The use-computer provider's conformance target (``macos`` against the loopback fake); the conformance conftest
appends ``Target(**USE_COMPUTER_TARGET_KWARGS)``. Not a test module.

The target runs with ``ephemeral=false``: the contract suite's ``deskctl up`` makes a detached session, which
use-computer refuses for ephemeral sandboxes (nobody would send keepalives). The API has no mouse down/up and no
key down/up: those two contract tests are expected to fail with ``usage.unsupported`` (``extra["xfail"]``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for fakes.use_computer

from deskctl.providers.base import RemoteHandle
from fakes._cloud import FakePerTest
from fakes.use_computer import FakeUseComputer

__all__ = ["FAST_OPTIONS", "USE_COMPUTER_TARGET_KWARGS", "use_computer_environment", "use_computer_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 30}

_fakes = FakePerTest(FakeUseComputer, "use.computer")
use_computer_environment = _fakes.environment
use_computer_probe_address = _fakes.probe_address


def use_computer_leftovers(handle: RemoteHandle) -> list[str]:
    """Sandboxes of the handle still on the fake (each with its Xvfb)."""
    return [f"sandbox {s['sandbox_id']}" for s in _fakes.current().live() if s["sandbox_id"] == handle.resource_id]


_NO_HOLD = "use.computer has no endpoint to hold a button or key (usage.unsupported)"

USE_COMPUTER_TARGET_KWARGS: dict[str, Any] = {
    "name": "use-computer-macos",
    "open_kwargs": {"provider": "use-computer", "platform": "macos",
                    "provider_options": {**FAST_OPTIONS, "ephemeral": False}},
    "probe_address": use_computer_probe_address,
    "leftovers": use_computer_leftovers,
    "environment": use_computer_environment,
    "geometry": "1024x768",
    "extra": {"cost_known": False,
              "xfail": {"test_move_and_mouse_down_up": _NO_HOLD,
                        "test_key_down_holds_a_modifier_until_key_up": _NO_HOLD}},
}
