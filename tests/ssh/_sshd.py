"""A real OpenSSH server on a loopback port, for the ssh provider's tests, the conformance suite and the benchmark.

:class:`SshServer` runs Debian's ``/usr/sbin/sshd -D -e`` as root with its own config, host keys and
``authorized_keys`` in a private temp dir, listening on 127.0.0.1 only, and logs in as the dedicated test user
(``deskctl-ssh``, made by ``scripts/setup.d/40-ssh.sh``). It is a plain module (no pytest) so ``bench/`` can use it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

TEST_USER = "deskctl-ssh"
#: a second unprivileged user TEST_USER may run commands as (sudo -n, no password): exec(user=...)
OTHER_USER = "deskctl-ssh-other"
SSHD = "/usr/sbin/sshd"


def unavailable_reason() -> str | None:
    """Why a loopback sshd cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the ssh tests run sshd as root (they switch to the test user)"
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        return "openssh-server is not installed (run scripts/setup.d/40-ssh.sh)"
    for user in (TEST_USER, OTHER_USER):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"the test user {user} does not exist (run scripts/setup.d/40-ssh.sh)"
    return None


def keygen(path: Path, kind: str = "ed25519", passphrase: str = "") -> Path:
    """A new key pair at ``path`` / ``path.pub`` (OpenSSH format)."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", "deskctl-test", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class SshServer:
    """One sshd. ``start()`` returns when it listens; ``stop()`` kills it and every connection it serves."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="deskctl-sshd-")))
    user: str = TEST_USER
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_lines: list[str] = field(default_factory=list)

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.root / "client_ed25519"

    @property
    def target(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    @property
    def known_hosts_line(self) -> str:
        kind, blob = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}\n"

    def write_known_hosts(self, path: Path) -> Path:
        path.write_text(self.known_hosts_line)
        return path

    def authorize(self, public_key: Path) -> None:
        with open(self.root / "authorized_keys", "a") as fh:
            fh.write(public_key.read_text())

    def start(self) -> SshServer:
        os.chmod(self.root, 0o755)  # sshd reads authorized_keys as the test user
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        keygen(self.host_key)
        keygen(self.client_key)
        os.chmod(self.client_key, 0o600)
        (self.root / "authorized_keys").write_text("")
        self.authorize(self.client_key.with_suffix(".pub"))
        os.chmod(self.root / "authorized_keys", 0o644)
        config = self.root / "sshd_config"
        last_error = ""
        for _ in range(5):  # a port taken between free_port() and bind: try another
            self.port = free_port()
            config.write_text(
                f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\nPidFile none\n"
                f"AuthorizedKeysFile {self.root}/authorized_keys\nStrictModes no\nUsePAM no\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin no\n"
                f"AllowUsers {self.user}\nAllowTcpForwarding yes\nAllowStreamLocalForwarding yes\n"
                "X11Forwarding no\nMaxSessions 64\nMaxStartups 64:30:128\nLogLevel VERBOSE\n"
                "ClientAliveInterval 0\nPrintMotd no\nSubsystem sftp internal-sftp\n"
            )
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         start_new_session=True)
            listening = threading.Event()
            threading.Thread(target=self._read_log, args=(self.proc, listening), daemon=True).start()
            listening.wait(30)
            if listening.is_set() and self.proc.poll() is None:
                return self
            last_error = "\n".join(self.log_lines[-5:])
            self._kill()
        self.stop()
        raise RuntimeError(f"sshd did not start: {last_error}")

    def _read_log(self, proc: subprocess.Popen[bytes], listening: threading.Event) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.log_lines.append(line)
            if "Server listening on" in line:
                listening.set()
        listening.set()  # it exited: let start() see the failure

    def connection_pids(self) -> list[int]:
        """Pids of the sshd processes serving connections (every descendant of the listener)."""
        if self.proc is None:
            return []
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        found: list[int] = []
        todo = [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                try:
                    comm = Path(f"/proc/{child}/comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith("sshd"):
                    found.append(child)
                    todo.append(child)
        return found

    def drop_connections(self) -> list[int]:
        """SIGKILL every sshd process serving a connection: the network drops as if a cable were pulled."""
        pids = self.connection_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.drop_connections()
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self._kill()
        shutil.rmtree(self.root, ignore_errors=True)


def processes_with(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process on this machine whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(entry.name), cmdline.strip()))
    return found
