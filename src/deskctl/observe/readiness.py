"""Is the application ready, has the screen stopped changing.

``open_desktop(..., ready_when=...)`` / ``deskctl up --wait-for TITLE | --wait-for-url URL | --wait-for-command
CMD`` wait after the desktop itself is ready for one of:

- a window whose title contains a text (``"Inbox"`` or ``{"title": "Inbox"}``),
- a page of the desktop's Chromium, by its DevTools list (``{"url": "example.com"}``: a page whose URL or title
  contains it; read through :meth:`Desktop.browser_pages` where the provider reaches DevTools (``start_url`` and
  ``open_url`` start Chromium with it), else at port 9222 on the desktop's loopback unless ``{"port": N}`` says),
- a command on the desktop that exits 0 (``{"command": "test -e /tmp/ready"}``),
- or any ``callable(desk)`` that returns something truthy.

Not ready in time is an infrastructure failure (``readiness.timeout``, exit 20) and the desktop is destroyed.

:func:`wait_until_stable` waits until the screen (or a region of it) has not changed for ``quiet_ms``, comparing
raw frames (no PNG is encoded).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from deskctl.errors import ReadinessTimeout, UsageError, WaitTimeout

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["condition", "ready_or_destroyed", "wait_ready_when", "wait_until_stable"]

_POLL = 0.1


def _pages(desk: Desktop, port: int | None) -> list[Any]:
    """The desktop's browser pages: through :meth:`Desktop.browser_pages` where the provider reaches the browser's
    DevTools (it knows the port this session's Chromium took), else from the desktop's own loopback by a command
    (port 9222 unless given). An empty list while no browser answers yet."""
    import json

    from deskctl.browser import DEVTOOLS_PORT, NO_BROWSER, parse_pages

    if port is None and getattr(desk.provider.capabilities, "browser", False):
        try:
            return list(desk.browser_pages())
        except UsageError as exc:
            if exc.code == NO_BROWSER:
                return []
            raise
    result = desk.exec(_devtools_probe(DEVTOOLS_PORT if port is None else port), timeout=15)
    if result.exit_code != 0:
        return []
    try:
        return parse_pages(json.loads(result.stdout))
    except ValueError:
        return []


def _devtools_probe(port: int) -> str:
    """A command for the desktop that prints the DevTools target list of the browser on ``port``."""
    return ('p=/usr/bin/python3; [ -x "$p" ] || p=python3; "$p" -c "import urllib.request,sys;'
            f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port}/json/list',timeout=5).read().decode())\"")


def condition(what: Any) -> tuple[str, Callable[[Desktop], Any]]:
    """``(description, check)`` for a ``ready_when`` value; ``usage.invalid`` for anything else."""
    if callable(what):
        return getattr(what, "__name__", "the condition"), what
    if isinstance(what, str):
        what = {"title": what}
    if not isinstance(what, Mapping) or len(set(what) & {"title", "url", "command"}) != 1:
        raise UsageError("ready_when is a window title, {\"title\": ...}, {\"url\": ...}, {\"command\": ...} or a "
                         "callable", code="usage.invalid")
    if "title" in what:
        title = str(what["title"])
        if not title:
            raise UsageError("ready_when needs a non-empty title", code="usage.invalid")
        return (f"a window titled {title!r}",
                lambda desk: next((t for t in desk.window_titles() if title in t), None))
    if "url" in what:
        url = str(what["url"])
        port = what.get("port")

        def page(desk: Desktop) -> Any:
            found = _pages(desk, None if port is None else int(port))
            return next((p.url for p in found if url in p.url or url in p.title), None)

        where = "its DevTools" if port is None else f"DevTools port {int(port)}"
        return f"a browser page at {url!r} ({where})", page
    command = str(what["command"])
    return f"the command {command!r} to exit 0", lambda desk: desk.exec(command, timeout=60).exit_code == 0


def wait_ready_when(desk: Desktop, what: Any, timeout: float) -> Any:
    """Wait until ``what`` holds on ``desk`` (its value); :class:`ReadinessTimeout` naming it and the last error
    seen when ``timeout`` passes. The caller destroys the desktop."""
    described, check = condition(what)
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            value = check(desk)
        except (WaitTimeout, UsageError):
            raise
        except Exception as exc:  # a check that fails now may pass later (the app is still starting)
            value, last = None, f"; last error: {exc}"
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ReadinessTimeout(f"{described} was not there within {timeout:g}s{last}",
                                   provider=desk.provider_name, remedy="raise --ready-timeout, or check that the "
                                   "application starts (deskctl screenshot ID)")
        time.sleep(min(_POLL * 2, max(0.0, deadline - time.monotonic())))


def ready_or_destroyed(desk: Desktop, what: Any, timeout: float) -> None:
    """:func:`wait_ready_when` on a desktop just opened; when it fails, the desktop is destroyed (its ledger row
    ends as failed) before the error is raised."""
    try:
        wait_ready_when(desk, what, timeout)
    except BaseException:
        desk.end_reason = "readiness.timeout"
        desk.close()
        raise


def wait_until_stable(desk: Desktop, region: Any = None, quiet_ms: int = 500, timeout: float = 30.0) -> float:
    """Return once the screen (or ``region`` = (x, y, w, h)) has not changed for ``quiet_ms`` milliseconds; the
    seconds it took. ``wait.timeout`` (exit 6) when it keeps changing for ``timeout`` seconds."""
    from deskctl.limits import check_number
    from deskctl.observe.transform import plan

    quiet = check_number("quiet_ms", quiet_ms, what="quiet_ms", strings=False) / 1000.0
    timeout = check_number("wait_timeout", timeout, what="timeout", strings=False)
    box = plan(desk.size, region=region).region if region is not None else None
    started = time.monotonic()
    deadline = started + timeout

    def digest() -> bytes:
        frame = desk.raw_frame()
        if box is None:
            return hashlib.blake2b(frame.data, digest_size=16).digest()
        x, y, w, h = box
        return hashlib.blake2b(frame.pil_view().crop((x, y, x + w, y + h)).tobytes(), digest_size=16).digest()

    last, since = digest(), time.monotonic()
    while True:
        now = time.monotonic()
        if now - since >= quiet:
            return now - started
        if now >= deadline:
            raise WaitTimeout(f"the screen kept changing for {timeout:g}s (it must stay still for {quiet_ms} ms)",
                              provider=desk.provider_name)
        time.sleep(min(_POLL / 2, quiet / 4 or _POLL / 2, max(0.0, deadline - now)))
        current = digest()
        if current != last:
            last, since = current, time.monotonic()
