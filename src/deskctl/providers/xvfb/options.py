"""The ``xvfb`` provider's options: the one declaration ``-o``, ``[providers.xvfb]``, ``deskctl providers --json``
and docs/providers.md read."""

from __future__ import annotations

from deskctl.providers.options import ProviderOptions, option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar

__all__ = ["Options"]


class Options(ProviderOptions):
    provider: ClassVar[str] = "xvfb"

    window_manager: bool = option(False, doc="run openbox on the desktop (also the spec's window_manager)")
    browser: str | None = option(None, doc="the browser a start URL opens in: a command name or path "
                                           "(default: the first of chromium, google-chrome, firefox found)",
                                 min_length=1)
    devtools_port: int = option(0, doc="the loopback port of Chromium's DevTools (0: one Chromium picks; 9222 for "
                                       "verifiers that expect it, one such desktop on a host at a time)",
                                ge=0, le=65535)
    owner_watch: bool = option(True, doc="a watcher process ends the desktop when its owner dies (or, detached, "
                                         "at its expiry)")
    xvfb_args: tuple[str, ...] = option((), doc="extra arguments for Xvfb")
    start_timeout: float = option(30.0, doc="seconds Xvfb may take to accept connections", gt=0, le=3600)
