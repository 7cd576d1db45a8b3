"""The use_computer provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic). It holds
no secret: the API key comes from the environment or keyring each time."""

from __future__ import annotations

from typing import Any

from deskctl.providers._handle_data import HandleData

__all__ = ["UseComputerHandleData"]


class UseComputerHandleData(HandleData, frozen=True):
    """``base_url`` (the API the sandbox was made on; ``""``: this process's), ``platform`` (``""`` in a row
    without it: macOS, the service's first), ``ephemeral``, and what the service said of the sandbox: ``host``,
    ``version``, ``vm_ip`` (``""`` when it said nothing)."""

    base_url: str = ""
    platform: str = ""
    ephemeral: bool = True
    host: str = ""
    version: str = ""
    vm_ip: str = ""

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in ("base_url", "platform", "host", "version", "vm_ip"):
            if key in values:
                values[key] = str(values[key])
        return values
