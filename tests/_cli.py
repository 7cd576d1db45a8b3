"""The real ``deskctl`` entry point as a child process, for the CLI tests: exit codes and output as a user sees them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def deskctl(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m deskctl ARGS`` with this process's environment plus ``env``; ``check`` raises on a non-zero exit
    with deskctl's stderr in the message."""
    proc = subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"deskctl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc
