"""The owner watcher (testcontainers' Ryuk pattern): a process per owner process that removes the containers
registered with it when the owner dies, even by SIGKILL (the kernel closes the pipe it reads)."""

from __future__ import annotations

import os
import sys

from deskctl import _threads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar

__all__ = ["_Watcher"]


class _Watcher:
    """The per-process link to the watcher process: ``add`` before create, ``forget`` after destroy/detach."""

    _lock = _threads.Lock()
    _instance: ClassVar[_Watcher | None] = None

    def __init__(self) -> None:
        import subprocess  # here: `deskctl down` and `deskctl cp` start no watcher

        self.pid = os.getpid()
        read_end, write_end = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from deskctl.providers.docker import _watch; _watch()"],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True, env=env,
            )
        finally:
            os.close(read_end)
        self._pipe = os.fdopen(write_end, "w", buffering=1)
        self._write_lock = _threads.Lock()

    @classmethod
    def get(cls) -> _Watcher:
        with cls._lock:
            current = cls._instance
            if current is None or current.pid != os.getpid() or current.process.poll() is not None:
                current = cls._instance = cls()
            return current

    def _send(self, line: str) -> None:
        with self._write_lock:
            try:
                self._pipe.write(line + "\n")
            except (OSError, ValueError):
                pass

    def add(self, name: str, engine: str = "") -> None:
        self._send(f"+{name}\t{engine}")

    def forget(self, name: str) -> None:
        self._send(f"-{name}")

    @classmethod
    def forget_if_running(cls, name: str) -> None:
        with cls._lock:
            current = cls._instance
        if current is not None and current.pid == os.getpid():
            current.forget(name)
