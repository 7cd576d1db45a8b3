"""Fixtures of the ssh provider tests: one real sshd on a loopback port per test module, and the environment that
points deskctl at it (see ``_ssh_target.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssh._ssh_target import server_env, stop_server
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
    env = server_env(sshd)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(Path(env["DESKCTL_SSH_KNOWN_HOSTS"]).read_text())
    env["DESKCTL_SSH_KNOWN_HOSTS"] = str(known_hosts)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for var in ("SSH_AUTH_SOCK", "DESKCTL_SSH_PASSWORD", "DESKCTL_SSH_PRIVATE_KEY", "DESKCTL_SSH_KEY_PASSPHRASE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no default identities of the test runner
    return env
