"""Test helpers shared by the cloud providers' tests (Daytona, cua, use.computer): point deskctl at a running
fake, in this process (:func:`point_deskctl_at`) or in a child ``deskctl`` process (:func:`run_deskctl`), and
read where a fake desktop's pointer is (:func:`pointer_at`); and for a conformance target, one fresh fake per
test (:class:`FakePerTest`).

A fake passed here has ``env()`` (the vendor's variables that point a client at it) and ``vendor_vars`` (every
variable of the vendor, none of which may leak into a test from the machine)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

import pytest

from deskctl.providers._x11 import X11Address

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["CloudFake", "FakePerTest", "point_deskctl_at", "pointer_at", "run_deskctl"]

#: no keyring in tests: a missing variable stays missing
KEYRING_OFF = "keyring.backends.fail.Keyring"


class CloudFake(Protocol):
    vendor_vars: tuple[str, ...]

    def env(self) -> dict[str, str]: ...

    def start(self) -> Self: ...

    def stop(self) -> None: ...

    def display_of(self, resource_id: str) -> str: ...


F = TypeVar("F", bound=CloudFake)


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


class FakePerTest(Generic[F]):
    """A conformance target's fake: :meth:`environment` starts a fresh one for a test (stopped after it) and
    yields the variables that point deskctl and its child processes at it; :meth:`current` is that fake."""

    def __init__(self, make: Callable[[], F], vendor: str) -> None:
        self._make = make
        self._vendor = vendor
        self._running: list[F] = []

    @contextlib.contextmanager
    def environment(self) -> Iterator[Mapping[str, str]]:
        fake = self._make()
        fake.start()
        self._running.append(fake)
        try:
            yield {**fake.env(), "DESKCTL_HTTP_RETRY_SCALE": "0"}
        finally:
            self._running.remove(fake)
            fake.stop()

    def current(self) -> F:
        if not self._running:
            raise RuntimeError(f"no {self._vendor} fake is running (the target's environment was not entered)")
        return self._running[-1]

    def probe_address(self, desk: Desktop) -> tuple[X11Address, bytes | None]:
        """The X display of the desktop behind ``desk`` (no cookie: the fakes' Xvfb take any local client)."""
        assert desk.handle is not None
        return X11Address(display=self.current().display_of(desk.handle.resource_id)), None
