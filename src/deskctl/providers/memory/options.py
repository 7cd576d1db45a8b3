"""The ``memory`` provider's options: none (a desktop is a folder; nothing to choose)."""

from __future__ import annotations

from typing import ClassVar

from deskctl.providers.options import ProviderOptions

__all__ = ["Options"]


class Options(ProviderOptions):
    provider: ClassVar[str] = "memory"
