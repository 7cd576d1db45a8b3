"""Where the ssh provider connects and whether it trusts what answers: ``user@host:port`` (:class:`SshTarget`),
the OpenSSH client configuration (HostName, User, Port, IdentityFile, ProxyJump), the settings they make
(:class:`_Settings`, also rebuilt from a handle) and the known_hosts policy (read, ``@revoked``, trust on first use).
The environment variables and the provider name live here, the bottom of the package."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import getpass
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl.errors import ConfigInvalid, PreflightError, UsageError
from deskctl.providers.base import RemoteHandle
from deskctl.providers.ssh.handle_data import SshHandleData

if TYPE_CHECKING:
    from deskctl.providers.ssh.options import Options

ENV_HOST = "DESKCTL_SSH_HOST"
ENV_KEY_FILE = "DESKCTL_SSH_KEY_FILE"
ENV_KEY_PASSPHRASE = "DESKCTL_SSH_KEY_PASSPHRASE"
ENV_PRIVATE_KEY = "DESKCTL_SSH_PRIVATE_KEY"
ENV_PASSWORD = "DESKCTL_SSH_PASSWORD"
ENV_KNOWN_HOSTS = "DESKCTL_SSH_KNOWN_HOSTS"
ENV_REMOTE_DIR = "DESKCTL_SSH_REMOTE_DIR"

PROVIDER = "ssh"


# -- target and settings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshTarget:
    """``user@host:port``. Parse with :meth:`parse`."""

    user: str
    host: str
    port: int = 22

    @classmethod
    def parse(cls, text: str, *, user: str | None = None, port: int | None = None) -> SshTarget:
        who, host, parsed_port = cls.split(text)
        return cls(user=who or user or getpass.getuser(), host=host, port=_port(parsed_port or port or 22))

    @staticmethod
    def split(text: str) -> tuple[str | None, str, int | None]:
        """``user@host:port`` -> (user or None, host, port or None); a usage error when malformed."""
        raw = text.strip()
        if raw.startswith("ssh://"):
            raw = raw[len("ssh://"):].rstrip("/")
        who, _, where = raw.rpartition("@")
        if ":" in who:  # user:password@host: refused, and the password is never echoed
            from deskctl._redact import redact

            raise UsageError(f"ssh host {redact(text)!r} carries a password; deskctl authenticates with keys or "
                             "the ssh agent", code="usage.bad_host", remedy="--host user@host[:port]")
        host, parsed_port = where, None
        if where.startswith("["):
            close = where.find("]")
            if close < 0:
                raise UsageError(f"ssh host {text!r}: unclosed '['", code="usage.bad_host")
            host, rest = where[1:close], where[close + 1:]
            if rest:
                if not rest.startswith(":"):
                    raise UsageError(f"ssh host {text!r} is not of the form user@host[:port]", code="usage.bad_host")
                parsed_port = rest[1:]
        elif where.count(":") == 1:
            host, parsed_port = where.split(":")
        if not host or any(c.isspace() for c in host) or "/" in host:
            raise UsageError(f"ssh host {text!r} is not of the form user@host[:port]", code="usage.bad_host",
                             remedy="for example --host alice@lab-box:2222")
        number: int | None = None
        if parsed_port is not None:
            if not parsed_port.isdigit():
                raise UsageError(f"ssh host {text!r}: port {parsed_port!r} is not a number", code="usage.bad_host")
            number = _port(parsed_port)
        return who or None, host, number

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH writes in known_hosts for this host and port."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"


def _port(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"ssh port {value!r} is not a number", code="usage.bad_host") from None
    if not 0 < number < 65536:
        raise UsageError(f"ssh port {number} is outside 1..65535", code="usage.bad_host")
    return number


def _parse_jump(text: str, default_user: str) -> tuple[SshTarget, ...]:
    """``"bastion,alice@inner:2222"`` -> the jump hosts in order (OpenSSH's ProxyJump syntax)."""
    return tuple(SshTarget.parse(part, user=default_user) for part in text.split(",") if part.strip())


def _ssh_config_entry(raw: Any, alias: str) -> dict[str, Any]:
    """What OpenSSH's client configuration says about ``alias`` (HostName, User, Port, IdentityFile ...):
    ``raw`` is option ``ssh_config``, the file (true: ``~/.ssh/config`` when it exists; false: none)."""
    if raw is False or (isinstance(raw, str) and raw.strip().lower() in ("", "0", "false", "no", "off", "none")):
        return {}
    path = Path("~/.ssh/config" if raw is True else str(raw)).expanduser()
    if not path.is_file():
        if raw is True:
            return {}
        raise ConfigInvalid(f"ssh_config {path} does not exist", provider=PROVIDER,
                            remedy="name an OpenSSH client config file, or -o ssh_config=false")
    import paramiko

    try:
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(alias))
    except Exception as exc:  # paramiko's parser and its Match evaluation raise several kinds
        raise ConfigInvalid(f"cannot use {path} for {alias}: {type(exc).__name__}: {exc}", provider=PROVIDER,
                            remedy="fix the file, or -o ssh_config=false") from exc


