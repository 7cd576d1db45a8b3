"""Provider registry: stable names mapped to lazily imported ``"module:Class"`` strings.

Nothing here imports a provider module until it is asked for, so ``import deskctl`` stays fast and a
provider whose optional library is missing fails only when used, with an install hint. Third-party providers
register through the ``deskctl.providers`` entry-point group (name -> ``"module:Class"``).

A provider's facts (credentials, aliases, platforms, geometry rules) are declared on its class (see
:class:`~deskctl.providers.base.Provider`). The one fact needed before any provider module is imported, the
other spellings of a built-in name, is :data:`ALIASES` here; a unit test holds it equal to the classes'
``aliases``. :func:`resolve_name` is the one place a name a user typed becomes a provider's name.
"""

from __future__ import annotations

import sys

from deskctl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.providers.base import Provider

__all__ = [
    "ALIASES",
    "DEFAULT_PROVIDER",
    "PROVIDERS",
    "canonical_name",
    "describe_options",
    "get_provider",
    "known_provider_names",
    "load_provider_class",
    "provider_class",
    "resolve_name",
]

DEFAULT_PROVIDER = "xvfb"

#: the hint of a provider whose libraries are deskctl's own dependencies: failing to import, it is a broken install
_REINSTALL = "reinstall deskctl (one of its own dependencies is missing)"

#: name -> (import path, install hint)
PROVIDERS: dict[str, tuple[str, str]] = {
    "xvfb": ("deskctl.providers.xvfb:XvfbProvider", "apt-get install xvfb"),
    "docker": ("deskctl.providers.docker:DockerProvider", _REINSTALL),
    "ssh": ("deskctl.providers.ssh:SSHProvider", _REINSTALL),
    "daytona": ("deskctl.providers.daytona:DaytonaProvider", _REINSTALL),
    "cua-cloud": ("deskctl.providers.cua_cloud:CuaCloudProvider", _REINSTALL),
    "use-computer": ("deskctl.providers.use_computer:UseComputerProvider", _REINSTALL),
    "kubernetes": ("deskctl.providers.kubernetes:KubernetesProvider", "pip install 'deskctl[kubernetes]'"),
    "memory": ("deskctl.providers.memory:MemoryProvider", "part of deskctl: reinstall deskctl"),
}

#: other spelling -> name, for the built-in providers: the union of their classes' ``aliases`` (kept here so that
#: resolving a name imports no provider module; tests/unit/test_registry.py checks it against the classes)
ALIASES: dict[str, str] = {
    "cua": "cua-cloud",
    "k8s": "kubernetes",
    "use.computer": "use-computer",
}

ENTRY_POINT_GROUP = "deskctl.providers"


#: :func:`_entry_points`'s answer, by group (read once per process)
_ENTRY_POINTS: dict[str, dict[str, tuple[str, str]]] = {}


def _entry_points() -> dict[str, tuple[str, str]]:
    found = _ENTRY_POINTS.get(ENTRY_POINT_GROUP)
    if found is None:
        from importlib.metadata import entry_points

        found = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name, (ep.value, f"reinstall the package that provides {ep.name!r}"))
        _ENTRY_POINTS[ENTRY_POINT_GROUP] = found
    return found


def _all() -> dict[str, tuple[str, str]]:
    merged = dict(_entry_points())
    merged.update(PROVIDERS)  # built-in names cannot be shadowed
    return merged


def known_provider_names() -> list[str]:
    """Built-in providers that have a module, plus entry-point ones, sorted."""
    return sorted(name for name in _all() if _module_exists(_all()[name][0]))


#: :func:`_module_exists`'s answers, by target
_EXISTS: dict[str, bool] = {}


def _module_exists(target: str) -> bool:
    """Whether the module of ``target`` is installed (imported already, or one of the import system's finders
    finds it), without importing it: ``importlib.util.find_spec``'s answer, without importing importlib (which
    imports warnings, contextlib, functools and collections on the way to a ``deskctl up``)."""
    found = _EXISTS.get(target)
    if found is None:
        found = _find(target.split(":", 1)[0])
        _EXISTS[target] = found
    return found


