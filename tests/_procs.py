"""Process checks the tests share: whether a process still runs (a zombie does not count), and waiting for a
condition without a fixed sleep."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from deskctl.ledger import SessionRecord, open_ledger


def wait_until(condition: Callable[[], object], what: str = "the condition", timeout: float = 20.0) -> None:
    """Poll ``condition`` until it is true; an AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Whether ``pid`` names a running process; a zombie waiting for its parent is not running."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def programs_naming(program: str, text: str | Path) -> dict[int, str]:
    """The processes of ``program`` (the end of argv[0]) whose command line contains ``text``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(program.encode()) and any(str(text).encode() in arg for arg in argv):
            found[int(entry.name)] = b" ".join(argv).decode(errors="replace")
    return found


def xvfb_servers_under(folder: Path) -> dict[int, str]:
    """The Xvfb servers whose command line names a path under ``folder`` (a test's DESKCTL_HOME or tmp_path): pid
    -> command line. What a test checks is left running after its desktops were destroyed."""
    return programs_naming("Xvfb", folder)


def ledger_sessions() -> list[SessionRecord]:
    """Every session of the ledger DESKCTL_HOME names, ended ones too."""
    with open_ledger() as book:
        return book.sessions(active=None)


def xvfb_leftovers(record: SessionRecord) -> list[str]:
    """What an xvfb session's record names that is still there: its processes (Xvfb, the window manager...) and
    its folder. Empty once the desktop is destroyed."""
    data = (record.handle or {}).get("data", {})
    left = [f"{p['role']} {p['pid']}" for p in data.get("procs", []) if alive(int(p["pid"]))]
    if data.get("dir") and os.path.exists(data["dir"]):
        left.append(data["dir"])
    return left
