"""The ``xvfb`` provider's create (Xvfb, the window manager, the browser and the owner watch, each started here) and
its readiness: a part of :class:`~deskctl.providers.xvfb.XvfbProvider` that only ``deskctl up`` loads (see
provider.py's ``_LATER``)."""

from __future__ import annotations

import _socket
import os
import sys
import time

from deskctl._fds import wait_readable
from deskctl._jsonc import dumps
from deskctl._record import replace
from deskctl.errors import (
    GeometryUnsupported,
    ProviderApiError,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
)
from deskctl.providers._procs import start_ticks
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_OWNER,
    LABEL_SESSION,
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
    which,
)
from deskctl.providers.xvfb.handle_data import XvfbHandleData, XvfbProcess
from deskctl.providers.xvfb.spawn import Child, spawn

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from deskctl.providers.xvfb.options import Options
    from deskctl.spec import DesktopSpec, Geometry

__all__ = ["_XvfbCreate"]


class _XvfbCreate(_XvfbBrowser):
    """Create and readiness of the ``xvfb`` provider (:class:`~deskctl.providers.xvfb.XvfbProvider`)."""

    # -- create --------------------------------------------------------------------------------------------
    def _create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
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

    def _start_xvfb(self, handle: RemoteHandle, xvfb: str, geometry: Geometry, options: Options,
                    directory: Path, timeout: float) -> int:
        from deskctl.providers._framebuffer import _framebuffer_root

        # the screen in a file of a host tmpfs (-fbdir): a capture maps it rather than asking the server for a copy
        # (X11Provider._framebuffer); recorded before Xvfb starts, so that destroy removes its folder whatever happens
        fb_dir = _framebuffer_root(directory) / handle.session_id
        fb_dir.mkdir(mode=0o700, exist_ok=True)
        replace(XvfbHandleData.of(handle), framebuffer=str(fb_dir / "Xvfb_screen0")).store(handle)
        self._write_marker(handle)  # a crash from here on: reap finds the folder too
        read_end, write_end = os.pipe()
        log = open(directory / "xvfb.log", "wb")  # noqa: SIM115 (handed to the child)
        argv = [xvfb, "-displayfd", str(write_end), "-screen", "0",
                f"{geometry.width}x{geometry.height}x{geometry.depth}", "-auth", XvfbHandleData.of(handle).cookie_file,
                "-fbdir", str(fb_dir), "-nocursor", "-nolisten", "tcp", "-noreset", *options.xvfb_args]
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
    def _wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
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

