"""Typed provider options: one declaration per provider that ``-o KEY=VALUE``, ``[providers.NAME]`` of
deskctl.toml, environment variables, preflight, ``deskctl providers --json`` and docs/providers.md all read.

A provider declares its options as a subclass of :class:`ProviderOptions` in its own ``options`` module, each
field made by :func:`option` (type, default, doc, environment variable, secret or not, bounds), and names that
class on the provider as ``options_model = "deskctl.providers.NAME.options:Options"``: a string, loaded only when
options are checked or described.

    class Options(ProviderOptions):
        image: str = option("deskctl-desktop:minimal", doc="the desktop image")
        shm_mb: int = option(256, doc="size of /dev/shm in MiB", ge=16, le=65536)

Values from the command line arrive as strings and are converted as pydantic's lax mode does (``"5"`` -> 5,
``"true"`` -> True, ``"1.5"`` -> 1.5; a union takes the first member the value is exactly, else the first it
converts to), with pydantic's messages; an unknown key or a bad value is a :class:`~deskctl.errors.UsageError`
(``usage.unknown_option`` / ``usage.bad_option``, exit 2) that names the key and the rule, never the value.
This module imports no pydantic (``deskctl up`` pays for every import): the types it reads are those the
providers declare (str, int, float, bool, None, ``Literal[...]``, ``tuple[str, ...]``, ``dict[str, T]`` and
unions of them). A field's own checks are :func:`field_validator` (``mode="before"``: on the raw value;
``"after"``: on the converted one) and :func:`model_validator` (on the whole, once every field is good); what
they raise passes through (a :class:`~deskctl.errors.UsageError` of their own), except a ``ValueError``, which
is the field's ``usage.bad_option`` with its message.
"""

from __future__ import annotations

import math
import operator
import re
import sys
import types
from collections.abc import Callable, Mapping

from deskctl import _lax as lax
from deskctl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self

__all__ = ["Option", "ProviderOptions", "field_validator", "model_validator", "option"]

#: the bounds :meth:`ProviderOptions.describe` shows, and the constraints :func:`option` takes besides them
_BOUNDS = ("ge", "gt", "le", "lt", "min_length", "max_length")
_CONSTRAINTS = frozenset(_BOUNDS) | {"pattern", "allow_inf_nan", "strict", "repr"}
_NUMBER_RULES: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("le", operator.le, "less than or equal to"), ("lt", operator.lt, "less than"),
    ("ge", operator.ge, "greater than or equal to"), ("gt", operator.gt, "greater than"))


class Option:
    """One declared option (:func:`option` makes it; ``Options.model_fields[name]`` holds it)."""

    __slots__ = ("_convert", "allow_inf_nan", "annotation", "bound", "constraints", "default", "description", "env",
                 "name", "pattern", "repr", "secret", "strict")

    def __init__(self, default: Any, doc: str, env: str | None, secret: bool, bound: str | None,
                 constraints: dict[str, Any]) -> None:
        unknown = set(constraints) - _CONSTRAINTS
        if unknown:
            raise TypeError(f"option() got unknown constraints: {', '.join(sorted(unknown))}")
        self.default, self.description, self.env, self.secret, self.bound = default, doc, env, secret, bound
        #: the bounds (ge, gt, le, lt, min_length, max_length) in the order given
        self.constraints = {key: value for key, value in constraints.items() if key in _BOUNDS}
        self.pattern: str | None = constraints.get("pattern")  # compiled when a value is checked against it
        self.allow_inf_nan: bool = constraints.get("allow_inf_nan", True)
        self.strict: bool = constraints.get("strict", False)
        self.repr: bool = constraints.get("repr", not secret)  # a secret is never in a repr, a log or a traceback
        self.name = ""
        self.annotation: Any = None
        self._convert: Callable[[Any, bool], Any] = _any

    def is_required(self) -> bool:
        return self.default is ...

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {_type_name(self.annotation)})"

    def check(self, value: Any) -> Any:
        """``value`` converted to the option's type and held to its bounds, or :class:`_Invalid`."""
        value = self._convert(value, self.strict)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            if not self.allow_inf_nan and isinstance(value, float) and not math.isfinite(value):
                raise _Invalid("Input should be a finite number")
            for key, holds, words in _NUMBER_RULES:  # in pydantic's order (nan breaks the first there is)
                if key in self.constraints and not holds(value, self.constraints[key]):
                    raise _Invalid(f"Input should be {words} {_number(self.constraints[key])}")
        elif isinstance(value, (str, tuple)):
            what, unit = ("String", "character") if isinstance(value, str) else ("Tuple", "item")
            least, most = self.constraints.get("min_length"), self.constraints.get("max_length")
            if least is not None and len(value) < least:
                raise _Invalid(f"{what} should have at least {least} {unit}{'' if least == 1 else 's'}")
            if most is not None and len(value) > most:
                raise _Invalid(f"{what} should have at most {most} {unit}{'' if most == 1 else 's'}")
            if isinstance(value, str) and self.pattern is not None and not re.search(self.pattern, value):
                raise _Invalid(f"String should match pattern {self.pattern!r}")
        return value


