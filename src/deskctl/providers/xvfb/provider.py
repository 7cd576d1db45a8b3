"""Provider ``xvfb``: a desktop on this host's own Xvfb (no isolation, zero setup; the embedded default).

What a desktop is here:

* ``Xvfb -displayfd`` picks a free display number itself, by binding the abstract socket ``@/tmp/.X11-unix/XN``
  (atomic, and gone with its process, so two deskctl processes never race for a number and nothing a dead
  server left can block a new one), and writes the number to a pipe when it accepts connections: that write
  *is* readiness, no sleep. deskctl then writes the classic lock file /tmp/.XN-lock (which -displayfd skips) so
  that tools choosing a display by lock files steer clear; destroy removes it, and the socket file;
* the server reads its MIT-MAGIC-COOKIE-1 from a 0600 Xauthority file in the session directory (``-auth``),
  so other local users cannot connect; TCP is off;
* Xvfb, the optional window manager (openbox) and the optional browser each run in their own session and
  process group (``start_new_session``), so a detached desktop outlives the CLI and destroy can end every
  process a program spawned; everything started on the desktop (those programs and ``exec`` commands) carries
  ``DESKCTL_SESSION=<id>`` in its environment, so destroy also ends what left its group (daemons);
* a JSON marker per desktop in ``runtime_dir()/xvfb/<session>/desktop.json`` (session id, owner, created,
  expires, display, pids with their start times) lets :meth:`XvfbProvider.list_owned` and the reaper find it
  from any process. A recorded pid is trusted only while its ``/proc`` start time matches, so a recycled pid is
  never killed.

Backstop (the owner-pid watch): an attached session's desktop gets a tiny watcher process that waits on the
owner's pidfd and ends the desktop's processes when the owner dies, even by SIGKILL; a detached one
(``deskctl.detached`` label) gets a watcher that ends it at its expiry instead. The watcher only stops processes
(Xvfb removes its socket on SIGTERM); the lock file, marker and session directory stay until ``deskctl reap``
(or ``down``) destroys the desktop and records the end in the ledger, so the reaper always has something to
find and to record, and the SIGKILL case stays observable. ``provider_options={"owner_watch": False}`` turns
the watcher off (then the reaper alone removes the live orphan).

Harness: ``exec`` runs ``sh -c`` here with the desktop's DISPLAY/XAUTHORITY (``cwd``/``env``/``background``
through :func:`~deskctl.providers._guest.posix_line`; ``user`` through sudo, only when deskctl runs as root:
that user cannot read the desktop's cookie, so its commands are not X clients); ``upload``/``download`` are
copies on this host's filesystem; the clipboard is ``xclip``; window titles come over the X connection.

Provider options: ``window_manager`` (bool, also ``spec.window_manager``), ``browser`` (a command name or path),
``owner_watch`` (bool, default True), ``xvfb_args`` (extra arguments), ``start_timeout`` (seconds, default 30).
"""

from __future__ import annotations

import _socket
import os
import sys
import time

from deskctl import _threads
from deskctl._fds import wait_readable
from deskctl._jsonc import dumps, loads
from deskctl._record import replace
from deskctl.errors import (
    CleanupIncomplete,
    GeometryUnsupported,
    NotFound,
    ProviderApiError,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._guest import background_pid, check_exec_options, posix_line, run_here
from deskctl.providers._procs import SESSION_ENV, alive, start_ticks, tagged_processes, wait_gone
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_OWNER,
    LABEL_SESSION,
    Capabilities,
    ExecResult,
    RemoteHandle,
)
from deskctl.providers.xvfb.browser import _XvfbBrowser
from deskctl.providers.xvfb.display import (
    WATCHER,
    claim_lock,
    default_geometry,
    depth_problem,
    file_id,
    has_big_window,
    has_window_manager,
    listening,
    lock_owner,
    which,
)
from deskctl.providers.xvfb.handle_data import XvfbHandleData, XvfbProcess
from deskctl.providers.xvfb.spawn import Child, spawn

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    import subprocess
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from deskctl.core.x11 import X11Driver
    from deskctl.providers.xvfb.options import Options
    from deskctl.spec import DesktopSpec, Geometry
else:
    import _signal  # signal's functions and constants without signal.py's enums (typeshed has no _signal)

