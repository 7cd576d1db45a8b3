"""CPython's SQLite driver (``_sqlite3``, the module :mod:`sqlite3` re-exports) imported without functools.

CPython 3.11's ``_sqlite3`` takes ``functools.lru_cache`` when it is imported (each connection's statement cache is
one) and so imports functools, and with it collections, keyword, operator, reprlib and types: a tenth of the
instructions of a whole ``deskctl do`` process, which needs nothing else of them. Where nothing has imported
functools yet, :func:`load_driver` lets the driver's import see a stand-in ``functools`` whose one name is
:func:`lru_cache`, the very cache ``functools.lru_cache`` makes (:mod:`_functools`' C one); the stand-in leaves
``sys.modules`` when that import ends, so the next ``import functools`` loads the real module. A driver that asks
the stand-in for anything else is imported again, with the real functools.

This module imports nothing of deskctl's (tests/unit/test_ledger_driver.py runs it alone in a fresh interpreter).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

__all__ = ["load_driver", "lru_cache"]


def _cache_info(*counts: int) -> tuple[int, ...]:
    """``cache_info()`` of a :func:`lru_cache` cache: (hits, misses, maxsize, size), as a plain tuple."""
    return counts


def lru_cache(maxsize: int | None = 128, typed: bool = False) -> Callable[[Any], Any]:
    """What ``functools.lru_cache(maxsize, typed)`` makes of a function (the C cache of :mod:`_functools`), without
    the copies of the function's ``__name__``/``__doc__``/``__wrapped__`` that nobody reads of a statement cache."""
    wrapper = sys.modules["_functools"]._lru_cache_wrapper
    if maxsize is not None and maxsize < 0:
        maxsize = 0

    def decorating(function: Any) -> Any:
        return wrapper(function, maxsize, typed, _cache_info)

    return decorating


def load_driver() -> ModuleType:
    """``_sqlite3``, imported (without functools where nothing has imported functools yet)."""
    if "functools" not in sys.modules and "_sqlite3" not in sys.modules:
        try:
            __import__("_functools")
        except ImportError:  # no C cache to make (not CPython): the real functools, below
            pass
        else:
            stand_in = type(sys)("functools")
            stand_in.__dict__["lru_cache"] = lru_cache
            sys.modules["functools"] = stand_in
            try:
                __import__("_sqlite3")
            except Exception:  # it wanted another name of functools: imported again below
                pass
            finally:
                if sys.modules.get("functools") is stand_in:
                    del sys.modules["functools"]
    import _sqlite3

    return _sqlite3
