"""A provider's option values at run time, read without building the typed options.

A provider declares its options once, as a :class:`~deskctl.providers.options.ProviderOptions` subclass in its
``options`` module. That class is built where options are checked or described (``up``, ``preflight``,
``providers --json``, the docs); a process that only drives or ends a desktop (``deskctl do``, ``down``) need
not pay for it (about 1 ms and 4-5 million instructions per provider: its converters, bounds, annotations and
the modules it imports). So each such provider package carries ``_option_table.py``, a table made from
the class by :func:`render_table` (``python -m deskctl.providers._option_values`` rewrites them all; a test
holds each equal to its class), and reads its values through :class:`OptionValues`: the given value, else the
declared environment variable, else the declared default; numbers checked against their ``bound``
(:func:`deskctl.limits.check_number`: ``config.invalid``, as before), flags read as true/false.

A provider types the view as its ``Options`` (imported under ``TYPE_CHECKING``), so ``self.opts.poll_interval``
is checked by mypy against the one declaration.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from deskctl.errors import ConfigInvalid

if TYPE_CHECKING:
    from deskctl.providers.options import ProviderOptions

__all__ = ["OptionRow", "OptionValues", "render_table"]

#: name -> (kind, default, env, bound); kind is one of bool, int, float, str, any
OptionRow = tuple[str, Any, "str | None", "str | None"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class OptionValues:
    """The option values of one provider instance (see the module's docstring). Values given are checked when
    the view is made (a bad one is :class:`~deskctl.errors.ConfigInvalid`); an environment variable is read
    (through ``lookup``: the provider's credential lookup, environment then keyring) the first time its option
    is asked for."""

    def __init__(self, provider: str, table: Mapping[str, OptionRow], given: Mapping[str, Any],
                 lookup: Callable[[str], str | None] | None = None) -> None:
        self._provider = provider
        self._table = table
        self._lookup = lookup or os.environ.get
        self._values: dict[str, Any] = {}
        for name, raw in given.items():
            if name in table and not _absent(raw):
                self._values[name] = self._convert(name, raw)
        self._given = frozenset(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            pass
        try:
            _kind, default, env, _bound = self._table[name]
        except KeyError:
            raise AttributeError(f"{self._provider} has no option {name!r}") from None
        raw = self._lookup(env) if env else None
        value = default if _absent(raw) else self._convert(name, raw)
        self._values[name] = value
        return value

    def given(self) -> dict[str, Any]:
        """The options that were set (given, or by their environment variable), not left to their defaults: as
        :meth:`deskctl.providers.options.ProviderOptions.given`."""
        return {name: getattr(self, name) for name, (_kind, _default, env, _bound) in self._table.items()
                if name in self._given or (env is not None and not _absent(self._lookup(env)))}

    def _convert(self, name: str, raw: Any) -> Any:
        kind, _default, _env, bound = self._table[name]
        what = f"{self._provider} option {name}"
        if kind in ("int", "float"):
            from deskctl.limits import check_number

            number = check_number(bound or "provider_option", raw, what=what)
            return int(number) if kind == "int" else float(number)
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ConfigInvalid(f"{what}: {raw!r} is not true or false", provider=self._provider)
        if kind == "str":
            return str(raw)
        return raw


def _absent(raw: Any) -> bool:
    return raw is None or (isinstance(raw, str) and not raw.strip())


# -- the tables -----------------------------------------------------------------------------------------------------

def _kind(annotation: Any) -> str:
    import types
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    for kind in (bool, int, float, str):
        if annotation is kind:
            name: str = kind.__name__
            return name
    return "any"


def render_table(model: type[ProviderOptions]) -> str:
    """The source of ``_option_table.py`` for ``model``."""
    lines = [f'"""{model.provider}\'s options as data for :class:`deskctl.providers._option_values.OptionValues`.',
             "",
             f"Made from {model.__module__}.{model.__qualname__} by ``python -m deskctl.providers._option_values``:",
             'do not edit (a test holds it equal to the class)."""',
             "",
             "from deskctl.providers._option_values import OptionRow",
             "",
             "TABLE: dict[str, OptionRow] = {"]
    for name, field in model.model_fields.items():
        default = None if field.is_required() else field.default
        row = (_kind(field.annotation), default, field.env, field.bound)
        lines.append(f"    {name!r}: {row!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


#: the provider packages that read their options through a table (module of ``Options``, file of the table)
TABLES = ("daytona", "cua_cloud", "use_computer", "kubernetes", "ssh")


def _write_all() -> None:  # pragma: no cover - a developer's command
    import importlib
    from pathlib import Path

    here = Path(__file__).parent
    for package in TABLES:
        model = importlib.import_module(f"deskctl.providers.{package}.options").Options
        (here / package / "_option_table.py").write_text(render_table(model))


if __name__ == "__main__":  # pragma: no cover
    _write_all()
