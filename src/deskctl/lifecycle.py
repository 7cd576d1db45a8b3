"""The one lifecycle of a session: its statuses and the moves between them, shared by the session
(:attr:`deskctl.session.Desktop.state`), the ledger (the ``status`` column) and the reaper.

::

    new ──> intent ──> creating ──> ready ──> destroying ──> ended
             │           │            │            │    └──> failed
             │           │            │            └───────> leaked ──> destroying | ended | failed
             └───────────┴────────────┴──> ended | failed | leaked (no destroy needed, or the reaper's end)

* ``new``: a :class:`~deskctl.session.Desktop` built but not opened; the ledger has no row for it yet.
* ``intent``: the row is written (before anything is created or paid for); preflight and the budget ran.
* ``creating``: the create request is about to go out: billable time starts here.
* ``ready``: the live display answered and its geometry was verified.
* ``destroying``: written before a destroy is sent (a process killed meanwhile leaves a row ``deskctl reap``
  finishes).
* ``ended`` / ``failed``: over (terminal): nothing of the session can still exist or bill. ``failed`` when
  create or readiness failed, the desktop was lost, or an exception left the ``with`` block.
* ``leaked``: a destroy could not be confirmed (``cleanup.incomplete``): something may still exist and bill; the
  reaper (or ``deskctl down``) finishes it.

A terminal status has no way out: an end is never reopened. The table is data (:data:`TRANSITIONS`);
:func:`check_move` says whether a move is one of its edges.

This module imports nothing of deskctl's but :mod:`deskctl._strenum` (:class:`SessionStatus` is an
:class:`enum.StrEnum` to type checkers, and loads no :mod:`enum`): the ledger, the session and the click-free CLI
paths all load it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from enum import StrEnum
else:
    from deskctl._strenum import StrEnum  # enum.StrEnum's part deskctl uses, without enum (see its docstring)

__all__ = ["ACTIVE_STATUSES", "STATUSES", "TERMINAL_STATUSES", "TRANSITIONS", "SessionStatus", "can_move",
           "check_move"]


class SessionStatus(StrEnum):
    """Where a session is in its life; the value is what the ledger stores (``new`` is never stored)."""

    NEW = "new"
    INTENT = "intent"
    CREATING = "creating"
    READY = "ready"
    DESTROYING = "destroying"
    ENDED = "ended"
    FAILED = "failed"
    LEAKED = "leaked"

    @property
    def terminal(self) -> bool:
        """Over: nothing of the session can still exist or bill (``ended``, ``failed``)."""
        return self in _TERMINAL

    @property
    def settled(self) -> bool:
        """This process is done with the session: over, or left to the reaper (``leaked``)."""
        return self in _TERMINAL or self is SessionStatus.LEAKED


_TERMINAL = frozenset({SessionStatus.ENDED, SessionStatus.FAILED})
_OVER = frozenset({SessionStatus.ENDED, SessionStatus.FAILED, SessionStatus.LEAKED})

#: status -> the statuses it may move to; a move to itself is no move and always allowed
TRANSITIONS: dict[SessionStatus, frozenset[SessionStatus]] = {
    SessionStatus.NEW: frozenset({SessionStatus.INTENT, SessionStatus.DESTROYING}) | _OVER,
    SessionStatus.INTENT: frozenset({SessionStatus.CREATING, SessionStatus.DESTROYING}) | _OVER,
    SessionStatus.CREATING: frozenset({SessionStatus.READY, SessionStatus.DESTROYING}) | _OVER,
    SessionStatus.READY: frozenset({SessionStatus.DESTROYING}) | _OVER,
    SessionStatus.DESTROYING: _OVER,
    SessionStatus.LEAKED: frozenset({SessionStatus.DESTROYING}) | _TERMINAL,
    SessionStatus.ENDED: frozenset(),
    SessionStatus.FAILED: frozenset(),
}

#: every status the ledger stores, in the order of a session's life
STATUSES: tuple[str, ...] = tuple(s.value for s in SessionStatus if s is not SessionStatus.NEW)
#: a session in one of these statuses is over: nothing of it can still exist or bill
TERMINAL_STATUSES: frozenset[str] = frozenset(s.value for s in _TERMINAL)
#: a session in one of these statuses may still have a desktop (and bill)
ACTIVE_STATUSES: frozenset[str] = frozenset(STATUSES) - TERMINAL_STATUSES


def can_move(old: str, new: str) -> bool:
    """Whether a session may go from status ``old`` to ``new`` (both as stored; unknown ones never may)."""
    try:
        before, after = SessionStatus(old), SessionStatus(new)
    except ValueError:
        return False
    return before is after or after in TRANSITIONS[before]


def check_move(old: str, new: str) -> SessionStatus:
    """``new`` as a :class:`SessionStatus` when the move from ``old`` is in the table, else ``ValueError``
    (a bug of deskctl's, never a user's mistake)."""
    if not can_move(old, new):
        raise ValueError(f"a session cannot move from {old!r} to {new!r}")
    return SessionStatus(new)
