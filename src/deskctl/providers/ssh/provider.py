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

import base64
import contextlib
import dataclasses
import functools
import getpass
import hashlib
import io
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
    ConfigInvalid,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._png import BandedPng
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

if TYPE_CHECKING:
    from deskctl.checks import CheckResult
    from deskctl.providers._x11 import X11Driver
    from deskctl.providers._x11provider import DisplayDriver
    from deskctl.spec import DesktopSpec, Geometry

__all__ = ["SSHProvider", "SshTarget", "host_key_fingerprint"]

ENV_HOST = "DESKCTL_SSH_HOST"
ENV_KEY_FILE = "DESKCTL_SSH_KEY_FILE"
ENV_KEY_PASSPHRASE = "DESKCTL_SSH_KEY_PASSPHRASE"
ENV_PRIVATE_KEY = "DESKCTL_SSH_PRIVATE_KEY"
ENV_PASSWORD = "DESKCTL_SSH_PASSWORD"
ENV_KNOWN_HOSTS = "DESKCTL_SSH_KNOWN_HOSTS"
ENV_REMOTE_DIR = "DESKCTL_SSH_REMOTE_DIR"

PROVIDER = "ssh"


def _default_geometry() -> Geometry:
    from deskctl.spec import Geometry

    return Geometry(width=1024, height=768)
_DEFAULT_IDENTITIES = ("id_ed25519", "id_ecdsa", "id_rsa")
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: flow-control window of the X channel: a whole 1920x1080 frame fits, so a capture streams without stalls
_X_WINDOW = 16 * 1024 * 1024
_X_PACKET = 32768
_KEEPALIVE_SECONDS = 15
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

# -- the scripts run on the host (POSIX sh; arguments always passed as quoted positional parameters) ----------

#: the pids of processes a desktop's exec started (their environment carries the desktop's directory);
#: others_kill signals those started as other users (exec(user=...): listed in $1/users, reached by sudo -n as
#: each of them, since only that user may read their environment)
_MARKED = r"""
marked() {
  grep -lzxF -- "DESKCTL_SSH_DESKTOP=$1" /proc/[0-9]*/environ 2>/dev/null | sed -n 's,^/proc/\([0-9]*\)/environ$,\1,p'
}
others_kill() {
  [ -f "$1/users" ] || return 0
  while IFS= read -r u; do
    sudo -n -u "$u" /bin/sh -c 'grep -lzxF -- "DESKCTL_SSH_DESKTOP=$1" /proc/[0-9]*/environ 2>/dev/null |
      sed -n "s,^/proc/\([0-9]*\)/environ\$,\1,p" | xargs -r kill -"$2" 2>/dev/null' sh "$1" "$2" \
      </dev/null >/dev/null 2>&1
  done < "$1/users"
}
"""

