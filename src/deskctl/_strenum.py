"""A :class:`StrEnum` for the enums a one-shot CLI process loads, without :mod:`enum`.

``enum`` imports ``functools`` (and with it ``collections``, ``keyword``, ``operator``, ``reprlib``), ``types``
and ``re``; a ``deskctl do`` process needs only two small string enums (:class:`deskctl.lifecycle.SessionStatus`,
:class:`deskctl.platforms.Platform`). This base gives exactly the part of :class:`enum.StrEnum` deskctl uses, and
behaves as it does (``tests/unit/test_strenum.py`` holds the two side by side on the same class body):

* a member is an instance of its class and of ``str``, equal to its value and hashed as it (a dict key or a
  frozenset element that finds the plain string too); ``str()``, ``format()`` and f-strings give the value;
  ``repr`` is ``<Cls.NAME: 'value'>``; ``.name`` and ``.value`` (a plain ``str``);
* ``Cls("value")`` and ``Cls(member)`` return the member; an unknown value is ``ValueError("'x' is not a valid
  Cls")``; iteration in definition order, ``len``, ``Cls.__members__`` (aliases included), ``Cls.NAME``;
* properties, methods and classmethods of the class body work and are not members; a class with members cannot
  be subclassed; pickling and :mod:`copy` give back the very member.

Unlike enum's, a member has no ``__dict__`` of its own to add to: setting or deleting any attribute of a member
raises ``AttributeError`` (enum refuses ``name`` and ``value`` only). Members are the body's names bound to a
``str`` that are neither dunder (``__x__``) nor sunder (``_x_``) nor private (``_Cls__x``); a name bound to a
value that is not a ``str`` is a ``TypeError``, as in enum.

Type checkers see :class:`enum.StrEnum` (the modules that use this one import it as ``if TYPE_CHECKING: from enum
import StrEnum`` / ``else: from deskctl._strenum import StrEnum``). This module imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any, Self

__all__ = ["StrEnum", "StrEnumType"]

_MappingProxy = type(type.__dict__)  # types.MappingProxyType, without importing types


def _is_member_name(cls_name: str, name: str, value: object) -> bool:
    if name[:2] == name[-2:] == "__":
        return False  # dunder
    if len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_" and name[-2] != "_":
        # enum gives a few of these a meaning (_missing_, _order_, ...) and refuses the others; here none has one
        raise ValueError(f"_sunder_ names, such as {name!r}, are reserved for future Enum use")
    if name.startswith(f"_{cls_name.lstrip('_')}__"):
        return False  # a private name of the class
    descriptor = hasattr(type(value), "__get__") or hasattr(type(value), "__set__") or hasattr(
        type(value), "__delete__")
    return not descriptor


class StrEnumType(type):
    """The metaclass: makes the members when a class is defined, and looks them up on ``Cls(value)``."""

    _member_map_: dict[str, Any]  # name -> member, aliases included
    _member_names_: list[str]  # the members' names (no alias), in definition order
    _value2member_map_: dict[object, Any]  # value -> member
    _value2name_: dict[str, str]  # value -> the member's name

    def __new__(mcs, cls_name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> StrEnumType:
        for base in bases:
            if isinstance(base, StrEnumType) and base._member_names_:
                raise TypeError(f"<enum {cls_name!r}> cannot extend <enum {base.__name__!r}>")
        values: dict[str, str] = {}
        body: dict[str, Any] = {}
        for name, value in namespace.items():
            if _is_member_name(cls_name, name, value):
                if not isinstance(value, str):
                    raise TypeError(f"{value!r} is not a string")
                values[name] = value
            else:
                body[name] = value
        body.setdefault("__slots__", ())  # no __dict__: a member cannot take attributes
        cls = super().__new__(mcs, cls_name, bases, body, **kwargs)
        member_class: Any = cls  # a str subclass, which mypy cannot tell of a StrEnumType
        member_map: dict[str, Any] = {}
        member_names: list[str] = []
        by_value: dict[object, Any] = {}
        names: dict[str, str] = {}
        for name, value in values.items():
            member = by_value.get(value)
            if member is None:  # not an alias of an earlier name
                member = str.__new__(member_class, value)
                by_value[value] = member
                names[value] = name
                member_names.append(name)
            member_map[name] = member
            type.__setattr__(cls, name, member)
        type.__setattr__(cls, "_member_map_", member_map)
        type.__setattr__(cls, "_member_names_", member_names)
        type.__setattr__(cls, "_value2member_map_", by_value)
        type.__setattr__(cls, "_value2name_", names)
        return cls

    def __call__(cls, value: object) -> Any:
        try:
            return cls._value2member_map_[value]  # a str, a member, or anything (unhashable: TypeError)
        except (KeyError, TypeError):
            pass
        raise ValueError(f"{value!r} is not a valid {cls.__qualname__}")

    def __iter__(cls) -> Iterator[Any]:
        return (cls._member_map_[name] for name in cls._member_names_)

    def __len__(cls) -> int:
        return len(cls._member_names_)

    @property
    def __members__(cls) -> Mapping[str, Any]:
        return _MappingProxy(cls._member_map_)

    def __setattr__(cls, name: str, value: object) -> None:
        if name in cls.__dict__.get("_member_map_", ()):
            raise AttributeError(f"cannot reassign member {name!r}")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        if name in cls.__dict__.get("_member_map_", ()):
            raise AttributeError(f"{cls.__name__!r} cannot delete member {name!r}.")
        super().__delattr__(name)


class StrEnum(str, metaclass=StrEnumType):
    """Base of a string enum: ``class Colour(StrEnum): RED = "red"`` (see the module's docstring)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The member's name in the class body."""
        return type(self)._value2name_[str.__str__(self)]

    @property
    def value(self) -> str:
        """The member's value, a plain ``str``."""
        return str.__str__(self)

    __str__ = str.__str__
    __format__ = str.__format__

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {str.__repr__(self)}>"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot set attribute {name!r} of {self!r}: a member is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete attribute {name!r} of {self!r}: a member is immutable")

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, tuple[str]]:
        return type(self), (str.__str__(self),)

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: Any) -> Self:
        return self
