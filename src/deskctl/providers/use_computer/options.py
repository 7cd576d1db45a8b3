"""use.computer's options: the one declaration that ``-o KEY=VALUE``, ``[providers.use-computer]``, the environment,
``deskctl providers --json`` and docs/providers.md read (at run time through ``_option_table.py``, made from it)."""

from __future__ import annotations

from typing import ClassVar

from deskctl.providers._http_options import HttpOptions, number
from deskctl.providers.options import option

__all__ = ["Options"]


class Options(HttpOptions):
    """What a use.computer sandbox is made from and how long deskctl waits for the service."""

    provider: ClassVar[str] = "use-computer"

    base_url: str = option("https://api.use.computer", doc="the use.computer API", env="USE_COMPUTER_BASE_URL")
    ephemeral: bool = option(True, doc="the service reaps the sandbox after about 2 idle minutes (false: only a "
                                       "destroy ends it; required for a detached session)")
    host: str | None = option(None, doc="the host to place the sandbox on", env="USE_COMPUTER_HOST")
    version: str | None = option(None, doc="the guest image's version (ubuntu, windows; not with snapshot)",
                                 env="USE_COMPUTER_VERSION")
    snapshot: str | None = option(None, doc="a snapshot to start from (ubuntu, windows; not with version)",
                                  env="USE_COMPUTER_SNAPSHOT")
    reservation_id: str | None = option(None, doc="the reservation a macOS sandbox comes from",
                                        env="USE_COMPUTER_RESERVATION_ID")
    resources: str | dict[str, int] | None = option(
        None, doc='cpus, memory and disk of an ubuntu or windows sandbox ("cpus=4,memory_mb=4096,disk_gb=40")')
    shell: str | None = option(None, doc="the shell exec names (default: bash on ubuntu, powershell on windows)")
    create_timeout: float = number(180.0, "timeout of the create request, seconds")
