"""Provider ``ssh``: a desktop on any Linux host you can reach over SSH (paramiko, imported only when used).

Target: ``provider_options["host"]`` (``--host user@host[:port]``, or ``DESKCTL_SSH_HOST``); ``[v6addr]:port``
works too. The user defaults to the local user name, the port to 22. ``host`` may be an alias of the OpenSSH
client configuration (``~/.ssh/config`` or ``provider_options["ssh_config"]``; false ignores it): its HostName,
User, Port, IdentityFile and ProxyJump apply unless the target names them; the handle keeps what they resolved
to. Jump hosts (``provider_options["jump"]``, OpenSSH ``-J`` syntax) are passed through by ``direct-tcpip``.

Host keys (checked *before* any credential is sent):

* the key the host presents must be in ``known_hosts`` (``provider_options["known_hosts"]``, else
  ``DESKCTL_SSH_KNOWN_HOSTS``, else ``~/.ssh/known_hosts``; ``/etc/ssh/ssh_known_hosts`` is also read).
  Names are written and looked up the way OpenSSH does (``host`` on port 22, ``[host]:port`` otherwise;
  hashed entries are understood);
* an unknown host is refused (``credentials.host_key_unknown``) unless ``accept_new_host_key`` is set
  (``--accept-new-host-key``); then its key is appended to the known_hosts file named above (trust on first
  use, like OpenSSH's ``StrictHostKeyChecking=accept-new``). Preflight never writes the file;
* a key that differs from the recorded one (or a host that now offers only key types other than the recorded
  ones) is always refused (``credentials.host_key_changed``) with both fingerprints and the known_hosts line;
  no option overrides it; a key marked ``@revoked`` is refused too (``credentials.host_key_revoked``).

Authentication sources, tried in this order until one is accepted: the key file
(``provider_options["key_file"]`` or ``DESKCTL_SSH_KEY_FILE``; its passphrase from ``DESKCTL_SSH_KEY_PASSPHRASE``),
a private key held as a secret (``DESKCTL_SSH_PRIVATE_KEY``, the key text), the SSH agent (``SSH_AUTH_SOCK``;
``provider_options["agent"] = False`` turns it off), the ssh config's IdentityFiles or else the default
identities ``~/.ssh/id_ed25519``, ``id_ecdsa`` and ``id_rsa`` (only when no key was named), and a password
(``DESKCTL_SSH_PASSWORD``). Secrets come from the environment, else the OS keyring
(``deskctl login ssh --var DESKCTL_SSH_PASSWORD``), through :func:`deskctl.credentials.resolve`; they are
registered for redaction and never enter ``handle.data``, the ledger or a message. Provider options never
carry secrets (they are stored in the ledger with the spec).

On the host, per desktop, in ``<remote_dir>/<session id>/`` (default ``~/.cache/deskctl/ssh``, mode 0700):
``Xauthority`` (the MIT cookie, made on the client and sent over the channel, never on a command line),
``meta.json`` (the deskctl labels: the marker :meth:`SSHProvider.list_owned` finds), ``state`` (display and pids),
``mode``, ``lock`` and ``xvfb.log``. ``Xvfb -displayfd`` picks a free display itself (race-free) and says so when
it accepts connections: that line is readiness. TCP stays off; the cookie guards the unix socket.

Who owns the remote Xvfb:

* attached session: a small ``sh`` watcher started on the session's exec channel. It reads that channel's
  stdin; when the SSH connection ends for any reason (close, crash, SIGKILL of the client, dropped network),
  sshd closes the pipe, the watcher kills Xvfb and removes the directory. Nothing stays on the host;
* detached session (``deskctl.detached`` label, ``deskctl up``): the same watcher, told not to read the
  channel, so it outlives the connection; Xvfb runs under ``timeout(1)`` set to the ``deskctl.expires`` label,
  which ends it at its expiry. ``deskctl down`` (any process) reconnects with ``handle.data`` and kills the
  processes whose command line carries the session directory; :meth:`SSHProvider.detach` switches an attached
  watcher to this mode on the fly.

What ``exec`` starts carries ``DESKCTL_SSH_DESKTOP=<session dir>`` in its environment and ends with the desktop
(destroy and the watcher end every process so marked; those run as another user, ``exec(user=...)`` through
``sudo -n``, are listed in ``users`` and signalled as that user). ``exec(background=True)`` returns at once.
Every process of a desktop holds ``lock`` (``flock``) until it exits, so destroy *waits* for the last one to go,
then confirms nothing with the session's markers is left (else ``cleanup.incomplete``).

Fast path: one SSH connection per session. The X11 driver (:mod:`deskctl.providers._x11`) talks X11 to the
remote Xvfb's unix socket through a ``direct-streamlocal@openssh.com`` channel (OpenSSH's unix-socket
forwarding) on that connection, bridged to a local socketpair; each action is one X round trip, never a new
ssh command. Screenshots fetch only what the X DAMAGE extension reports changed (:class:`_FrameCache`).
``exec`` opens a session channel on the same connection (exit code, stdout and stderr apart). Files too: one file
over SFTP (pipelined, streamed, replaced by one rename), a folder as one tar stream on a command channel.

Errors: a host that does not answer is ``provider.unreachable``; wrong or missing credentials are
``credentials.invalid`` / ``credentials.missing``; a connection that drops while a desktop is open is
``provider.session_lost`` with ``details["cause"] = "provider.unreachable"`` (an attached desktop is gone with
it, by design; one this process does not own is reached again on a new connection by the next call); a host
without Xvfb is ``ssh.xvfb_missing`` (exit 3). No paramiko exception leaves this module.

Provider options: ``host``, ``port``, ``user``, ``ssh_config``, ``jump``, ``key_file``, ``known_hosts``,
``accept_new_host_key``, ``agent`` (bool), ``xvfb_path`` (default ``Xvfb`` from the remote PATH), ``remote_dir`` (also
``DESKCTL_SSH_REMOTE_DIR``; relative to the remote home directory), ``connect_timeout``
(seconds, default 15), ``compression`` (bool, SSH zlib; default False), ``incremental_capture`` (bool,
default True), ``window_manager`` (bool, also ``spec.window_manager``), ``window_manager_command`` (default
``openbox``). A start URL is refused in preflight (``compat.start_url``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import posixpath
import re
import shlex
import socket
import stat
import struct
import tarfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from deskctl.errors import (
    CleanupIncomplete,
    DeskctlError,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_OWNER,
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    ExecResult,
    RawFrame,
    RemoteHandle,
    Screenshot,
)
from deskctl.providers.ssh.connection import _bridge, _Connection, _lines
from deskctl.providers.ssh.frames import _FrameCache
from deskctl.providers.ssh.scripts import (
    _DESTROY_BY_ID_SCRIPT,
    _DESTROY_SCRIPT,
    _LIST_SCRIPT,
    _NOT_A_FOLDER,
    _OWNER_SCRIPT,
    _PROBE_SCRIPT,
    _STATE_SCRIPT,
    _UNPACK_SCRIPT,
    _sh,
)
from deskctl.providers.ssh.target import (
    ENV_HOST,
    ENV_KEY_FILE,
    ENV_KEY_PASSPHRASE,
    ENV_KNOWN_HOSTS,
    ENV_PASSWORD,
    ENV_PRIVATE_KEY,
    PROVIDER,
    SshTarget,
    _bool,
    _load_known_hosts,
    _Settings,
    host_key_fingerprint,
)

if TYPE_CHECKING:
    from deskctl.checks import CheckResult
    from deskctl.providers._x11 import X11Driver
    from deskctl.providers._x11provider import DisplayDriver
    from deskctl.spec import DesktopSpec, Geometry

__all__ = ["SSHProvider", "SshTarget", "host_key_fingerprint"]


def _default_geometry() -> Geometry:
    from deskctl.spec import Geometry

    return Geometry(width=1024, height=768)
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_EXEC_GRACE = 10.0
#: bytes per SFTP read or write request: OpenSSH's sftp-server takes messages up to 256 KiB, 8 times paramiko's
#: 32 KiB default (the minimum every server must take, used for any other server): 8 times fewer requests and
#: answers, each a Python round of paramiko's machinery
_SFTP_REQUEST_OPENSSH = 255 * 1024
_SFTP_REQUEST_ANY = 32768
#: SFTP reads in flight while downloading a file: far more than fit the SSH window (2 MiB), so the host always has
#: one to answer (8 in flight measured 5 times slower); memory stays bounded by the window, since each answer is
#: written out as it arrives
_SFTP_READ_AHEAD = 32

T = TypeVar("T")


def _home_relative(remote: str) -> str:
    """A path on the host as SFTP and a command in the home directory both read it: ``~`` and ``~/x`` become
    relative to the home directory (where both start); anything else is as given."""
    if remote == "~":
        return "."
    if remote.startswith("~/"):
        return remote[2:] or "."
    return remote


def _sftp_request_size(conn: _Connection) -> int:
    version = str(getattr(conn.transport, "remote_version", "") or "")
    return _SFTP_REQUEST_OPENSSH if "OpenSSH" in version else _SFTP_REQUEST_ANY


def _pack(source: Path, into: BinaryIO) -> None:
    from deskctl.providers._files import pack_dir

    pack_dir(source, into)


def _xauthority_bytes(cookie: bytes) -> bytes:
    """One Xauthority entry: FamilyWild, any display number, MIT-MAGIC-COOKIE-1 (the format libXau reads)."""
    def counted(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    return struct.pack(">H", 0xFFFF) + counted(b"") + counted(b"") + counted(b"MIT-MAGIC-COOKIE-1") + counted(cookie)


def _cookie_from_xauthority(raw: bytes) -> bytes | None:
    offset = 0
    try:
        while offset < len(raw):
            offset += 2
            fields: list[bytes] = []
            for _ in range(4):
                (length,) = struct.unpack_from(">H", raw, offset)
                offset += 2
                fields.append(raw[offset:offset + length])
                offset += length
            if fields[2] == b"MIT-MAGIC-COOKIE-1":
                return fields[3]
    except struct.error:
        return None
    return None


def _printf_escaped(data: bytes) -> str:
    return "".join(f"\\{byte:03o}" for byte in data)


# -- one desktop as seen from this process --------------------------------------------------------------------


@dataclass
class _Desktop:
    conn: _Connection
    display: int
    dir: str
    cookie: bytes
    owner: Any = None  # the watcher's channel (attached desktops made by this process)
    frames: _FrameCache | None = None
    frames_tried: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: the SFTP session for uploads and downloads (a channel on ``conn``), opened on first use, one user at a time
    sftp: Any = None
    sftp_lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self, *, keep_owner: bool = False) -> None:
        if self.sftp is not None:
            with contextlib.suppress(Exception):
                self.sftp.close()
            self.sftp = None
        if self.frames is not None:
            self.frames.close()
            self.frames = None
        self.frames_tried = False
        if self.owner is not None and not keep_owner:
            with contextlib.suppress(Exception):
                self.owner.close()
            self.owner = None


class SSHProvider(X11Provider):
    """Desktops on a Linux host over SSH. ``handle.data``: ``host``, ``port``, ``user``, ``key_file``,
    ``known_hosts``, ``agent``, ``xvfb_path``, ``remote_dir``, ``dir`` (the session directory on the host),
    ``display`` (int), ``xvfb_pid``, ``watcher_pid``, ``detached``, ``geometry``. No secret: the cookie stays in
    the host's 0600 file and is read over SSH by a process that reattaches."""

    name = PROVIDER

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        if options.get("host"):
            SshTarget.split(str(options["host"]))

    option_names = frozenset({"host", "port", "user", "ssh_config", "jump", "key_file", "known_hosts",
                              "accept_new_host_key", "agent", "xvfb_path", "remote_dir", "connect_timeout",
                              "compression", "incremental_capture", "window_manager", "window_manager_command"})
    capabilities = Capabilities(
        platforms=frozenset({Platform.UBUNTU}),
        settable_geometry=True,
        min_size=(64, 64),
        max_size=(8192, 8192),
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=False,
        isolation="host",
        start_url=False,
        local=False,
        billing="external",
        cursor_position=True,
        clipboard=True,
        windows=True,
    )
    # none required (a key file, the agent or a default identity may do); secret: the names with KEY or PASS
    credentials = CredentialSet(
        variables=(ENV_HOST, ENV_KEY_FILE, ENV_KNOWN_HOSTS, ENV_KEY_PASSPHRASE, ENV_PRIVATE_KEY, ENV_PASSWORD),
        source="deskctl.providers.ssh",
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._lock = threading.RLock()
        self._desktops: dict[str, _Desktop] = {}
        self._spare: _Connection | None = None  # the preflight's connection, handed to the next create
        # a provider dropped without close() must not keep its connections (and their threads) alive
        self._connections: list[_Connection] = []
        weakref.finalize(self, _close_connections, self._connections)
        # one connection per host for list_owned, is_alive and destroy of desktops this process did not open
        self._controls: dict[tuple[Any, ...], _Connection] = {}

    def _track(self, conn: _Connection) -> _Connection:
        with self._lock:
            self._connections[:] = [c for c in self._connections if c.alive]
            self._connections.append(conn)
        return conn

    # -- connections ------------------------------------------------------------------------------------------
    def _settings(self) -> _Settings:
        return _Settings.from_options(self.options)

    def _connect(self, settings: _Settings, *, record_new_host_key: bool = True) -> _Connection:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            if spare.alive and spare.settings.key == settings.key:
                if record_new_host_key:
                    spare.record_host_key()  # preflight never writes known_hosts; the desktop's create does
                return spare
            spare.close()
        return self._track(_Connection(settings, record_new_host_key=record_new_host_key))

    def _control(self, settings: _Settings) -> _Connection:
        with self._lock:
            conn = self._controls.get(settings.key)
            if conn is not None and conn.alive:
                return conn
        conn = self._track(_Connection(settings, record_new_host_key=False))
        with self._lock:
            self._controls[settings.key] = conn
        return conn

    # -- preflight --------------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        from deskctl.checks import CheckRecorder

        # platform and geometry are checked by the preflight runner from ``capabilities``
        checks = CheckRecorder(PROVIDER)
        try:
            settings = self._settings()
        except UsageError as err:
            checks.add_error(err, "ssh.no_target")
            return checks.results
        checks.start()
        try:
            conn = self._track(_Connection(settings, record_new_host_key=False))
        except DeskctlError as err:
            checks.add_error(err)
            return checks.results
        unknown = not _load_known_hosts(settings).lookup(settings.target.known_hosts_name)
        if unknown:
            checks.add("warn", "credentials.host_key_unknown",
                       f"{settings.target.known_hosts_name} is not in known_hosts yet; --accept-new-host-key will "
                       "record it when the desktop is made")
        checks.add("pass", "ssh.connect",
                   f"logged in to {settings.target} ({conn.auth_method.replace('_', ' ')})")
        checks.start()
        try:
            status, out, _err = conn.call(_sh(_PROBE_SCRIPT, settings.xvfb_path, self._window_manager(spec)),
                                         timeout=settings.connect_timeout)
        except DeskctlError as err:
            conn.close()
            checks.add_error(err)
            return checks.results
        facts: dict[str, str] = {}
        for line in out.decode(errors="replace").splitlines():
            word, _, rest = line.partition(" ")
            facts[word] = rest if word not in facts else facts[word] + " " + rest
        host = settings.target.host
        if status != 0 or "os" not in facts:
            checks.add("fail", "ssh.shell", f"{host}: the probe did not run under /bin/sh (exit {status})",
                       "the host needs a POSIX /bin/sh")
        elif facts["os"] != "Linux":
            checks.add("fail", "compat.platform", f"{host} runs {facts['os']}, not Linux")
        if "wm-missing" in facts:
            checks.add("fail", "ssh.window_manager", f"a window manager was asked for but {host} has no "
                       f"{facts['wm-missing']}", "on the host: apt-get install openbox")
        elif "wm" in facts:
            checks.add("pass", "ssh.window_manager", f"{host} has a window manager at {facts['wm']}")
        if spec.start_url:
            checks.add("fail", "compat.start_url", "the ssh provider does not open a start URL",
                       "start the browser yourself: desk.exec(\"firefox URL >/dev/null 2>&1 &\"), or use the xvfb or "
                       "docker provider")
        if "xvfb-missing" in facts:
            checks.add("fail", "ssh.xvfb_missing", f"{host} has no {settings.xvfb_path} (searched the login PATH)",
                       "on the host: apt-get install xvfb (or dnf install xorg-x11-server-Xvfb), or set the "
                       "xvfb_path provider option")
        elif "xvfb" in facts:
            checks.add("pass", "ssh.xvfb", f"{host} has Xvfb at {facts['xvfb']}")
        missing = facts.get("tool-missing", "").split()
        hard = [t for t in missing if t in ("mkfifo", "grep", "sed", "od")]
        if hard:
            checks.add("fail", "ssh.tools", f"{host} lacks {', '.join(hard)}", "install coreutils, grep and sed")
        soft = [t for t in missing if t not in hard]
        if soft:
            checks.add("warn", "ssh.tools", f"{host} lacks {', '.join(soft)}: "
                       + ("no expiry backstop for detached desktops; " if "timeout" in soft else "")
                       + ("destroy polls instead of waiting on a lock; " if "flock" in soft else "")
                       + ("folders cannot be copied (upload/download of a directory)" if "tar" in soft else ""),
                       "install coreutils, util-linux and tar on the host")
        socket_dir = facts.get("socket-dir", "")
        in_use = facts.get("displays-in-use", "?")
        if socket_dir in ("ok", "creatable"):
            checks.add("pass", "ssh.displays", f"{host}: {in_use} X displays in use; Xvfb -displayfd takes a free one")
        else:
            checks.add("fail", "ssh.displays", f"{host}: /tmp/.X11-unix is {socket_dir or 'unknown'}: Xvfb cannot "
                       "listen", "on the host: mkdir -p /tmp/.X11-unix && chmod 1777 /tmp/.X11-unix")
        with self._lock:
            if self._spare is not None:
                self._spare.close()
            self._spare = conn
        return checks.results

    # -- lifecycle --------------------------------------------------------------------------------------------
    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        if not _SESSION_ID.match(session_id):
            raise UsageError(f"session id {session_id!r} is not a plain name", code="usage.bad_session_id")
        settings = self._settings()
        geometry = spec.geometry or _default_geometry()
        detached = labels.get(LABEL_DETACHED) == "1"
        now = time.time()
        expires = _int(labels.get(LABEL_EXPIRES))
        lifetime = max(1, expires - int(now)) if expires else 0
        conn = self._connect(settings)
        try:
            cookie = _new_cookie()
            meta = {
                "session_id": session_id, "labels": dict(labels), "created": _int(labels.get(LABEL_CREATED)) or now,
                "expires": expires or None, "owner": labels.get(LABEL_OWNER), "geometry": str(geometry),
                "detached": detached, "made_by": "deskctl",
            }
            stdin = f"{_printf_escaped(_xauthority_bytes(cookie))}\n{json.dumps(meta, sort_keys=True)}\n".encode()
            command = _sh(_OWNER_SCRIPT, settings.remote_dir, session_id,
                          f"{geometry.width}x{geometry.height}x{geometry.depth}", settings.xvfb_path, str(lifetime),
                          "detached" if detached else "attached", self._window_manager(spec),
                          name=f"deskctl-ssh:{session_id}")
            owner = conn.session(command)
            try:
                owner.sendall(stdin)
                ready = self._await_ready(owner, settings, time.monotonic() + settings.connect_timeout + 30)
            except BaseException:
                with contextlib.suppress(Exception):
                    owner.close()
                self._cleanup_failed_create(conn, settings, session_id)
                raise
            display, xvfb_pid, watcher_pid, remote_path = ready
            if detached:
                owner.close()  # the watcher no longer reads the channel
                owner = None
        except BaseException:
            conn.close()
            raise
        data = settings.to_data() | {
            "dir": remote_path, "display": display, "xvfb_pid": xvfb_pid, "watcher_pid": watcher_pid,
            "detached": detached, "geometry": str(geometry), "window_manager": bool(self._window_manager(spec)),
        }
        handle = RemoteHandle(provider=PROVIDER, session_id=session_id,
                              resource_id=f"ssh://{settings.target}{remote_path}", labels=dict(labels), data=data)
        with self._lock:
            self._desktops[session_id] = _Desktop(conn=conn, display=display, dir=remote_path, cookie=cookie,
                                                  owner=owner)
        return handle

    def _await_ready(self, owner: Any, settings: _Settings, deadline: float) -> tuple[int, int, int, str]:
        import paramiko

        host = settings.target.host
        logs: list[str] = []
        try:
            for line in _lines(owner, deadline):
                word, _, rest = line.partition(" ")
                if word == "ready":
                    display, xvfb_pid, watcher_pid, remote_path = rest.split(" ", 3)
                    return int(display), int(xvfb_pid), int(watcher_pid), remote_path
                if word == "log":
                    logs.append(rest)
                elif word == "error":
                    self._raise_start_error(rest, logs, settings)
        except TimeoutError as exc:
            raise ReadinessTimeout(f"Xvfb on {host} did not start in time", provider=PROVIDER) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ProviderUnreachable(f"lost {host} while Xvfb started: {exc}", provider=PROVIDER) from exc
        raise ProviderApiError(f"the desktop watcher on {host} ended before Xvfb was ready "
                               f"(exit {owner.exit_status if owner.exit_status_ready() else 'unknown'})",
                               provider=PROVIDER, remedy="the host needs a POSIX /bin/sh")

    def _window_manager(self, spec: DesktopSpec) -> str:
        """The window manager command to start ("" for none): openbox, when the spec or options ask for one."""
        wanted = spec.window_manager or _bool(self.options.get("window_manager", False))
        return str(self.options.get("window_manager_command") or "openbox") if wanted else ""

    @staticmethod
    def _raise_start_error(rest: str, logs: list[str], settings: _Settings) -> None:
        host = settings.target.host
        if rest.startswith("wm-missing"):
            raise PreflightError(
                f"a window manager was asked for but {host} has no {rest.split(' ', 1)[-1]}",
                code="ssh.window_manager", provider=PROVIDER, remedy="on the host: apt-get install openbox",
            )
        if rest.startswith("xvfb-missing"):
            raise PreflightError(
                f"{host} has no {settings.xvfb_path} on the login PATH", code="ssh.xvfb_missing",
                provider=PROVIDER, remedy="on the host: apt-get install xvfb, or set the xvfb_path provider option",
            )
        tail = "; ".join(logs[-5:])
        raise ProviderApiError(f"Xvfb did not start on {host}: {rest}" + (f" ({tail})" if tail else ""),
                               provider=PROVIDER)

    def _cleanup_failed_create(self, conn: _Connection, settings: _Settings, session_id: str) -> None:
        # The directory is named after the session: whatever the half-started watcher made is found by name.
        if not conn.alive:
            return
        with contextlib.suppress(DeskctlError):
            conn.call(_sh(_DESTROY_BY_ID_SCRIPT, settings.remote_dir, session_id), timeout=30)

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        from deskctl.providers import _x11

        desk = self._desktop(handle)
        address = self._address(desk)
        try:
            _x11.wait_for_display(address, desk.cookie, deadline)
            if handle.data.get("window_manager"):
                self._await_window_manager(desk, address, deadline)
        except DeskctlError as err:
            err.provider = PROVIDER
            raise
        self._driver(handle)

    @staticmethod
    def _await_window_manager(desk: _Desktop, address: Any, deadline: float) -> None:
        """Until an EWMH window manager manages the screen (it sets _NET_SUPPORTING_WM_CHECK on the root):
        PropertyNotify events on the root wake us, no polling."""
        from deskctl.providers._x11 import connect_display

        display = connect_display(address, desk.cookie, timeout=max(0.1, deadline - time.monotonic()))
        try:
            SSHProvider._x_errors(desk, "wait for the window manager",
                                  functools.partial(SSHProvider._wm_loop, desk, display, deadline))
        finally:
            display.close()

    @staticmethod
    def _wm_loop(desk: _Desktop, display: Any, deadline: float) -> None:
        from Xlib import X

        from deskctl._fds import wait_readable

        root = display.screen().root
        root.change_attributes(event_mask=X.PropertyChangeMask)
        atom = display.intern_atom("_NET_SUPPORTING_WM_CHECK")
        while root.get_full_property(atom, X.AnyPropertyType) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadinessTimeout(f"the window manager on :{desk.display} did not start in time",
                                       provider=PROVIDER, remedy=f"see {desk.dir}/wm.log on the host")
            if not display.pending_events():
                wait_readable([display.fileno()], remaining)
            while display.pending_events():
                display.next_event()

    def destroy(self, handle: RemoteHandle) -> None:
        self._drop_driver(handle.session_id)
        with self._lock:
            desk = self._desktops.pop(handle.session_id, None)
        remote_path = str(handle.data.get("dir") or "")
        if not remote_path:
            return  # create never got as far as a directory
        conn: _Connection | None = None
        own_conn = False
        try:
            if desk is not None:
                owner = desk.owner
                desk.close(keep_owner=True)
                if owner is not None:  # EOF on the watcher's stdin: it stops Xvfb itself
                    with contextlib.suppress(Exception):
                        owner.shutdown_write()
                own_conn = desk.conn.alive
                conn = desk.conn if own_conn else None
            if conn is None:
                try:
                    conn = self._control(_Settings.from_handle(handle, self.options))
                except DeskctlError as err:
                    raise CleanupIncomplete(
                        f"cannot confirm that {handle.session_id} is gone from {handle.data.get('host')}: "
                        f"{err.message}", provider=PROVIDER, remedy=f"deskctl reap once the host is reachable "
                        f"(on the host: rm -rf {remote_path} and kill its Xvfb)",
                        details={"left": [handle.resource_id], "cause": err.code},
                    ) from err
            try:
                status, out, err_out = conn.call(_sh(_DESTROY_SCRIPT, remote_path), timeout=60)
            except DeskctlError as err:
                raise CleanupIncomplete(f"destroy of {handle.session_id} on {handle.data.get('host')} could not "
                                        f"be confirmed: {err.message}", provider=PROVIDER,
                                        details={"left": [handle.resource_id], "cause": err.code}) from err
            text = out.decode(errors="replace").strip()
            if status != 0 or not text.endswith("gone"):
                raise CleanupIncomplete(
                    f"{handle.session_id} on {handle.data.get('host')} is not confirmed gone: "
                    f"{text or err_out.decode(errors='replace').strip()}", provider=PROVIDER,
                    remedy=f"on the host: kill the Xvfb whose command line holds {remote_path}; then deskctl reap",
                    details={"left": [handle.resource_id]},
                )
        finally:
            if desk is not None:
                desk.close()
                desk.conn.close()
            if conn is not None and own_conn:
                conn.close()

    def detach(self, handle: RemoteHandle) -> None:
        """Let the desktop outlive this process: an attached watcher is told to stop reading the connection
        (it keeps the expiry backstop). Nothing to do for desktops made detached."""
        with self._lock:
            desk = self._desktops.get(handle.session_id)
        if desk is None or desk.owner is None:
            return
        owner = desk.owner
        try:
            owner.sendall(b"detach\n")
            for line in _lines(owner, time.monotonic() + desk.conn.settings.connect_timeout):
                if line == "ack detach":
                    break
            else:
                raise SessionLost(f"the watcher of {handle.session_id} ended before it detached", provider=PROVIDER)
        except TimeoutError as exc:
            raise ProviderApiError(f"the watcher of {handle.session_id} did not acknowledge detach",
                                   provider=PROVIDER) from exc
        except OSError as exc:
            raise desk.conn.lost("detach") from exc
        desk.owner = None
        owner.close()
        handle.data["detached"] = True

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        try:
            settings = self._settings()
        except UsageError:
            return []  # no host configured: nothing this provider could own
        status, out, err = self._control(settings).call(_sh(_LIST_SCRIPT, settings.remote_dir), timeout=60)
        if status != 0:
            raise ProviderApiError(f"listing desktops on {settings.target.host} failed: "
                                   f"{err.decode(errors='replace').strip()}", provider=PROVIDER)
        handles: list[RemoteHandle] = []
        for block in _blocks(out.decode(errors="replace")):
            try:
                meta = json.loads(block.get("meta", "{}"))
            except ValueError:
                continue
            labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
            session_id = str(meta.get("session_id") or labels.get(LABEL_SESSION) or "")
            if not session_id or labels.get(LABEL_SESSION, session_id) != session_id:
                continue
            if selector and any(labels.get(k) != v for k, v in selector.items()):
                continue
            remote_path = block["dir"]
            data = settings.to_data() | {
                "dir": remote_path, "display": _int(block.get("display")), "xvfb_pid": _int(block.get("xvfb_pid")),
                "watcher_pid": _int(block.get("watcher_pid")), "detached": block.get("mode") == "detached",
                "geometry": meta.get("geometry"), "alive": block.get("alive") == "yes",
            }
            handles.append(RemoteHandle(provider=PROVIDER, session_id=session_id,
                                        resource_id=f"ssh://{settings.target}{remote_path}", labels=labels,
                                        data=data, created_at=float(meta.get("created") or time.time())))
        return handles

    def is_alive(self, handle: RemoteHandle) -> bool:
        with self._lock:
            desk = self._desktops.get(handle.session_id)
        try:
            if desk is not None and desk.owner is not None and not desk.conn.alive:
                return False  # a desktop whose watcher this process owned ended with its connection
            if desk is not None and desk.conn.alive:
                conn = desk.conn
            else:
                conn = self._control(_Settings.from_handle(handle, self.options))
            state = self._remote_state(handle, conn)
        except DeskctlError:
            return False
        return state.get("alive") == "yes"

    # -- while open -------------------------------------------------------------------------------------------
    def _conn_for(self, handle: RemoteHandle) -> _Connection:
        with self._lock:
            desk = self._desktops.get(handle.session_id)
        if desk is not None:
            if desk.conn.alive:
                return desk.conn
            raise desk.conn.lost("reach the desktop")
        return self._connect(_Settings.from_handle(handle, self.options), record_new_host_key=False)

    def _forget(self, handle: RemoteHandle, desk: _Desktop) -> None:
        with self._lock:
            if self._desktops.get(handle.session_id) is desk:
                del self._desktops[handle.session_id]
        self._drop_driver(handle.session_id)
        desk.close()
        desk.conn.close()

    def _idempotent(self, handle: RemoteHandle, fn: Callable[[], T]) -> T:
        """Run a read-only ``fn``; when the connection drops under it and the desktop is one this process does not
        own, run it once more on a new connection (an action or a command is never run twice)."""
        try:
            return fn()
        except SessionLost:
            with self._lock:
                desk = self._desktops.get(handle.session_id)
            if desk is None or desk.owner is not None or desk.conn.alive:
                raise
            return fn()

    def _remote_state(self, handle: RemoteHandle, conn: _Connection) -> dict[str, str]:
        remote_path = str(handle.data.get("dir") or "")
        status, out, _err = conn.call(_sh(_STATE_SCRIPT, remote_path), timeout=conn.settings.connect_timeout)
        text = out.decode(errors="replace")
        if status != 0 or text.strip() == "missing":
            return {"alive": "no"}
        return next(iter(_blocks("dir " + remote_path + "\n" + text + "end\n")), {"alive": "no"})

    def _desktop(self, handle: RemoteHandle) -> _Desktop:
        """This process's view of the desktop: the one create made, or one rebuilt from ``handle.data``
        (another process: ``deskctl do``, ``attach``) by reading the host's state and cookie over SSH."""
        with self._lock:
            desk = self._desktops.get(handle.session_id)
            if desk is not None and (desk.conn.alive or desk.owner is not None):
                return desk
        if desk is not None:
            # The connection dropped, but this process never owned the desktop (detached, or another process's
            # watcher holds it): it outlived the connection, so reach it again on a new one.
            self._forget(handle, desk)
        conn = self._conn_for(handle)
        try:
            state = self._remote_state(handle, conn)
            cookie = _cookie_from_xauthority(bytes.fromhex(state.get("auth", "")))
            if state.get("alive") != "yes" or cookie is None:
                raise SessionLost(f"desktop {handle.session_id} is no longer running on {conn.settings.target.host}",
                                  provider=PROVIDER, remedy="deskctl reap removes what is left of it")
            from deskctl._redact import register_secret

            register_secret(cookie.hex())
            desk = _Desktop(conn=conn, display=int(state.get("display", "0")), dir=str(handle.data["dir"]),
                            cookie=cookie)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            existing = self._desktops.setdefault(handle.session_id, desk)
        if existing is not desk:
            conn.close()
        return existing

    def _address(self, desk: _Desktop) -> Any:
        from deskctl.providers._x11 import X11Address

        socket_path = f"/tmp/.X11-unix/X{desk.display}"
        conn = desk.conn

        @dataclass(frozen=True)
        class ChannelAddress(X11Address):
            def describe(self) -> str:
                return f"{conn.settings.target}{socket_path}"

            def connect_socket(self, timeout: float) -> socket.socket:
                try:
                    chan = conn.streamlocal(socket_path)
                except DeskctlError as err:
                    raise OSError(err.message) from err
                return _bridge(chan, f"deskctl-ssh-x{desk.display}")

        return ChannelAddress(display=f":{desk.display}")

    def _driver(self, handle: RemoteHandle) -> DisplayDriver:
        # _desktop first: a desktop this process does not own whose connection dropped is reached again on a new
        # connection (forgetting the old one and its driver) before a cached driver is trusted
        self._desktop(handle)
        return super()._driver(handle)

    def _open_driver(self, handle: RemoteHandle) -> X11Driver:
        from deskctl.providers._x11 import X11Driver, connect_display

        desk = self._desktop(handle)
        if not desk.conn.alive:
            raise desk.conn.lost("reach the display")
        address = self._address(desk)
        try:
            display = connect_display(address, desk.cookie, timeout=desk.conn.settings.connect_timeout)
        except DeskctlError as err:
            err.provider = PROVIDER
            if not desk.conn.alive:
                raise desk.conn.lost("reach the display") from err
            raise
        try:
            return X11Driver(display, address, provider=PROVIDER, use_shm=False)
        except BaseException:
            with contextlib.suppress(Exception):
                display.close()
            raise

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        desk = self._desktops.get(handle.session_id)
        if desk is not None and not desk.conn.alive:
            return desk.conn.lost(doing)
        return super()._lost(handle, doing, cause)

    def _read(self, handle: RemoteHandle, doing: str, work: Callable[[DisplayDriver], T]) -> T:
        return self._idempotent(handle, lambda: self._call(handle, doing, work))

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        """PNG of the screen. With the DAMAGE extension (Xvfb has it) only what changed since the last
        screenshot crosses SSH (:class:`_FrameCache`); otherwise the shared driver captures the whole screen."""
        return self._idempotent(handle, lambda: self._screenshot(handle))

    def raw_frame(self, handle: RemoteHandle) -> RawFrame:
        """The screen's pixels; like :meth:`screenshot`, only what DAMAGE says changed crosses SSH."""
        return self._idempotent(handle, lambda: self._captured(
            handle, lambda d: d.raw_frame(), lambda frames: frames.raw_frame))

    def _screenshot(self, handle: RemoteHandle) -> Screenshot:
        return self._captured(handle, lambda d: d.screenshot(), lambda frames: frames.screenshot)

    def _captured(self, handle: RemoteHandle, by_driver: Callable[[DisplayDriver], T],
                  by_frames: Callable[[_FrameCache], Callable[[], T]]) -> T:
        frames = self._frames(handle) if _bool(self.options.get("incremental_capture", True)) else None
        if frames is None:
            return self._call(handle, "capture the screen", by_driver)
        desk = self._desktop(handle)
        try:
            return self._x_errors(desk, "capture the screen", by_frames(frames))
        except SessionLost:
            with desk.lock:
                if desk.frames is frames:
                    desk.frames = None
                    desk.frames_tried = False
            frames.close()
            raise

    def _frames(self, handle: RemoteHandle) -> _FrameCache | None:
        desk = self._desktop(handle)
        with desk.lock:
            if desk.frames is not None or desk.frames_tried:
                return desk.frames
            desk.frames_tried = True
            from deskctl.providers._x11 import connect_display

            if not desk.conn.alive:
                raise desk.conn.lost("capture the screen")
            try:
                display = connect_display(self._address(desk), desk.cookie,
                                          timeout=desk.conn.settings.connect_timeout)
            except DeskctlError as err:
                desk.frames_tried = False
                if not desk.conn.alive:
                    raise desk.conn.lost("capture the screen") from err
                raise
            try:
                if _FrameCache.supported(display):
                    desk.frames = _FrameCache(display)
            except Exception:  # no usable DAMAGE (or an unusual depth): the driver's full capture serves
                desk.frames = None
            if desk.frames is None:
                with contextlib.suppress(Exception):
                    display.close()
            return desk.frames

    @staticmethod
    def _x_errors(desk: _Desktop, doing: str, fn: Callable[[], T]) -> T:
        import Xlib.error

        try:
            return fn()
        except Xlib.error.ConnectionClosedError as exc:
            if not desk.conn.alive:
                raise desk.conn.lost(doing) from exc
            raise SessionLost(f"X display :{desk.display} closed the connection while we tried to {doing}",
                              provider=PROVIDER) from exc
        except OSError as exc:
            if not desk.conn.alive:
                raise desk.conn.lost(doing) from exc
            raise SessionLost(f"lost X display :{desk.display} while we tried to {doing}: {exc}",
                              provider=PROVIDER) from exc
        except Xlib.error.XError as exc:
            raise ProviderApiError(f"X display :{desk.display} refused to {doing}: {type(exc).__name__}",
                                   provider=PROVIDER) from exc

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Run ``command`` with ``sh -c`` on the host over the session's connection, in ``cwd`` (default: the
        home directory) with DISPLAY and XAUTHORITY of the desktop and ``env`` added, as ``user`` (``sudo -n``).
        On timeout the command's process group is ended by ``timeout(1)`` on the host and the exit code is 124.
        ``background``: started in a session of its own with its output to /dev/null, so the channel closes at
        once; the result carries its ``pid``, and it still ends with the desktop (its marker)."""
        from deskctl.providers._guest import background_pid, check_exec_options, posix_line

        clean = check_exec_options(env, user, PROVIDER)
        desk = self._desktop(handle)
        auth = f"{desk.dir}/Xauthority"
        # DESKCTL_SSH_DESKTOP marks everything the command starts: destroy (or the watcher) ends it all
        inner = (f"DISPLAY=:{desk.display} XAUTHORITY={shlex.quote(auth)} DESKCTL_SSH_DESKTOP={shlex.quote(desk.dir)};"
                 " export DISPLAY XAUTHORITY DESKCTL_SSH_DESKTOP; cd; ")
        if user:
            # sudo resets the environment: the marker goes in explicitly, and the user is listed so that destroy
            # ends that user's marked processes as that user (others_kill)
            clean = {"DESKCTL_SSH_DESKTOP": desk.dir, **clean}
            users, quoted = shlex.quote(f"{desk.dir}/users"), shlex.quote(user)
            inner += f"grep -qxF -- {quoted} {users} 2>/dev/null || printf '%s\\n' {quoted} >> {users}; "
        line = posix_line(command, cwd=cwd, env=clean, user=user, background=background)
        seconds = max(1, int(timeout + 0.999))
        inner += (f"if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 {seconds} /bin/sh -c "
                  f"{shlex.quote(line)}; else exec /bin/sh -c {shlex.quote(line)}; fi")
        try:
            status, out, err = desk.conn.run(_sh(inner), timeout=timeout + _EXEC_GRACE)
        except TimeoutError:
            return ExecResult(124, "", f"deskctl: command timed out after {timeout:g}s\n")
        stderr = err.decode(errors="replace")
        if status == 124:
            stderr += f"deskctl: command timed out after {timeout:g}s\n"
        result = ExecResult(status, out.decode(errors="replace"), stderr)
        if background and status == 0:
            result = dataclasses.replace(result, pid=background_pid(result))
        return result

    # -- files: SFTP for one file, a tar stream for a tree, both on the session's connection -------------------
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        """Make ``remote`` a copy of ``local``. A file goes over SFTP (pipelined writes, streamed from disk) to a
        temporary name beside ``remote``, gets the local file's mode, and replaces ``remote`` in one rename
        (``posix-rename@openssh.com``): a reader never sees half a file. A directory goes as one tar stream
        into ``tar -x`` on the host (no staged archive on either side). Missing parents are made. A relative
        ``remote`` (or ``~/...``) is in the login user's home directory."""
        from deskctl.providers._files import no_such_file

        source = Path(local)
        if not source.exists():
            raise no_such_file(local, "here", PROVIDER)
        path = _home_relative(remote)
        desk = self._desktop(handle)
        if source.is_dir():
            self._tree_call(desk, _sh(_UNPACK_SCRIPT, path), f"unpack into {remote}",
                            send=functools.partial(_pack, source))
            return
        with self._sftp(desk, f"copy {local} to {remote}") as sftp:
            self._sftp_makedirs(sftp, posixpath.dirname(path) or ".", remote)
            try:
                kind = sftp.stat(path).st_mode
            except FileNotFoundError:
                kind = None
            if kind is not None and stat.S_ISDIR(kind):
                raise UsageError(f"{remote} is a directory on the desktop; name the file to write",
                                 code="usage.bad_path", provider=PROVIDER)
            name = f".{posixpath.basename(path)}.deskctl-{uuid.uuid4().hex[:8]}"
            partial = posixpath.join(posixpath.dirname(path), name)
            request = _sftp_request_size(desk.conn)
            try:
                with source.open("rb") as reader, sftp.open(partial, "wb") as writer:
                    writer.MAX_REQUEST_SIZE = request
                    writer.set_pipelined(True)  # writes are not waited for one by one; close collects the acks
                    while chunk := reader.read(request):
                        writer.write(chunk)
                    # permission bits only: a setuid or sticky bit is not the guest user's to set (as _files)
                    writer.chmod(source.stat().st_mode & 0o777)
                try:
                    sftp.posix_rename(partial, path)
                except OSError as exc:
                    if exc.errno is not None or "unsupported" not in str(exc).lower():
                        raise
                    # a server without the posix-rename extension: replace in two steps
                    with contextlib.suppress(FileNotFoundError):
                        sftp.remove(path)
                    sftp.rename(partial, path)
                partial = ""
            finally:
                if partial:
                    with contextlib.suppress(Exception):
                        sftp.remove(partial)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        """Make ``local`` a copy of ``remote``: a file over SFTP (prefetched reads) into a partial file renamed
        into place, a directory as one ``tar -c`` stream unpacked here as it arrives (no absolute paths, no
        ``..``, no links out of ``local``). ``usage.no_such_file`` when ``remote`` does not exist."""
        from deskctl.providers._files import extract_tar, no_such_file

        target = Path(local)
        path = _home_relative(remote)
        desk = self._desktop(handle)
        with self._sftp(desk, f"copy {remote} to {local}") as sftp:
            try:
                mode = sftp.stat(path).st_mode
            except FileNotFoundError:
                raise no_such_file(remote, "on the desktop", PROVIDER) from None
            if not stat.S_ISDIR(mode or 0):
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.deskctl-part")
                try:
                    with partial.open("wb") as writer, sftp.open(path, "rb") as reader:
                        reader.MAX_REQUEST_SIZE = request = _sftp_request_size(desk.conn)
                        # a bounded read-ahead: several reads in flight, never the whole file in memory
                        reader.prefetch(reader.stat().st_size, _SFTP_READ_AHEAD)
                        while chunk := reader.read(request):
                            writer.write(chunk)
                    os.replace(partial, target)
                finally:
                    partial.unlink(missing_ok=True)
                return
        self._tree_call(desk, _sh('LC_ALL=C; export LC_ALL; exec tar -cf - -C "$1" .', path), f"pack {remote}",
                        receive=functools.partial(extract_tar, dest=target))

    @contextlib.contextmanager
    def _sftp(self, desk: _Desktop, doing: str) -> Iterator[Any]:
        """The desktop's SFTP session (opened once, on the session's connection), for one transfer at a time;
        SFTP and OS errors become deskctl errors."""
        import paramiko

        with desk.sftp_lock:
            try:
                if desk.sftp is None:
                    if not desk.conn.alive:
                        raise desk.conn.lost(doing)
                    try:
                        desk.sftp = paramiko.SFTPClient.from_transport(desk.conn.transport)
                    except (paramiko.SSHException, OSError, EOFError) as exc:
                        if not desk.conn.alive:
                            raise desk.conn.lost(doing) from exc
                        raise ProviderApiError(
                            f"{desk.conn.settings.target.host} refused an SFTP session: {exc}", provider=PROVIDER,
                            remedy="the host's sshd needs its sftp subsystem (Subsystem sftp internal-sftp)",
                        ) from exc
                yield desk.sftp
            except (paramiko.SSHException, EOFError) as exc:
                broken, desk.sftp = desk.sftp, None  # the next transfer opens a new SFTP session
                with contextlib.suppress(Exception):
                    broken.close()
                if not desk.conn.alive:
                    raise desk.conn.lost(doing) from exc
                raise ProviderApiError(f"cannot {doing}: {exc}", provider=PROVIDER) from exc
            except PermissionError as exc:
                raise UsageError(f"cannot {doing}: permission denied ({exc.filename or exc})",
                                 code="usage.permission_denied", provider=PROVIDER) from exc
            except OSError as exc:
                if not desk.conn.alive:
                    desk.sftp = None
                    raise desk.conn.lost(doing) from exc
                raise ProviderApiError(f"cannot {doing}: {exc.strerror or exc}", provider=PROVIDER) from exc

    @staticmethod
    def _sftp_makedirs(sftp: Any, path: str, remote: str) -> None:
        """``mkdir -p`` over SFTP (a directory made meanwhile by someone else is fine)."""
        try:
            mode = sftp.stat(path).st_mode
        except FileNotFoundError:
            parent = posixpath.dirname(path.rstrip("/"))
            if parent and parent != path:
                SSHProvider._sftp_makedirs(sftp, parent, remote)
            try:
                sftp.mkdir(path)
            except OSError:
                if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                    raise
            return
        if not stat.S_ISDIR(mode or 0):
            raise UsageError(f"cannot copy to {remote}: {path} is not a directory on the desktop",
                             code="usage.bad_path", provider=PROVIDER)

    @staticmethod
    def _tree_call(desk: _Desktop, command: str, doing: str, *, send: Callable[[BinaryIO], None] | None = None,
                   receive: Callable[[BinaryIO], None] | None = None) -> None:
        status, err, failure = desk.conn.stream(command, send=send, receive=receive)
        if isinstance(failure, tarfile.TarError):  # what the host sent is refused here (a link out of the tree...)
            raise ProviderApiError(f"cannot {doing}: {failure}", provider=PROVIDER) from failure
        if status != 0:
            detail = err.decode(errors="replace").strip()[-400:]
            if status == 127:
                detail = f"the host has no tar ({detail})"
            elif "Permission denied" in detail:
                raise UsageError(f"cannot {doing}: {detail}", code="usage.permission_denied",
                                 provider=PROVIDER) from failure
            elif status == _NOT_A_FOLDER or "Not a directory" in detail:
                raise UsageError(f"cannot {doing}: {detail}", code="usage.bad_path", provider=PROVIDER) from failure
            raise ProviderApiError(f"cannot {doing} on {desk.conn.settings.target.host} (exit {status}): {detail}",
                                   provider=PROVIDER) from failure
        if failure is not None:
            if isinstance(failure, PermissionError):
                raise UsageError(f"cannot {doing}: permission denied ({failure.filename or failure})",
                                 code="usage.permission_denied", provider=PROVIDER) from failure
            raise ProviderApiError(f"cannot {doing}: {failure}", provider=PROVIDER) from failure

    # -- harness actions: clipboard, launch and open_url through exec (GuestActions), window titles over X -------
    def _guest_dialect(self, handle: RemoteHandle) -> str:
        return "posix"

    def keepalive(self, handle: RemoteHandle) -> None:
        """One X round trip over the connection: proves the connection, sshd and Xvfb are all still there."""
        self._idempotent(handle, lambda: self._call(handle, "reach the display", lambda d: d.ping()))

    def close(self) -> None:
        """Close every connection. An attached desktop made by this provider ends with its connection (its
        watcher sees EOF): call :meth:`destroy` first for a confirmed end, or :meth:`detach` to keep it."""
        super().close()
        with self._lock:
            desktops, self._desktops = list(self._desktops.values()), {}
            spare, self._spare = self._spare, None
        for desk in desktops:
            desk.close()
            desk.conn.close()
        if spare is not None:
            spare.close()
        _close_connections(self._connections)


def _close_connections(connections: list[_Connection]) -> None:
    for conn in list(connections):
        conn.close()
    connections.clear()


def _new_cookie() -> bytes:
    from deskctl._redact import register_secret
    from deskctl.providers._x11 import new_cookie

    cookie = new_cookie()
    register_secret(cookie.hex())
    return cookie


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _blocks(text: str) -> list[dict[str, str]]:
    """``dir``..``end`` blocks of ``key value`` lines (``state k=v`` lines become ``k``)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "dir":
            current = {"dir": rest}
        elif current is None:
            continue
        elif word == "end":
            blocks.append(current)
            current = None
        elif word == "state":
            key, _, value = rest.partition("=")
            current[key] = value
        else:
            current[word] = rest
    return blocks
