"""One authenticated SSH connection (:class:`_Connection`, a paramiko Transport) and what runs over it: the host
key check before any credential, authentication in the documented order, command channels, ``direct-streamlocal``
channels to the remote X socket, keepalives that notice a vanished host, and jump hosts. What reads and bridges a
channel is in :mod:`.channels`."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import socket
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from deskctl.errors import (
    CredentialsInvalid,
    CredentialsMissing,
    ProviderApiError,
    ProviderUnreachable,
    SessionLost,
)
from deskctl.providers.ssh.channels import ChannelWriter, _collect, channel_reader
from deskctl.providers.ssh.target import (
    ENV_KEY_FILE,
    ENV_KEY_PASSPHRASE,
    ENV_PASSWORD,
    ENV_PRIVATE_KEY,
    PROVIDER,
    _load_known_hosts,
    _record_host_key,
    _revoked_in,
    _Settings,
    host_key_fingerprint,
)

_DEFAULT_IDENTITIES = ("id_ed25519", "id_ecdsa", "id_rsa")
#: flow-control window of the X channel: a whole 1920x1080 frame fits, so a capture streams without stalls
_X_WINDOW = 16 * 1024 * 1024
_X_PACKET = 32768
#: flow-control window and packet size of a bulk channel (SFTP, a tar stream): the host sends up to 256 KiB a
#: packet (paramiko's default, 32 KiB, is 8 times the packets, each a Python round of decrypting and queueing)
#: and 16 MiB ahead (the default 2 MiB stalls it between our window adjustments). The 64 MiB benchmark file:
#: 755 -> 550 ms up, 732 -> 614 ms down (bench/bench_files.py --targets ssh)
_BULK_WINDOW = 16 * 1024 * 1024
_BULK_PACKET = 256 * 1024
_KEEPALIVE_SECONDS = 15


# -- paramiko glue --------------------------------------------------------------------------------------------


@functools.cache
def _transport_class() -> type[Any]:
    """paramiko's Transport with ``open_streamlocal``: a ``direct-streamlocal@openssh.com`` channel (OpenSSH
    PROTOCOL section 2.4) to a unix socket on the server. paramiko has no public call for it; this mirrors its
    own ``open_channel`` with the streamlocal payload."""
    import paramiko
    from paramiko.channel import Channel
    from paramiko.common import cMSG_CHANNEL_OPEN
    from paramiko.message import Message

    class StreamLocalTransport(paramiko.Transport):  # type: ignore[misc]
        def open_streamlocal(self, path: str, *, window_size: int, max_packet_size: int, timeout: float) -> Any:
            this: Any = self  # paramiko's private members are not in its stubs
            if not this.active:
                raise paramiko.SSHException("SSH session not active")
            with this.lock:
                window_size = this._sanitize_window_size(window_size)
                max_packet_size = this._sanitize_packet_size(max_packet_size)
                chanid = this._next_channel()
                message = Message()
                message.add_byte(cMSG_CHANNEL_OPEN)
                message.add_string("direct-streamlocal@openssh.com")
                message.add_int(chanid)
                message.add_int(window_size)
                message.add_int(max_packet_size)
                message.add_string(path)
                message.add_string("")  # reserved
                message.add_int(0)  # reserved
                chan: Any = Channel(chanid)
                this._channels.put(chanid, chan)
                this.channel_events[chanid] = event = threading.Event()
                this.channels_seen[chanid] = True
                chan._set_transport(this)
                chan._set_window(window_size, max_packet_size)
            this._send_user_message(message)
            deadline = time.monotonic() + timeout
            while not event.wait(0.1):
                if not this.active:
                    raise this.get_exception() or paramiko.SSHException("Unable to open channel.")
                if time.monotonic() > deadline:
                    raise paramiko.SSHException("Timeout opening channel.")
            opened = this._channels.get(chanid)
            if opened is not None:
                return opened
            raise this.get_exception() or paramiko.SSHException("Unable to open channel.")

    return StreamLocalTransport


class _Connection:
    """One authenticated SSH connection (paramiko Transport) to one host. Thread-safe for channels."""

    def __init__(self, settings: _Settings, *, record_new_host_key: bool = True) -> None:
        self.settings = settings
        self.transport: Any = None
        self.via: _Connection | None = None  # the connection to the last jump host, if any
        self.auth_method = ""
        self._connect(record_new_host_key)

    # -- connecting -----------------------------------------------------------------------------------------
    def _connect(self, record_new_host_key: bool) -> None:
        import paramiko

        settings, target = self.settings, self.settings.target
        timeout = settings.connect_timeout
        sock: Any
        if settings.jump:
            self.via = _Connection(settings.hop(), record_new_host_key=record_new_host_key)
            try:
                sock = self.via.transport.open_channel("direct-tcpip", (target.host, target.port), ("127.0.0.1", 0),
                                                       timeout=timeout)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self.via.close()
                raise ProviderUnreachable(
                    f"jump host {settings.jump[-1].host} cannot reach {target.host} port {target.port}: {exc}",
                    provider=PROVIDER, remedy="check the jump host's AllowTcpForwarding and its network path",
                ) from exc
        else:
            try:
                sock = socket.create_connection((target.host, target.port), timeout=timeout)
            except OSError as exc:
                reason = exc.strerror or str(exc) or type(exc).__name__
                raise ProviderUnreachable(
                    f"cannot reach {target.host} port {target.port}: {reason}", provider=PROVIDER,
                    remedy="check the host name and port, that sshd runs there, and the network path",
                ) from exc
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _detect_dead_peers(sock)
        transport = _transport_class()(sock)
        self.transport = transport
        try:
            transport.use_compression(settings.compression)
            known = _load_known_hosts(settings)
            recorded = known.lookup(target.known_hosts_name)
            if recorded:
                self._prefer_key_types(transport, list(recorded.keys()))
            self._prefer_aead_ciphers(transport)
            try:
                transport.start_client(timeout=timeout)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise ProviderUnreachable(
                    f"SSH handshake with {target.host} port {target.port} failed: {exc or type(exc).__name__}",
                    provider=PROVIDER, remedy="check that an SSH server (not another service) listens there",
                ) from exc
            self._check_host_key(transport.get_remote_server_key(), recorded, record_new_host_key)
            self._authenticate(transport)
            transport.set_keepalive(_KEEPALIVE_SECONDS)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _prefer_aead_ciphers(transport: Any) -> None:
        # AES-GCM encrypts and authenticates in one pass inside the crypto library, where paramiko's default
        # (AES-CTR, then a separate HMAC) makes two: about a third less CPU per byte received, which is what bounds
        # screenshots and downloads here. OpenSSH offers it by default; other ciphers stay as fallbacks.
        options = transport.get_security_options()
        offered = list(options.ciphers)
        first = [c for c in ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com") if c in offered]
        options.ciphers = first + [c for c in offered if c not in first]

    @staticmethod
    def _prefer_key_types(transport: Any, known_types: list[str]) -> None:
        # Ask first for a key type we have on record, as OpenSSH does, so a host with several keys is not
        # reported as unknown because it offered another type.
        options = transport.get_security_options()
        offered = list(options.key_types)
        wanted: list[str] = []
        for kind in known_types:
            if kind == "ssh-rsa":
                wanted += [k for k in ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa") if k in offered]
            elif kind in offered:
                wanted.append(kind)
        if wanted:
            options.key_types = wanted + [k for k in offered if k not in wanted]

    def _check_host_key(self, key: Any, recorded: Any, record_new: bool) -> None:
        settings, target = self.settings, self.settings.target
        name, kind, fingerprint = target.known_hosts_name, key.get_name(), host_key_fingerprint(key)
        path = settings.known_hosts_path
        revoked = _revoked_in(settings, key)
        if revoked:
            raise CredentialsInvalid(
                f"the {kind} key {fingerprint} presented by {name} is marked @revoked in {revoked}; deskctl refuses "
                "to connect", code="credentials.host_key_revoked", provider=PROVIDER,
                remedy="ask the host's administrator for its current key; never remove a @revoked line to get in",
                details={"host": name, "presented": f"{kind} {fingerprint}", "known_hosts": revoked},
            )
        if recorded:
            known = recorded.get(kind)
            if known is not None and known.asbytes() == key.asbytes():
                return
            expected = ", ".join(f"{k} {host_key_fingerprint(v)}" for k, v in recorded.items())
            raise CredentialsInvalid(
                f"HOST KEY CHANGED for {name}: it presented {kind} {fingerprint}, but known_hosts ({path}) "
                f"records {expected}. Someone may be intercepting the connection, or the host was reinstalled; "
                "deskctl refuses to connect",
                code="credentials.host_key_changed", provider=PROVIDER,
                remedy=(f"confirm the new fingerprint {fingerprint} with the host's administrator (on the host: "
                        "ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then remove the old entry with "
                        f"ssh-keygen -R '{name}' -f {path} and connect again with --accept-new-host-key"),
                details={"host": name, "presented": f"{kind} {fingerprint}", "known_hosts": str(path)},
            )
        if not settings.accept_new_host_key:
            raise CredentialsInvalid(
                f"unknown host {name}: its {kind} key {fingerprint} is not in known_hosts ({path})",
                code="credentials.host_key_unknown", provider=PROVIDER,
                remedy=(f"check the fingerprint {fingerprint} with the host's administrator, then pass "
                        f"--accept-new-host-key to record it (or: ssh-keyscan -p {target.port} {target.host} "
                        f">> {path})"),
                details={"host": name, "presented": f"{kind} {fingerprint}", "known_hosts": str(path)},
            )
        if record_new:
            _record_host_key(settings, key)

    def _authenticate(self, transport: Any) -> None:
        import paramiko

        from deskctl.credentials import resolve

        settings, user = self.settings, self.settings.target.user
        tried: list[str] = []
        allowed: list[str] | None = None

        def attempt(label: str, call: Callable[[], list[str]]) -> bool:
            nonlocal allowed
            if not transport.is_active():
                return False
            tried.append(label)
            try:
                remaining = call()
            except paramiko.BadAuthenticationType as exc:
                allowed = list(exc.allowed_types)
                return False
            except paramiko.AuthenticationException:
                return False
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise ProviderUnreachable(f"SSH connection to {settings.target.host} failed while "
                                          f"authenticating: {exc}", provider=PROVIDER) from exc
            return not remaining

        def publickey_allowed() -> bool:
            return allowed is None or "publickey" in allowed

        named_key = False
        passphrase = resolve(PROVIDER, ENV_KEY_PASSPHRASE)
        if settings.key_file:
            named_key = True
            key = self._load_key_file(settings.key_file, passphrase.value if passphrase else None)
            if attempt(f"key file {settings.key_file}", lambda: transport.auth_publickey(user, key)):
                self.auth_method = "key_file"
                return
        secret_key = resolve(PROVIDER, ENV_PRIVATE_KEY)
        if secret_key is not None and publickey_allowed():
            named_key = True
            key = self._load_key_text(secret_key.value, passphrase.value if passphrase else None)
            if attempt(f"{ENV_PRIVATE_KEY} ({secret_key.source})", lambda: transport.auth_publickey(user, key)):
                self.auth_method = "private_key"
                return
        if settings.agent and os.environ.get("SSH_AUTH_SOCK") and publickey_allowed():
            try:
                agent_keys = paramiko.Agent().get_keys()
            except (paramiko.SSHException, OSError):
                agent_keys = ()
            for index, agent_key in enumerate(agent_keys):
                if not publickey_allowed():
                    break
                if attempt(f"agent key {index + 1}", functools.partial(transport.auth_publickey, user, agent_key)):
                    self.auth_method = "agent"
                    return
        if not named_key and publickey_allowed():
            identities = ([Path(p) for p in settings.identity_files] if settings.identity_files
                          else [Path.home() / ".ssh" / name for name in _DEFAULT_IDENTITIES])
            for path in identities:
                if not path.is_file():
                    continue
                try:
                    secret: Any = passphrase.value.encode() if passphrase else None
                    key = paramiko.PKey.from_path(str(path), secret)
                except (paramiko.SSHException, OSError, ValueError, TypeError):
                    continue  # an encrypted default key without its passphrase is skipped, as ssh does in batch
                if attempt(f"key file {path}", functools.partial(transport.auth_publickey, user, key)):
                    self.auth_method = "default_key"
                    return
        password = resolve(PROVIDER, ENV_PASSWORD)
        if (password is not None and (allowed is None or "password" in allowed)
                and attempt(f"password ({password.source})", lambda: transport.auth_password(user, password.value))):
            self.auth_method = "password"
            return
        where = f"{user}@{settings.target.host} port {settings.target.port}"
        if not tried:
            raise CredentialsMissing(
                f"no SSH credentials to log in as {where}: no key file, no {ENV_PRIVATE_KEY}, no agent key, no "
                f"default identity (~/.ssh/id_*), no {ENV_PASSWORD}", provider=PROVIDER,
                remedy=(f"name a key with -o key_file=PATH (or export {ENV_KEY_FILE}), start ssh-agent and ssh-add a "
                        f"key, or run deskctl login ssh --var {ENV_PASSWORD}"),
            )
        accepted = f"; the server accepts: {', '.join(allowed)}" if allowed is not None else ""
        raise CredentialsInvalid(
            f"{where} refused every credential offered (tried: {', '.join(tried)}){accepted}", provider=PROVIDER,
            remedy=f"authorise the key on the host (ssh-copy-id -p {settings.target.port} {user}@"
                   f"{settings.target.host}) or name the right one with -o key_file=PATH",
        )

    @staticmethod
    def _load_key_file(path: str, passphrase: str | None) -> Any:
        import paramiko

        if not Path(path).is_file():
            raise CredentialsMissing(f"SSH key file {path} does not exist", provider=PROVIDER,
                                     remedy=f"name an existing private key with -o key_file=PATH or {ENV_KEY_FILE}")
        try:
            # cryptography wants the passphrase as bytes
            secret: Any = passphrase.encode() if passphrase else None
            return paramiko.PKey.from_path(path, secret)
        except (paramiko.PasswordRequiredException, TypeError) as exc:
            # cryptography raises TypeError for an encrypted OpenSSH-format key without a passphrase
            if isinstance(exc, TypeError) and "password" not in str(exc).lower():
                raise CredentialsInvalid(f"cannot load SSH key file {path}: {exc}", provider=PROVIDER) from exc
            raise CredentialsMissing(f"SSH key file {path} is encrypted and no passphrase was given",
                                     provider=PROVIDER, remedy=f"export {ENV_KEY_PASSPHRASE}=... or run deskctl "
                                     f"login ssh --var {ENV_KEY_PASSPHRASE}") from exc
        except (paramiko.SSHException, ValueError, OSError) as exc:
            raise CredentialsInvalid(f"cannot load SSH key file {path}: {exc}", provider=PROVIDER,
                                     remedy=f"check the key and {ENV_KEY_PASSPHRASE}") from exc

    @staticmethod
    def _load_key_text(text: str, passphrase: str | None) -> Any:
        import paramiko

        last: Exception | None = None
        for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
            try:
                return cls.from_private_key(io.StringIO(text), password=passphrase)
            except (paramiko.PasswordRequiredException, TypeError) as exc:
                raise CredentialsMissing(f"{ENV_PRIVATE_KEY} is encrypted and no passphrase was given",
                                         provider=PROVIDER, remedy=f"set {ENV_KEY_PASSPHRASE}") from exc
            except (paramiko.SSHException, ValueError) as exc:
                last = exc
        raise CredentialsInvalid(f"{ENV_PRIVATE_KEY} is not a private key paramiko can read "
                                 f"({type(last).__name__})", provider=PROVIDER)

    def record_host_key(self) -> None:
        """Record the host's key (accepted by ``accept_new_host_key``) if known_hosts does not have it yet."""
        settings = self.settings
        if not settings.accept_new_host_key:
            return
        if self.via is not None:
            self.via.record_host_key()
        if not _load_known_hosts(settings).lookup(settings.target.known_hosts_name):
            _record_host_key(settings, self.transport.get_remote_server_key())

    # -- using ----------------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.transport is not None and bool(self.transport.is_active())

    def gone_within(self, wait: float) -> bool:
        """Whether the connection is gone, given up to ``wait`` seconds for its transport to notice: a send that
        fails on a broken socket (EOFError) can come before the transport's own reader sees the end."""
        transport = self.transport
        if transport is None or not transport.is_active():
            return True
        transport.join(wait)  # its thread ends with the connection
        return not transport.is_active()

    def lost(self, doing: str) -> SessionLost:
        return SessionLost(
            f"the SSH connection to {self.settings.target.host} was lost while we tried to {doing} "
            "(provider unreachable); a desktop attached to this connection ended with it", provider=PROVIDER,
            details={"cause": "provider.unreachable"},
        )

    def session(self, command: str, *, bulk: bool = False) -> Any:
        """A session channel running ``command`` (not waited for); ``bulk``: with the window and packet size of a
        bulk transfer."""
        import paramiko

        try:
            chan = self.transport.open_session(timeout=self.settings.connect_timeout,
                                               **({"window_size": _BULK_WINDOW, "max_packet_size": _BULK_PACKET}
                                                  if bulk else {}))
            chan.exec_command(command)
        except EOFError as exc:  # paramiko's packetizer: the socket under the connection is dead
            self.close()
            raise self.lost("run a command") from exc
        except (paramiko.SSHException, OSError) as exc:
            if not self.alive:
                raise self.lost("run a command") from exc
            raise ProviderApiError(f"{self.settings.target.host} refused a command channel: {exc}",
                                   provider=PROVIDER) from exc
        return chan

    def run(self, command: str, *, stdin: bytes = b"", timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        """Run ``command``; (exit status, stdout, stderr). Raises TimeoutError when it outlives ``timeout``."""
        import paramiko

        chan = self.session(command)
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            return _collect(chan, timeout, self)
        except TimeoutError:
            raise
        except EOFError as exc:
            self.close()
            raise self.lost("run a command") from exc
        except (paramiko.SSHException, OSError) as exc:
            if not self.alive:
                raise self.lost("run a command") from exc
            raise ProviderApiError(f"a command on {self.settings.target.host} failed: {exc}",
                                   provider=PROVIDER) from exc
        finally:
            chan.close()

    def call(self, command: str, *, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        """:meth:`run` for deskctl's own scripts: overrunning ``timeout`` is a :class:`ProviderApiError`."""
        try:
            return self.run(command, timeout=timeout)
        except TimeoutError as exc:
            raise ProviderApiError(f"a deskctl script on {self.settings.target.host} did not finish in {timeout:g}s",
                                   provider=PROVIDER) from exc

    def stream(self, command: str, *, send: Callable[[BinaryIO], None] | None = None,
               receive: Callable[[BinaryIO], None] | None = None) -> tuple[int, bytes, BaseException | None]:
        """Run ``command`` with its stdin written by ``send`` or its stdout read by ``receive`` as it flows (a tar
        stream: nothing held whole in memory); stderr is read apart. (exit status, stderr, what ``send`` or
        ``receive`` raised: the command's own failure usually explains it, so the caller judges both)."""
        import paramiko

        chan = self.session(command, bulk=True)
        err_chunks: list[bytes] = []

        def read_stderr() -> None:
            with contextlib.suppress(Exception):
                while data := chan.recv_stderr(65536):
                    err_chunks.append(data)

        reader = threading.Thread(target=read_stderr, name="deskctl-ssh-stderr", daemon=True)
        reader.start()
        failure: BaseException | None = None
        try:
            try:
                if send is not None:
                    stdin = ChannelWriter(chan)
                    send(stdin)  # type: ignore[arg-type]
                    stdin.flush()
                chan.shutdown_write()
                if receive is not None:
                    with channel_reader(chan) as stdout:
                        receive(stdout)
            except (OSError, EOFError, paramiko.SSHException, tarfile.TarError) as exc:
                failure = exc
                if receive is not None:
                    chan.close()  # the command may be blocked writing what we no longer read: end it
            # the command's exit status (or, failing that, the channel's end: the connection died)
            ended = chan.status_event.wait(self.settings.connect_timeout if failure else None)
            status = chan.exit_status if ended else -1
            reader.join(self.settings.connect_timeout)
            if status == -1 and not self.alive:
                raise self.lost("copy files") from failure
            return int(status), b"".join(err_chunks), failure
        finally:
            chan.close()

    def streamlocal(self, path: str) -> Any:
        import paramiko

        try:
            return self.transport.open_streamlocal(path, window_size=_X_WINDOW, max_packet_size=_X_PACKET,
                                                   timeout=self.settings.connect_timeout)
        except EOFError as exc:
            self.close()
            raise self.lost("reach the display") from exc
        except (paramiko.SSHException, OSError) as exc:
            if not self.alive:
                raise self.lost("reach the display") from exc
            raise ProviderUnreachable(
                f"{self.settings.target.host} refused to forward {path}: {exc}", provider=PROVIDER,
                remedy="the host's sshd must allow unix-socket forwarding (AllowStreamLocalForwarding yes, "
                       "DisableForwarding no)",
            ) from exc

    def close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()
        if self.via is not None:
            self.via.close()


def _detect_dead_peers(sock: socket.socket) -> None:
    """A host that vanishes without closing the connection (cable, VPN, suspended VM) must end the session in
    seconds, not after minutes of TCP retransmission: data unacknowledged for 30 s drops the connection, and
    TCP keepalives (plus paramiko's own, every 15 s) make sure there is data to acknowledge. Linux options,
    set where the platform has them."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 15), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", 30000)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)
