"""Shared test isolation: every test gets its own DESKCTL_HOME (ledger, markers, cookies) and a plain terminal, and
every process a test starts gets the default signal dispositions, however the suite itself was started."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

#: signals the tests send to the processes they start (or that those processes must die of)
_CHILD_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE)


def _ignored_here(signum: int, frame: object) -> None:
    """Stands for SIG_IGN in pytest's own process (see pytest_configure)."""


def pytest_configure(config: pytest.Config) -> None:
    """A signal ignored here would be ignored by every process the tests start (SIG_IGN survives exec): a runner
    that starts the suite with ``nohup`` or ``&`` in a script (SIGINT and SIGHUP ignored) would make each test
    that interrupts a child wait out its timeout. A handler does not survive exec: an ignored signal becomes one
    that this process still ignores, and every child starts with the default. (SIGPIPE is ignored by Python
    itself, and subprocess restores it; the others by whoever started pytest.)"""
    for signum in _CHILD_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, _ignored_here)


#: how long a test marked ``slow`` (an image build, a Harbor trial, a provider's whole conformance suite in a child
#: pytest) may take, however loaded the machine; every other test has pyproject's ``timeout`` (60 s). A test that
#: needs another bound says so with its own ``@pytest.mark.timeout``.
SLOW_TIMEOUT = 300


#: the tests that build, prune or compare the desktop images of the shared Docker engine, and the chaos run (every
#: surface at once): under pytest-xdist (``-n 2 --dist loadgroup``, as scripts/test runs) they go to one worker, one
#: after another, so that no image build of one is seen by another's before/after comparison (the episodes tests
#: count the engine's snapshot images before and after; scripts/test runs the Harbor tests apart, alone). The
#: episodes tests on fakes, memory and xvfb touch no engine: they run beside the others.
_ONE_AT_A_TIME = ("harbor/", "chaos/", "episodes/test_docker_snapshots.py", "episodes/test_gym.py",
                  "docker_provider/test_task_images.py",
                  "docker_provider/test_docker_provider.py::test_image_",
                  "docker_provider/test_docker_provider.py::test_prune_")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
        if any(part in item.nodeid for part in _ONE_AT_A_TIME):
            item.add_marker(pytest.mark.xdist_group("docker-images"))


@pytest.fixture(scope="session", autouse=True)
def session_deskctl_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A DESKCTL_HOME for the whole run, under each test's own (:func:`deskctl_home`): what a module- or
    session-scoped fixture starts before any test's home exists (an MCP server, a shared desktop) writes there,
    never to the ledger of whoever runs the tests."""
    with pytest.MonkeyPatch.context() as patch:
        home = tmp_path_factory.mktemp("deskctl-home-session")
        patch.setenv("DESKCTL_HOME", str(home))
        patch.delenv("DESKCTL_LEDGER_URL", raising=False)
        # a loaded machine (2 cores, two workers, other work beside) answers a check in more than 10 s at times:
        # the preflight before every `up` waits up to this (tests of the timeout itself pass their own)
        patch.setenv("DESKCTL_PREFLIGHT_TIMEOUT", os.environ.get("DESKCTL_PREFLIGHT_TIMEOUT") or "45")
        yield home


@pytest.fixture(autouse=True)
def deskctl_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("deskctl-home")
    monkeypatch.setenv("DESKCTL_HOME", str(home))
    monkeypatch.delenv("DESKCTL_LEDGER_URL", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    # never the developer's own keyring; credential tests choose a file keyring themselves
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    yield home


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI (``CI`` set) nothing may be skipped: scripts/test installs and starts every part the tests need,
    so a skip there means a missing install step, which must fail the run instead of hiding."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped under CI, which must run every test: {reason}"
