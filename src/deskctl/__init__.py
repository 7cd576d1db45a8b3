"""deskctl: one interface for computer-use desktops.

Every desktop session is preflighted before anything is paid for, pinned to the geometry asked for,
destroyed on return, exception, Ctrl-C and SIGTERM, and metered in the ledger.

    with deskctl.open_desktop("xvfb", geometry="1024x768") as desk:
        desk.click(10, 20)
        png = desk.screenshot().png

Heavy libraries (httpx, paramiko, PIL, Xlib, docker) load only when a provider that needs them is used.
"""

from __future__ import annotations

from deskctl.errors import (
    BudgetExceeded,
    CleanupIncomplete,
    DeskctlError,
    InfrastructureError,
    Interrupted,
    PreflightError,
    UsageError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl import aio
    from deskctl.checks.runner import preflight
    from deskctl.session import Desktop, attach, open_desktop
    from deskctl.spec import DesktopSpec, Geometry, Platform

__version__ = "0.1.0"

__all__ = [
    "BudgetExceeded",
    "CleanupIncomplete",
    "DeskctlError",
    "Desktop",
    "DesktopSpec",
    "Geometry",
    "InfrastructureError",
    "Interrupted",
    "Platform",
    "PreflightError",
    "UsageError",
    "__version__",
    "aio",
    "attach",
    "open_desktop",
    "preflight",
]

_LAZY = {
    "DesktopSpec": "deskctl.spec",
    "Geometry": "deskctl.spec",
    "Platform": "deskctl.spec",
    "Desktop": "deskctl.session",
    "open_desktop": "deskctl.session",
    "attach": "deskctl.session",
    "preflight": "deskctl.checks.runner",
}


#: submodules reached as attributes (``deskctl.aio``) without importing them with the package
_LAZY_MODULES = {"aio": "deskctl.aio"}


def _module(name: str) -> Any:
    """The module ``name``, imported (importlib.import_module's answer, without importing importlib: it imports
    warnings)."""
    import sys

    __import__(name)
    return sys.modules[name]


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        value = _module(_LAZY_MODULES[name])
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deskctl' has no attribute {name!r}")
    value = getattr(_module(module), name)
    globals()[name] = value
    return value
