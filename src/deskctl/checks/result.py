"""One preflight finding, :class:`CheckResult`, and the one way to record them, :class:`CheckRecorder`."""

from __future__ import annotations

import time

from deskctl._record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    from deskctl.errors import DeskctlError

    Status = Literal["pass", "warn", "fail", "skip"]

__all__ = ["CheckRecorder", "CheckResult", "Status", "failure_from"]


def __getattr__(name: str) -> Any:
    """``Status`` for code that reads it at run time: built here, so that a process that only records findings (a
    ``deskctl up`` runs the local checks) does not import :mod:`typing` (a sixteenth of its instructions)."""
    if name == "Status":
        from typing import Literal

        return Literal["pass", "warn", "fail", "skip"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CheckResult(Record, frozen=True):
    """status pass|warn|fail|skip, a stable ``code`` (``credentials.invalid``, ``docker.daemon`` ...), a one-line
    ``message``, a ``remedy`` (the exact command or variable to set), the provider, and how long it took."""

    status: Status
    code: str
    message: str
    remedy: str | None = None
    provider: str | None = None
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "message": self.message, "remedy": self.remedy,
                "provider": self.provider, "elapsed_ms": self.elapsed_ms}


def failure_from(
    exc: BaseException, *, code: str, provider: str | None, elapsed_ms: float = 0.0,
) -> CheckResult:
    """The ``fail`` row for an exception a check raised: a :class:`~deskctl.errors.DeskctlError` keeps its code,
    message, remedy and provider; anything else is reported under ``code``, naming its type. Redacted."""
    from deskctl._redact import redact
    from deskctl.errors import DeskctlError

    if isinstance(exc, DeskctlError):
        return CheckResult(
            "fail", exc.code, redact(exc.message), remedy=redact(exc.remedy) if exc.remedy else None,
            provider=exc.provider or provider, elapsed_ms=elapsed_ms,
        )
    return CheckResult(
        "fail", code, f"check {code} raised {type(exc).__name__}: {redact(str(exc))}",
        provider=provider, elapsed_ms=elapsed_ms,
    )


class CheckRecorder:
    """Collects a provider's preflight results, each timed and redacted the same way.

    Each check starts with :meth:`start` (the recorder's creation starts the first) and ends with :meth:`add`, or
    with :meth:`add_error` for the :class:`~deskctl.errors.DeskctlError` that answered it; ``elapsed_ms`` is the
    time between the two. Messages and remedies are redacted as they are recorded, so a provider's
    ``preflight()`` never returns a secret, whoever renders it.
    """

    def __init__(self, provider: str | None) -> None:
        self.provider = provider
        self.results: list[CheckResult] = []
        self._started = time.monotonic()

    def start(self) -> None:
        """Start timing the next check."""
        self._started = time.monotonic()

    def elapsed_ms(self) -> float:
        return round((time.monotonic() - self._started) * 1000, 1)

    def add(self, status: Status, code: str, message: str, remedy: str | None = None) -> CheckResult:
        from deskctl._redact import redact

        result = CheckResult(status, code, redact(message), redact(remedy) if remedy else None, self.provider,
                             self.elapsed_ms())
        self.results.append(result)
        return result

    def add_error(
        self, error: DeskctlError, code: str | None = None, *, message: str | None = None,
        remedy: str | None = None, status: Status = "fail",
    ) -> CheckResult:
        """A row for the error that answered the current check: its code, message and remedy unless given."""
        return self.add(status, code or error.code, error.message if message is None else message,
                        error.remedy if remedy is None else remedy)
