"""The ssh provider against a REAL OpenSSH server on a loopback port (``_sshd.py``), logging in as the unprivileged
test user; the "remote" host is this machine, so the tests look at its processes and files directly.

Covers what the conformance suite does not: target parsing, host-key policy (unknown, accepted and recorded,
changed), every authentication source (key file, encrypted key with passphrase from env and keyring, key text,
a real ssh-agent, none, wrong), a host without Xvfb, the connection dropped mid-session, a killed client,
detached desktops that outlive their creator, one SSH connection per session, exec timeout, list_owned.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import keyring.core
import pytest

import deskctl
from _small_disk import small_disk
from deskctl.actions import Click
from deskctl.credentials import redact, store_secret
from deskctl.errors import (
    CleanupIncomplete,
    ConfigInvalid,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    SessionLost,
    UsageError,
)
from deskctl.providers.base import LABEL_DETACHED, LABEL_EXPIRES, LABEL_SESSION, RemoteHandle
from deskctl.providers.ssh import SSHProvider, SshTarget
from deskctl.spec import DesktopSpec
from ssh._ssh_target import remote_path, wait_until_released
from ssh._sshd import OTHER_USER, SshServer, keygen, processes_with

pytestmark = pytest.mark.ssh

SPEC = DesktopSpec(provider="ssh", geometry="640x480")


def labels(session_id: str, **extra: str) -> dict[str, str]:
    return {LABEL_SESSION: session_id, LABEL_EXPIRES: str(int(time.time()) + 600), **extra}


def new_id() -> str:
    return "dk-t" + os.urandom(4).hex()


def fingerprint(public_key_file: Path) -> str:
    blob = base64.b64decode(public_key_file.read_text().split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def started_by_exec(remote_dir: str) -> list[int]:
    """Pids whose environment carries the desktop's marker (what its exec started, and their children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"DESKCTL_SSH_DESKTOP={remote_dir}".encode() in environ:
                found.append(int(entry.name))
    return found


def assert_nothing_left(handle: RemoteHandle) -> None:
    remote_dir = str(handle.data["dir"])
    wait_until_released(remote_dir)
    assert processes_with(remote_dir + "/Xauthority") == []
    assert processes_with(f"deskctl-ssh:{handle.session_id} ") == []
    assert not os.path.exists(remote_dir)


@pytest.fixture
def provider(ssh_env: dict[str, str]) -> Iterator[SSHProvider]:
    made = SSHProvider({})
    try:
        yield made
    finally:
        made.close()


# -- target ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alice@box", SshTarget("alice", "box", 22)),
        ("alice@box:2222", SshTarget("alice", "box", 2222)),
        ("bob@[::1]:2200", SshTarget("bob", "::1", 2200)),
        ("ssh://carol@10.0.0.5:23/", SshTarget("carol", "10.0.0.5", 23)),
        ("box", SshTarget("zed", "box", 22)),
    ],
)
def test_target_parsing(text: str, expected: SshTarget) -> None:
    assert SshTarget.parse(text, user="zed") == expected


@pytest.mark.parametrize("text", ["alice@", "alice@box:port", "alice@box:0", "alice@[::1", "a@b c"])
def test_bad_targets_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        SshTarget.parse(text)


def test_a_target_with_a_password_is_refused_without_echoing_it() -> None:
    with pytest.raises(UsageError) as caught:
        SshTarget.parse("alice:pw-hunter22@box:22")
    assert caught.value.code == "usage.bad_host" and "pw-hunter22" not in caught.value.message
    assert "alice:***@box:22" in caught.value.message


def test_known_hosts_name_follows_openssh() -> None:
    assert SshTarget("a", "box", 22).known_hosts_name == "box"
    assert SshTarget("a", "127.0.0.1", 2222).known_hosts_name == "[127.0.0.1]:2222"


def test_no_host_is_a_preflight_failure_with_a_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DESKCTL_SSH_HOST", raising=False)
    results = SSHProvider({}).preflight(SPEC)
    assert [(r.status, r.code) for r in results] == [("fail", "ssh.no_target")]
    assert results[0].remedy and "DESKCTL_SSH_HOST" in results[0].remedy
    assert SSHProvider({}).list_owned() == []


def test_an_openssh_config_alias_gives_host_user_port_and_identity(sshd: SshServer, ssh_env: dict[str, str],
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DESKCTL_SSH_KEY_FILE")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host labbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
                      f"  IdentityFile {sshd.client_key}\n\nHost *\n  User nobody-else\n")
    provider = SSHProvider({"host": "labbox", "ssh_config": str(config)})
    try:
        results = {r.code: r for r in provider.preflight(SPEC)}
        assert results["ssh.connect"].status == "pass", results
        assert f"{sshd.user}@127.0.0.1:{sshd.port}" in results["ssh.connect"].message
        session_id = new_id()
        handle = provider.create(SPEC, session_id, labels(session_id))
        # the handle holds what the alias resolved to: another process needs no ssh config to reach it
        assert (handle.data["host"], handle.data["port"], handle.data["user"]) == ("127.0.0.1", sshd.port, sshd.user)
        assert handle.data["identity_files"] == [str(sshd.client_key)]
        provider.destroy(handle)
    finally:
        provider.close()
    # what the target names explicitly wins over the config
    results = SSHProvider({"host": "nobody@labbox:1", "ssh_config": str(config)}).preflight(SPEC)
    assert [(r.status, r.code) for r in results] == [("fail", "provider.unreachable")]
    assert "127.0.0.1 port 1" in results[0].message
    results = SSHProvider({"host": "nobody@labbox", "ssh_config": str(config)}).preflight(SPEC)
    assert [(r.status, r.code) for r in results] == [("fail", "credentials.invalid")]
    assert results[0].message.startswith(f"nobody@127.0.0.1 port {sshd.port}")
    with pytest.raises(ConfigInvalid):
        SSHProvider({"host": "labbox", "ssh_config": str(tmp_path / "missing")}).create(SPEC, new_id(), labels("x"))


def test_through_a_jump_host(sshd: SshServer, ssh_env: dict[str, str]) -> None:
    """ProxyJump: the test server is its own bastion (the target is reached by a direct-tcpip channel on the
    connection to the jump host, as OpenSSH's -J does)."""
    logins_before = sum("Accepted publickey" in line for line in sshd.log_lines)
    provider = SSHProvider({"jump": sshd.target})
    try:
        session_id = new_id()
        handle = provider.create(SPEC, session_id, labels(session_id))
        assert handle.data["jump"] == sshd.target
        provider.wait_ready(handle, time.monotonic() + 30)
        provider.act(handle, Click(3, 4))
        assert provider.screenshot(handle).width == 640
        # two logins: the jump host, then the target through it
        assert sum("Accepted publickey" in line for line in sshd.log_lines) - logins_before == 2
        other = SSHProvider({})  # another process reaches it again from the handle alone
        try:
            assert other.is_alive(handle)
            other.destroy(handle)
        finally:
            other.close()
    finally:
        provider.close()
    assert_nothing_left(handle)


# -- preflight and host keys -------------------------------------------------------------------------------------


def test_preflight_passes_and_reports_xvfb_and_displays(provider: SSHProvider) -> None:
    results = {r.code: r for r in provider.preflight(SPEC)}
    assert results["ssh.connect"].status == "pass"
    assert results["ssh.xvfb"].status == "pass" and "Xvfb" in results["ssh.xvfb"].message
    assert results["ssh.displays"].status == "pass"
    assert not [r for r in results.values() if r.status == "fail"]


