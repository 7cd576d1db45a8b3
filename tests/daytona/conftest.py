"""Fixtures of the Daytona tests: a fresh loopback fake per test and a provider pointed at it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _daytona_target
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # fakes

from _daytona_target import FAST_OPTIONS

from deskctl.providers.daytona import DaytonaProvider
from fakes.daytona import FakeDaytona

_VARS = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_API_URL", "DAYTONA_TARGET")


@pytest.fixture
def fake() -> Iterator[FakeDaytona]:
    server = FakeDaytona()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def daytona_env(fake: FakeDaytona, monkeypatch: pytest.MonkeyPatch) -> FakeDaytona:
    """The fake, with the environment pointing deskctl at it (no keyring: a missing variable stays missing)."""
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.setenv("DAYTONA_API_KEY", fake.api_key)
    monkeypatch.setenv("DAYTONA_API_URL", fake.api_url)
    monkeypatch.setenv("DESKCTL_HTTP_RETRY_SCALE", "0")
    return fake


@pytest.fixture
def provider(daytona_env: FakeDaytona) -> Iterator[DaytonaProvider]:
    prov = DaytonaProvider(dict(FAST_OPTIONS))
    try:
        yield prov
    finally:
        prov.close()
