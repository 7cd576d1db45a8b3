"""Daytona's options: the one declaration that ``-o KEY=VALUE``, ``[providers.daytona]``, the environment,
``deskctl providers --json`` and docs/providers.md read (at run time through ``_option_table.py``, made from it)."""

from __future__ import annotations

from typing import ClassVar

from deskctl.providers._http_options import HttpOptions, number
from deskctl.providers.options import option

__all__ = ["Options"]


class Options(HttpOptions):
    """What a Daytona sandbox is made from and how long deskctl waits for the service."""

    provider: ClassVar[str] = "daytona"

    api_url: str = option("https://app.daytona.io/api", doc="the Daytona API", env="DAYTONA_API_URL")
    target: str | None = option(None, doc="the region (default: the organization's; us for windows)",
                                env="DAYTONA_TARGET")
    snapshot: str | None = option(None, doc="the snapshot to start (default: Daytona's; windows for windows)")
    auto_stop_minutes: int | None = option(
        None, doc="idle minutes before Daytona stops the sandbox (default: 15, or the lifetime of a detached one)",
        bound="provider_option", ge=0)
    ttl_minutes: int | None = option(
        None, doc="wall-clock minutes before Daytona deletes it (default: the session's lifetime + 5, else 1440; "
                  "0 disables)", bound="provider_option", ge=0)
    destroy_timeout: float = number(300.0, "how long a destroy waits for the sandbox to go, seconds")
    create_timeout: float = number(120.0, "timeout of the create request, seconds")
    snapshot_timeout: float = number(600.0, "how long a snapshot (deskctl snapshot) may take to become active, "
                                            "seconds")
