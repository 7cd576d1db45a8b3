"""Test helpers shared by the cloud providers' tests (Daytona, cua, use.computer): point deskctl at a running
fake, in this process (:func:`point_deskctl_at`) or in a child ``deskctl`` process (:func:`run_deskctl`), and
read where a fake desktop's pointer is (:func:`pointer_at`).

A fake passed here has ``env()`` (the vendor's variables that point a client at it) and ``vendor_vars`` (every
variable of the vendor, none of which may leak into a test from the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

import pytest

__all__ = ["CloudFake", "point_deskctl_at", "pointer_at", "run_deskctl"]

#: no keyring in tests: a missing variable stays missing
KEYRING_OFF = "keyring.backends.fail.Keyring"


class CloudFake(Protocol):
    vendor_vars: tuple[str, ...]

    def env(self) -> dict[str, str]: ...


def point_deskctl_at(fake: CloudFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set this process's environment so that deskctl talks to ``fake`` (no keyring, no retry backoff)."""
    for var in fake.vendor_vars:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", KEYRING_OFF)
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DESKCTL_HTTP_RETRY_SCALE", "0")


def run_deskctl(fake: CloudFake, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m deskctl ARGS`` in a child process whose environment points at ``fake``."""
    env = {k: v for k, v in os.environ.items() if k not in fake.vendor_vars}
    env.update(fake.env(), DESKCTL_HTTP_RETRY_SCALE="0", PYTHON_KEYRING_BACKEND=KEYRING_OFF)
    return subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd)


def pointer_at(display: str) -> tuple[int, int]:
    """Where the pointer is on X ``display``, as a separate X client sees it."""
    from Xlib import display as xdisplay

    conn: Any = xdisplay.Display(display)
    try:
        reply = conn.screen().root.query_pointer()
        return int(reply.root_x), int(reply.root_y)
    finally:
        conn.close()