def option(default: Any = ..., *, doc: str, env: str | None = None, secret: bool = False,
           bound: str | None = None, **constraints: Any) -> Any:
    """One option: ``default`` (``...``: required), ``doc`` (one line for docs and ``providers --json``), ``env``
    (an environment variable that gives it when no option does), ``secret`` (never shown), ``bound`` (a key of
    :data:`deskctl.limits.BOUNDS`), and constraints: ``ge``, ``gt``, ``le``, ``lt``, ``min_length``,
    ``max_length``, ``pattern`` (searched), ``allow_inf_nan`` (default true), ``strict`` (no conversion),
    ``repr`` (default: not for a secret)."""
    return Option(default, doc, env, secret, bound, constraints)


def field_validator(*names: str, mode: str = "after") -> Callable[[Any], Any]:
    """A classmethod ``(cls, value) -> value`` run on the options ``names``: ``mode="before"`` on the value given,
    ``"after"`` on the converted one (not on a default)."""
    if mode not in ("before", "after"):
        raise ValueError(f"mode must be before or after, not {mode!r}")

    def mark(func: Any) -> Any:
        target = func.__func__ if isinstance(func, classmethod) else func
        setattr(target, "__deskctl_validates__", (names, mode))  # noqa: B010 - a function's attribute
        return func
    return mark


def model_validator(*, mode: str = "after") -> Callable[[Any], Any]:
    """A method ``(self) -> self`` run on the options once every field is good."""
    if mode != "after":
        raise ValueError("only mode='after' is supported")

    def mark(func: Any) -> Any:
        setattr(func, "__deskctl_validates__", ((), "model"))  # noqa: B010 - a function's attribute
        return func
    return mark


class _Invalid(Exception):
    """A value that breaks a rule: the message is pydantic's for that rule (and never shows the value)."""


