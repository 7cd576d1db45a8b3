"""Putting a finished copy in place: :func:`replace_file`, the last step of every download (and of the agent's
uploads), which write the file beside its destination first so that a failed or interrupted copy leaves the old
file whole.

Why not a bare ``os.replace(partial, target)``: renaming over an existing file makes ext4 (``auto_da_alloc``, on
by default) start writing the whole new file to disk inside the ``rename`` call, its guard for programs that
replace a file without ``fsync``. For a 64 MiB download that was 100-170 ms of a 400 ms ``deskctl cp`` here, which
``docker cp`` does not pay: it unlinks the destination before writing it (bench/bench_files.py, ``docker-cli``).
Unlinking the old file first, once the new one is complete, keeps what the rename was for (no reader ever sees a
half-written file, a failed copy leaves the old one) and costs the same as docker's way; for a moment between the
two calls there is no file at ``target``. A directory at ``target`` is left alone (``os.replace`` refuses it, as
before). A file of the agent's image: it imports nothing of deskctl.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["replace_file"]


def replace_file(partial: str | Path, target: str | Path) -> None:
    """Move the complete file ``partial`` to ``target`` (same directory), replacing a file or symlink there. A
    missing ``partial`` raises FileNotFoundError before anything at ``target`` is touched."""
    os.lstat(partial)
    try:
        if not stat.S_ISDIR(os.lstat(target).st_mode):
            os.unlink(target)
    except FileNotFoundError:
        pass
    os.replace(partial, target)
