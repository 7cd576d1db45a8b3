"""Test helpers shared by the cloud providers' tests (Daytona, cua, use.computer): the fixtures of their folders'
conftests (:func:`cloud_fixtures`), a provider where pytest-httpx answers (:func:`provider_in_env`) and a ready
desktop made and destroyed around a test (:func:`ready_handle`);
point deskctl at a running fake, in this process (:func:`point_deskctl_at`) or in a child ``deskctl`` process
(:func:`run_deskctl`), and read where a fake desktop's pointer is (:func:`pointer_at`); and for a conformance
target, one fresh fake per test (:class:`FakePerTest`).

A fake passed here has ``env()`` (the vendor's variables that point a client at it) and ``vendor_vars`` (every
variable of the vendor, none of which may leak into a test from the machine)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

import pytest

from deskctl.providers._x11 import X11Address

if TYPE_CHECKING:
    from deskctl.providers.base import Provider, RemoteHandle
    from deskctl.session import Desktop
    from deskctl.spec import DesktopSpec

__all__ = ["CloudFake", "FakePerTest", "cloud_fixtures", "point_deskctl_at", "pointer_at", "provider_in_env",
           "ready_handle", "run_deskctl"]

#: no keyring in tests: a missing variable stays missing
KEYRING_OFF = "keyring.backends.fail.Keyring"


class CloudFake(Protocol):
    vendor_vars: tuple[str, ...]

    def env(self) -> dict[str, str]: ...

    def start(self) -> Self: ...

    def stop(self) -> None: ...

    def display_of(self, resource_id: str) -> str: ...

    def live(self) -> list[dict[str, Any]]: ...


F = TypeVar("F", bound=CloudFake)
P = TypeVar("P", bound="Provider")


def cloud_fixtures(make_fake: Callable[[], F], make_provider: Callable[[dict[str, Any]], P],
                   options: Mapping[str, Any], *, env: str) -> tuple[Any, Any, Any]:
    """The three fixtures of a cloud provider's test folder, for its conftest to bind by name::

        fake, cua_env, provider = cloud_fixtures(FakeCua, CuaCloudProvider, FAST_OPTIONS, env="cua_env")

    ``fake``: a fresh loopback fake per test (its desktops real Xvfb servers, all stopped with it); ``env``
    (the name the folder's tests ask for): that fake, with this process's environment pointing deskctl at it;
    ``provider``: the provider with ``options`` in that environment, closed after the test."""

    @pytest.fixture
    def fake() -> Iterator[F]:
        """A fresh loopback fake, stopped after the test (its desktops with it)."""
        server = make_fake()
        server.start()
        try:
            yield server
        finally:
            server.stop()

    @pytest.fixture(name=env)
    def env_fixture(fake: F, monkeypatch: pytest.MonkeyPatch) -> F:
        """The fake, with the environment pointing deskctl at it (no keyring: a missing variable stays missing)."""
        point_deskctl_at(fake, monkeypatch)
        return fake

    @pytest.fixture
    def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[P]:
        """The provider, in the environment that points it at the fake; closed after the test."""
        request.getfixturevalue(env)  # named by the folder, so not a parameter
        yield from provider_in_env(monkeypatch, make_provider, options, {})

    return fake, env_fixture, provider


def provider_in_env(monkeypatch: pytest.MonkeyPatch, make_provider: Callable[[dict[str, Any]], P],
                    options: Mapping[str, Any], env: Mapping[str, str], *, unset: Iterable[str] = ()) -> Iterator[P]:
    """For a fixture to ``yield from``: the provider with ``options``, made in this process's environment with
    ``unset`` removed, ``env`` set and no retry backoff (for tests where pytest-httpx answers, not a fake);
    closed after the test."""
    for var in unset:
        monkeypatch.delenv(var, raising=False)
    for key, value in {**env, "DESKCTL_HTTP_RETRY_SCALE": "0"}.items():
        monkeypatch.setenv(key, value)
    prov = make_provider(dict(options))
    try:
        yield prov
    finally:
        prov.close()


def ready_handle(provider: Provider, fake: CloudFake, spec: DesktopSpec, name: str,
                 labels: Mapping[str, str] | None = None, *,
                 restore: Callable[[], None] | None = None) -> Iterator[RemoteHandle]:
    """For a fixture to ``yield from``: a desktop of ``spec`` made as session ``name`` and ready; afterwards
    ``restore`` (what the test broke on the fake, so that the destroy can work) and the destroy, and nothing of
    it may be left on the fake."""
    handle = provider.create(spec, name, dict(labels or {}))
    try:
        provider.wait_ready(handle, time.monotonic() + 30)
        yield handle
    finally:
        if restore is not None:
            restore()
        provider.destroy(handle)
        assert fake.live() == []


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
