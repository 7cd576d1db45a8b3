"""The ``xvfb`` provider's preflight (Xvfb and its tools are here, the window manager and the browser a spec asks
for) and its typed options, which create reads too: a part of :class:`~deskctl.providers.xvfb.XvfbProvider` that
``deskctl do``, ``screenshot`` and ``down`` do not load (see provider.py's ``_LATER``; the colour depth is the
class's own ``check_geometry``)."""

from __future__ import annotations

from deskctl.providers.xvfb.display import BROWSERS, default_geometry, which
from deskctl.providers.xvfb.provider import _XvfbBase

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.checks import CheckRecorder, CheckResult
    from deskctl.providers.xvfb.options import Options
    from deskctl.spec import DesktopSpec

__all__ = ["_XvfbPreflight"]


class _XvfbPreflight(_XvfbBase):
    """Preflight and the options of the ``xvfb`` provider (:class:`~deskctl.providers.xvfb.XvfbProvider`)."""

    # -- preflight -----------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        from deskctl.checks import CheckRecorder

        # platform and geometry (the depth too: check_geometry) are checked by the preflight runner
        checks = CheckRecorder(self.name)
        xvfb = which("Xvfb")
        if xvfb:
            checks.add("pass", "xvfb.binary", f"Xvfb found at {xvfb}")
        else:
            checks.add("fail", "xvfb.binary", "Xvfb is not installed", "apt-get install xvfb")
        xauth = which("xauth")
        if xauth:
            checks.add("pass", "xvfb.xauth", f"xauth found at {xauth}")
        else:
            checks.add("warn", "xvfb.xauth", "xauth is not installed: tools that read XAUTHORITY still work, "
                       "but you cannot inspect the cookie", "apt-get install xauth")
        if self._wants_window_manager(spec):
            wm = which("openbox")
            if wm:
                checks.add("pass", "xvfb.window_manager", f"openbox found at {wm}")
            else:
                checks.add("fail", "xvfb.window_manager", "a window manager was asked for but openbox is not "
                           "installed", "apt-get install openbox")
        if spec.start_url:
            browser = self._browser()
            if browser:
                checks.add("pass", "xvfb.browser", f"browser {browser} opens {spec.start_url}")
            else:
                checks.add("fail", "xvfb.browser", f"--start-url needs a browser; none of {', '.join(BROWSERS)} "
                           "is installed", "apt-get install chromium")
            self._window_checks(spec, checks)
        return checks.results

    def _window_checks(self, spec: DesktopSpec, checks: CheckRecorder) -> None:
        if spec.geometry is not None and spec.window_geometry is not None:
            return  # the engine checks a window against a pinned size (geometry.window_*); a native one is ours
        geometry = spec.geometry or default_geometry()
        window = spec.window_geometry
        if window is None:
            checks.add("pass", "xvfb.window_geometry", f"browser window fills the {geometry} desktop")
            return
        fills = (window.x, window.y, window.width, window.height) == (0, 0, geometry.width, geometry.height)
        if window.x == 0 and window.y == 0 and not fills:
            checks.add("warn", "xvfb.window_geometry",
                       f"the browser window {window} sits at 0,0 but does not fill the {geometry} desktop: "
                       "the agent sees an empty band it may click into",
                       f"use --window-geometry {geometry} or --geometry {window.width}x{window.height}")
        elif window.x + window.width > geometry.width or window.y + window.height > geometry.height:
            checks.add("warn", "xvfb.window_geometry",
                       f"the browser window {window} reaches past the {geometry} desktop")
        else:
            checks.add("pass", "xvfb.window_geometry", f"browser window {window} on a {geometry} desktop")

    def _settings(self, spec: DesktopSpec | None = None) -> Options:
        settings: Any = self.settings(spec)  # this provider's Options (not typing.cast: no typing at run time)
        options: Options = settings
        return options

    def _wants_window_manager(self, spec: DesktopSpec) -> bool:
        return spec.window_manager or self._settings(spec).window_manager

    def _browser(self) -> str | None:
        wanted = self._settings().browser
        for name in ([wanted] if wanted else list(BROWSERS)):
            found = which(name)
            if found:
                return found
        return None
