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

import os
import time

from deskctl import _threads
from deskctl._jsonc import loads
from deskctl.errors import CleanupIncomplete, NotFound, ProviderUnreachable, SessionLost
from deskctl.platforms import Platform
from deskctl.providers._later import add_parts
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import LABEL_SESSION, Capabilities, RemoteHandle
from deskctl.providers.xvfb.handle_data import XvfbHandleData, XvfbProcess

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    import subprocess
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from deskctl.core.x11 import X11Driver
    from deskctl.providers.xvfb.commands import _XvfbCommands as _Mixins  # the whole class, as mypy checks it
    from deskctl.providers.xvfb.spawn import Child
    from deskctl.spec import DesktopSpec, Geometry
else:
    import _signal  # signal's functions and constants without signal.py's enums (typeshed has no _signal)

__all__ = ["XvfbProvider"]

_TERM_GRACE = 5.0

#: the methods of the class's other parts (its preflight, browser, create and commands), by the ``module:class``
#: that defines them: :class:`XvfbProvider` takes each from there when it is first looked up (providers/_later.py),
#: so that a process that only destroys, drives or captures a desktop (``deskctl down``, ``do``, ``screenshot``)
#: imports none of those modules (nor spawn.py, _guest.py, core/shell.py). tests/unit/test_xvfb_parts.py holds this
#: list whole.
_LATER = {
    "deskctl.providers.xvfb.preflight:_XvfbPreflight": (
        "preflight", "_window_checks", "_settings", "_wants_window_manager", "_browser"),
    "deskctl.providers.xvfb.browser:_XvfbBrowser": (
        "_start_browser", "_browser_argv", "open_url", "browser_endpoint", "_browser_runs"),
    "deskctl.providers.xvfb.create:_XvfbCreate": (
        "_create", "_wait_ready", "_require", "_start_xvfb", "_log_tail", "_remember", "_spawn", "_start_watcher",
        "_write_marker", "_wait_on_display"),
    "deskctl.providers.xvfb.commands:_XvfbCommands": ("exec", "_other_user", "upload", "download"),
}


class _XvfbBase(X11Provider):
    """What every process that holds an xvfb desktop uses: its driver, liveness, destroy and the listing; the
    other parts (preflight.py, browser.py, create.py, commands.py) subclass it."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._children: dict[int, subprocess.Popen[bytes] | Child] = {}
        self._lock = _threads.RLock()

    def _env(self, handle: RemoteHandle) -> dict[str, str]:
        """The environment of a program on the desktop (create's, exec's)."""
        from deskctl.providers._procs import SESSION_ENV

        env = dict(os.environ)
        data = XvfbHandleData.of(handle)
        env["DISPLAY"] = data.display
        env["XAUTHORITY"] = data.cookie_file
        env[SESSION_ENV] = handle.session_id  # tags every descendant, for destroy
        return env

    # -- while open ----------------------------------------------------------------------------------------
    def _framebuffer_path(self, handle: RemoteHandle) -> str:
        """The file this desktop's Xvfb draws the screen into (``-fbdir``); captures map it."""
        return XvfbHandleData.of(handle).framebuffer

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
        from deskctl.providers._procs import alive

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
        from deskctl.providers._procs import alive, tagged_processes

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
        # the session's folder, and the framebuffer's in the host tmpfs (inside the first when /dev/shm was not usable)
        for directory in (data.dir, os.path.dirname(data.framebuffer) if data.framebuffer else ""):
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
        from deskctl.providers._procs import alive, wait_gone
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
        from deskctl.providers.xvfb.display import file_id, listening, lock_owner
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



    def check_geometry(self, geometry: Geometry | None, platform: Platform) -> str | None:
        from deskctl.providers.xvfb.display import depth_problem

        return super().check_geometry(geometry, platform) or depth_problem(geometry)


if not TYPE_CHECKING:
    _Mixins = _XvfbBase  # the rest later: see _LATER


class XvfbProvider(_Mixins):
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

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        """create.py's ``_create`` (written out here, as :meth:`wait_ready`: the base class declares both abstract,
        and a method found later is not seen by the class's check of what is implemented; and looked up on
        ``self``, as the other parts' methods, not imported: create.py imports this module)."""
        return self._create(spec, session_id, labels)

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        self._wait_ready(handle, deadline)


add_parts(XvfbProvider, _LATER)
