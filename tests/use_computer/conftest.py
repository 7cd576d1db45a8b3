"""Fixtures of the use-computer tests: a fresh loopback fake per test and a provider pointed at it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _use_computer_target
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # fakes

from _use_computer_target import FAST_OPTIONS

from deskctl.providers.use_computer import UseComputerProvider
from fakes.use_computer import FakeUseComputer

_VARS = ("USE_COMPUTER_API_KEY", "USE_COMPUTER_BASE_URL", "USE_COMPUTER_HOST", "USE_COMPUTER_VERSION",
         "USE_COMPUTER_SNAPSHOT", "USE_COMPUTER_RESERVATION_ID")


@pytest.fixture
def fake() -> Iterator[FakeUseComputer]:
    server = FakeUseComputer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def uc_env(fake: FakeUseComputer, monkeypatch: pytest.MonkeyPatch) -> FakeUseComputer:
    """The fake, with the environment pointing deskctl at it (no keyring: a missing variable stays missing)."""
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.setenv("USE_COMPUTER_API_KEY", fake.api_key)
    monkeypatch.setenv("USE_COMPUTER_BASE_URL", fake.base_url)
    monkeypatch.setenv("DESKCTL_HTTP_RETRY_SCALE", "0")
    return fake


@pytest.fixture
def provider(uc_env: FakeUseComputer) -> Iterator[UseComputerProvider]:
    prov = UseComputerProvider(dict(FAST_OPTIONS))
    try:
        yield prov
    finally:
        prov.close()
