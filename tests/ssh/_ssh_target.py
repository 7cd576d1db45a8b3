"""The ssh provider's conformance target (tests/conformance/conftest.py appends ``Target(**SSH_TARGET_KWARGS)``)
and helpers the ssh tests share. Not a test module.

Each test that uses the target gets its own real sshd on a loopback port (:mod:`_sshd`), a client key in its
``authorized_keys`` and a known_hosts file holding its host key; the provider reaches it through
``DESKCTL_SSH_HOST``, ``DESKCTL_SSH_KEY_FILE`` and ``DESKCTL_SSH_KNOWN_HOSTS``, which child processes inherit.
The "host" is this machine, so the test can look at its processes and files directly.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from deskctl.providers._x11 import X11Address, read_cookie
from deskctl.providers.base import RemoteHandle
from ssh._sshd import OTHER_USER, SshServer, processes_with, unavailable_reason

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = [
    "SSH_TARGET_KWARGS",
    "point_at_server",
    "remote_path",
    "server_env",
    "ssh_environment",
    "ssh_leftovers",
    "ssh_probe_address",
    "stop_server",
    "wait_until_released",
]

_current: list[SshServer] = []


def remote_dir(server: SshServer) -> str:
    """Where this server's desktops live on the host (relative to the test user's home): one directory per
    server, so a test run cleans up only its own desktops, never those of another run on this machine."""
    return f".cache/deskctl/ssh-test-{server.port}"


def remote_path(server: SshServer, session_id: str) -> str:
    return f"{Path('~' + server.user).expanduser()}/{remote_dir(server)}/{session_id}"


def server_env(server: SshServer) -> dict[str, str]:
    known_hosts = server.write_known_hosts(server.root / "known_hosts")
    return {
        "DESKCTL_SSH_HOST": server.target,
        "DESKCTL_SSH_KEY_FILE": str(server.client_key),
        "DESKCTL_SSH_KNOWN_HOSTS": str(known_hosts),
        "DESKCTL_SSH_REMOTE_DIR": remote_dir(server),
    }


def point_at_server(server: SshServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Set DESKCTL_SSH_* for ``server`` (a known_hosts of this test's own holds its key), no agent, no key of the
    test runner (HOME moves into ``tmp_path``); the environment is returned for child processes."""
    env = server_env(server)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(Path(env["DESKCTL_SSH_KNOWN_HOSTS"]).read_text())
    env["DESKCTL_SSH_KNOWN_HOSTS"] = str(known_hosts)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for var in ("SSH_AUTH_SOCK", "DESKCTL_SSH_PASSWORD", "DESKCTL_SSH_PRIVATE_KEY", "DESKCTL_SSH_KEY_PASSPHRASE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return env


def stop_server(server: SshServer) -> None:
    """Destroy what a failed test may have left on this server's host (through the provider itself: list_owned
    then destroy), then stop the server."""
    from deskctl.providers.ssh import SSHProvider

    try:
        env = server_env(server)
        provider = SSHProvider({"host": server.target, "key_file": env["DESKCTL_SSH_KEY_FILE"],
                                "known_hosts": env["DESKCTL_SSH_KNOWN_HOSTS"], "remote_dir": remote_dir(server),
                                "agent": False})
        try:
            for handle in provider.list_owned():
                provider.destroy(handle)
        finally:
            provider.close()
        # the host is this machine: wait for desktops still ending on their own (an attached one whose
        # connection just closed), then remove the (now empty) base directory
        base = os.path.dirname(remote_path(server, "x"))
        with contextlib.suppress(OSError):
            for name in os.listdir(base):
                wait_until_released(os.path.join(base, name))
        with contextlib.suppress(OSError):
            os.rmdir(base)
    finally:
        server.stop()


@contextlib.contextmanager
def ssh_environment() -> Iterator[Mapping[str, str]]:
    """A fresh sshd for one test and the variables that point deskctl (and its children) at it."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer().start()
    _current.append(server)
    try:
        yield {**server_env(server), "SSH_AUTH_SOCK": ""}
    finally:
        _current.remove(server)
        stop_server(server)


def ssh_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    """The host is this machine: the probe uses the display's own unix socket and the cookie file."""
    assert desk.handle is not None
    data = desk.handle.data
    return X11Address(display=f":{data['display']}"), read_cookie(f"{data['dir']}/Xauthority")


def wait_until_released(remote_dir: str) -> None:
    """Block until every process of a desktop is gone: each holds ``<dir>/lock`` (flock) until it exits.
    A directory already removed means they are gone. Never creates the lock file."""
    try:
        fd = os.open(f"{remote_dir}/lock", os.O_RDONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def ssh_leftovers(handle: RemoteHandle) -> list[str]:
    """Processes of the desktop (Xvfb, its timeout(1), the watcher) and its directory, if still there."""
    left: list[str] = []
    remote_dir = str(handle.data.get("dir") or "")
    if remote_dir:
        for pid, cmdline in processes_with(remote_dir + "/Xauthority"):
            left.append(f"process {pid}: {cmdline[:80]}")
        if os.path.exists(remote_dir):
            left.append(remote_dir)
    for pid, _cmdline in processes_with(f"deskctl-ssh:{handle.session_id} "):
        left.append(f"watcher process {pid}")
    return left


SSH_TARGET_KWARGS: dict[str, Any] = {
    "name": "ssh",
    "open_kwargs": {"provider": "ssh"},
    "probe_address": ssh_probe_address,
    "leftovers": ssh_leftovers,
    "marks": (pytest.mark.ssh,),
    "environment": ssh_environment,
    # the price catalog has no rate for a host you run yourself: its cost is "unknown", never 0
    # exec(user=...) runs sudo -n on the host: 40-ssh.sh lets the login user act as OTHER_USER, nobody else
    "extra": {"cost_known": False, "other_user": OTHER_USER},
}
