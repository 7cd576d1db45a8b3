"""The conformance target of the ``memory`` provider, and its probe window.

The memory desktop has no X server, so the probe is a window on the memory screen instead
(:class:`MemoryProbe`): it has the X probe's interface (tests/probe) and reads the events the memory screen
received (``events.jsonl``, X keysyms and masks), paints into the frame buffer, and on open covers the screen in
white as the X probe's window does (the screen behind it is black), restoring it when closed.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl.providers.base import RemoteHandle
from deskctl.providers.memory import MemoryScreen
from deskctl.providers.xvfb import SESSION_ENV
from probe import Probe, ProbeEvent, _char

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["MEMORY_TARGET_KWARGS", "MemoryProbe", "memory_leftovers", "open_memory_probe"]

#: how often a waiting probe looks at the event log again (every action is written before it returns, so a
#: wait only ever waits for another process: `deskctl do`, the view's input handler)
_POLL = 0.01


class MemoryProbe(Probe):
    """A full-screen white window on a memory desktop that records the input events it receives."""

    def __init__(self, directory: str | Path) -> None:  # the X probe's constructor (an X connection) is not called
        self.screen = MemoryScreen(directory)
        self.size = self.screen.size
        self.events: list[ProbeEvent] = []
        _, self._offset = self.screen.events()  # a window sees what happens after it is mapped
        self._behind = self.screen.frame()
        self.screen.fill(0, 0, self.size[0], self.size[1], (255, 255, 255))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the desktop may already be gone (tests that destroy it)
            self.screen.write_frame(self._behind)

    def paint(self, x: int, y: int, width: int, height: int, rgb: tuple[int, int, int]) -> None:
        self.screen.fill(x, y, width, height, rgb)

    def _read(self) -> bool:
        events, self._offset = self.screen.events(self._offset)
        for raw in events:
            keysym = int(raw.get("keysym", 0))
            self.events.append(ProbeEvent(str(raw["kind"]), int(raw["x"]), int(raw["y"]), int(raw.get("button", 0)),
                                          keysym, _char(keysym) if raw["kind"] in ("key", "key_release") else "",
                                          int(raw.get("state", 0))))
        return bool(events)

    def pump(self, deadline: float) -> None:
        if not self._read():
            time.sleep(max(0.0, min(_POLL, deadline - time.monotonic())))

    def sync_point(self, timeout: float = 10.0) -> None:
        # the memory screen writes an action's events before the action returns: all of them are in the log
        self._read()


def open_memory_probe(desk: Desktop) -> MemoryProbe:
    assert desk.handle is not None
    return MemoryProbe(desk.handle.data["dir"])


def memory_leftovers(handle: RemoteHandle) -> list[str]:
    left: list[str] = []
    directory = handle.data.get("dir")
    if directory and os.path.exists(directory):
        left.append(str(directory))
    needle = f"{SESSION_ENV}={handle.session_id}\0".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
            with open(f"/proc/{name}/stat") as fh:
                zombie = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
            if not zombie and (environ.startswith(needle) or b"\0" + needle in environ):
                left.append(f"process {name}")
    return left


MEMORY_TARGET_KWARGS: dict[str, Any] = {
    "name": "memory",
    "open_kwargs": {"provider": "memory"},
    "open_probe": open_memory_probe,
    "leftovers": memory_leftovers,
}
