"""Fixtures of the ssh provider tests: one real sshd on a loopback port per test module, and the environment that
points deskctl at it (see ``_ssh_target.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssh._ssh_target import point_at_server, stop_server
from ssh._sshd import SshServer, unavailable_reason


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer().start()
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def ssh_env(sshd: SshServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """DESKCTL_SSH_* for ``sshd`` (known_hosts holds its key) and no agent; returned for child processes."""
    return point_at_server(sshd, monkeypatch, tmp_path)
