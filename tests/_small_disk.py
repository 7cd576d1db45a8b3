"""A size-limited tmpfs for the tests of what a full disk does (a copy that stops in the middle, a ledger that
cannot grow): mounted on a new folder, unmounted after; a machine where it cannot be mounted (no root) skips."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(mount: Path, size: str = "1m", mode: str = "0777") -> Iterator[Path]:
    """``mount`` (made, with its parents) as a tmpfs of ``size`` and ``mode``."""
    mount.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
