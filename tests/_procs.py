"""Process checks the tests share: whether a process still runs (a zombie does not count)."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Whether ``pid`` names a running process; a zombie waiting for its parent is not running."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
