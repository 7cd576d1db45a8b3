"""The cua_cloud provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic). It holds no
secret: the API key and the OAuth client secret come from the environment or keyring each time."""

from __future__ import annotations

import math
from typing import Any

from deskctl.providers._handle_data import HandleData

__all__ = ["CuaHandleData"]


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class CuaHandleData(HandleData, frozen=True):
    """Where the claim lives: ``base_url`` (``""``: this process's), ``namespace`` (the pool's), ``warmpool``,
    ``svc_suffix``; ``sandbox`` (the bound sandbox's name, ``""`` until bound), ``platform`` (``""``: unknown),
    ``claim_ttl`` (seconds each renewal moves the claim's shutdown time; None: the provider's), ``expires_at``
    (the session's expiry, never renewed past; None: none)."""

    base_url: str = ""
    namespace: str = ""
    warmpool: str | None = None
    svc_suffix: str = ""
    sandbox: str = ""
    platform: str = ""
    claim_ttl: float | None = None
    expires_at: float | None = None

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in ("base_url", "namespace", "svc_suffix", "sandbox", "platform"):
            if key in values:
                values[key] = str(values[key])
        if "warmpool" in values:
            values["warmpool"] = str(values["warmpool"])
        for key in ("claim_ttl", "expires_at"):
            if key in values:
                values[key] = _finite(values[key])
        return values
