"""The base class of the providers whose desktop is a display driven over one connection per session (``xvfb``,
``docker`` and ``ssh`` through the shared X11 driver; providers that reach the display through the in-desktop
agent plug in the same way), beside :class:`~deskctl.providers._http.HttpProvider` for the cloud providers.

:class:`X11Provider` keeps one driver per session in this process: opened on first use, shared by every thread,
opened once even when threads ask at the same moment, dropped (and reopened by the next call) when a call finds
the display lost. It writes the display half of the provider contract once: ``display_size``, ``screenshot``,
``raw_frame``, ``act``, ``cursor_position`` and ``window_titles`` (over the driver's connection, not by a command
on the desktop); clipboard, launch and open_url come from :class:`~deskctl.providers._guest.GuestActions`
through the subclass's ``exec``.

Hooks for a subclass:

- :meth:`X11Provider._open_driver` (required): connect to the handle's display. Anything with the
  :class:`DisplayDriver` surface serves: :class:`~deskctl.core.x11.X11Driver`, or the agent's client.
- :meth:`X11Provider._lost`: the error for a call that lost the display, which may say why (the container
  stopped, the SSH connection dropped). Default: the :class:`~deskctl.errors.SessionLost` as the driver raised it.
- :meth:`X11Provider._read`: how a call that changes nothing on the desktop runs (ssh retries it once on a new
  connection). Default: as any call. ``act`` never goes through it: an action is never run twice.
- :meth:`X11Provider._framebuffer_path`: the file Xvfb draws the screen into (``-fbdir``, in a host tmpfs) when
  this process can map it (xvfb, and docker on the local engine). Captures then read the pixels from it after one
  X round trip (so every request sent before is drawn): a copy of mapped memory, not the X server's copy into
  MIT-SHM or the pixels through the socket (not in a one-shot ``deskctl screenshot`` process, where one GetImage
  costs less than mapping the file once). Default: none, the driver captures.
- :meth:`X11Provider._screenshot_with` / :meth:`X11Provider._raw_frame_with`: another capture path, given the
  open driver (the framebuffer file's, by default). A subclass may also override ``screenshot`` /
  ``raw_frame`` whole (ssh's damage-driven frame cache) and use :meth:`X11Provider._call` where it needs the
  driver.
- :meth:`X11Provider._drop_driver`: extend it (calling ``super()``) to release what belongs with the driver.
"""

from __future__ import annotations

import os
from abc import abstractmethod

from deskctl import _threads
from deskctl.errors import DeskctlError, SessionLost
from deskctl.providers._guest import GuestActions
from deskctl.providers.base import Provider, RawFrame, RemoteHandle, Screenshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Mapping
    from typing import Any, Protocol, TypeVar

    from deskctl.actions import Action
    from deskctl.providers._framebuffer import _Framebuffer

__all__ = ["X11Provider"]

if TYPE_CHECKING:  # for the type checkers only (typing costs a tenth of a `deskctl do` process)
    T = TypeVar("T")

    class DisplayDriver(Protocol):
        """What :class:`X11Provider` needs of a driver: the surface of :class:`~deskctl.core.x11.X11Driver`.
        A connection lost in a call raises :class:`~deskctl.errors.SessionLost`; ``close`` is idempotent."""

        @property
        def closed(self) -> bool: ...

        def size(self) -> tuple[int, int]: ...

        def screenshot(self, *, compress_level: int = 1) -> Screenshot: ...

        def raw_frame(self) -> RawFrame: ...

        def act(self, action: Action) -> None: ...

        def cursor_position(self) -> tuple[int, int]: ...

        def window_titles(self) -> list[str]: ...

        def ping(self) -> None: ...

        def close(self) -> None: ...