#: $1 base dir ("" = default), $2 session id, $3 WxHxD, $4 Xvfb, $5 lifetime seconds (0 = none), $6 mode,
#: $7 window manager command ("" = none).
#: stdin: line 1 the Xauthority bytes as printf octal escapes, line 2 meta.json; then (attached) the control
#: stream: EOF = the connection ended = stop; "detach" = outlive the connection.
_OWNER_SCRIPT = _MARKED + r"""
set -u
trap '' PIPE HUP
base=${1:-$HOME/.cache/deskctl/ssh}; sid=$2; geom=$3; xvfb=$4; ttl=$5; mode=$6; wm=${7:-}
umask 077
fail() { echo "error $*"; exit 1; }
command -v "$xvfb" >/dev/null 2>&1 || fail "xvfb-missing $xvfb"
[ -z "$wm" ] || command -v "$wm" >/dev/null 2>&1 || fail "wm-missing $wm"
command -v mkfifo >/dev/null 2>&1 || fail "tool-missing mkfifo"
mkdir -p "$base" || fail "cannot create $base"
dir=$(cd "$base" && pwd -P)/$sid || fail "cannot enter $base"
mkdir "$dir" || fail "cannot create $dir"
bail() { rm -rf "$dir"; fail "$@"; }
IFS= read -r auth || bail "no cookie on stdin"
printf "$auth" > "$dir/Xauthority" || bail "cannot write $dir/Xauthority"
IFS= read -r meta || bail "no meta on stdin"
printf '%s\n' "$meta" > "$dir/meta.json"
echo "$mode" > "$dir/mode"
mkfifo "$dir/displayfd" || bail "cannot make a fifo in $dir"
if command -v flock >/dev/null 2>&1; then exec 9>"$dir/lock"; flock -n 9 || bail "lock busy"; fi
if [ "$ttl" -gt 0 ] && command -v timeout >/dev/null 2>&1; then
  set -- timeout -k 5 "$ttl" "$xvfb"
else
  set -- "$xvfb"
fi
"$@" -displayfd 3 -screen 0 "$geom" -auth "$dir/Xauthority" -nolisten tcp -noreset \
  3>"$dir/displayfd" </dev/null >"$dir/xvfb.log" 2>&1 &
xpid=$!
IFS= read -r display < "$dir/displayfd" || display=
rm -f "$dir/displayfd"
case $display in
  ''|*[!0-9]*)
    wait "$xpid"; st=$?
    sed -n '1,20s/^/log /p' "$dir/xvfb.log"
    bail "xvfb-failed $st";;
esac
wpid=
if [ -n "$wm" ]; then
  DISPLAY=":$display" XAUTHORITY="$dir/Xauthority" "$wm" </dev/null >"$dir/wm.log" 2>&1 &
  wpid=$!
fi
printf 'display=%s\nxvfb_pid=%s\nwatcher_pid=%s\nwm_pid=%s\n' "$display" "$xpid" "$$" "$wpid" > "$dir/state"
echo "ready $display $xpid $$ $dir"
rpid=
if [ "$mode" = detached ]; then
  exec </dev/null >>"$dir/watcher.log" 2>&1
else
  exec 4<&0
  (
    while IFS= read -r line; do
      case $line in detach) echo detached > "$dir/mode"; echo "ack detach"; exit 0;; esac
    done
    kill -TERM "$xpid" 2>/dev/null
  ) <&4 9>&- &
  rpid=$!
fi
trap 'kill -TERM "$xpid" 2>/dev/null' TERM INT
while :; do wait "$xpid"; st=$?; kill -0 "$xpid" 2>/dev/null || break; done
[ -n "$rpid" ] && kill "$rpid" 2>/dev/null
[ -n "$wpid" ] && kill "$wpid" 2>/dev/null && wait "$wpid"
# what exec started for this desktop (marked in its environment) ends with it
others_kill "$dir" TERM
pids=$(marked "$dir")
if [ -n "$pids" ]; then
  kill -TERM $pids 2>/dev/null
  n=0; while [ $n -lt 20 ] && [ -n "$(marked "$dir")" ]; do sleep 0.1; n=$((n+1)); done
  pids=$(marked "$dir"); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
fi
others_kill "$dir" KILL
rm -rf "$dir"
echo "exited $st"
"""

#: prints the pids whose command line holds "$1/Xauthority" (Xvfb and its timeout(1)); grep's own argv holds
#: the pattern "...Xauthorit[y]", which does not match itself
_OURS = _MARKED + r"""
ours() {
  pat=$(printf '%s' "$1/Xauthorit" | sed 's/[][\.*^$]/\\&/g')'[y]'
  grep -la -- "$pat" /proc/[0-9]*/cmdline 2>/dev/null | sed -n 's,^/proc/\([0-9]*\)/cmdline$,\1,p'
}
everything() { ours "$1"; marked "$1"; }
"""

_DESTROY_BODY = r"""
others_kill "$dir" TERM
pids=$(everything "$dir")
[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
if command -v flock >/dev/null 2>&1 && [ -e "$dir/lock" ]; then
  flock -w 10 "$dir/lock" true 2>/dev/null
fi
n=0; while [ -n "$(everything "$dir")" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
pids=$(everything "$dir")
if [ -n "$pids" ]; then
  kill -KILL $pids 2>/dev/null
  n=0; while [ -n "$(everything "$dir")" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
fi
others_kill "$dir" KILL
rm -rf "$dir"
left=$(everything "$dir" | tr '\n' ' ')
if [ -n "$left" ] || [ -e "$dir" ]; then echo "left $left"; else echo gone; fi
"""

#: $1 session dir. Kills the desktop's processes, waits for the last holder of the lock, confirms.
_DESTROY_SCRIPT = _OURS + 'set -u\ndir=$1\n' + _DESTROY_BODY

#: $1 base dir ("" = default), $2 session id: the same, for a create that failed before it knew the directory.
_DESTROY_BY_ID_SCRIPT = _OURS + r"""
set -u
base=${1:-$HOME/.cache/deskctl/ssh}
[ -d "$base" ] || { echo gone; exit 0; }
dir=$(cd "$base" && pwd -P)/$2
""" + _DESTROY_BODY

