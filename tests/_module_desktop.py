"""One detached xvfb desktop per test module, and one DESKCTL_HOME for it and every test of the module: the fixtures
of the CLI tests that run many whole-process commands against the same desktop (import them into the module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _cli import deskctl

__all__ = ["module_home", "same_home", "session"]


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One DESKCTL_HOME for the module's desktop and every test of this module."""
    return tmp_path_factory.mktemp("deskctl-home-module")


@pytest.fixture(autouse=True)
def same_home(module_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(module_home))


@pytest.fixture(scope="module")
def session(module_home: Path) -> Iterator[str]:
    env = {"DESKCTL_HOME": str(module_home)}
    sid = deskctl("up", "--geometry", "320x240", env=env, check=True).stdout.strip()
    try:
        yield sid
    finally:
        deskctl("down", sid, env=env, check=True)
