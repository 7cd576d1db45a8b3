"""The ``memory`` provider (a desktop that is a pixel buffer in a folder): :class:`MemoryProvider` in
:mod:`.provider`, the desktop's folder in :mod:`.screen`, its options in :mod:`.options` and the desktop's own
tools (xdpyinfo, xclip, xmessage) as the data file ``guest/tools.py.in``."""

from deskctl.providers.memory.provider import MemoryProvider
from deskctl.providers.memory.screen import DESKTOP_ENV, MemoryScreen

__all__ = ["DESKTOP_ENV", "MemoryProvider", "MemoryScreen"]