class ProviderOptions:
    """The base of every provider's ``Options``: frozen, unknown keys refused."""

    #: the provider's name, for messages (set by the subclass)
    provider: ClassVar[str] = ""
    #: the declared options in order (the base class's first; a restated one keeps its place)
    model_fields: ClassVar[dict[str, Option]] = {}
    _before: ClassVar[dict[str, list[str]]] = {}
    _after: ClassVar[dict[str, list[str]]] = {}
    _whole: ClassVar[list[str]] = []
    #: the options that were given (or came from their environment variable), not left to their defaults
    model_fields_set: set[str]

    __slots__ = ("__dict__", "model_fields_set")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls.model_fields)
        namespace = vars(sys.modules[cls.__module__])
        annotations = cls.__annotations__  # the class's own (Python 3.10+), strings under postponed evaluation
        for name, annotation in annotations.items():
            if not isinstance(cls.__dict__.get(name), Option) and "ClassVar" not in str(annotation):
                raise TypeError(f"{cls.__name__}.{name}: declare an option as `{name}: TYPE = option(...)`")
        for name, value in list(cls.__dict__.items()):
            if not isinstance(value, Option):
                continue
            if name not in annotations:
                raise TypeError(f"{cls.__name__}.{name}: an option needs its type (`{name}: TYPE = option(...)`)")
            annotation = annotations[name]
            value.name = name
            value.annotation = _resolve(annotation, namespace) if isinstance(annotation, str) else annotation
            value._convert = _converter(value.annotation)
            fields[name] = value
            delattr(cls, name)  # an instance's value is in its __dict__; the class keeps the declaration only
        cls.model_fields = fields
        marks: dict[str, tuple[tuple[str, ...], str]] = {}  # method name -> what it validates (the last class's)
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                marked = getattr(value.__func__ if isinstance(value, classmethod) else value,
                                 "__deskctl_validates__", None)
                if marked is not None:
                    marks[attr] = marked
                elif attr in marks:
                    del marks[attr]  # overridden by a method that validates nothing
        before: dict[str, list[str]] = {}
        after: dict[str, list[str]] = {}
        whole: list[str] = []
        for attr, (names, mode) in marks.items():
            if mode == "model":
                whole.append(attr)
            for name in names:
                if name not in fields:
                    raise TypeError(f"{cls.__name__}.{attr} validates {name!r}, which is no option")
                (before if mode == "before" else after).setdefault(name, []).append(attr)
        cls._before, cls._after, cls._whole = before, after, whole

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name!r} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name!r} cannot be deleted")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_args())})"

    def __str__(self) -> str:
        return " ".join(self._repr_args())

    def _repr_args(self) -> list[str]:
        return [f"{name}={self.__dict__[name]!r}" for name, field in self.model_fields.items() if field.repr]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(cls.model_fields)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, where: str = "provider options") -> Self:
        """The options in ``raw`` checked and converted; environment variables fill fields ``raw`` lacks."""
        import os

        values = dict(raw)
        for name, field in cls.model_fields.items():
            if name not in values and field.env is not None and os.environ.get(field.env):
                values[name] = os.environ[field.env]
        checked: dict[str, Any] = {}
        first: tuple[str, str] | None = None  # (key, rule) of the first bad field, in declaration order
        for name, field in cls.model_fields.items():
            if name not in values:
                if field.is_required():
                    first = first or (name, "Field required")
                else:
                    default = field.default
                    checked[name] = type(default)(default) if isinstance(default, (dict, list)) else default
                continue
            try:
                value = values[name]
                for attr in cls._before.get(name, ()):
                    value = getattr(cls, attr)(value)
                value = field.check(value)
                for attr in cls._after.get(name, ()):
                    value = getattr(cls, attr)(value)
            except (_Invalid, ValueError) as exc:
                first = first or (name, str(exc))
                continue
            checked[name] = value
        if first is not None:
            key, rule = first
            raise UsageError(f"{where}: option {key!r}: {rule}", code="usage.bad_option",
                             provider=cls.provider or None)
        unknown = [key for key in values if key not in cls.model_fields]
        if unknown:
            known = ", ".join(sorted(cls.model_fields))
            raise UsageError(f"{where}: {cls.provider or 'the provider'} has no option {str(unknown[0])!r}; "
                             f"its options: {known}", code="usage.unknown_option", provider=cls.provider or None)
        made = object.__new__(cls)
        made.__dict__.update(checked)
        object.__setattr__(made, "model_fields_set", {name for name in values if name in cls.model_fields})
        for attr in cls._whole:
            made = getattr(made, attr)()
        return made

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """Each option as data (name, type, default, doc, env, secret, bounds), for docs and ``providers --json``."""
        rows: list[dict[str, Any]] = []
        for name, field in cls.model_fields.items():
            required = field.is_required()
            row: dict[str, Any] = {
                "name": name,
                "type": _type_name(field.annotation),
                "required": required,
                "default": None if required or field.secret else _jsonable(field.default),
                "doc": field.description,
                "env": field.env,
                "secret": field.secret,
            }
            row.update((key, value) for key, value in field.constraints.items() if value is not None)
            if field.bound:
                row["bound"] = field.bound
            rows.append(row)
        return rows

    def given(self) -> dict[str, Any]:
        """The options that were set (not defaults), as plain values."""
        return {name: self.__dict__[name] for name in self.model_fields if name in self.model_fields_set}


