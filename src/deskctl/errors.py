"""The one error tree of deskctl.

Every failure a caller can see is a :class:`DeskctlError` carrying a stable string ``code`` and the process
``exit_code`` the CLI uses. Codes are public API: never rename one, only add.

::

    DeskctlError                      internal                 exit 1
    ├── UsageError                    usage.*                  exit 2
    │   ├── ConfigInvalid             config.invalid
    │   ├── GeometryOutOfBounds       geometry.out_of_bounds
    │   ├── NotFound                  usage.not_found
    │   └── SessionClosed             usage.session_closed
    ├── PreflightError                preflight.failed         exit 3
    │   ├── CredentialsMissing        credentials.missing
    │   ├── CredentialsInvalid        credentials.invalid
    │   ├── CredentialsForbidden      credentials.forbidden
    │   ├── QuotaExceeded             quota.exceeded
    │   ├── CompatError               compat.*
    │   └── GeometryUnsupported       geometry.unsupported
    ├── BudgetExceeded                budget.exceeded          exit 4
    ├── CleanupIncomplete             cleanup.incomplete       exit 5
    ├── WaitTimeout                   wait.timeout             exit 6
    ├── SessionPaused                 session.paused           exit 7
    ├── InfrastructureError           provider.error           exit 20
    │   ├── ProviderUnreachable       provider.unreachable
    │   ├── RateLimited               provider.rate_limited
    │   ├── ProviderApiError          provider.api_error
    │   ├── SessionLost               provider.session_lost
    │   ├── ReadinessTimeout          readiness.timeout
    │   ├── GeometryMismatch          geometry.mismatch
    │   └── CapacityUnavailable       capacity.unavailable
    └── Interrupted                   interrupted              exit 130 (SIGINT) / 143 (SIGTERM)

A subclass fixes the default code; a finer code of the same family (``usage.bad_geometry``,
``compat.agent_unsupported``) may be passed as ``code=`` and must start with the family's prefix.

The bounds of every input (:mod:`deskctl.limits`) refuse a value with ``usage.out_of_range`` (a number outside its
range), ``usage.not_a_number`` (NaN, an infinity, a fraction for a whole number, no number at all) or
``usage.too_long`` (a string past its length), all :class:`UsageError` (exit 2); a bound older than that table
keeps its own code (``usage.bad_limit``, ``usage.bad_duration``, ``usage.bad_geometry``, ...).

Messages never contain secrets: every message is passed through :func:`deskctl._redact.redact` style
scrubbing by the code that raises it, and :meth:`DeskctlError.to_dict` redacts once more.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any, ClassVar
else:
    import _signal  # signal's functions and constants without signal.py's enums (typeshed has no _signal)

__all__ = [
    "BudgetExceeded",
    "CapacityUnavailable",
    "CleanupIncomplete",
    "CompatError",
    "ConfigInvalid",
    "CredentialsForbidden",
    "CredentialsInvalid",
    "CredentialsMissing",
    "DeskctlError",
    "GeometryMismatch",
    "GeometryOutOfBounds",
    "GeometryUnsupported",
    "InfrastructureError",
    "Interrupted",
    "NotFound",
    "PreflightError",
    "ProviderApiError",
    "ProviderUnreachable",
    "QuotaExceeded",
    "RateLimited",
    "ReadinessTimeout",
    "SessionClosed",
    "SessionLost",
    "SessionPaused",
    "UsageError",
    "WaitTimeout",
]


class DeskctlError(Exception):
    """Base of every deskctl error.

    Attributes the caller may rely on: ``code`` (stable string), ``exit_code`` (int), ``message``,
    ``provider`` (name or None), ``remedy`` (what to do, or None), ``details`` (JSON-able dict).
    """

    code: str = "internal"
    exit_code: int = 1
    #: the family prefix a finer ``code=`` must carry (None: any code is accepted)
    family: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        provider: str | None = None,
        remedy: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            family = type(self).family
            if family is not None and not (code == family or code.startswith(family + ".")):
                raise ValueError(f"code {code!r} does not belong to family {family!r}")
            self.code = code
        self.message = message
        self.provider = provider
        self.remedy = remedy
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The ``{"error": {...}}`` document printed by ``--json`` on failure."""
        from deskctl._redact import redact

        body: dict[str, Any] = {
            "code": self.code,
            "message": redact(self.message),
            "provider": self.provider,
            "remedy": redact(self.remedy) if self.remedy else None,
        }
        if self.details:
            body["details"] = _redacted(self.details)
        return {"error": body}


def _redacted(value: Any) -> Any:
    """``value`` with every string in it redacted (details carry check messages, URLs, hosts)."""
    from deskctl._redact import redact

    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


class UsageError(DeskctlError):
    """Bad flags, spec, configuration or input: the caller must change what they asked for."""

    code = "usage.invalid"
    exit_code = 2
    family = "usage"


class ConfigInvalid(UsageError):
    code = "config.invalid"
    family = "config"


class GeometryOutOfBounds(UsageError):
    """A coordinate outside the pinned screen."""

    code = "geometry.out_of_bounds"
    family = "geometry"


class NotFound(UsageError):
    """A session id, budget or other named thing that does not exist."""

    code = "usage.not_found"


class SessionClosed(UsageError):
    """The desktop was used after it was closed."""

    code = "usage.session_closed"


class PreflightError(DeskctlError):
    """The run cannot start: credentials, permission, quota, compatibility or geometry."""

    code = "preflight.failed"
    exit_code = 3


class CredentialsMissing(PreflightError):
    code = "credentials.missing"
    family = "credentials"


class CredentialsInvalid(PreflightError):
    code = "credentials.invalid"
    family = "credentials"


class CredentialsForbidden(PreflightError):
    code = "credentials.forbidden"
    family = "credentials"


class QuotaExceeded(PreflightError):
    code = "quota.exceeded"
    family = "quota"


class CompatError(PreflightError):
    code = "compat.unsupported"
    family = "compat"


class GeometryUnsupported(PreflightError):
    code = "geometry.unsupported"
    family = "geometry"


class BudgetExceeded(DeskctlError):
    """Spend is over a cap, or the projected cost of the request would pass it."""

    code = "budget.exceeded"
    exit_code = 4
    family = "budget"


class CleanupIncomplete(DeskctlError):
    """A destroy could not be confirmed; ``details["left"]`` names what may still exist."""

    code = "cleanup.incomplete"
    exit_code = 5
    family = "cleanup"


class InfrastructureError(DeskctlError):
    """The provider or the machine failed; not the agent's fault."""

    code = "provider.error"
    exit_code = 20


class ProviderUnreachable(InfrastructureError):
    code = "provider.unreachable"


class RateLimited(InfrastructureError):
    code = "provider.rate_limited"

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ProviderApiError(InfrastructureError):
    code = "provider.api_error"

    def __init__(self, message: str, *, status: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.status = status


class SessionLost(InfrastructureError):
    """The desktop disappeared while in use (killed from outside, connection dropped)."""

    code = "provider.session_lost"


class ReadinessTimeout(InfrastructureError):
    code = "readiness.timeout"


class GeometryMismatch(InfrastructureError):
    code = "geometry.mismatch"


class CapacityUnavailable(InfrastructureError):
    code = "capacity.unavailable"


class WaitTimeout(DeskctlError):
    """``wait_for`` ran out of time before its condition held (the desktop is fine; the app is not there yet)."""

    code = "wait.timeout"
    exit_code = 6


class SessionPaused(DeskctlError):
    """A person holds control of the desktop (``deskctl view --control --takeover``) and the caller chose not to
    wait (``on_takeover="fail"``): the agent's action was not sent. Retry once they release it."""

    code = "session.paused"
    exit_code = 7


class Interrupted(DeskctlError):
    """The session was interrupted by a signal; cleanup has already run."""

    code = "interrupted"
    exit_code = 130

    def __init__(self, message: str, *, signum: int = _signal.SIGINT, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.signum = signum
        self.exit_code = 128 + int(signum)
