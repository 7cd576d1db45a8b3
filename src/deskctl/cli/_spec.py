"""Flags and configuration to a :class:`~deskctl.spec.DesktopSpec`: one path for every command that asks for a
desktop (``up``, ``preflight``), so ``[providers.NAME]`` of the configuration, ``-o KEY=VALUE``, ``--host`` and
the option-name checks behave the same everywhere. The ``[defaults]`` table reaches the flags themselves through
click's default map (:func:`defaults_map`)."""

from __future__ import annotations

from deskctl.errors import ConfigInvalid, UsageError
from deskctl.platforms import suggest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    import click

    from deskctl.config import Config
    from deskctl.spec import DesktopSpec

__all__ = ["COMMAND_LINE_ONLY", "check_environment", "check_option_names", "defaults_map", "option_pairs",
           "option_value",
           "provider_options", "spec_from_flags"]


def option_pairs(values: Iterable[str], what: str) -> dict[str, str]:
    """``("k=v", ...)`` -> ``{"k": "v"}``; anything else is ``usage.bad_option``."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} {item!r} is not KEY=VALUE", code="usage.bad_option")
        out[key.strip()] = value
    return out


def option_value(raw: str) -> Any:
    """A ``-o`` value as the provider expects it: booleans and numbers parsed, anything else a string."""
    low = raw.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def check_option_names(provider: str, keys: Iterable[str], *, where: str, config: bool = False) -> None:
    """Refuse a provider option the provider does not read (a typo would otherwise be ignored silently).

    A provider that declares no ``option_names`` (a third-party one) accepts any key."""
    from deskctl.providers import load_provider_class

    known = load_provider_class(provider).declared_option_names()
    if known is None:
        return
    for key in keys:
        if key not in known:
            message = (f"{where}: {provider} has no option {key!r}{suggest(key, sorted(known))}; "
                       f"its options: {', '.join(sorted(known))}")
            if config:
                raise ConfigInvalid(message, provider=provider, remedy="see the provider's page under docs/")
            raise UsageError(message, code="usage.unknown_option", provider=provider)


def provider_options(name: str, config: Config, options: Iterable[str] = (), *, host: str | None = None,
                     accept_new_host_key: bool = False) -> dict[str, Any]:
    """``[providers.NAME]`` of the configuration under the flags (``-o``, ``--host``), names checked."""
    merged = config.provider_options(name)
    if merged:
        check_option_names(name, merged, where=config.provider_source(name), config=True)
    flags: dict[str, Any] = {k: option_value(v) for k, v in option_pairs(options, "option").items()}
    if host:
        flags["host"] = host
    if accept_new_host_key:
        flags["accept_new_host_key"] = True
    check_option_names(name, flags, where="-o")
    merged.update(flags)
    if merged:
        from deskctl.providers import load_provider_class

        load_provider_class(name).check_options(merged)
    return merged


def spec_from_flags(config: Config, *, provider: str, options: Iterable[str] = (), host: str | None = None,
                    accept_new_host_key: bool = False, labels: Iterable[str] = (), **fields: Any) -> DesktopSpec:
    """The spec a command's flags ask for. Every check that needs no provider call happens here, before a
    ledger row or a provider is touched: a bad value is a usage error (exit 2) with a stable code."""
    from deskctl.spec import DesktopSpec

    name = DesktopSpec.build(provider=provider).provider  # normalised, or usage.unknown_provider
    return DesktopSpec.build(
        provider=name, labels=option_pairs(labels, "label"),
        provider_options=provider_options(name, config, options, host=host, accept_new_host_key=accept_new_host_key),
        **fields,
    )


# -- [defaults] -> click's default map ---------------------------------------------------------------------------

_NOT_CONFIGURABLE = {"help", "version"}
#: options that widen what a client may do or who may reach it (``mcp --allow-exec``: a shell; ``mcp --bind``: the
#: network; ``view --control``: the keyboard). Only the command line turns them on: a ``deskctl.toml`` in a cloned
#: project's folder must not hand its author a shell.
COMMAND_LINE_ONLY = frozenset({"allow_exec", "bind", "control"})


def _option_keys(param: click.Parameter) -> set[str]:
    keys = {param.name or ""}
    keys |= {opt.lstrip("-").replace("-", "_") for opt in param.opts if opt.startswith("--")}
    return keys - {""}


def _command_map(ctx: click.Context, command: click.Command, defaults: Mapping[str, Any],
                 used: set[str]) -> dict[str, Any]:
    import click  # here: `deskctl up`'s click-free path (cli/_up_fast.py) reads the flags with this module

    out: dict[str, Any] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in _NOT_CONFIGURABLE or param.name is None:
            continue
        for key in _option_keys(param) & set(defaults):
            value = defaults[key]
            if param.multiple and not isinstance(value, list | tuple):
                value = [value]
            out[param.name] = value
            used.add(key)
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            child = command.get_command(ctx, sub)
            if child is not None:
                nested = _command_map(ctx, child, defaults, used)
                if nested:
                    out[sub] = nested
    return out


def defaults_map(ctx: click.Context, group: click.Group, config: Config) -> dict[str, Any]:
    """Click's default map for every command from ``[defaults]``: a key is an option's long name (``max-usd``
    or ``max_usd``) and sets that option of every command that has it. A key no command has is a
    ``config.invalid`` error with a did-you-mean."""
    import click

    for key in sorted(set(config.defaults) & COMMAND_LINE_ONLY):
        where = config.defaults_source.get(key, "configuration")
        flag = "--" + key.replace("_", "-")
        raise ConfigInvalid(
            f"{where}: [defaults] sets {key.replace('_', '-')!r}, which only the command line may set: {flag} "
            "widens what a client may do or who may reach it, so a configuration file cannot turn it on",
            remedy=f"remove {key.replace('_', '-')} from {where} and pass {flag} where you mean it",
        )
    used: set[str] = set()
    known: set[str] = set()
    out: dict[str, Any] = {}

    def collect(command: click.Command) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and param.name not in _NOT_CONFIGURABLE:
                known.update(_option_keys(param))
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                child = command.get_command(ctx, sub)
                if child is not None:
                    collect(child)

    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None:
            continue
        collect(command)
        mapped = _command_map(ctx, command, config.defaults, used)
        if mapped:
            out[name] = mapped
    for key in sorted(set(config.defaults) - used):
        where = config.defaults_source.get(key, "configuration")
        raise ConfigInvalid(
            f"{where}: [defaults] has {key.replace('_', '-')!r}, which is no option of any command"
            + suggest(key, sorted(known)).replace("_", "-"),
            remedy="a key of [defaults] is an option's long name, e.g. provider, geometry, ttl, max-usd",
        )
    return out


def check_environment() -> None:
    """``DESKCTL_HOME`` and ``DESKCTL_LEDGER_URL`` usable, checked without opening anything: a command that
    will write to the ledger calls this first, so a bad value is exit 2 before any row or resource exists."""
    from deskctl.ledger import check_ledger_url
    from deskctl.paths import home_path

    home_path()  # home_dir()'s checks, without pathlib (which imports warnings, re, functools, urllib.parse)
    check_ledger_url()
