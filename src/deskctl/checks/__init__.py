"""Preflight: the checks that run before anything is paid for.

* :mod:`deskctl.checks.result`: one finding (:class:`CheckResult`) and the one way a provider records them
  (:class:`CheckRecorder`), re-exported here for provider modules.
* :mod:`deskctl.checks.compat`: the compatibility matrix and the checks that need no provider call (platform,
  geometry, agent x task OS).
* :mod:`deskctl.checks.runner`: the engine; its :func:`~deskctl.checks.runner.preflight` is the public
  ``deskctl.preflight(...)``.

The package is not named ``deskctl.preflight``: that name is the function, and a package of the same name
would replace it as an attribute of ``deskctl`` as soon as one of its modules was imported.
"""

from __future__ import annotations

from deskctl.checks.result import CheckRecorder, CheckResult, failure_from

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.checks.result import Status

__all__ = ["CheckRecorder", "CheckResult", "Status", "failure_from"]


def __getattr__(name: str) -> Any:
    """``Status``, from :mod:`deskctl.checks.result` when first read (it imports :mod:`typing` to build it)."""
    if name == "Status":
        from deskctl.checks import result

        return result.Status
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