__all__ = ["XvfbProvider"]

_TERM_GRACE = 5.0


class XvfbProvider(_XvfbBrowser):
    """Desktops on the host's Xvfb. ``handle.data``: :class:`~.handle_data.XvfbHandleData` (the cookie itself
    stays in its 0600 file)."""

    name = "xvfb"
    options_model = "deskctl.providers.xvfb.options:Options"
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
        isolation="none",
        start_url=True,
        local=True,
        billing="free",
        cursor_position=True,
        clipboard=True,
        windows=True,
        browser=True,
        window_management=True,
        accessibility=True,
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._children: dict[int, subprocess.Popen[bytes] | Child] = {}
        self._lock = _threads.RLock()

    # -- create --------------------------------------------------------------------------------------------
    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        from pathlib import Path

        from deskctl.core.x11auth import new_cookie, write_xauthority  # here: `deskctl down` writes no cookie

        geometry = spec.geometry or default_geometry()
        options = self._settings(spec)
        problem = depth_problem(geometry)
        if problem:
            raise GeometryUnsupported(problem, provider=self.name, remedy=f"ask for {geometry}x24")
        xvfb = which("Xvfb")
        if xvfb is None:
            raise ProviderUnreachable("Xvfb is not installed", provider=self.name, remedy="apt-get install xvfb")
        from deskctl.paths import runtime_dir

        base = runtime_dir() / "xvfb"
        base.mkdir(mode=0o700, exist_ok=True)
        directory = base / session_id
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            raise ProviderApiError(f"a desktop for session {session_id} already exists in {directory}",
                                   provider=self.name) from None
        labels = dict(labels)
        labels.setdefault(LABEL_SESSION, session_id)
        labels.setdefault(LABEL_OWNER, f"{_socket.gethostname()}:{os.getpid()}")
        labels.setdefault(LABEL_CREATED, str(int(time.time())))
        cookie_file = directory / "Xauthority"
        handle = RemoteHandle(
            provider=self.name, session_id=session_id, resource_id=f"xvfb:{session_id}", labels=labels,
            data=XvfbHandleData(dir=str(directory), marker=str(directory / "desktop.json"),
                                cookie_file=str(cookie_file), xauthority=str(cookie_file),
                                geometry=f"{geometry.width}x{geometry.height}x{geometry.depth}", procs=()).to_data(),
        )
        try:
            cookie = new_cookie()
            write_xauthority(cookie_file, None, cookie)
            self._write_marker(handle)  # before the first process: a crash from here on is findable
            number = self._start_xvfb(handle, xvfb, geometry, options, directory,
                                      options.start_timeout)
            # the socket file's identity: destroy removes that file only, never a newer server's at the same path
            data = replace(XvfbHandleData.of(handle), display=f":{number}", display_number=number,
                           socket_id=file_id(Path(f"/tmp/.X11-unix/X{number}")))
            data.store(handle)
            claim_lock(number, int(data.xvfb_pid or 0))
            handle.resource_id = f"xvfb:{_socket.gethostname()}:{number}:{data.xvfb_pid}"
            self._write_marker(handle)
            if self._wants_window_manager(spec):
                self._spawn(handle, "window_manager", [self._require("openbox", "apt-get install openbox")])
            # open_url's Chromium uses it too
            replace(XvfbHandleData.of(handle), devtools_port=options.devtools_port).store(handle)
            if spec.start_url:
                self._start_browser(handle, spec, geometry)
            self._start_watcher(handle, options)
        except BaseException:
            try:
                self.destroy(handle)
            except Exception:
                pass
            raise
        return handle

    def _require(self, name: str, remedy: str) -> str:
        found = which(name)
        if found is None:
            raise ProviderUnreachable(f"{name} is not installed", provider=self.name, remedy=remedy)
        return found

    def _env(self, handle: RemoteHandle) -> dict[str, str]:
        env = dict(os.environ)
        data = XvfbHandleData.of(handle)
        env["DISPLAY"] = data.display
        env["XAUTHORITY"] = data.cookie_file
        env[SESSION_ENV] = handle.session_id  # tags every descendant, for destroy
        return env

    def _start_xvfb(self, handle: RemoteHandle, xvfb: str, geometry: Geometry, options: Options,
                    directory: Path, timeout: float) -> int:
        read_end, write_end = os.pipe()
        log = open(directory / "xvfb.log", "wb")  # noqa: SIM115 (handed to the child)
        argv = [xvfb, "-displayfd", str(write_end), "-screen", "0",
                f"{geometry.width}x{geometry.height}x{geometry.depth}", "-auth", XvfbHandleData.of(handle).cookie_file,
                "-nolisten", "tcp", "-noreset", *options.xvfb_args]
        try:
            try:
                proc = spawn(argv, output=log.fileno(), passed=write_end)  # Popen's guarantees, without subprocess
            except OSError as exc:
                raise ProviderUnreachable(f"cannot start Xvfb: {exc.strerror}", provider=self.name,
                                          remedy="apt-get install xvfb") from exc
            finally:
                os.close(write_end)
                log.close()
            self._remember(handle, "xvfb", proc)
            deadline = time.monotonic() + timeout
            data = b""
            while not data.endswith(b"\n"):
                if not wait_readable([read_end], max(0.0, deadline - time.monotonic())):
                    raise ReadinessTimeout(f"Xvfb did not announce a display within {timeout:.0f}s; "
                                           f"log: {self._log_tail(directory)}", provider=self.name)
                chunk = os.read(read_end, 64)
                if not chunk:
                    proc.wait()
                    raise ProviderApiError(f"Xvfb exited with status {proc.returncode} before it was ready; "
                                           f"log: {self._log_tail(directory)}", provider=self.name)
                data += chunk
            return int(data.strip())
        finally:
            os.close(read_end)

    @staticmethod
    def _log_tail(directory: Path, name: str = "xvfb.log") -> str:
        try:
            text = (directory / name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        lines = [line for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-3:]) or "(empty)"

    def _remember(self, handle: RemoteHandle, role: str, proc: subprocess.Popen[bytes] | Child) -> None:
        with self._lock:
            self._children[proc.pid] = proc
        data = XvfbHandleData.of(handle)
        started = XvfbProcess(role=role, pid=proc.pid, ticks=start_ticks(proc.pid))
        replace(data, procs=(*(data.procs or ()), started)).store(handle)
        self._write_marker(handle)

    def _spawn(self, handle: RemoteHandle, role: str, argv: list[str]) -> subprocess.Popen[bytes]:
        import subprocess
        from pathlib import Path

        directory = Path(XvfbHandleData.of(handle).dir)
        with open(directory / f"{role}.log", "wb") as log:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                        env=self._env(handle), start_new_session=True, close_fds=True,
                                        cwd=directory)
            except OSError as exc:
                raise ProviderApiError(f"cannot start {argv[0]}: {exc.strerror}", provider=self.name) from exc
        self._remember(handle, role, proc)
        return proc

    def _start_watcher(self, handle: RemoteHandle, options: Options) -> None:
        if not options.owner_watch:
            return
        detached = handle.labels.get(LABEL_DETACHED) == "1"
        owner = 0 if detached else os.getpid()
        try:
            expires = float(handle.labels.get(LABEL_EXPIRES) or 0) if detached else 0.0
        except ValueError:
            expires = 0.0
        if owner == 0 and expires <= 0:
            return
        data = XvfbHandleData.of(handle)
        targets = [[p.pid, p.ticks] for p in data.procs or ()]
        script = os.path.join(data.dir, "watch.py")
        with open(script, "w") as file:
            file.write(WATCHER)
        try:
            with open(os.devnull, "wb") as devnull:
                proc = spawn([sys.executable, "-I", "-S", script, str(owner), str(expires), dumps(targets)],
                             output=devnull.fileno())
        except OSError as exc:
            raise ProviderApiError(f"cannot start the owner watch: {exc.strerror}", provider=self.name) from exc
        self._remember(handle, "watcher", proc)

    def _write_marker(self, handle: RemoteHandle) -> None:
        data = XvfbHandleData.of(handle)
        marker = data.marker
        body = {
            "session_id": handle.session_id,
            "owner": handle.labels.get(LABEL_OWNER),
            "created": handle.labels.get(LABEL_CREATED),
            "expires": handle.labels.get(LABEL_EXPIRES),
            "display": data.display or None,
            "pids": [p.pid for p in data.procs or ()],
            "handle": handle.to_dict(),
        }
        tmp = marker + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(dumps(body))
        os.replace(tmp, marker)

    # -- readiness -----------------------------------------------------------------------------------------
    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        """Xvfb announced itself through -displayfd in :meth:`create`; here one X round trip confirms that
        it answers with our cookie (and keeps that connection for the actions to come)."""
        if not XvfbHandleData.of(handle).display:
            raise ReadinessTimeout("the desktop has no display yet", provider=self.name)
        self._driver(handle).ping()
        procs = {p.role: p.pid for p in self._procs(handle)}
        if "window_manager" in procs:
            self._wait_on_display(handle, "window_manager", procs["window_manager"], deadline,
                                  has_window_manager, "the window manager to manage the screen")
        if "browser" in procs:
            self._wait_on_display(handle, "browser", procs["browser"], deadline, has_big_window,
                                  "the browser window to appear")

    def _wait_on_display(self, handle: RemoteHandle, role: str, pid: int, deadline: float,
                         condition: Any, what: str) -> None:
        """Wait until ``condition(display, root)`` holds, re-checked on each X event on the root (window maps,
        property changes) and woken by the program's exit (its pidfd); never by a timer."""
        from pathlib import Path

        import Xlib.error
        from Xlib import X

        from deskctl.core.x11 import X11Address, connect_display
        from deskctl.core.x11auth import read_cookie

        data = XvfbHandleData.of(handle)
        cookie = read_cookie(data.cookie_file)
        display = connect_display(X11Address(data.display), cookie)
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except OSError:
            pidfd = None
        try:
            root = display.screen().root
            root.change_attributes(event_mask=X.SubstructureNotifyMask | X.PropertyChangeMask)
            display.sync()
            while not condition(display, root):
                waiting = [display.fileno()] + ([pidfd] if pidfd is not None else [])
                ready = wait_readable(waiting, max(0.0, deadline - time.monotonic()))
                if pidfd is not None and pidfd in ready:
                    raise ProviderApiError(
                        f"the {role.replace('_', ' ')} exited while deskctl waited for {what}; log: "
                        f"{self._log_tail(Path(data.dir), f'{role}.log')}", provider=self.name)
                if not ready:
                    raise ReadinessTimeout(f"timed out waiting for {what}", provider=self.name,
                                           remedy=f"raise --ready-timeout, or read {role}.log in "
                                                  f"{data.dir}")
                while display.pending_events():
                    display.next_event()
        except (OSError, Xlib.error.ConnectionClosedError, Xlib.error.XError) as exc:
            raise SessionLost(f"lost the display while waiting for {what}: {exc}", provider=self.name) from exc
        finally:
            if pidfd is not None:
                os.close(pidfd)
            display.close()

    # -- while open ----------------------------------------------------------------------------------------
    def _open_driver(self, handle: RemoteHandle) -> X11Driver:
        from deskctl.core.x11auth import read_cookie
        from deskctl.core.x11open import open_x11

        data = XvfbHandleData.of(handle)
        if not data.display:
            raise SessionLost(f"session {handle.session_id} has no display", provider=self.name)
        try:
            cookie = read_cookie(data.cookie_file)
        except ProviderUnreachable as exc:
            raise SessionLost(f"the desktop of {handle.session_id} is gone ({exc.message})",
                              provider=self.name) from exc
        try:
            # open_x11: X11Driver.open, without loading its module in a process that prefers the wire (`do`)
            return open_x11(data.display, cookie=cookie, provider=self.name)
        except ProviderUnreachable as exc:
            if not self._xvfb_alive(handle):
                raise SessionLost(f"the Xvfb of {handle.session_id} is gone", provider=self.name) from exc
            raise

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Run ``command`` with ``sh -c`` on this host with DISPLAY and XAUTHORITY of the desktop, in ``cwd``
        with ``env`` added, as ``user`` (through ``sudo``: only when deskctl runs as root). On timeout its
        process group is killed and the exit code is 124 (as timeout(1) reports). ``background``: the command
        is detached from every pipe of this call (its output goes to /dev/null) and its pid comes back."""
        extra = check_exec_options(env, user, self.name)
        other = self._other_user(user)
        if not self._xvfb_alive(handle):
            raise SessionLost(f"the Xvfb of {handle.session_id} is gone", provider=self.name)
        if other is not None:
            # sudo resets the environment: the session tag (destroy ends what carries it) goes in explicitly
            extra = {SESSION_ENV: handle.session_id, **extra}
        line = posix_line(command, cwd=cwd, env=extra, user=other, background=background)
        exit_code, out, err = run_here(line, timeout, env=self._env(handle), provider=self.name)
        result = ExecResult(exit_code, out.decode(errors="replace"), err.decode(errors="replace"))
        if background and result.exit_code == 0:
            return ExecResult(0, result.stdout, result.stderr, pid=background_pid(result))
        return result

    def _other_user(self, user: str | None) -> str | None:
        """``user`` when it is not the one deskctl runs as (then sudo switches to it), else None. Only root may
        switch here: anyone else gets ``usage.unsupported`` rather than a sudo password prompt that fails."""
        if user is None:
            return None
        import pwd

        try:
            wanted = pwd.getpwnam(user)
        except KeyError:
            raise UsageError(f"no user {user!r} on this host", code="usage.bad_user", provider=self.name) from None
        if wanted.pw_uid == os.geteuid():
            return None
        if os.geteuid() != 0:
            raise UsageError(f"xvfb runs commands as another user ({user}) only when deskctl runs as root",
                             code="usage.unsupported", provider=self.name,
                             remedy="run deskctl as root, or leave user unset")
        if which("sudo") is None:
            raise ProviderUnreachable("running a command as another user needs sudo, which is not installed",
                                      provider=self.name, remedy="apt-get install sudo")
        return user

    # -- files: this host's own filesystem -----------------------------------------------------------------
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        from deskctl.providers._files import copy_here  # here: `deskctl do` imports this module, not tarfile

        copy_here(local, remote, "here", self.name)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        from deskctl.providers._files import copy_here

        copy_here(remote, local, "on the desktop", self.name)

    # -- detach / destroy ----------------------------------------------------------------------------------
    def detach(self, handle: RemoteHandle) -> None:
        """Drop this process's connection; a detached desktop's watcher (expiry only) stays."""
        self._drop_driver(handle.session_id)

    def _procs(self, handle: RemoteHandle) -> tuple[XvfbProcess, ...]:
        data = XvfbHandleData.of(handle)
        if data.procs is None:
            # a handle from the ledger may predate the last marker write: the marker knows more
            marker = self._read_marker(data.marker)
            stored = (marker or {}).get("handle", {}).get("data", {})
            return XvfbHandleData.from_data(stored if isinstance(stored, dict) else {}).procs or ()
        return data.procs

    def _xvfb_alive(self, handle: RemoteHandle) -> bool:
        return any(p.role == "xvfb" and alive(p.pid, p.ticks) for p in self._procs(handle))

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._xvfb_alive(self._fresh(handle))

    def _fresh(self, handle: RemoteHandle) -> RemoteHandle:
        """The handle as its marker last recorded it (more pids than a handle saved before they started)."""
        marker = self._read_marker(XvfbHandleData.of(handle).marker)
        if marker and isinstance(marker.get("handle"), dict):
            try:
                return RemoteHandle.from_dict(marker["handle"])
            except (KeyError, TypeError, ValueError):
                pass
        return handle

    def destroy(self, handle: RemoteHandle) -> None:
        """End every process group of the desktop (watcher first), wait for them, remove the lock, socket,
        cookie, marker and session directory. Idempotent; raises CleanupIncomplete naming what is left.
        (No pathlib: `deskctl down` is a process per desktop.)"""
        from deskctl.paths import remove_tree

        self._drop_driver(handle.session_id)
        handle = self._fresh(handle)
        procs = self._procs(handle)
        order = sorted(procs, key=lambda p: {"watcher": 0, "browser": 1, "window_manager": 2}.get(p.role, 3))
        live = [(p.pid, p.ticks) for p in order if alive(p.pid, p.ticks)]
        live = self._terminate(live, group=True)
        data = XvfbHandleData.of(handle)
        # what the desktop's programs started outside their groups (exec'd daemons, setsid children, Chromium's
        # helpers writing into the session's folder)
        live += self._terminate(tagged_processes(handle.session_id, data.dir or None), group=False)
        left: list[str] = [f"process {pid}" for pid, _ in live]
        xvfb_pids = {p.pid for p in procs if p.role == "xvfb"}
        if data.display_number is not None:
            ours = data.socket_id if isinstance(data.socket_id, str) else None
            left.extend(self._remove_display_files(data.display_number, xvfb_pids, ours))
        directory = data.dir
        if directory and not live:
            remove_tree(directory)  # as shutil.rmtree(ignore_errors=True), without shutil's import (bz2, lzma)
            if os.path.lexists(directory):
                left.append(directory)
        if left:
            raise CleanupIncomplete(f"xvfb desktop {handle.session_id} is not fully gone: {', '.join(left)}",
                                    provider=self.name, remedy="deskctl reap",
                                    details={"left": left, "session_id": handle.session_id})

    def _terminate(self, procs: list[tuple[int, int | None]], *, group: bool) -> list[tuple[int, int | None]]:
        """SIGTERM (to each process group, or process), a grace period awaited on pidfds, then SIGKILL; the
        processes still alive after that."""
        live = procs
        for sig in (_signal.SIGTERM, _signal.SIGKILL):
            if not live:
                break
            for pid, ticks in live:
                if alive(pid, ticks):
                    try:
                        (os.killpg if group else os.kill)(pid, sig)
                    except OSError:
                        pass
            self._reap_children()
            deadline = time.monotonic() + _TERM_GRACE
            live = [(pid, ticks) for pid, ticks in live if wait_gone([(pid, ticks)], deadline)]
            self._reap_children()
        return live

    def _reap_children(self) -> None:
        with self._lock:
            for pid, proc in list(self._children.items()):
                if proc.poll() is not None:
                    del self._children[pid]

    @staticmethod
    def _remove_display_files(number: int, xvfb_pids: set[int], socket_id: str | None = None) -> list[str]:
        """Remove /tmp/.XN-lock and /tmp/.X11-unix/XN that our (dead) Xvfb left, e.g. after SIGKILL; never
        another server's: a lock naming another pid, a socket something listens on, or a socket file that is not
        the one our server made (``socket_id``: a new server that took the number may not listen yet) is left
        alone. Returns what could not be removed."""
        lock = f"/tmp/.X{number}-lock"
        sock = f"/tmp/.X11-unix/X{number}"
        owner = lock_owner(lock)
        if owner is not None and owner not in xvfb_pids:
            return []  # the number was taken over by another server: its files are not ours
        left: list[str] = []
        ours = socket_id is None or file_id(sock) == socket_id
        if ours and os.path.exists(sock) and not listening(sock):
            try:
                os.unlink(sock)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(sock)
        if owner is not None:
            try:
                os.unlink(lock)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(lock)
        return left

    # -- listing -------------------------------------------------------------------------------------------
    @staticmethod
    def _read_marker(path: str | Path) -> dict[str, Any] | None:
        try:
            with open(path) as file:
                data = loads(file.read())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        from deskctl.paths import runtime_dir

        base = runtime_dir() / "xvfb"
        found: list[RemoteHandle] = []
        if not base.is_dir():
            return found
        for directory in sorted(base.iterdir()):
            marker = self._read_marker(directory / "desktop.json")
            if marker is None or not isinstance(marker.get("handle"), dict):
                if directory.is_dir() and not (directory / "desktop.json").exists():
                    # a directory without marker: a create that died before its first write
                    found.append(RemoteHandle(self.name, directory.name, f"xvfb:{directory.name}",
                                              labels={LABEL_SESSION: directory.name}, data={"dir": str(directory)}))
                continue
            try:
                handle = RemoteHandle.from_dict(marker["handle"])
            except (KeyError, TypeError, ValueError):
                continue
            if selector and any(handle.labels.get(k) != v for k, v in selector.items()):
                continue
            found.append(handle)
        return found

    def find(self, session_id: str) -> RemoteHandle:
        for handle in self.list_owned({LABEL_SESSION: session_id}):
            return handle
        raise NotFound(f"no xvfb desktop for session {session_id}", provider=self.name)

    def close(self) -> None:
        super().close()
        self._reap_children()

