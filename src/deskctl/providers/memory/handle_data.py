"""The memory provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic)."""

from __future__ import annotations

from deskctl.providers._handle_data import HandleData

__all__ = ["MemoryHandleData"]


class MemoryHandleData(HandleData, frozen=True):
    """``dir``: the desktop's folder (``""`` in a row without it: the provider's folder for the session);
    ``geometry``: ``WxH`` as made; ``platform``: the spec's platform value."""

    dir: str = ""
    geometry: str = ""
    platform: str = ""
