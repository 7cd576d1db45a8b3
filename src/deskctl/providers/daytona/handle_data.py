"""The daytona provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic). It holds no
secret: the API key comes from the environment or keyring each time; the toolbox URL carries none."""

from __future__ import annotations

from typing import Any

from deskctl.providers._handle_data import HandleData

__all__ = ["DaytonaHandleData"]


class DaytonaHandleData(HandleData, frozen=True):
    """``api_url`` (the API the sandbox was made on; ``""``: this process's), ``toolbox_url`` (its toolbox proxy,
    ``""`` until the sandbox started), ``platform``, and what the API said of the sandbox: ``name``, ``target``,
    ``snapshot``, ``sandbox_class``, ``cpu``, ``memory``, ``disk``, ``gpu``, ``ttl_minutes``, ``auto_destroy_at``
    (None when it said nothing)."""

    api_url: str = ""
    toolbox_url: str = ""
    platform: str = ""
    name: str | None = None
    target: str | None = None
    snapshot: str | None = None
    sandbox_class: str | None = None
    cpu: float | None = None
    memory: float | None = None
    disk: float | None = None
    gpu: float | None = None
    ttl_minutes: float | None = None
    auto_destroy_at: str | None = None

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in ("api_url", "toolbox_url", "platform"):
            if key in values:
                values[key] = str(values[key])
        for key in ("cpu", "memory", "disk", "gpu", "ttl_minutes"):
            if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int | float)):
                del values[key]  # as the API's numbers were kept: only numbers
        return values