@dataclass(frozen=True)
class _Settings:
    """Everything needed to connect, from provider options (and, for a handle, from ``handle.data``).
    Holds no secret: those are resolved when connecting."""

    target: SshTarget
    key_file: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    agent: bool = True
    xvfb_path: str = "Xvfb"
    remote_dir: str = ""
    connect_timeout: float = 15.0
    compression: bool = False
    #: IdentityFile entries of the ssh config for this host (tried instead of the default identities)
    identity_files: tuple[str, ...] = ()
    #: jump hosts, first to last (ProxyJump): the connection to each is made through the one before
    jump: tuple[SshTarget, ...] = ()

    @classmethod
    def from_options(cls, options: Options) -> _Settings:
        host = options.host
        if not host:
            raise UsageError(
                "the ssh provider needs a host", code="usage.missing_host", provider=PROVIDER,
                remedy=f"--host user@host[:port], or export {ENV_HOST}=user@host",
            )
        who, alias, port = SshTarget.split(host)
        entry = _ssh_config_entry(options.ssh_config, alias)
        target = SshTarget(
            user=str(who or options.user or entry.get("user") or getpass.getuser()),
            host=str(entry.get("hostname") or alias),
            port=_port(port or options.port or entry.get("port") or 22),
        )
        identity_files = tuple(str(Path(str(p)).expanduser()) for p in entry.get("identityfile", []))
        jump_text = str(options.jump or entry.get("proxyjump") or "")
        jump = _parse_jump(jump_text, target.user) if jump_text.lower() not in ("", "none") else ()
        return cls(
            target=target,
            key_file=str(Path(options.key_file).expanduser()) if options.key_file else None,
            known_hosts=str(Path(options.known_hosts).expanduser()) if options.known_hosts else None,
            accept_new_host_key=options.accept_new_host_key,
            agent=options.agent,
            xvfb_path=options.xvfb_path,
            remote_dir=options.remote_dir or "",
            connect_timeout=options.connect_timeout,
            compression=options.compression,
            identity_files=identity_files,
            jump=jump,
        )

    @classmethod
    def from_handle(cls, handle: RemoteHandle, options: Options) -> _Settings:
        data = SshHandleData.of(handle)
        if not data.host:
            return cls.from_options(options)
        given_timeout = "connect_timeout" in options.given()
        return cls(
            target=SshTarget(user=data.user, host=data.host, port=data.port),
            key_file=data.key_file or options.key_file or None,
            known_hosts=data.known_hosts,
            accept_new_host_key=False,  # the key was recorded when the desktop was made
            agent=data.agent,
            xvfb_path=data.xvfb_path or "Xvfb",
            remote_dir=data.remote_dir,
            connect_timeout=float(options.connect_timeout if given_timeout
                                  else data.connect_timeout or options.connect_timeout),
            compression=data.compression,
            identity_files=data.identity_files,
            jump=_parse_jump(data.jump, data.user),
        )

    def handle_data(self) -> SshHandleData:
        """How to reach the host again, as the handle keeps it (the desktop's own fields left at their
        defaults)."""
        return SshHandleData(
            host=self.target.host, port=self.target.port, user=self.target.user, key_file=self.key_file,
            known_hosts=self.known_hosts, agent=self.agent, xvfb_path=self.xvfb_path, remote_dir=self.remote_dir,
            compression=self.compression, identity_files=self.identity_files,
            jump=",".join(str(hop) for hop in self.jump),
        )

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts) if self.known_hosts else Path.home() / ".ssh" / "known_hosts"

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.target, self.key_file, self.known_hosts, self.agent, self.jump)

    def hop(self) -> _Settings:
        """The settings of the last jump host (reached through the ones before it), same credentials."""
        return dataclasses.replace(self, target=self.jump[-1], jump=self.jump[:-1])


def host_key_fingerprint(key: Any) -> str:
    """OpenSSH's fingerprint of a paramiko public key: ``SHA256:`` and unpadded base64."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


# -- known_hosts ----------------------------------------------------------------------------------------------


def _load_known_hosts(settings: _Settings) -> Any:
    """The known_hosts entries as paramiko HostKeys. Read line by line, because paramiko's own loader raises on
    marker lines (``@revoked``, ``@cert-authority``) and on any malformed line; like OpenSSH, those are skipped
    here (``@revoked`` is honoured separately by :func:`_revoked_in`)."""
    import paramiko
    from paramiko.hostkeys import HostKeyEntry

    keys = paramiko.HostKeys()
    for path in (Path("/etc/ssh/ssh_known_hosts"), settings.known_hosts_path):
        try:
            text = path.read_text(errors="replace") if path.is_file() else ""
        except OSError as exc:
            raise PreflightError(f"cannot read known_hosts {path}: {exc.strerror}", code="credentials.known_hosts",
                                 provider=PROVIDER) from exc
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith(("#", "@")):
                continue
            try:
                entry = HostKeyEntry.from_line(line, number)
            except Exception:  # a malformed or unsupported line: skipped, as ssh does
                continue
            if entry is None or entry.key is None:
                continue
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    return keys


def _revoked_in(settings: _Settings, key: Any) -> str | None:
    """The known_hosts file that marks ``key`` ``@revoked`` (paramiko skips marker lines), or None."""
    blob = key.get_base64()
    for path in (Path("/etc/ssh/ssh_known_hosts"), settings.known_hosts_path):
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                fields = line.split()
                if len(fields) >= 4 and fields[0] == "@revoked" and fields[3] == blob:
                    return str(path)
    return None


def _record_host_key(settings: _Settings, key: Any) -> None:
    path = settings.known_hosts_path
    line = f"{settings.target.known_hosts_name} {key.get_name()} {key.get_base64()}\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            with open(path, "rb") as existing:
                content = existing.read()
            if content and not content.endswith(b"\n"):
                line = "\n" + line
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise PreflightError(f"cannot record the host key in {path}: {exc.strerror}",
                             code="credentials.known_hosts", provider=PROVIDER) from exc

