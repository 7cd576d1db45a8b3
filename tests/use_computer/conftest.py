"""Fixtures of the use-computer tests: a fresh loopback fake per test and a provider pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deskctl.providers.use_computer import UseComputerProvider
from fakes._cloud import point_deskctl_at
from fakes.use_computer import FakeUseComputer
from use_computer._use_computer_target import FAST_OPTIONS


@pytest.fixture
def fake() -> Iterator[FakeUseComputer]:
    with FakeUseComputer() as server:
        yield server


@pytest.fixture
def uc_env(fake: FakeUseComputer, monkeypatch: pytest.MonkeyPatch) -> FakeUseComputer:
    """The fake, with the environment pointing deskctl at it (no keyring: a missing variable stays missing)."""
    point_deskctl_at(fake, monkeypatch)
    return fake


@pytest.fixture
def provider(uc_env: FakeUseComputer) -> Iterator[UseComputerProvider]:
    prov = UseComputerProvider(dict(FAST_OPTIONS))
    try:
        yield prov
    finally:
        prov.close()