#: $1 base dir ("" = default). One block per desktop directory.
_LIST_SCRIPT = _OURS + r"""
base=${1:-$HOME/.cache/deskctl/ssh}
[ -d "$base" ] || exit 0
base=$(cd "$base" && pwd -P)
for d in "$base"/*; do
  [ -f "$d/meta.json" ] || continue
  echo "dir $d"
  echo "meta $(head -n 1 "$d/meta.json")"
  sed 's/^/state /' "$d/state" 2>/dev/null
  echo "mode $(cat "$d/mode" 2>/dev/null)"
  if [ -n "$(ours "$d")" ]; then echo "alive yes"; else echo "alive no"; fi
  echo end
done
"""

#: $1 session dir. What a process needs to reach a desktop again: state, mode, cookie (hex), liveness.
_STATE_SCRIPT = _OURS + r"""
dir=$1
[ -f "$dir/state" ] || { echo missing; exit 0; }
sed 's/^/state /' "$dir/state"
echo "mode $(cat "$dir/mode" 2>/dev/null)"
echo "auth $(od -An -v -tx1 "$dir/Xauthority" | tr -d ' \n')"
if [ -n "$(ours "$dir")" ]; then echo "alive yes"; else echo "alive no"; fi
"""

_NOT_A_FOLDER = 3
#: $1 the folder to unpack the tar on stdin into (made with its parents); C messages, so errors can be told apart
_UNPACK_SCRIPT = r"""
LC_ALL=C; export LC_ALL
if [ -e "$1" ] && [ ! -d "$1" ]; then echo "$1 is a file, not a folder" >&2; exit 3; fi
mkdir -p -- "$1" && exec tar -xf - -C "$1"
"""

#: $1 Xvfb, $2 window manager ("" = none). What preflight needs to know about the host.
_PROBE_SCRIPT = r"""
if p=$(command -v "$1" 2>/dev/null); then echo "xvfb $p"; else echo "xvfb-missing"; fi
if [ -n "$2" ]; then
  if p=$(command -v "$2" 2>/dev/null); then echo "wm $p"; else echo "wm-missing $2"; fi
fi
for t in mkfifo flock timeout grep sed od tar; do command -v "$t" >/dev/null 2>&1 || echo "tool-missing $t"; done
n=0; for s in /tmp/.X11-unix/X*; do [ -e "$s" ] && n=$((n+1)); done; echo "displays-in-use $n"
if [ -d /tmp/.X11-unix ]; then
  if [ -w /tmp/.X11-unix ]; then echo "socket-dir ok"; else echo "socket-dir not-writable"; fi
elif [ -w /tmp ]; then echo "socket-dir creatable"; else echo "socket-dir missing"; fi
echo "os $(uname -s)"
"""


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


def _sh(script: str, *args: str, name: str = "deskctl-ssh") -> str:
    """A command line for the login shell that runs ``script`` with ``sh`` and positional ``args``."""
    return " ".join(["exec", "/bin/sh", "-c", shlex.quote(script), shlex.quote(name), *map(shlex.quote, args)])


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


