"""A real sshd on a loopback port for the observe tests of the ssh provider (the tests/ssh fixtures' way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def ssh_desktop_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An sshd for this test, and DESKCTL_SSH_* pointing at it (its key known, no agent, no default identity)."""
    from ssh._ssh_target import point_at_server, stop_server
    from ssh._sshd import SshServer, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer().start()
    try:
        point_at_server(server, monkeypatch, tmp_path)
        yield
    finally:
        stop_server(server)
