"""A provider class in parts: methods of its other parts (preflight, create, commands and files) named on the class
and imported when first looked up, so that a process that only destroys, drives or captures a desktop (``deskctl
down``, ``do``, ``screenshot``) imports none of those modules. Shared by the ``docker`` and ``xvfb`` providers.

A part is a subclass of the class's base (``module:class``) whose methods use no ``super()``: bound to an instance of
the provider class, which is not a subclass of the part, ``super()``'s check of the instance's class would fail.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = ["Later", "add_parts"]


class Later:
    """A method of another part of the class (``module:class``), imported when it is first looked up and then set on
    the class in its place."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner, self.name = owner, name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        module, _, part = self.target.partition(":")
        __import__(module)
        method = getattr(sys.modules[module], part).__dict__[self.name]
        setattr(self.owner, self.name, method)
        return method.__get__(instance, owner)


def add_parts(cls: type, parts: Mapping[str, Sequence[str]]) -> None:
    """Put a :class:`Later` on ``cls`` for each method name of ``parts`` (``module:class`` to its method names); a
    name the class defines itself is an error (the part's would never be found)."""
    for target, names in parts.items():
        for name in names:
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name} is both the class's own and {target}'s")
            method = Later(target)
            setattr(cls, name, method)
            method.__set_name__(cls, name)