# -- converting a value to a declared type, as pydantic's lax mode does ------------------------------------------

#: pydantic's words for a value the shared lax conversion refused, by the reason it gives
_STRING = "Input should be a valid string"
_NOT_UTF8 = "Input should be a valid string, unable to parse raw data as a unicode string"


def _scalar(convert: Callable[[Any], Any], exact: type | tuple[type, ...],
            words: dict[str, str]) -> Callable[[Any, bool], Any]:
    """The converter of a scalar type: ``convert`` (of :mod:`deskctl._lax`) with its refusals in pydantic's
    ``words``; strict, only a value of the ``exact`` types (a bool is no int there) is taken."""
    def check(value: Any, strict: bool) -> Any:
        if strict and (not isinstance(value, exact) or (isinstance(value, bool) and exact is not bool)):
            raise _Invalid(words[lax.TYPE])
        try:
            return convert(value)
        except lax.Refused as refused:
            raise _Invalid(words.get(refused.reason, _NOT_UTF8)) from None
    return check


_str = _scalar(lax.text, str, {lax.TYPE: _STRING})
_int = _scalar(lax.whole, int, {
    lax.TYPE: "Input should be a valid integer", lax.FINITE: "Input should be a finite number",
    lax.FRACTION: "Input should be a valid integer, got a number with a fractional part",
    lax.SYNTAX: "Input should be a valid integer, unable to parse string as an integer"})
_float = _scalar(lax.number, (int, float), {
    lax.TYPE: "Input should be a valid number",
    lax.SYNTAX: "Input should be a valid number, unable to parse string as a number"})
_bool = _scalar(lax.flag, bool, {
    lax.TYPE: "Input should be a valid boolean",
    lax.WORD: "Input should be a valid boolean, unable to interpret input"})


def _any(value: Any, strict: bool) -> Any:
    return value


def _none(value: Any, strict: bool) -> None:
    if value is not None:
        raise _Invalid("Input should be None")


def _literal(choices: tuple[Any, ...]) -> Callable[[Any, bool], Any]:
    shown = [repr(choice) for choice in choices]
    expected = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"

    def convert(value: Any, strict: bool) -> Any:
        for choice in choices:
            if type(value) is type(choice) and value == choice:
                return choice
        raise _Invalid(f"Input should be {expected}")
    return convert


def _tuple(item: Callable[[Any, bool], Any]) -> Callable[[Any, bool], Any]:
    def convert(value: Any, strict: bool) -> tuple[Any, ...]:
        import collections

        if not isinstance(value, tuple if strict else (tuple, list, set, frozenset, collections.deque)):
            raise _Invalid("Input should be a valid tuple")
        return tuple(item(each, strict) for each in value)
    return convert


def _dict(key: Callable[[Any, bool], Any], item: Callable[[Any, bool], Any]) -> Callable[[Any, bool], Any]:
    def convert(value: Any, strict: bool) -> dict[Any, Any]:
        if not isinstance(value, dict if strict else Mapping):
            raise _Invalid("Input should be a valid dictionary")
        return {key(k, strict): item(v, strict) for k, v in value.items()}
    return convert


