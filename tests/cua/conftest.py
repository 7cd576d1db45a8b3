"""Fixtures of the cua-cloud tests: a fresh loopback fake per test and a provider pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cua._cua_target import FAST_OPTIONS
from deskctl.providers.cua_cloud import CuaCloudProvider
from fakes._cloud import point_deskctl_at
from fakes.cua import FakeCua


@pytest.fixture
def fake() -> Iterator[FakeCua]:
    with FakeCua() as server:
        yield server


@pytest.fixture
def cua_env(fake: FakeCua, monkeypatch: pytest.MonkeyPatch) -> FakeCua:
    """The fake, with the environment pointing deskctl at it (no keyring: a missing variable stays missing)."""
    point_deskctl_at(fake, monkeypatch)
    return fake


@pytest.fixture
def provider(cua_env: FakeCua) -> Iterator[CuaCloudProvider]:
    prov = CuaCloudProvider(dict(FAST_OPTIONS))
    try:
        yield prov
    finally:
        prov.close()
