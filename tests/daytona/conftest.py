"""Fixtures of the Daytona tests: a fresh loopback fake per test and a provider pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from daytona._daytona_target import FAST_OPTIONS
from deskctl.providers.daytona import DaytonaProvider
from fakes._cloud import point_deskctl_at
from fakes.daytona import FakeDaytona


@pytest.fixture
def fake() -> Iterator[FakeDaytona]:
    with FakeDaytona() as server:
        yield server


@pytest.fixture
def daytona_env(fake: FakeDaytona, monkeypatch: pytest.MonkeyPatch) -> FakeDaytona:
    """The fake, with the environment pointing deskctl at it (no keyring: a missing variable stays missing)."""
    point_deskctl_at(fake, monkeypatch)
    return fake


@pytest.fixture
def provider(daytona_env: FakeDaytona) -> Iterator[DaytonaProvider]:
    prov = DaytonaProvider(dict(FAST_OPTIONS))
    try:
        yield prov
    finally:
        prov.close()