def _union(members: list[Callable[[Any, bool], Any]]) -> Callable[[Any, bool], Any]:
    """pydantic's smart union: the first member that takes the value exactly (strict), else the first that
    converts it; when none does, the first member's rule."""
    def convert(value: Any, strict: bool) -> Any:
        for member in members:
            try:
                return member(value, True)
            except _Invalid:
                pass
        if strict:
            return members[0](value, True)
        for member in members:
            try:
                return member(value, False)
            except _Invalid:
                pass
        return members[0](value, False)
    return convert


def _optional(inner: Callable[[Any, bool], Any]) -> Callable[[Any, bool], Any]:
    def convert(value: Any, strict: bool) -> Any:
        return None if value is None else inner(value, strict)
    return convert


_SIMPLE: dict[Any, Callable[[Any, bool], Any]] = {str: _str, int: _int, float: _float, bool: _bool,
                                                  type(None): _none}

#: what :func:`_parts` gives as the origin of ``Literal[...]`` (typing's own ``Literal`` would need typing loaded)
_LITERAL = "Literal"


def _parts(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """``typing.get_origin`` and ``typing.get_args`` of ``annotation``, a union's origin as ``types.UnionType``
    and a literal's as :data:`_LITERAL`, without importing typing: an annotation typing made (``Literal[...]``,
    ``Optional[...]``, ``Union[...]``, ``Any``) was evaluated in a module that imported typing, so only then is
    it asked."""
    kind = type(annotation)
    if kind is types.UnionType:
        return types.UnionType, annotation.__args__
    if kind is types.GenericAlias:  # tuple[str, ...], dict[str, int] (not a subclass: Callable's flattens)
        return annotation.__origin__, annotation.__args__
    if kind.__module__ != "typing" and not hasattr(annotation, "__origin__"):
        return None, ()  # a class (str, int, None's type): no origin, no arguments
    import typing  # loaded already for typing's own objects; anything else generic asks it too

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        origin = types.UnionType
    elif origin is typing.Literal:
        origin = _LITERAL
    return origin, args


def _is_any(annotation: Any) -> bool:
    typing = sys.modules.get("typing")  # ``Any`` was evaluated where typing is imported
    return typing is not None and annotation is typing.Any


#: the names an annotation is made of without evaluating it (the common case: ``float``, ``str | None``)
_PLAIN: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool, "None": type(None)}


def _resolve(text: str, namespace: dict[str, Any]) -> Any:
    """A postponed annotation evaluated: a union of plain names by lookup, anything else by ``eval`` in the
    declaring module (compiling each would cost every process that loads options)."""
    parts: list[Any] = [_PLAIN.get(part.strip()) for part in text.split("|")]
    if all(part is not None for part in parts):
        resolved = parts[0]
        for part in parts[1:]:
            resolved = resolved | part
        return resolved
    return eval(text, namespace)


def _converter(annotation: Any) -> Callable[[Any, bool], Any]:
    """How a value becomes ``annotation`` (one of the types this module reads; anything else is refused when
    the class is declared, not when a user gives a value)."""
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    if _is_any(annotation):
        return _any
    origin, args = _parts(annotation)
    if origin is types.UnionType:
        members = [_converter(arg) for arg in args if arg is not type(None)]
        inner = members[0] if len(members) == 1 else _union(members)
        return _optional(inner) if type(None) in args else inner
    if origin is _LITERAL:
        return _literal(args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _tuple(_converter(args[0]))
    if origin is dict and len(args) == 2:
        return _dict(_converter(args[0]), _converter(args[1]))
    raise TypeError(f"provider options cannot read the type {annotation!r}")


def _number(value: float) -> str:
    """A bound as pydantic writes it (2592000.0 -> 2592000)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _type_name(annotation: Any) -> str:
    """A type as it is written in Python 3.10+ (``str | None``, ``Literal['a', 'b']``, ``tuple[str, ...]``)."""
    origin, args = _parts(annotation)
    if origin is types.UnionType:
        return " | ".join(_type_name(a) for a in args)
    if origin is _LITERAL:
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
