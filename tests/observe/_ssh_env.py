"""A real sshd on a loopback port for the observe tests of the ssh provider (the tests/ssh fixtures' way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def ssh_desktop_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An sshd for this test, and DESKCTL_SSH_* pointing at it (its key known, no agent, no default identity)."""
    from ssh._ssh_target import server_env, stop_server
    from ssh._sshd import SshServer, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer().start()
    try:
        env = server_env(server)
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(Path(env["DESKCTL_SSH_KNOWN_HOSTS"]).read_text())
        env["DESKCTL_SSH_KNOWN_HOSTS"] = str(known_hosts)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for var in ("SSH_AUTH_SOCK", "DESKCTL_SSH_PASSWORD", "DESKCTL_SSH_PRIVATE_KEY", "DESKCTL_SSH_KEY_PASSPHRASE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        yield
    finally:
        stop_server(server)