def _ssh_config_entry(options: Mapping[str, Any], alias: str) -> dict[str, Any]:
    """What OpenSSH's client configuration says about ``alias`` (HostName, User, Port, IdentityFile ...):
    ``provider_options["ssh_config"]`` names the file (default ``~/.ssh/config`` when it exists; false: none)."""
    raw = options.get("ssh_config", True)
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


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


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
    def from_options(cls, options: Mapping[str, Any]) -> _Settings:
        host = options.get("host") or os.environ.get(ENV_HOST)
        if not host:
            raise UsageError(
                "the ssh provider needs a host", code="usage.missing_host", provider=PROVIDER,
                remedy=f"--host user@host[:port], or export {ENV_HOST}=user@host",
            )
        who, alias, port = SshTarget.split(str(host))
        entry = _ssh_config_entry(options, alias)
        target = SshTarget(
            user=str(who or options.get("user") or entry.get("user") or getpass.getuser()),
            host=str(entry.get("hostname") or alias),
            port=_port(port or options.get("port") or entry.get("port") or 22),
        )
        identity_files = tuple(str(Path(str(p)).expanduser()) for p in entry.get("identityfile", []))
        jump_text = str(options.get("jump") or entry.get("proxyjump") or "")
        jump = _parse_jump(jump_text, target.user) if jump_text.lower() not in ("", "none") else ()
        key_file = options.get("key_file") or os.environ.get(ENV_KEY_FILE) or None
        known_hosts = options.get("known_hosts") or os.environ.get(ENV_KNOWN_HOSTS) or None
        return cls(
            target=target,
            key_file=str(Path(str(key_file)).expanduser()) if key_file else None,
            known_hosts=str(Path(str(known_hosts)).expanduser()) if known_hosts else None,
            accept_new_host_key=_bool(options.get("accept_new_host_key", False)),
            agent=_bool(options.get("agent", True)),
            xvfb_path=str(options.get("xvfb_path") or "Xvfb"),
            remote_dir=str(options.get("remote_dir") or os.environ.get(ENV_REMOTE_DIR) or ""),
            connect_timeout=float(options.get("connect_timeout") or 15.0),
            compression=_bool(options.get("compression", False)),
            identity_files=identity_files,
            jump=jump,
        )

    @classmethod
    def from_handle(cls, handle: RemoteHandle, options: Mapping[str, Any]) -> _Settings:
        data = handle.data
        if not data.get("host"):
            return cls.from_options(options)
        return cls(
            target=SshTarget(user=str(data["user"]), host=str(data["host"]), port=int(data.get("port", 22))),
            key_file=data.get("key_file") or options.get("key_file") or os.environ.get(ENV_KEY_FILE) or None,
            known_hosts=data.get("known_hosts"),
            accept_new_host_key=False,  # the key was recorded when the desktop was made
            agent=_bool(data.get("agent", True)),
            xvfb_path=str(data.get("xvfb_path") or "Xvfb"),
            remote_dir=str(data.get("remote_dir") or ""),
            connect_timeout=float(options.get("connect_timeout") or data.get("connect_timeout") or 15.0),
            compression=_bool(data.get("compression", False)),
            identity_files=tuple(str(p) for p in data.get("identity_files") or ()),
            jump=_parse_jump(str(data.get("jump") or ""), str(data["user"])),
        )

    def to_data(self) -> dict[str, Any]:
        return {
            "host": self.target.host, "port": self.target.port, "user": self.target.user,
            "key_file": self.key_file, "known_hosts": self.known_hosts, "agent": self.agent,
            "xvfb_path": self.xvfb_path, "remote_dir": self.remote_dir, "compression": self.compression,
            "identity_files": list(self.identity_files),
            "jump": ",".join(str(hop) for hop in self.jump),
        }

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

    def lost(self, doing: str) -> SessionLost:
        return SessionLost(
            f"the SSH connection to {self.settings.target.host} was lost while we tried to {doing} "
            "(provider unreachable); a desktop attached to this connection ended with it", provider=PROVIDER,
            details={"cause": "provider.unreachable"},
        )

    def session(self, command: str) -> Any:
        """A session channel running ``command`` (not waited for)."""
        import paramiko

        try:
            chan = self.transport.open_session(timeout=self.settings.connect_timeout)
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

        chan = self.session(command)
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
                    with chan.makefile("wb") as stdin:
                        send(stdin)
                chan.shutdown_write()
                if receive is not None:
                    with chan.makefile("rb") as stdout:
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


def _collect(chan: Any, timeout: float, conn: _Connection) -> tuple[int, bytes, bytes]:
    """Read stdout and stderr of a channel apart (stderr in a helper thread so neither can stall the window)
    until it exits. Raises TimeoutError when ``timeout`` passes first."""
    err_chunks: list[bytes] = []

    def read_stderr() -> None:
        with contextlib.suppress(Exception):
            while True:
                data = chan.recv_stderr(65536)
                if not data:
                    return
                err_chunks.append(data)

    reader = threading.Thread(target=read_stderr, name="deskctl-ssh-stderr", daemon=True)
    reader.start()
    out_chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    chan.settimeout(max(0.01, timeout))
    while True:
        try:
            data = chan.recv(65536)
        except TimeoutError:
            raise TimeoutError(f"no exit after {timeout:g}s") from None
        if not data:
            break
        out_chunks.append(data)
        chan.settimeout(max(0.01, deadline - time.monotonic()))
    if not chan.status_event.wait(max(0.01, deadline - time.monotonic())):
        raise TimeoutError(f"no exit status after {timeout:g}s")
    reader.join(max(0.01, deadline - time.monotonic()))
    status = chan.exit_status
    if status == -1 and not conn.alive:
        raise conn.lost("run a command")
    return int(status), b"".join(out_chunks), b"".join(err_chunks)


