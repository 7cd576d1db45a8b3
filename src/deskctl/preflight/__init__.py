"""Preflight: checks that run before anything is paid for.

``deskctl.preflight`` is both this package and the function :func:`deskctl.preflight.runner.preflight`
(``deskctl/__init__.py`` maps the attribute lazily). Once any submodule is imported, Python binds the
*package* to ``deskctl.preflight``; the package is therefore callable and forwards to the runner, so
``deskctl.preflight(spec)`` works whichever was imported first.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from deskctl.preflight.runner import preflight

        return preflight(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
