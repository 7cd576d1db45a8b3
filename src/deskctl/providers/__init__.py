"""Provider registry: stable names mapped to lazily imported ``"module:Class"`` strings.

Nothing here imports a provider module until it is asked for, so ``import deskctl`` stays fast and a
provider whose optional library is missing fails only when used, with an install hint. Third-party providers
register through the ``deskctl.providers`` entry-point group (name -> ``"module:Class"``).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING, Any

from deskctl.errors import UsageError

if TYPE_CHECKING:
    from deskctl.providers.base import Provider

__all__ = ["DEFAULT_PROVIDER", "PROVIDERS", "get_provider", "known_provider_names", "load_provider_class"]

DEFAULT_PROVIDER = "xvfb"

#: name -> (import path, install hint)
PROVIDERS: dict[str, tuple[str, str]] = {
    "xvfb": ("deskctl.providers.xvfb:XvfbProvider", "apt-get install xvfb"),
    "docker": ("deskctl.providers.docker:DockerProvider", "pip install docker; apt-get install docker.io"),
    "ssh": ("deskctl.providers.ssh:SSHProvider", "pip install paramiko"),
    "daytona": ("deskctl.providers.daytona:DaytonaProvider", "pip install httpx tenacity"),
    "cua-cloud": ("deskctl.providers.cua_cloud:CuaCloudProvider", "pip install httpx tenacity"),
    "use-computer": ("deskctl.providers.use_computer:UseComputerProvider", "pip install httpx tenacity"),
}

ENTRY_POINT_GROUP = "deskctl.providers"


@cache
def _entry_points() -> dict[str, tuple[str, str]]:
    from importlib.metadata import entry_points

    found: dict[str, tuple[str, str]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, (ep.value, f"reinstall the package that provides {ep.name!r}"))
    return found


def _all() -> dict[str, tuple[str, str]]:
    merged = dict(_entry_points())
    merged.update(PROVIDERS)  # built-in names cannot be shadowed
    return merged


def known_provider_names() -> list[str]:
    """Built-in providers that have a module, plus entry-point ones, sorted."""
    return sorted(name for name in _all() if _module_exists(_all()[name][0]))


@cache
def _module_exists(target: str) -> bool:
    from importlib.util import find_spec

    module = target.split(":", 1)[0]
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def load_provider_class(name: str) -> type[Provider]:
    # A built-in name wins over an entry point anyway; reading every installed package's entry points
    # (importlib.metadata) is left to names that are not built in, so `deskctl do` does not pay for it.
    registry = PROVIDERS if name in PROVIDERS else _all()
    if name not in registry:
        known = known_provider_names()
        import difflib  # here: only a misspelt name needs it, and every `deskctl do` loads this module

        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"unknown provider {name!r}{hint}; known: {', '.join(known)}",
                         code="usage.unknown_provider")
    target, install_hint = registry[name]
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"provider {name!r} cannot be loaded: {exc}", code="usage.provider_unavailable",
            remedy=install_hint, provider=name,
        ) from exc
    cls: type[Provider] = getattr(module, class_name)
    return cls


def get_provider(name: str, options: dict[str, Any] | None = None) -> Provider:
    """An instance of the named provider, built with ``options`` (the spec's ``provider_options``)."""
    return load_provider_class(name)(options)