def _lines(chan: Any, deadline: float) -> Iterator[str]:
    """Lines a channel prints, until it closes or ``deadline`` (monotonic) passes (then TimeoutError)."""
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode(errors="replace")
        chan.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = chan.recv(4096)
        except TimeoutError:
            raise TimeoutError("no answer in time") from None
        if not data:
            if buffer:
                yield buffer.decode(errors="replace")
            return
        buffer += data


def _bridge(chan: Any, name: str) -> socket.socket:
    """A local socket whose peer is ``chan``: two pump threads copy bytes both ways (python-xlib needs a real
    socket to select on). Closing either side closes both."""
    ours, theirs = socket.socketpair()
    for end in (ours, theirs):  # a whole frame in few reads: python-xlib re-joins its buffer on every read
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, option, 4 << 20)
    closed = threading.Event()

    def shut() -> None:
        if closed.is_set():
            return
        closed.set()
        with contextlib.suppress(Exception):
            chan.close()
        with contextlib.suppress(OSError):
            theirs.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            theirs.close()

    def down() -> None:  # channel -> local
        with contextlib.suppress(Exception):
            while True:
                data = chan.recv(1 << 20)
                if not data:
                    break
                theirs.sendall(data)
        shut()

    def up() -> None:  # local -> channel
        with contextlib.suppress(Exception):
            while True:
                data = theirs.recv(1 << 16)
                if not data:
                    break
                chan.sendall(data)
        shut()

    threading.Thread(target=down, name=f"{name}-down", daemon=True).start()
    threading.Thread(target=up, name=f"{name}-up", daemon=True).start()
    return ours


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


# -- screenshots by damage tracking ----------------------------------------------------------------------------


class _FrameCache:
    """The remote screen kept as a client-side frame, refreshed by what the X DAMAGE extension says changed.

    A full 1024x768 frame is 3 MiB of raw pixels through SSH; an agent's screen mostly changes in small places
    between two screenshots (a button, a line of text). This keeps its own X connection (a second channel on the
    session's SSH connection) with a DeltaRectangles damage object on the root window, and per capture:
    resets the damage region, makes one round trip (every damage event sent before it has then arrived), and
    fetches only the damaged boxes with GetImage, patched into the frame. Correct by construction: drawing that
    happens after the reset is reported again and fetched at the latest next time; fetching it twice is harmless.
    The first capture, a size change, or damage over half the screen fetches the whole screen.

    The PNG is encoded by bands of rows (:class:`BandedPng`), so a small change re-compresses a few bands, not
    the whole picture; with no change at all the last PNG is returned as it is.
    """

    MAX_BOXES = 8
    FULL_FRACTION = 0.5

    def __init__(self, display: Any) -> None:
        from Xlib.ext import damage

        self._display = display
        self._lock = threading.Lock()
        display.damage_query_version()
        screen = display.screen()
        self._root = screen.root
        depth = int(screen.root_depth)
        formats = {int(f.depth): int(f.bits_per_pixel) for f in display.display.info.pixmap_formats}
        if formats.get(depth) != 32:
            raise ValueError(f"{depth}-bit screen")
        # python-xlib registers a copy of damage.DamageNotify per display: match the event code, not the class
        self._notify_code = int(display.query_extension("DAMAGE").first_event) + damage.DamageNotifyCode
        self._damage = self._root.damage_create(damage.DamageReportDeltaRectangles)
        self._frame: bytearray | None = None
        self._size = (0, 0)
        self._png: Screenshot | None = None  # the last PNG, valid while nothing changed
        self._encoder: BandedPng | None = None
        self.fetched_pixels = 0  # for tests and the benchmark: what crossed the wire

    @classmethod
    def supported(cls, display: Any) -> bool:
        return bool(display.has_extension("DAMAGE"))

    def screenshot(self) -> Screenshot:
        """The current screen as PNG; the same PNG again when nothing changed since the last one."""
        with self._lock:
            changed = self._refresh()
            if changed or self._png is None:
                assert self._frame is not None and self._encoder is not None
                width, height = self._size
                self._png = Screenshot(png=self._encoder.encode(self._frame), width=width, height=height)
            return self._png

    def raw_frame(self) -> RawFrame:
        """The current screen's pixels (a copy of the frame, brought up to date)."""
        with self._lock:
            if self._refresh():
                self._png = None  # the next screenshot must encode what was fetched here
            assert self._frame is not None
            width, height = self._size
            return RawFrame(bytes(self._frame), width, height, "BGRX")

    @property
    def encoder(self) -> BandedPng | None:
        return self._encoder

    def _refresh(self) -> bool:
        """Bring the frame up to date; whether any pixel was fetched."""
        from Xlib import X

        display = self._display
        display.damage_subtract(self._damage)
        geometry = self._root.get_geometry()  # the round trip: every earlier damage event is now queued
        width, height = int(geometry.width), int(geometry.height)
        boxes: list[tuple[int, int, int, int]] = []
        while display.pending_events():
            event = display.next_event()
            if event.type & 0x7F == self._notify_code:
                area = event.area
                boxes.append((int(area.x), int(area.y), int(area.width), int(area.height)))
        if self._frame is None or self._size != (width, height):
            boxes = [(0, 0, width, height)]
            self._frame = bytearray(width * height * 4)
            self._size = (width, height)
            self._encoder = BandedPng(width, height)
        frame, encoder = self._frame, self._encoder
        assert encoder is not None
        fetch = _merge_boxes(boxes, width, height, self.MAX_BOXES, self.FULL_FRACTION)
        for x, y, w, h in fetch:
            data = self._root.get_image(x, y, w, h, X.ZPixmap, 0xFFFFFFFF).data
            self.fetched_pixels += w * h
            encoder.invalidate(y, y + h)
            if w == width:
                frame[y * width * 4:(y + h) * width * 4] = data
                continue
            stride = w * 4
            for row in range(h):
                start = ((y + row) * width + x) * 4
                frame[start:start + stride] = data[row * stride:(row + 1) * stride]
        return bool(fetch)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._display.close()


