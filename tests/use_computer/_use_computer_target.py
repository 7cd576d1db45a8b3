"""The use-computer provider's conformance target (``macos`` against the loopback fake); the conformance conftest
appends ``Target(**USE_COMPUTER_TARGET_KWARGS)``. Not a test module.

The target runs with ``ephemeral=false``: the contract suite's ``deskctl up`` makes a detached session, which
use-computer refuses for ephemeral sandboxes (nobody would send keepalives). The API has no mouse down/up and no
key down/up: those two contract tests are expected to fail with ``usage.unsupported`` (``extra["xfail"]``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for fakes.use_computer

from deskctl.providers._x11 import X11Address
from deskctl.providers.base import RemoteHandle
from fakes.use_computer import FakeUseComputer

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["FAST_OPTIONS", "USE_COMPUTER_TARGET_KWARGS", "use_computer_environment", "use_computer_leftovers"]

#: provider options that keep polls short against a loopback fake
FAST_OPTIONS: dict[str, Any] = {"poll_interval": 0.005, "poll_max_interval": 0.05, "destroy_timeout": 30}

_current: list[FakeUseComputer] = []


@contextlib.contextmanager
def use_computer_environment() -> Iterator[Mapping[str, str]]:
    """A fresh fake for one test, and the variables that point deskctl (and its child processes) at it."""
    fake = FakeUseComputer()
    fake.start()
    _current.append(fake)
    try:
        yield {**fake.env(), "DESKCTL_HTTP_RETRY_SCALE": "0"}
    finally:
        _current.remove(fake)
        fake.stop()


def _fake() -> FakeUseComputer:
    if not _current:
        raise RuntimeError("no use.computer fake is running (the target's environment was not entered)")
    return _current[-1]


def use_computer_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    assert desk.handle is not None
    return X11Address(display=_fake().display_of(desk.handle.resource_id)), None


def use_computer_leftovers(handle: RemoteHandle) -> list[str]:
    """Sandboxes of the handle still on the fake (each with its Xvfb)."""
    return [f"sandbox {s['sandbox_id']}" for s in _fake().live() if s["sandbox_id"] == handle.resource_id]


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
