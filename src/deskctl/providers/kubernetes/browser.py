"""The ``kubernetes`` provider's browser: Chromium in the pod with DevTools on the pod's loopback,
``127.0.0.1:9222`` (:data:`deskctl.browser.DEVTOOLS_PORT`, where a task verifier inside expects it; started by the
image's entrypoint for a start URL, or by :meth:`open_url`), and :meth:`browser_endpoint`: a loopback listener of
the caller's (:class:`deskctl.browser.ChannelForwarder`) whose every connection is a new authenticated connection
to the pod's agent turned into a byte pipe to that port (the agent's ``stream`` operation). Nothing listens on a
pod port but the agent's; DevTools is never exposed on the pod's network."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from deskctl.browser import ChannelForwarder
    from deskctl.providers._x11provider import DisplayDriver
    from deskctl.providers.base import RemoteHandle

__all__ = ["KubernetesBrowser"]

_LOCK = threading.Lock()


class KubernetesBrowser:
    """``open_url`` with Chromium, and ``browser_endpoint``, for the kubernetes provider."""

    if TYPE_CHECKING:
        name: ClassVar[str]

        def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, **kwargs: Any) -> Any: ...
        def _open_driver(self, handle: RemoteHandle) -> DisplayDriver: ...
        def _launch_detached(self, handle: RemoteHandle, app: str, args: Any) -> int | None: ...

    def open_url(self, handle: RemoteHandle, url: str, browser: str | None = None) -> None:
        """``browser="chromium"``, or none in a pod whose image has Chromium (the browser image): Chromium with
        DevTools on the pod's 127.0.0.1:9222 (a running one takes the URL); anything else is the desktop's
        opener."""
        from deskctl.browser import container_chromium_args, is_chromium

        if browser is None:
            said = self.exec(handle, "command -v chromium", 30)
            browser = "chromium" if said.exit_code == 0 and said.stdout.strip() else None
        if browser is None or not is_chromium(browser):
            super().open_url(handle, url, browser)  # type: ignore[misc]
            return
        self._require_program(handle, browser)  # type: ignore[attr-defined]
        self._launch_detached(handle, browser, container_chromium_args(url))

    def browser_endpoint(self, handle: RemoteHandle) -> Any:
        """The pod's DevTools through a loopback listener here (one per desktop, kept until the desktop is
        destroyed or the provider closed). A Chromium still starting has a while; none is ``usage.no_browser``."""
        from deskctl.agent.client import AgentDriver
        from deskctl.browser import DEVTOOLS_PORT, ChannelForwarder, endpoint_when_up

        def open_channel() -> Any:
            driver = self._open_driver(handle)
            assert isinstance(driver, AgentDriver)
            return driver.stream(DEVTOOLS_PORT)

        forwarders = self._browser_forwarders()
        with _LOCK:
            forwarder = forwarders.get(handle.session_id)
            if forwarder is None or forwarder.closed:
                forwarder = forwarders[handle.session_id] = ChannelForwarder(open_channel, target=DEVTOOLS_PORT)
        return endpoint_when_up(forwarder.port, self.name, DEVTOOLS_PORT,
                                lambda: self.exec(handle, "pgrep -x chromium", 15).exit_code == 0)

    def _browser_forwarders(self) -> dict[str, ChannelForwarder]:
        found: dict[str, ChannelForwarder] = self.__dict__.setdefault("_devtools_forwarders", {})  # atomic
        return found

    def close_browser(self, session_id: str | None = None) -> None:
        """Close the forwarder of ``session_id`` (None: every one): at destroy and at the provider's close; the
        agent's streams end with the connections it cuts."""
        forwarders = self._browser_forwarders()
        with _LOCK:
            chosen = [forwarders.pop(s) for s in list(forwarders) if session_id in (None, s)]
        for forwarder in chosen:
            forwarder.close()

    def close(self) -> None:
        """The DevTools forwarders, then the provider's connections."""
        self.close_browser()
        super().close()  # type: ignore[misc]