def _merge_boxes(boxes: list[tuple[int, int, int, int]], width: int, height: int, max_boxes: int,
                 full_fraction: float) -> list[tuple[int, int, int, int]]:
    """Clip to the screen, merge boxes that touch (or nearly), and fall back to fewer, larger fetches: the
    bounding box when more than ``max_boxes`` remain, the whole screen when they cover ``full_fraction`` of it."""
    slack = 16
    rects: list[list[int]] = []
    for x, y, w, h in boxes:
        x1, y1, x2, y2 = max(0, x), max(0, y), min(width, x + w), min(height, y + h)
        if x2 > x1 and y2 > y1:
            rects.append([x1, y1, x2, y2])
    merged = True
    while merged and len(rects) > 1:
        merged = False
        out: list[list[int]] = []
        for rect in rects:
            for other in out:
                if (rect[0] <= other[2] + slack and other[0] <= rect[2] + slack
                        and rect[1] <= other[3] + slack and other[1] <= rect[3] + slack):
                    other[0], other[1] = min(other[0], rect[0]), min(other[1], rect[1])
                    other[2], other[3] = max(other[2], rect[2]), max(other[3], rect[3])
                    merged = True
                    break
            else:
                out.append(rect)
        rects = out
    if len(rects) > max_boxes:
        rects = [[min(r[0] for r in rects), min(r[1] for r in rects),
                  max(r[2] for r in rects), max(r[3] for r in rects)]]
    if sum((r[2] - r[0]) * (r[3] - r[1]) for r in rects) >= full_fraction * width * height:
        rects = [[0, 0, width, height]]
    return [(r[0], r[1], r[2] - r[0], r[3] - r[1]) for r in rects]


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
        import select

        from Xlib import X

        root = display.screen().root
        root.change_attributes(event_mask=X.PropertyChangeMask)
        atom = display.intern_atom("_NET_SUPPORTING_WM_CHECK")
        while root.get_full_property(atom, X.AnyPropertyType) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadinessTimeout(f"the window manager on :{desk.display} did not start in time",
                                       provider=PROVIDER, remedy=f"see {desk.dir}/wm.log on the host")
            if not display.pending_events():
                select.select([display.fileno()], [], [], remaining)
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
                                 code="usage.invalid", provider=PROVIDER)
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
                             code="usage.invalid", provider=PROVIDER)

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
                raise UsageError(f"cannot {doing}: {detail}", code="usage.invalid", provider=PROVIDER) from failure
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