def test_unreachable_host(ssh_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from ssh._sshd import free_port

    monkeypatch.setenv("DESKCTL_SSH_HOST", f"deskctl-ssh@127.0.0.1:{free_port()}")
    results = SSHProvider({}).preflight(SPEC)
    assert [(r.status, r.code) for r in results] == [("fail", "provider.unreachable")]
    with pytest.raises(ProviderUnreachable):
        SSHProvider({}).create(SPEC, new_id(), labels("x"))


def test_unknown_host_key_is_refused_then_accepted_and_recorded(sshd: SshServer, ssh_env: dict[str, str],
                                                                tmp_path: Path) -> None:
    known_hosts = tmp_path / "fresh" / "known_hosts"  # neither the file nor its directory exists yet
    options = {"known_hosts": str(known_hosts)}
    with pytest.raises(CredentialsInvalid) as caught:
        SSHProvider(options).create(SPEC, new_id(), labels("x"))
    assert caught.value.code == "credentials.host_key_unknown"
    assert fingerprint(sshd.host_key.with_suffix(".pub")) in caught.value.message
    assert "--accept-new-host-key" in (caught.value.remedy or "")
    assert not known_hosts.exists()
    # preflight says how to proceed, and does not write either
    results = {r.code: r for r in SSHProvider({**options, "accept_new_host_key": True}).preflight(SPEC)}
    assert results["credentials.host_key_unknown"].status == "warn"
    assert not known_hosts.exists()

    accepting = SSHProvider({**options, "accept_new_host_key": True})
    session_id = new_id()
    handle = accepting.create(SPEC, session_id, labels(session_id))
    try:
        assert known_hosts.read_text() == sshd.known_hosts_line
        assert oct(known_hosts.stat().st_mode & 0o777) == "0o600"
    finally:
        accepting.destroy(handle)
        accepting.close()
    # recorded: the next connection needs no flag
    again = SSHProvider(options)
    try:
        assert [r.status for r in again.preflight(SPEC)].count("fail") == 0
    finally:
        again.close()


def test_accept_new_host_key_through_the_session_records_the_key(sshd: SshServer, ssh_env: dict[str, str],
                                                                  tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts_session"
    # preflight runs first and hands its connection to create: the key must still be recorded
    with deskctl.open_desktop("ssh", geometry="640x480",
                              provider_options={"known_hosts": str(known_hosts), "accept_new_host_key": True}) as desk:
        assert desk.size == (640, 480)
    assert known_hosts.read_text() == sshd.known_hosts_line


def test_changed_host_key_is_always_refused(sshd: SshServer, ssh_env: dict[str, str], tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "other_host_key")
    kind, blob = impostor.with_suffix(".pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts_changed"
    known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    for accept in (False, True):
        provider = SSHProvider({"known_hosts": str(known_hosts), "accept_new_host_key": accept})
        with pytest.raises(CredentialsInvalid) as caught:
            provider.create(SPEC, new_id(), labels("x"))
        err = caught.value
        assert err.code == "credentials.host_key_changed"
        assert fingerprint(sshd.host_key.with_suffix(".pub")) in err.message  # what it presented
        assert fingerprint(impostor.with_suffix(".pub")) in err.message  # what was on record
        assert err.remedy is not None and "ssh-keygen -R" in err.remedy
        assert err.exit_code == 3
    assert known_hosts.read_text() == f"[127.0.0.1]:{sshd.port} {kind} {blob}\n"  # untouched
    # through the session API it is a preflight failure (exit 3), and nothing was created
    with pytest.raises(CredentialsInvalid) as caught:
        deskctl.open_desktop("ssh", provider_options={"known_hosts": str(known_hosts)})
    assert caught.value.code == "credentials.host_key_changed"


def test_hashed_entries_and_marker_or_malformed_lines_in_known_hosts(sshd: SshServer, ssh_env: dict[str, str],
                                                                     tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts_hashed"
    known_hosts.write_text(sshd.known_hosts_line)
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known_hosts)], check=True, capture_output=True)
    hashed = known_hosts.read_text()
    assert hashed.startswith("|1|") and "127.0.0.1" not in hashed
    ca_kind, ca_blob = keygen(tmp_path / "ca").with_suffix(".pub").read_text().split()[:2]
    known_hosts.write_text(f"# a comment\n@cert-authority *.example.org {ca_kind} {ca_blob}\nnot a valid line\n"
                           + hashed)
    provider = SSHProvider({"known_hosts": str(known_hosts)})
    try:
        assert {r.code: r.status for r in provider.preflight(SPEC)}["ssh.connect"] == "pass"
    finally:
        provider.close()


def test_a_revoked_host_key_is_refused_even_with_accept_new(sshd: SshServer, ssh_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    kind, blob = sshd.host_key.with_suffix(".pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts_revoked"
    known_hosts.write_text(f"@revoked [127.0.0.1]:{sshd.port} {kind} {blob}\n")
    with pytest.raises(CredentialsInvalid) as caught:
        SSHProvider({"known_hosts": str(known_hosts), "accept_new_host_key": True}).create(SPEC, new_id(),
                                                                                             labels("x"))
    assert caught.value.code == "credentials.host_key_revoked"
    assert known_hosts.read_text() == f"@revoked [127.0.0.1]:{sshd.port} {kind} {blob}\n"


# -- authentication ----------------------------------------------------------------------------------------------


def test_wrong_key_is_credentials_invalid(ssh_env: dict[str, str], tmp_path: Path) -> None:
    stranger = keygen(tmp_path / "stranger")
    with pytest.raises(CredentialsInvalid) as caught:
        SSHProvider({"key_file": str(stranger)}).create(SPEC, new_id(), labels("x"))
    assert caught.value.code == "credentials.invalid"
    assert str(stranger) in caught.value.message
    results = SSHProvider({"key_file": str(stranger)}).preflight(SPEC)
    assert [(r.status, r.code) for r in results] == [("fail", "credentials.invalid")]


def test_no_credentials_at_all_is_credentials_missing(ssh_env: dict[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DESKCTL_SSH_KEY_FILE")
    with pytest.raises(CredentialsMissing) as caught:
        SSHProvider({}).create(SPEC, new_id(), labels("x"))
    assert "DESKCTL_SSH_PASSWORD" in (caught.value.remedy or "")


def test_a_password_the_server_does_not_take_is_credentials_invalid_naming_what_it_takes(
        ssh_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # the test sshd has PasswordAuthentication no (and the test user no password): the refusal says so
    monkeypatch.delenv("DESKCTL_SSH_KEY_FILE")
    monkeypatch.setenv("DESKCTL_SSH_PASSWORD", "hunter2-not-a-real-one")
    with pytest.raises(CredentialsInvalid) as caught:
        SSHProvider({}).create(SPEC, new_id(), labels("x"))
    assert "the server accepts: publickey" in caught.value.message
    assert "hunter2-not-a-real-one" not in json.dumps(caught.value.to_dict())


def test_encrypted_key_with_passphrase_from_env(sshd: SshServer, ssh_env: dict[str, str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    passphrase = "correct horse battery 4711"
    key = keygen(tmp_path / "locked", passphrase=passphrase)
    sshd.authorize(key.with_suffix(".pub"))
    results = SSHProvider({"key_file": str(key)}).preflight(SPEC)
    assert [(r.status, r.code) for r in results] == [("fail", "credentials.missing")]
    assert "DESKCTL_SSH_KEY_PASSPHRASE" in (results[0].remedy or "")
    with pytest.raises(CredentialsMissing):
        SSHProvider({"key_file": str(key)}).create(SPEC, new_id(), labels("x"))
    monkeypatch.setenv("DESKCTL_SSH_KEY_PASSPHRASE", "wrong passphrase 0000")
    with pytest.raises(CredentialsInvalid) as caught:
        SSHProvider({"key_file": str(key)}).create(SPEC, new_id(), labels("x"))
    assert "wrong passphrase 0000" not in caught.value.message
    monkeypatch.setenv("DESKCTL_SSH_KEY_PASSPHRASE", passphrase)
    results = SSHProvider({"key_file": str(key)}).preflight(SPEC)
    assert {r.code: r.status for r in results}["ssh.connect"] == "pass"
    assert passphrase not in json.dumps([r.to_dict() for r in results])


@pytest.fixture
def file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A real file keyring (keyrings.alt) in a temp XDG_DATA_HOME, chosen by keyring's own configuration."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    keyring.core.init_backend()
    try:
        yield
    finally:
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
        keyring.core.init_backend()


def test_private_key_text_and_passphrase_from_the_keyring(sshd: SshServer, ssh_env: dict[str, str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          file_keyring: None) -> None:
    passphrase = "keyring-held passphrase 31337"
    key = keygen(tmp_path / "vaulted", passphrase=passphrase)
    sshd.authorize(key.with_suffix(".pub"))
    monkeypatch.delenv("DESKCTL_SSH_KEY_FILE")
    store_secret("ssh", "DESKCTL_SSH_PRIVATE_KEY", key.read_text())
    store_secret("ssh", "DESKCTL_SSH_KEY_PASSPHRASE", passphrase)
    provider = SSHProvider({})
    try:
        results = {r.code: r for r in provider.preflight(SPEC)}
        assert results["ssh.connect"].status == "pass"
        assert "private key" in results["ssh.connect"].message
    finally:
        provider.close()
    assert redact(f"pass {passphrase}") == "pass ***"


def test_ssh_agent(sshd: SshServer, ssh_env: dict[str, str], tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert agent.stdout is not None
        agent.stdout.readline()  # it prints SSH_AUTH_SOCK=... once it listens
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(["ssh-add", "-q", str(sshd.client_key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        monkeypatch.delenv("DESKCTL_SSH_KEY_FILE")
        provider = SSHProvider({})
        try:
            results = {r.code: r for r in provider.preflight(SPEC)}
            assert results["ssh.connect"].status == "pass" and "agent" in results["ssh.connect"].message
        finally:
            provider.close()
        assert SSHProvider({"agent": False}).preflight(SPEC)[0].code == "credentials.missing"
    finally:
        agent.kill()
        agent.wait()


# -- the host ----------------------------------------------------------------------------------------------------


def test_host_without_xvfb(sshd: SshServer, ssh_env: dict[str, str]) -> None:
    options = {"xvfb_path": "/nonexistent/Xvfb"}
    results = {r.code: r for r in SSHProvider(options).preflight(SPEC)}
    assert results["ssh.xvfb_missing"].status == "fail"
    assert "apt-get install xvfb" in (results["ssh.xvfb_missing"].remedy or "")
    with pytest.raises(PreflightError) as caught:
        deskctl.open_desktop("ssh", provider_options=options)
    assert caught.value.code == "ssh.xvfb_missing" and caught.value.exit_code == 3
    # without preflight, create refuses the same way and leaves no directory behind
    session_id = new_id()
    with pytest.raises(PreflightError) as caught:
        SSHProvider(options).create(SPEC, session_id, labels(session_id))
    assert caught.value.code == "ssh.xvfb_missing"
    assert not os.path.exists(remote_path(sshd, session_id))


def test_a_script_that_ends_before_it_reads_its_input_still_says_why(
    sshd: SshServer, ssh_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host script can end (no Xvfb) before deskctl has sent it the cookie: the send then fails on a closed
    channel, and create still reports what the script printed (it failed CI once as a bare OSError)."""
    from deskctl.providers.ssh import connection

    opened = connection._Connection.session

    def session_after_its_end(self: Any, command: str, **kwargs: Any) -> Any:
        chan = opened(self, command, **kwargs)
        chan.status_event.wait(10)  # the script has exited (and the channel closes with it)
        deadline = time.monotonic() + 10
        while not chan.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert chan.closed
        return chan

    monkeypatch.setattr(connection._Connection, "session", session_after_its_end)
    session_id = new_id()
    with pytest.raises(PreflightError) as caught:
        SSHProvider({"xvfb_path": "/nonexistent/Xvfb"}).create(SPEC, session_id, labels(session_id))
    assert caught.value.code == "ssh.xvfb_missing"
    assert not os.path.exists(remote_path(sshd, session_id))


def test_xvfb_that_dies_at_start_is_reported_and_leaves_nothing(sshd: SshServer, ssh_env: dict[str, str]) -> None:
    session_id = new_id()
    provider = SSHProvider({"xvfb_path": "/bin/false"})
    try:
        with pytest.raises(ProviderApiError) as caught:
            provider.create(SPEC, session_id, labels(session_id))
        assert "Xvfb did not start" in caught.value.message
    finally:
        provider.close()
    assert not os.path.exists(remote_path(sshd, session_id))
    assert processes_with(f"deskctl-ssh:{session_id} ") == []


def test_window_manager_runs_until_the_desktop_ends(ssh_env: dict[str, str]) -> None:
    from Xlib import X

    from deskctl.providers._x11 import X11Address, connect_display, read_cookie

    with deskctl.open_desktop("ssh", geometry="640x480", window_manager=True) as desk:
        handle = desk.handle
        assert handle is not None
        state = dict(line.split("=", 1) for line in Path(handle.data["dir"], "state").read_text().split())
        wm_pid = int(state["wm_pid"])
        assert Path(f"/proc/{wm_pid}/comm").read_text().strip() == "openbox"
        local = connect_display(X11Address(f":{handle.data['display']}"),
                                read_cookie(f"{handle.data['dir']}/Xauthority"))
        try:
            atom = local.intern_atom("_NET_SUPPORTING_WM_CHECK")
            # wait_ready returned only once openbox manages the screen
            assert local.screen().root.get_full_property(atom, X.AnyPropertyType) is not None
        finally:
            local.close()
    assert_nothing_left(handle)
    assert not Path(f"/proc/{wm_pid}").exists()


def test_preflight_refuses_a_missing_window_manager_and_a_start_url_without_chromium_on_the_host(
        ssh_env: dict[str, str]) -> None:
    spec = DesktopSpec(provider="ssh", geometry="640x480", window_manager=True, start_url="https://example.org/")
    results = {r.code: r for r in SSHProvider({"window_manager_command": "no-such-wm",
                                               "browser": "no-such-chromium"}).preflight(spec)}
    assert results["ssh.window_manager"].status == "fail"
    assert results["ssh.browser_missing"].status == "fail"
    assert "no-such-chromium" in results["ssh.browser_missing"].message
    assert "compat.start_url" not in results
    # the host's own Chromium (Debian's, scripts/setup.d/60-observe.sh) is found on the login PATH
    found = {r.code: r for r in SSHProvider().preflight(DesktopSpec(provider="ssh", geometry="640x480",
                                                                    start_url="https://example.org/"))}
    assert found["ssh.browser"].status == "pass", found


def test_one_ssh_connection_carries_the_whole_session(sshd: SshServer, ssh_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    def sessions() -> set[int]:
        return {p for p in sshd.connection_pids()
                if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sshd: deskctl-ssh@notty")}

    before = sum("Accepted publickey" in line for line in sshd.log_lines)
    sessions_before = sessions()
    with deskctl.open_desktop("ssh", geometry="800x600") as desk:
        assert desk.size == (800, 600)
        for i in range(20):
            desk.click(10 + i, 20)
        desk.type("hello")
        desk.key("ctrl+a")
        assert desk.screenshot().width == 800
        result = desk.exec("echo $DISPLAY; echo oops >&2; exit 4")
        assert (result.exit_code, result.stdout, result.stderr) == (4, f":{desk.handle.data['display']}\n",  # type: ignore[union-attr]
                                                                    "oops\n")
        # files (SFTP and tar streams) and the clipboard travel on the same connection
        local = tmp_path / "tree"
        (local / "sub").mkdir(parents=True)
        (local / "sub" / "f.txt").write_text("f\n")
        desk.upload(local / "sub" / "f.txt", "one-conn/f.txt")
        desk.upload(local, "one-conn/tree")
        desk.download("one-conn", tmp_path / "back")
        assert (tmp_path / "back" / "tree" / "sub" / "f.txt").read_text() == "f\n"
        desk.clipboard_set("x")
        assert isinstance(desk.window_titles(), list)
        logins = sum("Accepted publickey" in line for line in sshd.log_lines) - before
        # preflight's connection is handed over to create: one login for the whole session
        assert logins == 1
        assert len(sessions() - sessions_before) == 1
        handle = desk.handle
    assert handle is not None
    assert_nothing_left(handle)
    home = Path("~" + sshd.user).expanduser()
    shutil.rmtree(home / "one-conn")


def _pids_of(user: str) -> list[int]:
    uid = pwd.getpwnam(user).pw_uid
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid]


def _owner(proc: Path) -> int:
    try:
        return proc.stat().st_uid
    except OSError:
        return -1


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _session(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return 0


def _ends(pid: int, within: float = 20.0) -> bool:
    """Whether process ``pid`` (on this machine) exits within ``within`` seconds: waits on its pidfd."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


def test_exec_timeout_ends_the_command(provider: SSHProvider) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    try:
        result = provider.exec(handle, "sleep 300 & echo $!; wait", timeout=1)
        assert result.exit_code == 124
        assert "timed out" in result.stderr
        sleeper = int(result.stdout)
        # the host's timeout(1) signalled the command's whole process group: the sleep ends too
        assert _ends(sleeper)
    finally:
        provider.destroy(handle)


def test_destroy_ends_what_exec_left_running(provider: SSHProvider) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    remote_dir = str(handle.data["dir"])
    try:
        result = provider.exec(handle, "sleep 300 >/dev/null 2>&1 & sh -c 'trap \"\" TERM; sleep 301' "
                                       ">/dev/null 2>&1 & echo started")
        assert result.stdout == "started\n"
        assert len(started_by_exec(remote_dir)) >= 2  # the two sleeps (and the shell that ignores TERM)
    finally:
        provider.destroy(handle)
    assert started_by_exec(remote_dir) == []
    assert_nothing_left(handle)


def test_a_background_gui_app_returns_at_once_and_ends_with_the_desktop(provider: SSHProvider) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    remote_dir = str(handle.data["dir"])
    try:
        # xmessage keeps the X connection and, without background, the channel's stdout: a foreground run of
        # the same line would end with 124 after the 5 s timeout
        result = provider.exec(handle, "xmessage -title deskctl-bg hello", timeout=5, background=True)
        assert result.exit_code == 0, result.stderr
        assert result.pid is not None
        deadline = time.monotonic() + 60
        # read until it shows: a process inside execve (sh becoming xmessage) shows no environment for a moment
        while result.pid not in started_by_exec(remote_dir):
            assert time.monotonic() < deadline, "the app never carried the desktop's marker"
            time.sleep(0.05)
        while "deskctl-bg" not in provider.window_titles(handle):
            assert time.monotonic() < deadline, "the window never appeared"
            time.sleep(0.05)
        # the pid is the leader of the new session xmessage runs in (setsid), so it names the app
        assert [p for p in started_by_exec(remote_dir) if _comm(p) == "xmessage" and _session(p) == result.pid]
    finally:
        provider.destroy(handle)
    assert result.pid is not None and _ends(result.pid)
    assert started_by_exec(remote_dir) == []
    assert_nothing_left(handle)


def test_exec_as_another_user_in_a_folder_with_env(provider: SSHProvider) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    try:
        result = provider.exec(handle, 'id -un; pwd; echo "$DK_X"', cwd="/tmp", env={"DK_X": "a b"},
                               user=OTHER_USER)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines() == [OTHER_USER, "/tmp", "a b"]
        # sudo -n never asks: a user the host's sudoers does not allow fails at once with sudo's message
        refused = provider.exec(handle, "id -un", user="root", timeout=20)
        assert refused.exit_code != 0 and "password" in refused.stderr
        with pytest.raises(UsageError) as info:
            provider.exec(handle, "true", user="bad user")
        assert info.value.code == "usage.bad_user"
        # what runs as another user ends with the desktop too (the login user cannot signal it: destroy asks
        # sudo to, as that user)
        started = provider.exec(handle, "sleep 300", user=OTHER_USER, background=True)
        assert started.exit_code == 0 and started.pid is not None
        deadline = time.monotonic() + 30
        while not (sleepers := [p for p in _pids_of(OTHER_USER) if _comm(p) == "sleep"
                                and _session(p) == started.pid]):
            assert time.monotonic() < deadline, "the sleep never started"
            time.sleep(0.05)
    finally:
        provider.destroy(handle)
    assert all(_ends(p) for p in sleepers)


@pytest.fixture
def opened(provider: SSHProvider) -> Iterator[RemoteHandle]:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    try:
        yield handle
    finally:
        provider.destroy(handle)


@pytest.fixture
def host_dir(sshd: SshServer) -> Iterator[Path]:
    """A fresh folder in the test user's home on the host (this machine), removed afterwards."""
    home = Path("~" + sshd.user).expanduser()
    path = home / f"files-{os.urandom(4).hex()}"
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_upload_replaces_a_file_in_one_rename_and_keeps_its_mode(provider: SSHProvider, opened: RemoteHandle,
                                                                 host_dir: Path, tmp_path: Path) -> None:
    local = tmp_path / "tool.sh"
    local.write_text("#!/bin/sh\necho one\n")
    local.chmod(0o750)
    # "~/" and relative paths are in the login user's home, as in exec
    provider.upload(opened, str(local), f"~/{host_dir.name}/bin/tool.sh")
    remote = host_dir / "bin" / "tool.sh"
    assert remote.read_text() == "#!/bin/sh\necho one\n"
    assert stat.S_IMODE(remote.stat().st_mode) == 0o750
    assert provider.exec(opened, f"{host_dir.name}/bin/tool.sh").stdout == "one\n"
    before = remote.stat().st_ino
    local.write_text("#!/bin/sh\necho two\n")
    provider.upload(opened, str(local), f"{host_dir.name}/bin/tool.sh")
    # a new file renamed over the old one (never the old one rewritten in place), no temporary left behind
    assert remote.stat().st_ino != before
    assert remote.read_text() == "#!/bin/sh\necho two\n"
    assert sorted(p.name for p in remote.parent.iterdir()) == ["tool.sh"]


def test_the_connection_prefers_aes_gcm(provider: SSHProvider, opened: RemoteHandle) -> None:
    transport = provider._desktops[opened.session_id].conn.transport
    # one pass of AES-GCM instead of AES-CTR plus HMAC on every byte: OpenSSH offers it, so it is chosen
    assert (transport.local_cipher, transport.remote_cipher) == ("aes128-gcm@openssh.com",) * 2


def test_a_file_larger_than_the_bulk_window_goes_both_ways_whole(provider: SSHProvider, opened: RemoteHandle,
                                                                  host_dir: Path, tmp_path: Path) -> None:
    # SFTP runs on a channel with a 16 MiB window and 256 KiB packets (paramiko's 2 MiB and 32 KiB stalled the
    # copy): a file past both, up and down, arrives whole with its mode, and no partial file is left on either side
    from deskctl.providers.ssh.connection import _BULK_PACKET, _BULK_WINDOW

    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(_BULK_WINDOW + 3 * _BULK_PACKET + 17))
    local.chmod(0o640)
    provider.upload(opened, str(local), f"{host_dir}/big.bin")
    channel = provider._desktops[opened.session_id].sftp.sock
    assert (channel.in_window_size, channel.in_max_packet_size) == (_BULK_WINDOW, _BULK_PACKET)
    provider.download(opened, f"{host_dir}/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()
    assert stat.S_IMODE((host_dir / "big.bin").stat().st_mode) == 0o640
    assert sorted(p.name for p in host_dir.iterdir()) == ["big.bin"]
    assert not [p.name for p in tmp_path.iterdir() if "deskctl-part" in p.name]


def test_a_failed_upload_leaves_the_old_file_and_no_partial(provider: SSHProvider, opened: RemoteHandle,
                                                            host_dir: Path, tmp_path: Path) -> None:
    (host_dir / "locked").mkdir(parents=True)
    (host_dir / "locked" / "keep.txt").write_text("old\n")
    os.system(f"chown -R {OTHER_USER} {host_dir}/locked")  # the login user may no longer write there
    local = tmp_path / "keep.txt"
    local.write_text("new\n")
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(local), f"{host_dir}/locked/keep.txt")
    assert info.value.code == "usage.permission_denied" and info.value.exit_code == 2
    assert (host_dir / "locked" / "keep.txt").read_text() == "old\n"
    assert sorted(p.name for p in (host_dir / "locked").iterdir()) == ["keep.txt"]
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(local), str(host_dir / "locked"))  # a directory is not a file's name
    assert info.value.code in ("usage.bad_path", "usage.permission_denied")
    (host_dir / "plain").write_text("")
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(local), f"{host_dir}/plain/below/x.txt")  # a file where a folder must be
    assert info.value.code == "usage.bad_path"


def test_a_file_never_replaces_a_folder_nor_a_folder_a_file(provider: SSHProvider, opened: RemoteHandle,
                                                           host_dir: Path, tmp_path: Path) -> None:
    # the same code as xvfb and docker give (usage.bad_path), and nothing on the host changes
    made = provider.exec(opened, f"mkdir -p {host_dir}/keep/inner && echo kept > {host_dir}/keep/inner/a && "
                                 f"echo f > {host_dir}/afile", 30.0)
    assert made.exit_code == 0, made
    one = tmp_path / "one.txt"
    one.write_text("one\n")
    tree = tmp_path / "tree"
    (tree / "x").mkdir(parents=True)
    for source, remote in ((one, "keep"), (tree, "afile"), (one, "afile/below/one.txt"),
                           (tree, "afile/below")):
        with pytest.raises(UsageError) as info:
            provider.upload(opened, str(source), f"{host_dir}/{remote}")
        assert info.value.code == "usage.bad_path", (source.name, remote)
        assert info.value.exit_code == 2
    assert (host_dir / "keep" / "inner" / "a").read_text() == "kept\n"
    assert (host_dir / "afile").read_text() == "f\n"
    assert sorted(p.name for p in host_dir.iterdir()) == ["afile", "keep"]
    provider.upload(opened, str(one), f"{host_dir}/keep/one.txt")  # into the folder by a path under it
    assert (host_dir / "keep" / "one.txt").read_text() == "one\n"


def test_a_tree_refused_before_the_host_reads_it_leaves_no_file_to_finalize_noisily(
    provider: SSHProvider, opened: RemoteHandle, host_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's unpack script refuses (a file where the folder goes) before it reads: the tar stream's sends
    then fail on a closed channel, and the error carries the frame that sent it. What sent it must not be one of
    paramiko's files: each flushes from __del__, and collected in that cycle after its own buffer was closed it
    printed "Exception ignored ... I/O operation on closed file" at the end of a benchmark."""
    import gc
    import sys

    import paramiko

    made = provider.exec(opened, f"mkdir -p {host_dir} && echo f > {host_dir}/afile", 30.0)
    assert made.exit_code == 0, made
    tree = tmp_path / "tree"
    tree.mkdir()
    for index in range(96):  # 24 MiB: past the 16 MiB the channel's window lets go unread
        (tree / f"f{index}.bin").write_bytes(os.urandom(256 * 1024))
    ignored: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    gc.collect()
    before = sum(isinstance(o, paramiko.file.BufferedFile) for o in gc.get_objects())
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(tree), f"{host_dir}/afile")
    assert info.value.code == "usage.bad_path"
    held = sum(isinstance(o, paramiko.file.BufferedFile) for o in gc.get_objects())
    assert held == before  # none waits on the collector, in a cycle with the error that is still held
    del info
    gc.collect()
    assert ignored == []
    assert (host_dir / "afile").read_text() == "f\n"


def test_a_large_file_is_streamed_not_held_in_memory(provider: SSHProvider, opened: RemoteHandle, host_dir: Path,
                                                     tmp_path: Path) -> None:
    import tracemalloc

    from deskctl.providers.ssh.connection import _BULK_PACKET, _BULK_WINDOW
    from deskctl.providers.ssh.desktop import _SFTP_READ_AHEAD, _SFTP_REQUEST_OPENSSH

    # what a transfer may hold at once: the channel's window, the answers of the reads in flight (paramiko's own
    # read-ahead, once it outran the writer on a loaded machine, held the whole file), and some slack; the file is
    # bigger than all that, so a transfer that held it would show
    held = _BULK_WINDOW + _SFTP_READ_AHEAD * _BULK_PACKET + 4 * 1024 * 1024
    size = 64 * 1024 * 1024 + 5
    assert held + 16 * 1024 * 1024 < size
    local = tmp_path / "big.bin"
    with local.open("wb") as fh:
        for _ in range(64):
            fh.write(os.urandom(1024 * 1024))
        fh.write(b"tail!")
    provider.upload(opened, str(local), f"{host_dir}/warm.bin")  # the SFTP session opened outside the trace
    tracemalloc.start()
    try:
        provider.upload(opened, str(local), f"{host_dir}/big.bin")
        _, up_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        provider.download(opened, f"{host_dir}/big.bin", str(tmp_path / "back.bin"))
        _, down_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    assert hashlib.sha256((host_dir / "big.bin").read_bytes()).hexdigest() == digest
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == digest
    assert (tmp_path / "back.bin").stat().st_size == size
    # both directions hold the SSH window and the read-ahead at most, never the file
    assert up_peak < held, up_peak
    assert down_peak < held, down_peak
    # an upload holds one request's buffer and one SSH packet's copies (paramiko's pipelined write made three
    # more copies of each request, every one a fresh buffer: 1.2 MB at its peak, and page faults for each)
    assert up_peak < 3 * _SFTP_REQUEST_OPENSSH, up_peak


def test_an_upload_of_any_size_arrives_whole_and_replaces_the_old_file(provider: SSHProvider, opened: RemoteHandle,
                                                                        host_dir: Path, tmp_path: Path) -> None:
    from deskctl.providers.ssh.desktop import _SFTP_READ_AHEAD, _SFTP_REQUEST_OPENSSH

    request = _SFTP_REQUEST_OPENSSH
    # around one write request, and more requests than are ever in flight at once
    sizes = [0, 1, request - 1, request, request + 1, (_SFTP_READ_AHEAD + 8) * request + 17]
    for size in sizes:
        for round_ in range(2):  # the second over the first: other bytes, another mode
            local = tmp_path / f"f{size}-{round_}"
            local.write_bytes(os.urandom(size))
            local.chmod(0o600 if round_ else 0o755)
            provider.upload(opened, str(local), f"{host_dir}/f{size}")
            remote = host_dir / f"f{size}"
            assert remote.read_bytes() == local.read_bytes(), (size, round_)
            assert stat.S_IMODE(remote.stat().st_mode) == (0o600 if round_ else 0o755)
    assert sorted(p.name for p in host_dir.iterdir()) == sorted(f"f{size}" for size in sizes)


@pytest.mark.parametrize("where", ["send", "recv_ready"])
def test_an_interrupted_upload_keeps_the_old_file_leaves_no_partial_and_the_session_works(
        provider: SSHProvider, opened: RemoteHandle, host_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    import paramiko

    host_dir.mkdir()
    host_dir.chmod(0o777)  # made here (by root): the login user writes in it too
    (host_dir / "keep.bin").write_bytes(b"old")
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(8 * 1024 * 1024))
    provider.upload(opened, str(local), f"{host_dir}/warm.bin")  # the SFTP session open before the count starts
    (host_dir / "warm.bin").unlink()
    # a Ctrl-C lands where Python runs next: here in the middle of a write request (its third SSH packet: the
    # host waits for the rest, and the session must be given up), or between two requests (the writes in flight
    # are answered first, and the session stays)
    real = getattr(paramiko.Channel, where)
    calls = []

    def interrupted(channel: paramiko.Channel, *args: object) -> object:
        if where == "recv_ready" or len(args[0]) > 4096:  # type: ignore[arg-type]  # a request's data, not a stat
            calls.append(where)
            if len(calls) == 3:
                raise KeyboardInterrupt
        return real(channel, *args)

    monkeypatch.setattr(paramiko.Channel, where, interrupted)
    with pytest.raises(KeyboardInterrupt):
        provider.upload(opened, str(local), f"{host_dir}/keep.bin")
    monkeypatch.undo()
    assert (host_dir / "keep.bin").read_bytes() == b"old"
    assert sorted(p.name for p in host_dir.iterdir()) == ["keep.bin"]  # the partial removed
    provider.upload(opened, str(local), f"{host_dir}/keep.bin")
    assert (host_dir / "keep.bin").read_bytes() == local.read_bytes()
    provider.download(opened, f"{host_dir}/keep.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()


def test_an_upload_the_host_cannot_store_keeps_the_old_file_the_session_and_no_half_tree(
    provider: SSHProvider, opened: RemoteHandle, host_dir: Path, tmp_path: Path
) -> None:
    # a 1 MiB file system on the host: a bigger upload fails in the middle of its writes (ENOSPC), with more of
    # them in flight and the host's answers still to come
    with small_disk(host_dir / "small") as small:
        (small / "keep.bin").write_bytes(b"old" * 1000)
        local = tmp_path / "big.bin"
        local.write_bytes(os.urandom(8 * 1024 * 1024))
        with pytest.raises(ProviderApiError) as info:
            provider.upload(opened, str(local), f"{small}/keep.bin")
        assert str(small / "keep.bin") in info.value.message
        # the old file whole, the partial one removed: the SFTP session was left usable
        assert (small / "keep.bin").read_bytes() == b"old" * 1000
        assert sorted(p.name for p in small.iterdir()) == ["keep.bin"]
        one = tmp_path / "one.txt"
        one.write_text("one\n")
        provider.upload(opened, str(one), f"{small}/one.txt")
        assert (small / "one.txt").read_text() == "one\n"
        provider.download(opened, f"{small}/keep.bin", str(tmp_path / "back.bin"))
        assert (tmp_path / "back.bin").read_bytes() == b"old" * 1000
        # a tree that does not fit: the folder the copy made goes again, and nothing else there is touched
        tree = tmp_path / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "a.txt").write_text("a\n")
        (tree / "sub" / "big.bin").write_bytes(os.urandom(4 * 1024 * 1024))
        with pytest.raises(ProviderApiError) as info:
            provider.upload(opened, str(tree), f"{small}/tree")
        assert "unpack into" in info.value.message
        assert sorted(p.name for p in small.iterdir()) == ["keep.bin", "one.txt"]
        (tree / "sub" / "big.bin").write_bytes(b"small now")
        provider.upload(opened, str(tree), f"{small}/tree")
        assert (small / "tree" / "sub" / "big.bin").read_bytes() == b"small now"


def test_a_download_of_any_size_arrives_whole_in_the_callers_thread(provider: SSHProvider, opened: RemoteHandle,
                                                                    host_dir: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from deskctl.providers.ssh import files
    from deskctl.providers.ssh.desktop import _SFTP_REQUEST_OPENSSH

    request = _SFTP_REQUEST_OPENSSH
    host_dir.mkdir()  # made here (by root): the login user reads it
    sizes = [0, 1, request - 1, request, request + 1, 40 * request + 17]
    for size in sizes:
        (host_dir / f"f{size}").write_bytes(os.urandom(size))
    provider.download(opened, f"{host_dir}/f1", str(tmp_path / "warm"))  # the SFTP session opened beforehand
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for size in sizes:
        provider.download(opened, f"{host_dir}/f{size}", str(tmp_path / f"f{size}"))
        assert (tmp_path / f"f{size}").read_bytes() == (host_dir / f"f{size}").read_bytes(), size
    # the reads are pipelined by the caller's thread (paramiko's read-ahead started a thread per 16 MiB of a
    # file, which polled every 10 ms and, once it ran ahead of the writer, held the rest of the file)
    assert started == []
    # reads bigger than the host answers (an older OpenSSH answered at most 64 KiB): each short answer's rest is
    # asked for, and the file still arrives whole
    monkeypatch.setattr(files, "_sftp_request_size", lambda conn: 4 * request)
    provider.download(opened, f"{host_dir}/f{sizes[-1]}", str(tmp_path / "short"))
    assert (tmp_path / "short").read_bytes() == (host_dir / f"f{sizes[-1]}").read_bytes()
    assert not [p.name for p in tmp_path.iterdir() if "deskctl-part" in p.name]


def test_a_download_that_fails_midway_leaves_no_partial_and_the_next_one_works(
        provider: SSHProvider, opened: RemoteHandle, host_dir: Path, tmp_path: Path) -> None:
    import resource

    host_dir.mkdir()
    host_dir.chmod(0o777)  # made here (by root): the login user writes in it too
    (host_dir / "big.bin").write_bytes(os.urandom(6 * 1024 * 1024 + 3))
    here = tmp_path / "here"
    provider.download(opened, f"{host_dir}/big.bin", str(here / "warm.bin"))
    # writes here fail past 1 MiB (EFBIG), with the host's answers still arriving: the copy stops in the middle of
    # the SFTP session's stream of answers
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, hard))
    try:
        with pytest.raises(ProviderApiError) as info:
            provider.download(opened, f"{host_dir}/big.bin", str(here / "back.bin"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert "too large" in info.value.message.lower(), info.value.message
    assert sorted(p.name for p in here.iterdir()) == ["warm.bin"]
    # the session's next copies run as ever
    provider.download(opened, f"{host_dir}/big.bin", str(here / "back.bin"))
    assert (here / "back.bin").read_bytes() == (host_dir / "big.bin").read_bytes()
    local = here / "up.txt"
    local.write_text("up\n")
    provider.upload(opened, str(local), f"{host_dir}/up.txt")
    assert (host_dir / "up.txt").read_text() == "up\n"


def test_a_tree_with_links_round_trips_and_a_link_out_of_it_is_refused(provider: SSHProvider, opened: RemoteHandle,
                                                                        host_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "f.txt").write_text("f\n")
    (source / "a" / "run.sh").write_text("#!/bin/sh\n")
    (source / "a" / "run.sh").chmod(0o755)
    (source / "link").symlink_to("a/b/f.txt")
    provider.upload(opened, str(source), f"{host_dir}/tree")
    assert (host_dir / "tree" / "link").is_symlink()
    assert os.readlink(host_dir / "tree" / "link") == "a/b/f.txt"
    assert stat.S_IMODE((host_dir / "tree" / "a" / "run.sh").stat().st_mode) == 0o755
    back = tmp_path / "back"
    provider.download(opened, f"{host_dir}/tree", str(back))
    assert (back / "a" / "b" / "f.txt").read_text() == "f\n"
    assert os.readlink(back / "link") == "a/b/f.txt"
    assert stat.S_IMODE((back / "a" / "run.sh").stat().st_mode) == 0o755
    # a folder where a file is, or where the login user may not write: usage errors, nothing written
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(source), f"{host_dir}/tree/a/run.sh")
    assert info.value.code == "usage.bad_path"
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(source), f"{host_dir}/tree/a/run.sh/below")
    assert info.value.code == "usage.bad_path"
    (host_dir / "locked").mkdir()
    os.chown(host_dir / "locked", pwd.getpwnam(OTHER_USER).pw_uid, -1)
    with pytest.raises(UsageError) as info:
        provider.upload(opened, str(source), f"{host_dir}/locked/tree")
    assert info.value.code == "usage.permission_denied"
    assert list((host_dir / "locked").iterdir()) == []
    # a tree on the host with a link pointing out of it cannot plant a file outside ``local``
    (host_dir / "evil").mkdir()
    (host_dir / "evil" / "out").symlink_to("/etc/passwd")
    with pytest.raises(DeskctlError):
        provider.download(opened, f"{host_dir}/evil", str(tmp_path / "evil"))
    assert not (tmp_path / "evil" / "out").exists()


def test_files_over_a_dropped_connection_are_session_lost(sshd: SshServer, provider: SSHProvider,
                                                          opened: RemoteHandle, host_dir: Path,
                                                          tmp_path: Path) -> None:
    local = tmp_path / "x.txt"
    local.write_text("x")
    provider.upload(opened, str(local), f"{host_dir}/x.txt")
    sshd.drop_connections()
    with pytest.raises(SessionLost):
        provider.upload(opened, str(local), f"{host_dir}/x.txt")
    with pytest.raises(SessionLost):
        provider.download(opened, f"{host_dir}/x.txt", str(tmp_path / "y.txt"))


def test_a_connection_dropped_in_the_middle_of_an_upload_is_session_lost(
        sshd: SshServer, provider: SSHProvider, opened: RemoteHandle, host_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import paramiko

    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(8 * 1024 * 1024))
    provider.upload(opened, str(local), f"{host_dir}/warm.bin")
    real, sent = paramiko.Channel.send, []

    def dropping(channel: paramiko.Channel, data: bytes) -> int:
        if len(data) > 4096:  # a write request's data
            sent.append(len(data))
            if len(sent) == 3:  # the host goes away with requests in flight and this one half sent
                sshd.drop_connections()
        return real(channel, data)

    monkeypatch.setattr(paramiko.Channel, "send", dropping)
    with pytest.raises(SessionLost):
        provider.upload(opened, str(local), f"{host_dir}/big.bin")


def test_list_owned_finds_the_marker_by_label(provider: SSHProvider) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id, team="qa"))
    try:
        found = provider.list_owned({LABEL_SESSION: session_id})
        assert [h.session_id for h in found] == [session_id]
        assert found[0].labels["team"] == "qa"
        assert found[0].data["dir"] == handle.data["dir"] and found[0].data["alive"] is True
        assert provider.list_owned({LABEL_SESSION: session_id, "team": "dev"}) == []
        assert provider.is_alive(handle)
    finally:
        provider.destroy(handle)
    assert provider.list_owned({LABEL_SESSION: session_id}) == []
    assert not provider.is_alive(handle)
    provider.destroy(handle)  # idempotent


def test_handle_data_holds_no_secret(provider: SSHProvider, monkeypatch: pytest.MonkeyPatch,
                                     sshd: SshServer) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    try:
        text = json.dumps(handle.to_dict())
        cookie = Path(handle.data["dir"], "Xauthority").read_bytes()[-16:]
        assert cookie.hex() not in text and base64.b64encode(cookie).decode() not in text
        assert "PRIVATE KEY" not in text
        assert oct(Path(handle.data["dir"]).stat().st_mode & 0o777) == "0o700"
        assert oct(Path(handle.data["dir"], "Xauthority").stat().st_mode & 0o777) == "0o600"
    finally:
        provider.destroy(handle)


# -- the connection ends --------------------------------------------------------------------------------------------


def test_connection_dropped_mid_session_ends_it_and_leaves_nothing(sshd: SshServer,
                                                                   ssh_env: dict[str, str]) -> None:
    desk = deskctl.open_desktop("ssh", geometry="640x480")
    handle = desk.handle
    assert handle is not None
    try:
        desk.click(5, 5)
        assert desk.exec("sleep 300 >/dev/null 2>&1 &").exit_code == 0
        assert started_by_exec(str(handle.data["dir"]))
        assert sshd.drop_connections()
        with pytest.raises(SessionLost) as caught:
            for _ in range(3):  # the first action after the drop fails, whichever notices it first
                desk.click(6, 6)
        assert caught.value.code == "provider.session_lost"
        assert "SSH connection" in caught.value.message
        assert caught.value.details.get("cause") == "provider.unreachable"
        assert desk.state.value == "failed"
        with pytest.raises(DeskctlError):
            desk.screenshot()
        assert started_by_exec(str(handle.data["dir"])) == []
    finally:
        if desk.state.value == "ready":  # only when the test failed before the drop
            desk.close()
    assert_nothing_left(handle)


_HOLDER = r"""
import json, sys, threading
import deskctl
desk = deskctl.open_desktop("ssh", geometry="640x480", detached=sys.argv[1] == "detached")
print(json.dumps({"id": desk.id, "handle": desk.handle.to_dict()}), flush=True)
if sys.argv[1] == "detached":
    desk.release()
    sys.exit(0)
desk.exec("sleep 300 >/dev/null 2>&1 &")
print("exec", flush=True)
threading.Event().wait()
"""


def _child(mode: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(proc.communicate()[1][-2000:])
    return proc, json.loads(line)


def test_killed_client_leaves_nothing_on_the_host(ssh_env: dict[str, str]) -> None:
    proc, opened = _child("attached", ssh_env)
    handle = RemoteHandle.from_dict(opened["handle"])  # type: ignore[arg-type]
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "exec\n"
        assert processes_with(str(handle.data["dir"]) + "/Xauthority")
        assert started_by_exec(str(handle.data["dir"]))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.communicate()
    # no reaper, no destroy: the watcher saw the connection end and stopped the desktop by itself,
    # with what exec had left running
    assert_nothing_left(handle)
    assert started_by_exec(str(handle.data["dir"])) == []
    provider = SSHProvider({})
    try:
        provider.destroy(handle)  # and destroy from another process confirms it is gone
    finally:
        provider.close()


def test_detached_desktop_outlives_its_creator_and_down_reaches_it(ssh_env: dict[str, str]) -> None:
    proc, opened = _child("detached", ssh_env)
    assert proc.wait(timeout=60) == 0
    proc.communicate()
    handle = RemoteHandle.from_dict(opened["handle"])  # type: ignore[arg-type]
    assert handle.labels[LABEL_DETACHED] == "1" and handle.data["detached"] is True
    assert processes_with(str(handle.data["dir"]) + "/Xauthority"), "the desktop ended with its creator"
    desk = deskctl.attach(str(opened["id"]))
    try:
        assert desk.size == (640, 480)
        assert desk.screenshot().width == 640
        desk.click(1, 1)
        assert desk.exec("xdpyinfo | grep dimensions").stdout.split()[1] == "640x480"
    finally:
        desk.close()
    assert_nothing_left(handle)


def test_a_detached_desktop_ends_at_its_expiry_on_the_host_alone(provider: SSHProvider) -> None:
    session_id = new_id()
    expires = int(time.time()) + 4
    handle = provider.create(SPEC, session_id, {LABEL_SESSION: session_id, LABEL_DETACHED: "1",
                                                LABEL_EXPIRES: str(expires)})
    provider.close()  # no deskctl process holds it any more
    assert processes_with(str(handle.data["dir"]) + "/Xauthority")
    assert_nothing_left(handle)  # blocks until the host's timeout(1) ended it
    assert time.time() >= expires - 1


def test_detach_switches_an_attached_desktop_to_outlive_the_connection(provider: SSHProvider) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    provider.wait_ready(handle, time.monotonic() + 30)
    provider.detach(handle)
    provider.close()  # the connection ends; the desktop must not
    other = SSHProvider({})
    try:
        assert other.is_alive(handle)
        other.act(handle, Click(3, 3))
        assert other.display_size(handle) == (640, 480)
        other.destroy(handle)
    finally:
        other.close()
    assert_nothing_left(handle)


def test_a_dropped_connection_to_a_detached_desktop_is_reconnected(provider: SSHProvider, sshd: SshServer) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id, **{LABEL_DETACHED: "1"}))
    provider.close()
    user = SSHProvider({})  # another process's view, as deskctl.attach() has it
    try:
        assert user.display_size(handle) == (640, 480)
        user.act(handle, Click(1, 1))
        assert sshd.drop_connections()
        # the desktop outlived the connection: a read reconnects (once), and actions go on on the new connection
        assert user.screenshot(handle).width == 640
        user.act(handle, Click(2, 2))
        assert user.exec(handle, "echo still here").stdout == "still here\n"
        user.destroy(handle)
    finally:
        user.close()
    assert_nothing_left(handle)


def test_destroy_of_an_unreachable_host_is_cleanup_incomplete(provider: SSHProvider, sshd: SshServer) -> None:
    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id, **{LABEL_DETACHED: "1"}))
    provider.close()
    moved = RemoteHandle.from_dict({**handle.to_dict(), "data": {**handle.data, "port": 1}})
    with pytest.raises(CleanupIncomplete) as caught:
        SSHProvider({}).destroy(moved)
    assert caught.value.details["left"] == [handle.resource_id]
    other = SSHProvider({})
    try:
        other.destroy(handle)
    finally:
        other.close()
    assert_nothing_left(handle)


# -- screenshots by damage tracking ---------------------------------------------------------------------------


def _local_truth(display: object, width: int, height: int) -> bytes:
    """The whole screen straight from the X server (a local client: the host is this machine), as RGB."""
    from PIL import Image
    from Xlib import X

    raw = display.screen().root.get_image(0, 0, width, height, X.ZPixmap, 0xFFFFFFFF).data  # type: ignore[attr-defined]
    return Image.frombuffer("RGB", (width, height), raw, "raw", "BGRX", 0, 1).tobytes()


def test_incremental_screenshots_equal_full_captures_and_fetch_only_changes(provider: SSHProvider) -> None:
    import io
    import random

    from PIL import Image
    from Xlib import X

    from deskctl.providers._x11 import X11Address, connect_display, read_cookie

    session_id = new_id()
    handle = provider.create(SPEC, session_id, labels(session_id))
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        width, height = 640, 480
        local = connect_display(X11Address(f":{handle.data['display']}"),
                                read_cookie(f"{handle.data['dir']}/Xauthority"))
        try:
            screen = local.screen()
            root = screen.root
            rng = random.Random(5)
            windows = []

            def pixel(rgb: tuple[int, int, int]) -> int:
                return (rgb[0] << 16) | (rgb[1] << 8) | rgb[2]

            encoded: list[int] = []

            def check() -> int:
                """Screenshot through deskctl == the server's own full capture; returns the pixels fetched."""
                local.sync()
                before = provider._desktops[session_id].frames
                fetched = before.fetched_pixels if before else 0
                bands = before.encoder.bands_encoded if before and before.encoder else 0
                shot = provider.screenshot(handle)
                frames = provider._desktops[session_id].frames
                assert frames is not None and frames.encoder is not None, "Xvfb has DAMAGE: must be incremental"
                got = Image.open(io.BytesIO(shot.png)).convert("RGB").tobytes()
                assert got == _local_truth(local, width, height)
                encoded.append(frames.encoder.bands_encoded - bands)
                return frames.fetched_pixels - fetched

            assert check() == width * height  # the first one fetches everything
            assert check() == 0  # nothing changed: nothing crosses the wire, nothing is re-encoded
            assert encoded == [480 // 16, 0]
            for round_ in range(24):
                gc = root.create_gc(foreground=pixel((rng.randrange(256), rng.randrange(256), rng.randrange(256))))
                kind = round_ % 4
                if kind == 0:  # draw on the root window
                    root.fill_rectangle(gc, rng.randrange(600), rng.randrange(440), 30, 20)
                elif kind == 1:  # map a child window
                    win = root.create_window(rng.randrange(500), rng.randrange(380), 90, 60, 0, screen.root_depth,
                                             X.InputOutput, X.CopyFromParent,
                                             background_pixel=pixel((rng.randrange(256), 0, 255)),
                                             override_redirect=True)
                    win.map()
                    windows.append(win)
                elif kind == 2 and windows:  # move one (exposes what was under it)
                    windows[-1].configure(x=rng.randrange(500), y=rng.randrange(380))
                elif windows:  # draw into one, and unmap another
                    windows[-1].fill_rectangle(gc, 5, 5, 40, 30)
                    if len(windows) > 1:
                        windows.pop(0).unmap()
                fetched = check()
                assert 0 < fetched < width * height // 2, f"round {round_} fetched {fetched} pixels"
                assert 0 < encoded[-1] < 480 // 16 // 2, f"round {round_} re-encoded {encoded[-1]} bands"
            # a change over most of the screen fetches it whole
            root.fill_rectangle(root.create_gc(foreground=pixel((1, 2, 3))), 0, 0, width, height - 10)
            for win in windows:
                win.unmap()
            assert check() == width * height
        finally:
            local.close()
    finally:
        provider.destroy(handle)
