"""Typed provider options: one declaration per provider that ``-o KEY=VALUE``, ``[providers.NAME]`` of
deskctl.toml, environment variables, preflight, ``deskctl providers --json`` and docs/providers.md all read.

A provider declares its options as a subclass of :class:`ProviderOptions` in its own ``options`` module, each
field made by :func:`option` (type, default, doc, environment variable, secret or not, bounds), and names that
class on the provider as ``options_model = "deskctl.providers.NAME.options:Options"``: a string, loaded only when
options are checked or described, so the whole-process paths that never read options (``deskctl do``, ``down``)
do not import pydantic.

    class Options(ProviderOptions):
        image: str = option("deskctl-desktop:minimal", doc="the desktop image")
        shm_mb: int = option(256, doc="size of /dev/shm in MiB", ge=16, le=65536)

Values from the command line arrive as strings and are converted as pydantic's lax mode does (``"5"`` -> 5,
``"true"`` -> True); an unknown key or a bad value is a :class:`~deskctl.errors.UsageError`
(``usage.unknown_option`` / ``usage.bad_option``, exit 2) that names the key and never echoes a secret value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deskctl.errors import UsageError

__all__ = ["ProviderOptions", "option"]


def option(default: Any = ..., *, doc: str, env: str | None = None, secret: bool = False,
           bound: str | None = None, **constraints: Any) -> Any:
    """One option: ``default`` (``...``: required), ``doc`` (one line for docs and ``providers --json``), ``env``
    (an environment variable that gives it when no option does), ``secret`` (never shown), ``bound`` (a key of
    :data:`deskctl.limits.BOUNDS`), and pydantic constraints (``ge``, ``le``, ``min_length``, ``pattern`` ...)."""
    extra: dict[str, Any] = {"env": env, "secret": secret, "bound": bound}
    if secret:
        constraints.setdefault("repr", False)  # never in a repr, a log line or a traceback
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


class ProviderOptions(BaseModel):
    """The base of every provider's ``Options``: frozen, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the provider's name, for messages (set by the subclass)
    provider: ClassVar[str] = ""

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(cls.model_fields)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, where: str = "provider options") -> Self:
        """The options in ``raw`` checked and converted; environment variables fill fields ``raw`` lacks."""
        import os

        values = dict(raw)
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            env = extra.get("env")
            if name not in values and isinstance(env, str) and os.environ.get(env):
                values[name] = os.environ[env]
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise cls._usage_error(exc, where) from None

    @classmethod
    def _usage_error(cls, exc: ValidationError, where: str) -> UsageError:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first.get("loc", ())) or "?"
        if first.get("type") == "extra_forbidden":
            known = ", ".join(sorted(cls.model_fields))
            return UsageError(f"{where}: {cls.provider or 'the provider'} has no option {key!r}; its options: {known}",
                              code="usage.unknown_option", provider=cls.provider or None)
        # the message pydantic gives names the rule, never the value (input is left out on purpose: secrets)
        return UsageError(f"{where}: option {key!r}: {first.get('msg', 'invalid value')}",
                          code="usage.bad_option", provider=cls.provider or None)

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """Each option as data (name, type, default, doc, env, secret, bounds), for docs and ``providers --json``."""
        rows: list[dict[str, Any]] = []
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            row: dict[str, Any] = {
                "name": name,
                "type": _type_name(field.annotation),
                "required": field.is_required(),
                "default": None if field.is_required() or extra.get("secret") else _jsonable(field.default),
                "doc": field.description or "",
                "env": extra.get("env"),
                "secret": bool(extra.get("secret")),
            }
            for meta in field.metadata:
                for attr in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                    value = getattr(meta, attr, None)
                    if value is not None:
                        row[attr] = value
            if extra.get("bound"):
                row["bound"] = extra["bound"]
            rows.append(row)
        return rows

    def given(self) -> dict[str, Any]:
        """The options that were set (not defaults), as plain values."""
        return self.model_dump(exclude_unset=True)


def _type_name(annotation: Any) -> str:
    """A type as it is written in Python 3.10+ (``str | None``, ``Literal['a', 'b']``, ``tuple[str, ...]``)."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "None"
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
