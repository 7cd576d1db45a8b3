"""The conformance suite's provider targets: ONE contract, run against every provider listed in :data:`TARGETS`.

Adding a provider is a few lines here: append a :class:`Target` to :data:`TARGETS`::

    TARGETS.append(Target(
        name="docker",
        open_kwargs={"provider": "docker", "provider_options": {"image": "deskctl/desktop:test"}},
        probe_address=docker_probe_address,      # Desktop -> (X11Address, cookie) the probe window connects to
        leftovers=docker_leftovers,              # RemoteHandle -> what still exists (containers, volumes ...)
        marks=(pytest.mark.docker,),             # skip-able groups: docker, ssh, postgres, slow
        environment=docker_environment,          # optional: a context manager yielding env vars (a fake server)
    ))

* ``open_kwargs`` are the keyword arguments of :func:`deskctl.open_desktop` (and, for the subprocess tests, of
  the same call in a child process). ``geometry`` is set by the suite.
* ``probe_address(desk)`` says how a test reaches the desktop's X display with python-xlib: an
  :class:`~deskctl.providers._x11.X11Address` (local display, unix socket at any path, or a forwarded TCP
  port) and the MIT-MAGIC-COOKIE-1 bytes (or None). A desktop that is not an X display (``memory``) gives
  ``open_probe(desk)`` instead: a window of its own with the X probe's interface (tests/probe).
* ``leftovers(handle)`` lists, in words, whatever of that desktop still exists after it was destroyed (processes,
  sockets, lock files, containers, sandboxes on a fake server). The suite asserts it is empty.
* ``browser_options`` (optional): what the desktop of the browser tests adds to ``open_kwargs``'s
  ``provider_options`` when the provider claims the ``browser`` capability (docker: ``{"variant": "browser"}``,
  the image with Chromium; xvfb and ssh use the host's Chromium and need none).
* ``environment()`` (optional) yields extra environment variables (for example the URL of a loopback fake
  server); they are set in this process and passed to child processes. It is entered once per module for the
  tests that share a desktop, and once per test for each of the others.

The tests that need only *a* desktop (``desk``: input, screenshots, exec, files, clipboard, windows) share one per
target and module, with a ``DESKCTL_HOME`` of its own (:class:`SharedDesktop`); a test that fails discards it.
The browser tests (``browser_desk``) share a second one per target and module, opened with ``browser_options``,
where the provider claims the ``browser`` capability; elsewhere they get ``desk`` (and fail with usage.unsupported).
The tests of what happens to a desktop (destroy, signals, reap, the CLI's up/down, recording) open their own, and
each gets a fresh ``DESKCTL_HOME`` (tests/conftest.py), so ledgers and markers never mix.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from deskctl.providers import DEFAULT_PROVIDER
from deskctl.providers._x11 import X11Address, read_cookie
from deskctl.providers.base import RemoteHandle
from deskctl.providers.xvfb import _listening

if TYPE_CHECKING:
    from deskctl.session import Desktop


@dataclass(frozen=True)
class Target:
    name: str
    open_kwargs: Mapping[str, Any]
    leftovers: Callable[[RemoteHandle], list[str]]
    probe_address: Callable[[Desktop], tuple[X11Address, bytes | None]] | None = None
    #: a desktop without an X display (memory): its own probe window, with the X probe's interface
    open_probe: Callable[[Desktop], Any] | None = None
    marks: tuple[Any, ...] = ()
    environment: Callable[[], contextlib.AbstractContextManager[Mapping[str, str]]] | None = None
    #: geometry the suite pins (a provider with fixed sizes names one it offers)
    geometry: str = "1024x768"
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: provider options the browser tests' desktop adds to ``open_kwargs`` (docker: ``variant=browser``, the image
    #: with Chromium); only for a provider whose capabilities claim ``browser``
    browser_options: Mapping[str, Any] = field(default_factory=dict)


# -- xvfb ---------------------------------------------------------------------------------------------------------
def _process_alive(pid: int, ticks: int | None) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and (ticks is None or int(fields[19]) == ticks)


def xvfb_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    data = desk.handle.data if desk.handle else {}
    return X11Address(display=str(data["display"])), read_cookie(data["cookie_file"])


def xvfb_leftovers(handle: RemoteHandle) -> list[str]:
    left: list[str] = []
    for proc in handle.data.get("procs", []):
        if _process_alive(int(proc["pid"]), proc.get("ticks")):
            left.append(f"{proc['role']} process {proc['pid']}")
    number = handle.data.get("display_number")
    if number is not None:
        xvfb_pids = {str(p["pid"]) for p in handle.data.get("procs", []) if p["role"] == "xvfb"}
        lock = Path(f"/tmp/.X{number}-lock")
        with contextlib.suppress(OSError):
            if lock.read_text().strip() in xvfb_pids:
                left.append(str(lock))
        sock = Path(f"/tmp/.X11-unix/X{number}")
        if sock.exists() and not _listening(sock):  # a live listener is another server that took the number
            left.append(str(sock))
    for key in ("dir", "cookie_file", "marker"):
        path = handle.data.get(key)
        if path and os.path.exists(path):
            left.append(str(path))
    return left


TARGETS: list[Target] = [
    Target(
        name="xvfb",
        open_kwargs={"provider": "xvfb"},
        probe_address=xvfb_probe_address,
        leftovers=xvfb_leftovers,
    ),
]


# -- memory (a pixel buffer in a folder, no X: tests/memory_provider/_memory_target.py) -----------------------------
from memory_provider._memory_target import MEMORY_TARGET_KWARGS  # noqa: E402

TARGETS.append(Target(**MEMORY_TARGET_KWARGS))

# -- docker (its target and helpers: tests/docker_provider/_docker_target.py) ------------------------------------------
from docker_provider._docker_target import DOCKER_REMOTE_TARGET_KWARGS, DOCKER_TARGET_KWARGS  # noqa: E402

TARGETS.append(Target(**DOCKER_TARGET_KWARGS))
# the same provider on a second engine over TCP: nothing shared through host folders, every call via the agent
TARGETS.append(Target(**DOCKER_REMOTE_TARGET_KWARGS))

# -- daytona (windows and ubuntu against the loopback fake: tests/daytona/_daytona_target.py) -----------------------
from daytona._daytona_target import DAYTONA_TARGETS_KWARGS  # noqa: E402

TARGETS.extend(Target(**kwargs) for kwargs in DAYTONA_TARGETS_KWARGS)

# -- cua-cloud (ubuntu against the loopback fake of the Fleet claims API: tests/cua/_cua_target.py) ----------------
from cua._cua_target import CUA_TARGET_KWARGS  # noqa: E402

TARGETS.append(Target(**CUA_TARGET_KWARGS))

# -- ssh (a real sshd on a loopback port per test: tests/ssh/_ssh_target.py) ----------------------------------------
from ssh._ssh_target import SSH_TARGET_KWARGS  # noqa: E402

TARGETS.append(Target(**SSH_TARGET_KWARGS))

# -- use-computer (macos and ubuntu against the loopback fake: tests/use_computer/_use_computer_target.py) -----------
from use_computer._use_computer_target import USE_COMPUTER_TARGETS_KWARGS  # noqa: E402

TARGETS.extend(Target(**kwargs) for kwargs in USE_COMPUTER_TARGETS_KWARGS)

# -- kubernetes (pods of a loopback fake API that are real containers, driven through the agent:
#    tests/kubernetes_provider/_kube_target.py) ---------------------------------------------------------------------
from kubernetes_provider._kube_target import KUBE_TARGET_KWARGS  # noqa: E402

TARGETS.append(Target(**KUBE_TARGET_KWARGS))

# -- a provider outside this repository: DESKCTL_CONFORMANCE_TARGET=module:attribute (deskctl.testing) -------------
from deskctl.testing import TARGET_ENV, load_targets, unsupported_by  # noqa: E402

TARGETS.extend(Target(**kwargs) for kwargs in load_targets(os.environ.get(TARGET_ENV)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``linux_guest`` is not collected for a target whose guest is not Linux (a Windows or macOS
    sandbox backed by an Xvfb here: its provider tests check what it sends instead). Deselected, not skipped."""
    keep, drop = [], []
    for item in items:
        chosen = getattr(getattr(item, "callspec", None), "params", {}).get("target_scope")
        wrong = isinstance(chosen, Target) and chosen.extra.get("guest", "linux") != "linux"
        (drop if wrong and item.get_closest_marker("linux_guest") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Remember whether a test's own code failed, for :func:`desk` (a shared desktop is not kept after one)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True


def _params() -> list[Any]:
    return [pytest.param(t, id=t.name, marks=list(t.marks)) for t in TARGETS]


class SharedDesktop:
    """One target's desktop shared by the tests of a module that need *a* desktop of it (input, screenshots,
    exec, files, clipboard, windows: each works in its own probe window or scratch folder), instead of one
    desktop per test. It has its own ``DESKCTL_HOME`` and its own entry of the target's environment (a fake
    server, an sshd), both entered on first use and kept until the module ends, when the desktop is closed and
    checked gone. A test that fails leaves no broken desktop to the next: :func:`desk` discards it then.
    Tests that change what a desktop is (destroy, signals, reap, the CLI's up/down, recording) keep a fresh one
    each (they use ``target`` alone)."""

    def __init__(self, target: Target, home: Path) -> None:
        self.target = target
        self.home = home
        self.desktop: Desktop | None = None
        #: the desktop of the browser tests (:meth:`open_browser`), where it differs from :attr:`desktop`
        self.browser: Desktop | None = None
        self._env: dict[str, str] | None = None
        self._stack = contextlib.ExitStack()

    def env(self) -> dict[str, str]:
        """The variables a test using the shared desktop runs with: the environment's, and the shared home."""
        if self._env is None:
            entered = self._stack.enter_context(self.target.environment()) if self.target.environment else {}
            self._env = {**entered, "DESKCTL_HOME": str(self.home)}
        return self._env

    def open(self) -> Desktop:
        """The shared desktop, opened now if there is none (in the test's environment, which is :meth:`env`)."""
        if self.desktop is None:
            import deskctl

            self.desktop = deskctl.open_desktop(**{**self.target.open_kwargs, "geometry": self.target.geometry})
        return self.desktop

    def open_browser(self) -> Desktop:
        """The shared desktop of the browser tests, opened now if there is none: the target's ``open_kwargs``
        with its ``browser_options`` added to the provider options (docker: the image with Chromium)."""
        if self.browser is None:
            import deskctl

            kwargs = dict(self.target.open_kwargs)
            kwargs["provider_options"] = {**dict(kwargs.get("provider_options") or {}), **self.target.browser_options}
            self.browser = deskctl.open_desktop(**{**kwargs, "geometry": self.target.geometry})
        return self.browser

    def discard(self) -> None:
        """Close the shared desktops (if any), check they left nothing, and destroy whatever else their ledger
        holds."""
        desktops = [d for d in (self.desktop, self.browser) if d is not None]
        self.desktop = self.browser = None
        if not desktops and self._env is None:
            return
        with pytest.MonkeyPatch.context() as patch:
            for key, value in self.env().items():
                patch.setenv(key, value)
            try:
                handles = [d.handle for d in desktops if d.handle is not None]
                for desktop in desktops:
                    desktop.close()
                # after both closed: a target's leftovers may be all of its environment's (the kube fake's pods)
                assert [left for handle in handles for left in self.target.leftovers(handle)] == []
            finally:
                _destroy_leftovers()

    def close(self) -> None:
        try:
            self.discard()
        finally:
            self._stack.close()


@pytest.fixture(scope="module", params=_params())
def target_scope(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDesktop]:
    """The provider target of this module's tests (the parameter), with the desktop they may share."""
    shared = SharedDesktop(request.param, tmp_path_factory.mktemp(f"deskctl-home-shared-{request.param.name}"))
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def target(request: pytest.FixtureRequest, target_scope: SharedDesktop,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """The provider target of this test, with its environment (if any) entered and exported. A test that uses
    ``desk`` runs in the shared desktop's environment and home (:class:`SharedDesktop`); any other enters a
    fresh environment of its own and, afterwards, whatever it left behind (sessions this test's ledger still calls
    active) is destroyed, before the environment (a fake server, say) goes away."""
    chosen = target_scope.target
    # a contract test the provider cannot pass by design (extra["xfail"]: test name -> why): it must fail with
    # usage.unsupported, and a pass would be reported (strict)
    why = dict(chosen.extra.get("xfail") or {}).get(request.node.originalname) or unsupported_by(
        str(chosen.open_kwargs.get("provider") or DEFAULT_PROVIDER), request.node.originalname)
    if why:
        from deskctl.errors import UsageError

        request.node.add_marker(pytest.mark.xfail(reason=why, raises=UsageError, strict=True))
    if {"desk", "browser_desk"} & set(request.fixturenames):
        for key, value in target_scope.env().items():
            monkeypatch.setenv(key, value)
        yield chosen
        return
    with contextlib.ExitStack() as stack:
        if chosen.environment is not None:
            env = stack.enter_context(chosen.environment())
            for key, value in env.items():
                monkeypatch.setenv(key, value)
        try:
            yield chosen
        finally:
            _destroy_leftovers()


def _destroy_leftovers() -> None:
    """Destroy every session of this test's ledger (its own DESKCTL_HOME) that did not end; never anything of
    another test or of another engineer's run sharing the machine."""
    from deskctl.ledger import open_ledger
    from deskctl.providers import get_provider
    from deskctl.providers.base import LABEL_SESSION

    with open_ledger() as book:
        records = book.sessions(active=True)
    for record in records:
        with contextlib.suppress(Exception):
            provider = get_provider(record.provider, dict(record.spec.get("provider_options") or {}))
            try:
                handles = ([RemoteHandle.from_dict(record.handle)] if record.handle
                           else provider.list_owned({LABEL_SESSION: record.session_id}))
                for handle in handles:
                    with contextlib.suppress(Exception):
                        provider.destroy(handle)
            finally:
                provider.close()


@pytest.fixture
def desk(request: pytest.FixtureRequest, target: Target, target_scope: SharedDesktop) -> Iterator[Desktop]:
    """An open desktop of the target at its pinned geometry: the module's shared one (:class:`SharedDesktop`),
    discarded (closed and checked gone) after a test that failed, so that the next test gets a fresh one."""
    yield target_scope.open()
    if request.node.stash.get(_CALL_FAILED, False):
        target_scope.discard()


@pytest.fixture
def browser_desk(request: pytest.FixtureRequest, target: Target, target_scope: SharedDesktop) -> Iterator[Desktop]:
    """The desktop of a browser test: where the target's provider claims the ``browser`` capability, the
    module's shared browser desktop (:meth:`SharedDesktop.open_browser`: Chromium is there, none runs until a
    test opens a page); elsewhere the shared ``desk``, on which the test must fail with usage.unsupported
    (:data:`deskctl.testing.CAPABILITY_TESTS`). Discarded after a test that failed, like ``desk``."""
    from deskctl.providers import load_provider_class

    provider = str(target.open_kwargs.get("provider") or DEFAULT_PROVIDER)
    claims = bool(load_provider_class(provider).capabilities.browser)
    if claims and target.browser_options and os.environ.get("DESKCTL_SKIP_BROWSER") == "1":
        pytest.skip("DESKCTL_SKIP_BROWSER=1: the browser image was not built")  # a failure under CI
    yield target_scope.open_browser() if claims else target_scope.open()
    if request.node.stash.get(_CALL_FAILED, False):
        target_scope.discard()


def probe_opener(target: Target, desk: Desktop) -> Callable[[], Any]:
    """What opens a probe window covering ``desk`` with the input focus (a context manager), learnt from ``desk``
    now and callable after ``desk`` let go of the desktop: on its X display, or the target's own for a desktop
    without one."""
    if target.open_probe is not None:
        opener = target.open_probe
        return lambda: opener(desk)
    from probe import Probe

    assert target.probe_address is not None, f"target {target.name} names neither probe_address nor open_probe"
    address, cookie = target.probe_address(desk)
    return lambda: Probe.open(address, cookie)


@pytest.fixture
def probe(desk: Desktop, target: Target) -> Iterator[Any]:
    """A probe window covering ``desk``, with the input focus."""
    with probe_opener(target, desk)() as window:
        yield window