class X11Provider(GuestActions, Provider):
    """A provider whose display calls go through one cached driver per session; see the module docstring."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._drivers: dict[str, DisplayDriver] = {}
        # one lock per session around opening, so that a slow connect (an SSH channel, a remote agent) holds up
        # neither the calls of other sessions nor a second open of the same display
        self._opening: dict[str, threading.Lock] = {}
        self._drivers_lock = _threads.Lock()
        self._framebuffers: dict[str, _Framebuffer] = {}  # guarded by _drivers_lock

    # -- hooks ---------------------------------------------------------------------------------------------------
    @abstractmethod
    def _open_driver(self, handle: RemoteHandle) -> DisplayDriver:
        """A new connection to the display of ``handle``; raises the provider's error when it cannot be made."""

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        """The error to raise after a call to ``doing`` lost the display (the driver is dropped already)."""
        if isinstance(cause, DeskctlError):
            return cause
        return SessionLost(f"lost the display of {handle.session_id}: {cause}", provider=self.name)

    def _read(self, handle: RemoteHandle, doing: str, work: Callable[[DisplayDriver], T]) -> T:
        """Run ``work``, a call that changes nothing on the desktop (so a subclass may run it again)."""
        return self._call(handle, doing, work)

    def _framebuffer_path(self, handle: RemoteHandle) -> str:
        """The framebuffer file of ``handle``'s Xvfb that this process can map, or ``""``."""
        return ""

    def _screenshot_with(self, handle: RemoteHandle, driver: DisplayDriver) -> Screenshot:
        """The framebuffer file's pixels (after one X round trip, so every request sent before is drawn), else
        the driver's capture."""
        framebuffer = self._framebuffer(handle)
        if framebuffer is None:
            return driver.screenshot()
        driver.ping()
        return framebuffer.screenshot()

    def _raw_frame_with(self, handle: RemoteHandle, driver: DisplayDriver) -> RawFrame:
        """As :meth:`_screenshot_with`, without the PNG."""
        framebuffer = self._framebuffer(handle)
        if framebuffer is None:
            return driver.raw_frame()
        driver.ping()
        return framebuffer.raw_frame()

    def _framebuffer(self, handle: RemoteHandle) -> _Framebuffer | None:
        """The mapped framebuffer file of the session (mapped once), or None when it has none this process can
        read (then the driver captures)."""
        with self._drivers_lock:
            cached = self._framebuffers.get(handle.session_id)
        if cached is not None:
            return cached
        path = self._framebuffer_path(handle)
        if not path:
            return None
        from deskctl.core.x11wire import wire_preferred  # loaded with the driver (deskctl.core.x11open)

        if wire_preferred():
            # a one-shot process (`deskctl screenshot`): mapping the file and faulting its pages in, done once, costs
            # more than the server's copy through the socket (A/B of whole processes: 3-6 ms more, xvfb and docker)
            return None
        if not os.path.exists(path):
            return None
        from deskctl.providers._framebuffer import _Framebuffer

        try:
            framebuffer = _Framebuffer(path)
        except (OSError, ValueError):
            return None
        with self._drivers_lock:
            cached = self._framebuffers.setdefault(handle.session_id, framebuffer)
        if cached is not framebuffer:  # another thread mapped it meanwhile
            framebuffer.close()
        return cached

    # -- the driver cache ----------------------------------------------------------------------------------------
    def _driver(self, handle: RemoteHandle) -> DisplayDriver:
        """The session's open driver, opened (once) when there is none or the last one was closed."""
        session_id = handle.session_id
        with self._drivers_lock:
            driver = self._drivers.get(session_id)
            if driver is not None and not driver.closed:
                return driver
            opening = self._opening.setdefault(session_id, _threads.Lock())
        with opening:
            with self._drivers_lock:
                driver = self._drivers.get(session_id)
                if driver is not None and not driver.closed:
                    return driver
            driver = self._open_driver(handle)
            with self._drivers_lock:
                self._drivers[session_id] = driver
            return driver

    def _call(self, handle: RemoteHandle, doing: str, work: Callable[[DisplayDriver], T]) -> T:
        """``work(driver)``; when it loses the display, the driver is dropped and :meth:`_lost` says why."""
        driver = self._driver(handle)
        try:
            return work(driver)
        except SessionLost as exc:
            self._drop_driver(handle.session_id, driver)
            error = self._lost(handle, doing, exc)
            if error is exc:
                raise
            raise error from exc

    def _drop_driver(self, session_id: str, driver: DisplayDriver | None = None) -> None:
        """Close the session's driver and forget it (only if it is still ``driver``, when one is given: another
        thread may have opened a new one already). Idempotent."""
        with self._drivers_lock:
            cached = self._drivers.get(session_id)
            if cached is not None and driver is not None and cached is not driver:
                cached = None
            elif cached is not None:
                del self._drivers[session_id]
            if driver is None:
                self._opening.pop(session_id, None)
        if cached is not None:
            cached.close()
        if driver is not None and driver is not cached:
            driver.close()
        with self._drivers_lock:
            framebuffer = self._framebuffers.pop(session_id, None)
        if framebuffer is not None:
            framebuffer.close()

    def close(self) -> None:
        """Close every driver of this process (the desktops stay)."""
        with self._drivers_lock:
            drivers = list(self._drivers.values())
            self._drivers.clear()
            self._opening.clear()
            framebuffers = list(self._framebuffers.values())
            self._framebuffers.clear()
        for driver in drivers:
            driver.close()
        for framebuffer in framebuffers:
            framebuffer.close()

    # -- the display calls of the provider contract -------------------------------------------------------------
    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        return self._read(handle, "read the screen size", lambda driver: driver.size())

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        return self._read(handle, "take a screenshot", lambda driver: self._screenshot_with(handle, driver))

    def raw_frame(self, handle: RemoteHandle) -> RawFrame:
        return self._read(handle, "capture the screen", lambda driver: self._raw_frame_with(handle, driver))

    def act(self, handle: RemoteHandle, action: Action) -> None:
        self._call(handle, "send input", lambda driver: driver.act(action))

    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        return self._read(handle, "read the pointer position", lambda driver: driver.cursor_position())

    def window_titles(self, handle: RemoteHandle) -> list[str]:
        """The top-level windows' titles, read over the driver's connection: a few round trips, no command on
        the desktop (``wait_for`` polls this)."""
        return self._read(handle, "list windows", lambda driver: driver.window_titles())
