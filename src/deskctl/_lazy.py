"""A module bound to a name now and imported when one of its attributes is first read: for a module that only
some of a class's methods use, so that a process which calls none of them (a ``deskctl up`` or ``down`` acts on
nothing) does not pay for its import. The type checkers see the real module::

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from deskctl import actions as act
    else:
        act = LazyModule("deskctl.actions")
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LazyModule"]


class LazyModule:
    """The module ``name``, imported at the first attribute read (then found in ``sys.modules`` each time)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(__import__(self._name, fromlist=["__name__"]), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
