"""Where deskctl keeps its files. ``DESKCTL_HOME`` overrides the user data directory; read at call time."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["home_dir", "runtime_dir"]


def home_dir() -> Path:
    """``$DESKCTL_HOME``, else the platform's user data directory for deskctl. Created on first use."""
    env = os.environ.get("DESKCTL_HOME")
    if env:
        path = Path(env).expanduser()
    else:
        from platformdirs import user_data_dir

        path = Path(user_data_dir("deskctl", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def runtime_dir() -> Path:
    """Per-user directory for sockets, cookies and pid files (mode 0700), under :func:`home_dir`."""
    path = home_dir() / "run"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path
