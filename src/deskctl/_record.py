"""Record classes that cost nothing to import: :class:`Record`, a base for the value classes on the path of every
``deskctl do`` process (a screenshot, a handle, a ledger row), instead of ``@dataclass``.

Importing :mod:`dataclasses` imports :mod:`inspect` (and with it ``ast``, ``dis``, ``tokenize``, ``linecache``):
about a third of the instructions of a whole ``deskctl do ID click X Y`` process, more than the click, the ledger
and the X connection together (valgrind counts; bench/bench_cli.py has the wall times). A record class is
declared like a dataclass, with annotated fields, defaults and :func:`field` (``default_factory``, ``repr``)::

    class Screenshot(Record, frozen=True):
        png: bytes
        width: int
        height: int

and behaves like one: keyword or positional ``__init__`` in field order (then ``__post_init__``), ``__repr__``,
``__eq__`` (same class, equal fields), ``frozen=True`` (assignment raises ``dataclasses.FrozenInstanceError``
and instances hash by their fields; a mutable record is unhashable, as a dataclass with ``eq`` is). Type checkers
read it as a dataclass (``typing.dataclass_transform``).

It is also a dataclass to the :mod:`dataclasses` module, once something loads that module and asks:
``__dataclass_fields__`` and ``__dataclass_params__`` are made on first access from the same declarations, so
``dataclasses.fields``, ``replace`` and ``asdict`` work on records, and a ``@dataclass`` may subclass a record
(it adds fields after the record's). :func:`record_fields` and :func:`replace` do the common cases without loading
:mod:`dataclasses`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar, dataclass_transform
else:
    def dataclass_transform(**kwargs: object) -> object:
        """typing's is for the type checkers (at run time it only marks the class, for nobody to read): the class
        as it is, without importing typing (a tenth of a `deskctl do` process)."""
        return lambda cls: cls

__all__ = ["Record", "field", "record_fields", "replace"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


class _Field:
    """What :func:`field` declares (kept apart from the class attribute it replaces)."""

    __slots__ = ("default", "default_factory", "repr")

    def __init__(self, default: Any, default_factory: Any, repr: bool) -> None:
        self.default = default
        self.default_factory = default_factory
        self.repr = repr


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | Any = _MISSING,
          repr: bool = True) -> Any:
    """A record field's default (``default``, or ``default_factory()`` made for each instance) and whether
    ``__repr__`` shows it (a secret's path, a large blob: ``repr=False``)."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, repr)


class _DataclassView:
    """``__dataclass_fields__`` / ``__dataclass_params__`` of a record class, made on first access by applying the
    real ``@dataclass`` to a stand-in class with the same declarations (so they are whatever this Python's
    :mod:`dataclasses` makes), and cached on the class."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type[Record]) -> Any:
        if owner is Record:
            raise AttributeError(self.name)  # the base is no dataclass (a frozen subclass must not see one)
        import dataclasses

        namespace: dict[str, Any] = {"__annotations__": dict(owner._record_types), "__module__": owner.__module__,
                                     "__qualname__": owner.__qualname__}
        for name, spec in owner._record_specs.items():
            if isinstance(spec, _Field):
                options: dict[str, Any] = {"repr": spec.repr}
                if spec.default is not _MISSING:
                    options["default"] = spec.default
                if spec.default_factory is not _MISSING:
                    options["default_factory"] = spec.default_factory
                namespace[name] = dataclasses.field(**options)
            elif spec is not _MISSING:
                namespace[name] = spec
        stand_in: Any = dataclasses.dataclass(frozen=owner._record_frozen)(type(owner.__name__, (), namespace))
        type.__setattr__(owner, "__dataclass_fields__", stand_in.__dataclass_fields__)
        type.__setattr__(owner, "__dataclass_params__", stand_in.__dataclass_params__)
        return getattr(stand_in, self.name)


def _frozen_setattr(self: Record, name: str, value: Any) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Record, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _record_hash(self: Record) -> int:
    return hash(tuple(getattr(self, name) for name in self._record_names))


@dataclass_transform(field_specifiers=(field,))
class Record:
    """The base of a record class; see the module docstring."""

    #: the fields in ``__init__`` order, their declarations (a default, a :class:`_Field`, or _MISSING), and
    #: their annotations as written
    _record_names: ClassVar[tuple[str, ...]] = ()
    _record_specs: ClassVar[dict[str, Any]] = {}
    _record_types: ClassVar[dict[str, Any]] = {}
    _record_frozen: ClassVar[bool] = False

    __dataclass_fields__ = _DataclassView("__dataclass_fields__")
    __dataclass_params__ = _DataclassView("__dataclass_params__")

    def __init_subclass__(cls, *, frozen: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parent_frozen = cls._record_frozen
        if frozen is None:
            frozen = parent_frozen
        elif cls._record_names and frozen != parent_frozen:
            raise TypeError(f"{cls.__name__}: a record subclass is frozen exactly when its base is")
        specs = dict(cls._record_specs)
        types = dict(cls._record_types)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 (no inspect)
            if "ClassVar" in str(annotation):
                continue
            value = cls.__dict__.get(name, _MISSING)
            if isinstance(value, _Field):
                if value.default is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value.default)
            specs.pop(name, None)  # a redeclared field keeps its place, as in a dataclass
            specs[name] = value
            types[name] = annotation
        names = tuple(specs)
        seen_default = False
        for name in names:
            has_default = _has_default(specs[name])
            if seen_default and not has_default:
                raise TypeError(f"{cls.__name__}: non-default field {name!r} follows a default field")
            seen_default = seen_default or has_default
        cls._record_names = names
        cls._record_specs = specs
        cls._record_types = types
        cls._record_frozen = frozen
        if frozen and not parent_frozen:  # set once, where freezing starts (a @dataclass subclass sets its own)
            cls.__setattr__ = _frozen_setattr  # type: ignore[method-assign,assignment]
            cls.__delattr__ = _frozen_delattr  # type: ignore[method-assign,assignment]
            if cls.__dict__.get("__hash__") is None:
                cls.__hash__ = _record_hash  # type: ignore[method-assign,assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self._record_names
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes {len(names)} positional arguments, {len(args)} given")
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"{type(self).__name__}() got multiple values for argument {key!r}")
            values[key] = value
        specs = self._record_specs
        put = object.__setattr__
        for name in names:
            if name in values:
                put(self, name, values.pop(name))
                continue
            spec = specs[name]
            if not _has_default(spec):
                raise TypeError(f"{type(self).__name__}() missing required argument {name!r}")
            if isinstance(spec, _Field):
                put(self, name, spec.default if spec.default_factory is _MISSING else spec.default_factory())
            else:
                put(self, name, spec)
        if values:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {next(iter(values))!r}")
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_names
                          if not isinstance(spec := self._record_specs[name], _Field) or spec.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._record_names)


if TYPE_CHECKING:
    _R = TypeVar("_R", bound=Record)


def _has_default(spec: Any) -> bool:
    if isinstance(spec, _Field):
        return spec.default is not _MISSING or spec.default_factory is not _MISSING
    return spec is not _MISSING


def record_fields(record: Record | type[Record]) -> tuple[str, ...]:
    """The field names of a record (or record class), in ``__init__`` order."""
    return record._record_names


def replace(record: _R, **changes: Any) -> _R:
    """A copy of ``record`` with ``changes`` (``dataclasses.replace`` for records)."""
    values = {name: getattr(record, name) for name in record._record_names}
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(record).__name__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(record)(**values)