def _find(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None
    parent, _, _ = module.rpartition(".")
    try:
        path = None
        if parent:  # as find_spec does: the parent package is imported, its __path__ searched
            __import__(parent)
            path = sys.modules[parent].__path__
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None and find_spec(module, path) is not None:
                return True
    except (ImportError, ValueError, AttributeError):
        pass
    return False


def canonical_name(name: str) -> str:
    """``name`` as the registry spells it (lower case, ``-`` for ``_``, an alias replaced), without checking
    that such a provider exists: for tables keyed by provider name (configuration, credentials)."""
    raw = name.strip().lower().replace("_", "-")
    return ALIASES.get(raw, raw)


def resolve_name(name: str) -> str:
    """The name of the provider ``name`` means: a name, an alias or a spelling of one (``use.computer``,
    ``cua``, ``Use_Computer``). Raises :class:`~deskctl.errors.UsageError` (exit 2): ``usage.unknown_provider``
    with the closest known name, or ``usage.provider_unavailable`` for a built-in missing from this installation."""
    raw = canonical_name(name)
    # a built-in name wins over an entry point anyway; reading every installed package's entry points
    # (importlib.metadata) is left to names that are not built in, so `deskctl do` does not pay for it
    if raw in PROVIDERS and _module_exists(PROVIDERS[raw][0]):
        return raw
    if raw not in PROVIDERS and raw in _all():
        return raw  # an entry point: importing it names its install hint if it fails
    if raw not in PROVIDERS:
        third_party = _entry_point_alias(raw)
        if third_party is not None:
            return third_party
    known = known_provider_names()
    if raw in PROVIDERS:
        raise UsageError(f"provider {name!r} is not available in this installation; available: {', '.join(known)}",
                         code="usage.provider_unavailable", remedy=f"--provider {known[0]}" if known else None)
    import difflib  # here: only a misspelt name needs it, and every `deskctl do` loads this module

    close = difflib.get_close_matches(raw, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UsageError(f"unknown provider {name!r}{hint}; known: {', '.join(known)}",
                     code="usage.unknown_provider", remedy=f"--provider {close[0]}" if close else None)


def _entry_point_alias(raw: str) -> str | None:
    """The entry-point provider whose class declares the alias ``raw``. Only a name nothing else knows gets
    here, so importing the third-party modules (the only place their aliases are written) costs no other call;
    one that fails to import is skipped (its own name still reports why)."""
    for name, (target, _hint) in _entry_points().items():
        if name in PROVIDERS:
            continue
        module_name, _, class_name = target.partition(":")
        try:
            cls = getattr(_import(module_name), class_name)
        except Exception:
            continue
        if raw in (canonical_name(alias) for alias in getattr(cls, "aliases", ())):
            return name
    return None


def _import(module_name: str) -> Any:
    """The module ``module_name``, imported (importlib.import_module's answer for an absolute name, without
    importing importlib, which imports warnings)."""
    __import__(module_name)
    return sys.modules[module_name]


def load_provider_class(name: str) -> type[Provider]:
    """The class of the provider ``name`` (any spelling :func:`resolve_name` accepts), imported now."""
    if name not in PROVIDERS:  # a registered name is imported as it is, to name its install hint if it fails
        name = resolve_name(name)
    target, install_hint = (PROVIDERS if name in PROVIDERS else _all())[name]
    module_name, _, class_name = target.partition(":")
    try:
        module = _import(module_name)
    except ImportError as exc:
        raise UsageError(
            f"provider {name!r} cannot be loaded: {exc}", code="usage.provider_unavailable",
            remedy=install_hint, provider=name,
        ) from exc
    cls: type[Provider] = getattr(module, class_name)
    return cls


def provider_class(name: str) -> type[Provider] | None:
    """The class of an installed provider whose module loads, or None (unknown, not installed, or its library
    missing): how the parts that ask about providers (credentials, the compatibility matrix) read a provider's
    declared facts (``credentials``, ``capabilities``) without handling the registry's errors themselves."""
    try:
        name = resolve_name(name)
        if not _module_exists((PROVIDERS if name in PROVIDERS else _all())[name][0]):
            return None
        return load_provider_class(name)
    except UsageError:
        return None


def get_provider(name: str, options: dict[str, Any] | None = None) -> Provider:
    """An instance of the named provider, built with ``options`` (the spec's ``provider_options``)."""
    return load_provider_class(name)(options)


def describe_options(cls: type[Provider]) -> list[dict[str, Any]] | None:
    """The options of a provider class as rows (name, type, default, doc, env, secret, bounds) from its typed
    ``options_model``; a provider that declares only ``option_names`` gets a row per name without types; None: it
    declares none (any key is passed through)."""
    model = cls.options_class()
    if model is not None:
        return model.describe()
    if cls.option_names is None:
        return None
    return [{"name": name, "type": None, "required": False, "default": None, "doc": "", "env": None,
             "secret": False} for name in sorted(cls.option_names)]
