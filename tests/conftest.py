"""Shared test isolation: every test gets its own DESKCTL_HOME (ledger, markers, cookies) and a plain terminal."""

from __future__ import annotations

import os
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI (``CI`` set) nothing may be skipped: scripts/test installs and starts every part the tests need,
    so a skip there means a missing install step, which must fail the run instead of hiding."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped under CI, which must run every test: {reason}"
