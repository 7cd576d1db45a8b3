"""Shared test isolation: every test gets its own DESKCTL_HOME (ledger, markers, cookies) and a plain terminal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def deskctl_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("deskctl-home")
    monkeypatch.setenv("DESKCTL_HOME", str(home))
    monkeypatch.delenv("DESKCTL_LEDGER_URL", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    # never the developer's own keyring; credential tests choose a file keyring themselves
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    yield home
