"""What a folder holds, for tests that compare two copies of a tree: each entry's kind, permission bits,
modification time and content (a file's bytes, a link's target)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any


def tree_state(root: Path, *, with_root: bool = False, link_times: bool = True) -> dict[str, tuple[Any, ...]]:
    """Relative path -> (kind, mode bits, mtime in ns, content); ``with_root``: ``root`` itself as ``"."``;
    ``link_times``: a link's own time (None when the copy under test does not set it, as tarfile)."""
    out: dict[str, tuple[Any, ...]] = {}
    for path in [root] * with_root + sorted(root.rglob("*")):
        info = os.lstat(path)
        body: Any = None
        if stat.S_ISREG(info.st_mode):
            body = path.read_bytes()
        elif stat.S_ISLNK(info.st_mode):
            body = os.readlink(path)
        times = None if stat.S_ISLNK(info.st_mode) and not link_times else info.st_mtime_ns
        out[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), times, body)
    return out
