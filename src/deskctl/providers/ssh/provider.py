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

Provider options: declared once in :mod:`.options`. A start URL opens in the host's Chromium (:mod:`.devtools`).

This module is the lifecycle (preflight, create, readiness, destroy, detach, listing); :mod:`.desktop` the
connections and an open desktop, :mod:`.files` SFTP and tar streams.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._record import replace
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
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_OWNER,
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    RemoteHandle,
)
from deskctl.providers.ssh.channels import _lines
from deskctl.providers.ssh.connection import _Connection
from deskctl.providers.ssh.desktop import (
    _SESSION_ID,
    _blocks,
    _default_geometry,
    _Desktop,
    _int,
    _new_cookie,
    _printf_escaped,
    _xauthority_bytes,
)
from deskctl.providers.ssh.devtools import SshBrowser
from deskctl.providers.ssh.files import SshFiles
from deskctl.providers.ssh.handle_data import SshHandleData
from deskctl.providers.ssh.scripts import (
    _DESTROY_BY_ID_SCRIPT,
    _DESTROY_SCRIPT,
    _LIST_SCRIPT,
    _OWNER_SCRIPT,
    _PROBE_SCRIPT,
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
    _load_known_hosts,
    _Settings,
    host_key_fingerprint,
)

if TYPE_CHECKING:
    from deskctl.checks import CheckResult
    from deskctl.spec import DesktopSpec


__all__ = ["SSHProvider", "SshTarget", "host_key_fingerprint"]


class SSHProvider(SshBrowser, SshFiles):
    """Desktops on a Linux host over SSH. ``handle.data``: ``host``, ``port``, ``user``, ``key_file``,
    ``known_hosts``, ``agent``, ``xvfb_path``, ``remote_dir``, ``dir`` (the session directory on the host),
    ``display`` (int), ``xvfb_pid``, ``watcher_pid``, ``detached``, ``geometry``. No secret: the cookie stays in
    the host's 0600 file and is read over SSH by a process that reattaches."""

    name = PROVIDER

    options_model = "deskctl.providers.ssh.options:Options"

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Every value against the declaration (:mod:`.options`), and the host's form: a usage error before
        anything is dialled."""
        super().check_options(options)
        if options.get("host"):
            SshTarget.split(str(options["host"]))

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
        start_url=True,
        local=False,
        billing="external",
        cursor_position=True,
        clipboard=True,
        windows=True,
        window_management=True,
        accessibility=True,
        browser=True,
    )
    # none required (a key file, the agent or a default identity may do); secret: the names with KEY or PASS
    credentials = CredentialSet(
        variables=(ENV_HOST, ENV_KEY_FILE, ENV_KNOWN_HOSTS, ENV_KEY_PASSPHRASE, ENV_PRIVATE_KEY, ENV_PASSWORD),
        source="deskctl.providers.ssh",
    )


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
            status, out, _err = conn.call(_sh(_PROBE_SCRIPT, settings.xvfb_path, self._window_manager(spec),
                                              self._browsers() if spec.start_url else ""),
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
        if "browser-missing" in facts:
            checks.add("fail", "ssh.browser_missing", f"a start URL needs Chromium, and {host} has no "
                       f"{' or '.join(facts['browser-missing'].split())} on the login PATH",
                       "on the host: apt-get install chromium, or set the browser provider option")
        elif "browser" in facts:
            checks.add("pass", "ssh.browser", f"{host} has Chromium at {facts['browser']} for {spec.start_url}")
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
                try:
                    owner.sendall(stdin)
                except OSError:
                    pass  # the script can end before it reads (no Xvfb, say): what it printed says why, read below
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
        data = replace(settings.handle_data(), dir=remote_path, display=display, xvfb_pid=xvfb_pid,
                       watcher_pid=watcher_pid, detached=detached, geometry=str(geometry),
                       window_manager=bool(self._window_manager(spec))).to_data()
        handle = RemoteHandle(provider=PROVIDER, session_id=session_id,
                              resource_id=f"ssh://{settings.target}{remote_path}", labels=dict(labels), data=data)
        with self._lock:
            self._desktops[session_id] = _Desktop(conn=conn, display=display, dir=remote_path, cookie=cookie,
                                                  owner=owner)
        if spec.start_url:
            try:
                self._open_start_url(handle, str(spec.start_url))
            except BaseException:
                with contextlib.suppress(Exception):
                    self.destroy(handle)
                raise
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
        transport = owner.get_transport()
        if transport is None or not transport.is_active():
            raise ProviderUnreachable(f"lost {host} while Xvfb started", provider=PROVIDER)
        raise ProviderApiError(f"the desktop watcher on {host} ended before Xvfb was ready "
                               f"(exit {owner.exit_status if owner.exit_status_ready() else 'unknown'})",
                               provider=PROVIDER, remedy="the host needs a POSIX /bin/sh")

    def _window_manager(self, spec: DesktopSpec) -> str:
        """The window manager command to start ("" for none): openbox, when the spec or options ask for one."""
        wanted = spec.window_manager or self.opts.window_manager
        return self.opts.window_manager_command if wanted else ""

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
            if SshHandleData.of(handle).window_manager:
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
        self.close_browser(handle.session_id)
        self._drop_driver(handle.session_id)
        with self._lock:
            desk = self._desktops.pop(handle.session_id, None)
        remote_path, host = SshHandleData.of(handle).dir, SshHandleData.of(handle).host or None
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
                    conn = self._control(_Settings.from_handle(handle, self.opts))
                except DeskctlError as err:
                    raise CleanupIncomplete(
                        f"cannot confirm that {handle.session_id} is gone from {host}: "
                        f"{err.message}", provider=PROVIDER, remedy=f"deskctl reap once the host is reachable "
                        f"(on the host: rm -rf {remote_path} and kill its Xvfb)",
                        details={"left": [handle.resource_id], "cause": err.code},
                    ) from err
            try:
                status, out, err_out = conn.call(_sh(_DESTROY_SCRIPT, remote_path), timeout=60)
            except DeskctlError as err:
                raise CleanupIncomplete(f"destroy of {handle.session_id} on {host} could not "
                                        f"be confirmed: {err.message}", provider=PROVIDER,
                                        details={"left": [handle.resource_id], "cause": err.code}) from err
            text = out.decode(errors="replace").strip()
            if status != 0 or not text.endswith("gone"):
                raise CleanupIncomplete(
                    f"{handle.session_id} on {host} is not confirmed gone: "
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
        replace(SshHandleData.of(handle), detached=True).store(handle)

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
            geometry = meta.get("geometry")
            data = replace(settings.handle_data(), dir=remote_path, display=_int(block.get("display")),
                           xvfb_pid=_int(block.get("xvfb_pid")), watcher_pid=_int(block.get("watcher_pid")),
                           detached=block.get("mode") == "detached",
                           geometry=None if geometry is None else str(geometry),
                           alive=block.get("alive") == "yes").to_data()
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
                conn = self._control(_Settings.from_handle(handle, self.opts))
            state = self._remote_state(handle, conn)
        except DeskctlError:
            return False
        return state.get("alive") == "yes"

