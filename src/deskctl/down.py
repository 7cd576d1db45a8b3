"""Destroying sessions by id: what ``deskctl down`` does, as a library (the CLI only prints what it returns).

Idempotent: a session that is over already is reported as such (``already_ended``, ``already_failed``), not as
an error; an id the ledger does not know is ``usage.not_found`` unless ``ignore_missing``.
"""

from __future__ import annotations

from deskctl._record import Record
from deskctl.errors import CleanupIncomplete, DeskctlError, NotFound, SessionClosed
from deskctl.lifecycle import TERMINAL_STATUSES
from deskctl.session import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from deskctl.ledger import Ledger

__all__ = ["Destroyed", "destroy_session", "first_error", "sessions_to_destroy"]


class Destroyed(Record, frozen=True):
    """What became of one session: ``status`` is ``destroyed``, ``already_ended``, ``already_failed``,
    ``missing`` (not in the ledger, ignored) or ``error`` (``error`` says which)."""

    session_id: str
    status: str
    cost_usd: float | None = None
    error: DeskctlError | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"id": self.session_id, "status": "error", "code": self.error.code, "message": self.error.message}
        return {"id": self.session_id, "status": self.status, "cost_usd": self.cost_usd}


def sessions_to_destroy(ledger: Ledger, session_ids: Iterable[str], *, everything: bool) -> list[str]:
    """``session_ids``, and with ``everything`` every session of ``ledger`` that is not over, each once."""
    ids = list(session_ids)
    if everything:
        ids += [r.session_id for r in ledger.sessions(active=True) if r.session_id not in ids]
    return ids


def destroy_session(ledger: Ledger, session_id: str, *, ignore_missing: bool) -> Destroyed:
    """Destroy the desktop of ``session_id`` (confirmed), record its end and cost; what failed is in the result."""
    try:
        desk = attach(session_id, ledger=ledger)
        desk.close()
        row = ledger.status_and_cost(session_id)
        return Destroyed(session_id, "destroyed", row[1] if row else None)
    except SessionClosed as exc:
        row = ledger.status_and_cost(session_id)
        if row is None or row[0] not in TERMINAL_STATUSES:
            return Destroyed(session_id, "error", error=exc)
        return Destroyed(session_id, f"already_{row[0]}", row[1])
    except NotFound as exc:
        if not ignore_missing:
            return Destroyed(session_id, "error", error=exc)
        return Destroyed(session_id, "missing")
    except DeskctlError as exc:
        return Destroyed(session_id, "error", error=exc)


def first_error(results: Iterable[Destroyed]) -> DeskctlError | None:
    """The error the whole call answers with: the first, unless a later one left something behind
    (``cleanup.incomplete`` outranks every other)."""
    answer: DeskctlError | None = None
    for result in results:
        exc = result.error
        if exc is None:
            continue
        if answer is None or isinstance(exc, CleanupIncomplete):
            answer = exc
    return answer
