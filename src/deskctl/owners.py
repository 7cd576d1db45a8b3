"""The owner of a desktop or a budget hold (``host:pid``, :func:`owner_id`) and whether it is still alive.

Kept apart from :mod:`deskctl.reaper` so that a budget check, which asks this for every hold, does not import the
providers (and pydantic) to do it.
"""

from __future__ import annotations

import os

# the function `socket.gethostname` is (socket.py re-exports _socket's): without socket.py, whose enums of
# constants are a twelfth of the instructions of a whole `deskctl down` process
from _socket import gethostname

__all__ = ["owner_alive", "owner_id"]


def owner_id() -> str:
    """``host:pid`` of this process, as stored in the ``deskctl.owner`` label."""
    return f"{gethostname()}:{os.getpid()}"


def owner_alive(owner: str | None) -> bool | None:
    """True/False for an owner ``host:pid`` on this host; None when it is on another host or unknown."""
    if not owner or ":" not in owner:
        return None
    host, _, pid_text = owner.rpartition(":")
    if host != gethostname():
        return None
    try:
        pid = int(pid_text)
    except ValueError:
        return None
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return False
    except OSError:
        pass
    return True
