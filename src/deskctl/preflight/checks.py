"""One preflight finding: :class:`CheckResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["CheckResult", "Status"]

Status = Literal["pass", "warn", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
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
        return asdict(self)
