"""Memory snapshots (the fast inner loop's provider, :mod:`deskctl.providers.memory`): the desktop's folder state
(frame buffer, pointer and keys, typed text, clipboard, input log) copied aside, and its windows' titles, which a
restore reopens (``xmessage -title T``, the only program that makes a window there).

Kept in ``$DESKCTL_HOME/run/snapshots/memory/<snapshot id>/``; deleting a snapshot removes that folder.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from deskctl.episodes import Taken

if TYPE_CHECKING:
    from deskctl.episodes.store import Snapshot
    from deskctl.providers.base import Provider, RemoteHandle
    from deskctl.spec import DesktopSpec

__all__ = ["MemorySnapshots"]

#: the files of a memory desktop that are its state (the marker, lock, tools and windows are made by create)
_STATE_FILES = ("screen", "state.json", "typed.txt", "clipboard", "events.jsonl")


def _store(snapshot_id: str) -> Path:
    from deskctl.paths import runtime_dir

    return runtime_dir() / "snapshots" / "memory" / snapshot_id


class MemorySnapshots:
    """The snapshot backend of :class:`deskctl.providers.memory.MemoryProvider`."""

    def take(self, provider: Provider, handle: RemoteHandle, snapshot_id: str, name: str,
             labels: Mapping[str, str]) -> Taken:
        from deskctl.providers.memory import MemoryScreen

        screen = MemoryScreen(handle.data["dir"])
        target = _store(snapshot_id)
        target.mkdir(parents=True, mode=0o700)
        size = 0
        try:
            with screen.locked():
                for name_ in _STATE_FILES:
                    source = screen.dir / name_
                    if source.exists():
                        shutil.copyfile(source, target / name_)
                        size += source.stat().st_size
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        titles = provider.window_titles(handle)
        relaunch = [{"title": t, "argv": ["xmessage", "-title", t]} for t in titles]
        return Taken(str(target), size_bytes=size, data={"dir": str(target), "relaunch": relaunch})

    def restore_spec(self, spec: DesktopSpec, snap: Snapshot) -> DesktopSpec:
        return spec

    def restore_labels(self, snap: Snapshot, labels: Mapping[str, str]) -> dict[str, str]:
        return dict(labels)

    def after_ready(self, provider: Provider, handle: RemoteHandle, snap: Snapshot) -> None:
        from deskctl.errors import NotFound
        from deskctl.providers.memory import MemoryScreen

        source = Path(snap.data["dir"])
        if not source.is_dir():
            raise NotFound(f"the files of snapshot {snap.name} are gone ({source})", provider=provider.name)
        screen = MemoryScreen(handle.data["dir"])
        with screen.locked():
            for name in _STATE_FILES:
                if (source / name).exists():
                    shutil.copyfile(source / name, screen.dir / name)
        wanted = [str(w["title"]) for w in snap.data.get("relaunch") or []]
        for title in wanted:
            provider.launch(handle, "xmessage", ["-title", title])
        deadline = time.monotonic() + 30
        while wanted and time.monotonic() < deadline:
            titles = provider.window_titles(handle)
            if all(t in titles for t in wanted):
                return
            time.sleep(0.05)

    def delete(self, provider: Provider, snap: Snapshot) -> None:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(_store(snap.snapshot_id))

    def exists(self, provider: Provider, snap: Snapshot) -> bool:
        return _store(snap.snapshot_id).exists()
