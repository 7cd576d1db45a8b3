"""One lifecycle: the statuses of deskctl.lifecycle are the ledger's, the session's and the reaper's, and its
transition table is what they follow."""

from __future__ import annotations

import pytest

import deskctl.ledger
import deskctl.session
from deskctl.lifecycle import (
    ACTIVE_STATUSES,
    STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    SessionStatus,
    can_move,
    check_move,
)


def test_one_vocabulary_for_session_ledger_and_reaper() -> None:
    assert deskctl.session.State is SessionStatus  # the name the session exported before, kept as an alias
    assert deskctl.ledger.STATUSES == STATUSES == (
        "intent", "creating", "ready", "destroying", "ended", "failed", "leaked")
    assert "ending" not in STATUSES and "new" not in STATUSES  # dead; never stored
    assert {"ended", "failed"} == TERMINAL_STATUSES and set(STATUSES) - TERMINAL_STATUSES == ACTIVE_STATUSES
    assert {s for s in SessionStatus if s.terminal} == {SessionStatus.ENDED, SessionStatus.FAILED}


def test_the_table_has_every_status_and_an_end_is_never_reopened() -> None:
    assert set(TRANSITIONS) == set(SessionStatus)
    for status in SessionStatus:
        assert can_move(status, status)  # no move
        if status.terminal:
            assert TRANSITIONS[status] == frozenset()
        else:  # every status that is not over can still end (cleanup is always possible)
            assert {SessionStatus.ENDED, SessionStatus.FAILED} <= TRANSITIONS[status]
    assert SessionStatus.NEW not in {t for targets in TRANSITIONS.values() for t in targets}


@pytest.mark.parametrize(("old", "new", "ok"), [
    ("intent", "creating", True), ("creating", "ready", True), ("ready", "destroying", True),
    ("destroying", "ended", True), ("destroying", "leaked", True), ("leaked", "destroying", True),
    ("ended", "destroying", False), ("failed", "ready", False), ("ready", "creating", False),
    ("leaked", "ready", False), ("ready", "ending", False), ("bogus", "ended", False),
])
def test_moves(old: str, new: str, ok: bool) -> None:
    assert can_move(old, new) is ok
    if ok:
        assert check_move(old, new) is SessionStatus(new)
    else:
        with pytest.raises(ValueError):
            check_move(old, new)
