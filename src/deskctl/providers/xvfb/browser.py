"""The ``xvfb`` provider's browser: the Chromium of ``--start-url`` (its profile and DevTools port in the
session directory), ``open_url`` and the DevTools endpoint: a part of :class:`~deskctl.providers.xvfb.XvfbProvider`
loaded on first use (see provider.py's ``_LATER``)."""

from __future__ import annotations

import os
import time

from deskctl.errors import ProviderUnreachable, UsageError
from deskctl.providers._procs import tagged_processes
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import RemoteHandle
from deskctl.providers.xvfb.display import BROWSERS, which
from deskctl.providers.xvfb.handle_data import XvfbHandleData
from deskctl.providers.xvfb.preflight import _XvfbPreflight

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from pathlib import Path
    from typing import Any

    from deskctl.spec import DesktopSpec, Geometry

__all__ = ["BROWSER_STARTING", "_XvfbBrowser"]

#: seconds a starting Chromium (its process runs) has to open its DevTools port
BROWSER_STARTING = 60.0


class _XvfbBrowser(_XvfbPreflight):
    """The browser of the ``xvfb`` provider (:class:`~deskctl.providers.xvfb.XvfbProvider`)."""

    if TYPE_CHECKING:
        def _spawn(self, handle: RemoteHandle, role: str, argv: list[str]) -> subprocess.Popen[bytes]: ...

    def _start_browser(self, handle: RemoteHandle, spec: DesktopSpec, geometry: Geometry) -> None:
        browser = self._browser()
        if browser is None:
            raise ProviderUnreachable(f"--start-url needs a browser; none of {', '.join(BROWSERS)} is installed",
                                      provider=self.name, remedy="apt-get install chromium")
        window = spec.window_geometry
        box = (window.x, window.y, window.width, window.height) if window else (0, 0, geometry.width,
                                                                                geometry.height)
        self._spawn(handle, "browser", self._browser_argv(handle, browser, str(spec.start_url), box))

    def _browser_argv(self, handle: RemoteHandle, browser: str, url: str, box: tuple[int, int, int, int]) -> list[str]:
        """The browser's command line: its profile in the session directory; Chromium with DevTools on the
        loopback at a port it picks (the host is shared: two desktops never fight over 9222; the port is in the
        profile's DevToolsActivePort, which :meth:`browser_endpoint` reads), or at the ``devtools_port`` option."""
        from pathlib import Path

        from deskctl.browser import chromium_flags, is_chromium

        x, y, w, h = box
        profile = Path(XvfbHandleData.of(handle).dir) / "browser-profile"
        profile.mkdir(mode=0o700, exist_ok=True)
        if "firefox" in Path(browser).name:
            return [browser, "--no-remote", "--profile", str(profile), "--width", str(w), "--height", str(h), url]
        argv = [browser, f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-dev-shm-usage", f"--window-position={x},{y}",
                f"--window-size={w},{h}", "--new-window", url]
        if is_chromium(browser):
            argv[1:1] = chromium_flags(XvfbHandleData.of(handle).devtools_port)
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        return argv

    # -- the browser's DevTools ------------------------------------------------------------------------------
    def open_url(self, handle: RemoteHandle, url: str, browser: str | None = None) -> None:
        """Chromium (``browser="chromium"``, or no ``browser`` while the desktop's Chromium runs) opens ``url``
        in the session's profile with DevTools on (a running one takes it as a new window); any other
        ``browser``, or none while no Chromium runs, is the guest's way (``xdg-open``)."""
        from pathlib import Path

        from deskctl.browser import active_port, is_chromium

        profile = Path(XvfbHandleData.of(handle).dir) / "browser-profile"
        running = active_port(profile) is not None
        program = which(browser) if browser else (self._browser() if running else None)
        if program is None or not is_chromium(program):
            X11Provider.open_url(self, handle, url, browser)  # the guest's (not super(): see provider.py)
            return
        width, height = (int(v) for v in XvfbHandleData.of(handle).geometry.split("x")[:2])
        argv = self._browser_argv(handle, program, url, (0, 0, width, height))
        self._launch_detached(handle, argv[0], argv[1:])
        deadline = time.monotonic() + 30.0
        while active_port(profile) is None and time.monotonic() < deadline:
            time.sleep(0.1)

    def browser_endpoint(self, handle: RemoteHandle) -> Any:
        """The loopback port of the session's Chromium (the caller is on the same host): the one its profile's
        DevToolsActivePort names, else the ``devtools_port`` option's. A Chromium of this session that is still
        starting (its process runs) has a while to open it; none running is ``usage.no_browser`` at once."""
        from pathlib import Path

        from deskctl.browser import active_port, endpoint_at, no_browser

        profile = Path(XvfbHandleData.of(handle).dir) / "browser-profile"
        deadline = time.monotonic() + BROWSER_STARTING
        while True:
            port = active_port(profile) or XvfbHandleData.of(handle).devtools_port
            try:
                if port:
                    return endpoint_at(port, self.name)
                raise no_browser(self.name)
            except UsageError:
                if time.monotonic() > deadline or not self._browser_runs(handle, profile):
                    raise
            time.sleep(0.25)

    @staticmethod
    def _browser_runs(handle: RemoteHandle, profile: Path) -> bool:
        """A process of this session runs Chromium on ``profile``."""
        flag = f"--user-data-dir={profile}".encode()
        for pid, _ in tagged_processes(handle.session_id):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if flag in fh.read().split(b"\0"):
                        return True
            except OSError:
                continue
        return False
