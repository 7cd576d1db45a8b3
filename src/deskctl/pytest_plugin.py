"""deskctl's pytest plugin (entry point ``pytest11``): a ``desktop`` fixture and ``--deskctl-*`` options.

::

    def test_login_page(desktop):          # a deskctl.Desktop, ready and verified
        desktop.click(100, 200)
        assert desktop.screenshot().width == 1024

    @pytest.mark.deskctl(geometry="800x600")   # per-test settings, over the command line's
    def test_small_screen(desktop): ...

Options (each also read from the environment variable ``deskctl up`` uses): ``--deskctl-provider``
(``DESKCTL_PROVIDER``, default ``xvfb``), ``--deskctl-platform`` (``DESKCTL_PLATFORM``, default ``ubuntu``),
``--deskctl-geometry`` (``DESKCTL_GEOMETRY``, default ``1024x768``). The desktop is made for the test and
destroyed after it, pass or fail, with every guarantee of :func:`deskctl.open_desktop` (the ledger records it).

When the provider is not ready (preflight fails: no credentials, no Xvfb, an unsupported platform) the test is
skipped with the preflight's reason; under ``CI=true`` it fails instead, so a CI job cannot go green on tests
that never ran. Any other error (budget, infrastructure) fails the test.

This module is loaded in every pytest run of an environment where deskctl is installed: it imports nothing of
deskctl until a test asks for ``desktop``, and adds only its options, its marker and its fixture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["desktop", "pytest_addoption", "pytest_configure"]

#: option name -> (environment variable, default, help)
_OPTIONS: dict[str, tuple[str, str, str]] = {
    # "": deskctl's default provider (the registry's DEFAULT_PROVIDER, not imported here: the plugin loads nothing)
    "provider": ("DESKCTL_PROVIDER", "", "provider of the `desktop` fixture"),
    "platform": ("DESKCTL_PLATFORM", "ubuntu", "platform of the `desktop` fixture: ubuntu, windows or macos"),
    "geometry": ("DESKCTL_GEOMETRY", "1024x768", "screen size WxH of the `desktop` fixture, or 'native'"),
}
#: keywords of @pytest.mark.deskctl(...) passed to deskctl.open_desktop besides the three options
_MARK_KEYWORDS = frozenset({"provider", "platform", "geometry", "window_geometry", "start_url", "window_manager",
                            "ttl", "max_minutes", "max_usd", "budget", "unknown_cost", "labels", "provider_options",
                            "ready_timeout"})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("deskctl", "deskctl desktops (the `desktop` fixture)")
    for name, (env, default, text) in _OPTIONS.items():
        group.addoption(f"--deskctl-{name}", dest=f"deskctl_{name}", default=None, metavar=name.upper(),
                        help=f"{text} (env {env}; default {default or 'the default provider'})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "deskctl(**settings): settings of this test's `desktop` fixture (geometry=..., provider=..., "
                   "max_minutes=..., any deskctl.open_desktop keyword)")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for name, (env, default, _) in _OPTIONS.items():
        settings[name] = request.config.getoption(f"deskctl_{name}") or os.environ.get(env) or default
    marker = request.node.get_closest_marker("deskctl")
    if marker is not None:
        unknown = sorted(set(marker.kwargs) - _MARK_KEYWORDS)
        if unknown or marker.args:
            raise pytest.UsageError(f"@pytest.mark.deskctl takes keywords of deskctl.open_desktop, not "
                                    f"{', '.join(unknown) or repr(marker.args)}")
        settings.update(marker.kwargs)
    return settings


@pytest.fixture
def desktop(request: pytest.FixtureRequest) -> Iterator[Desktop]:
    """A ready desktop (``deskctl.Desktop``) for this test, destroyed after it; see the module docstring."""
    from deskctl.errors import PreflightError
    from deskctl.session import open_desktop

    settings = _settings(request)
    provider = settings.pop("provider")
    try:
        desk = open_desktop(provider, **settings) if provider else open_desktop(**settings)
    except PreflightError as err:
        reason = f"deskctl: {err.provider or provider} is not ready: {err.message} ({err.code})"
        if err.remedy:
            reason += f"; remedy: {err.remedy}"
        if _in_ci():
            pytest.fail(f"{reason} [CI is set: a desktop test may not be skipped]", pytrace=False)
        pytest.skip(reason)
    with desk:
        yield desk
