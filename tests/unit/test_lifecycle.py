"""One lifecycle: the statuses of deskctl.lifecycle are the ledger's, the session's and the reaper's, and its
transition table is what they follow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_statuses_are_strings_as_the_ledger_json_and_pickle_see_them() -> None:
    """SessionStatus is deskctl._strenum's StrEnum (not enum's): what the ledger, the JSON output and the
    supervisor's pickles do with a status is what they did with enum's."""
    import pickle
    import sqlite3

    from deskctl._strenum import StrEnum

    assert issubclass(SessionStatus, StrEnum) and issubclass(SessionStatus, str)
    assert json.dumps({"status": SessionStatus.READY, SessionStatus.ENDED: 1}) == '{"status": "ready", "ended": 1}'
    with sqlite3.connect(":memory:") as db:
        assert db.execute("select ?, typeof(?)", (SessionStatus.LEAKED, SessionStatus.LEAKED)).fetchone() == (
            "leaked", "text")
    assert pickle.loads(pickle.dumps(SessionStatus.DESTROYING)) is SessionStatus.DESTROYING
    assert SessionStatus("ready") is SessionStatus.READY and SessionStatus.READY == "ready"
    assert f"{SessionStatus.READY}" == str(SessionStatus.READY) == "ready"
    assert repr(SessionStatus.READY) == "<SessionStatus.READY: 'ready'>"
    with pytest.raises(ValueError, match="'ending' is not a valid SessionStatus"):
        SessionStatus("ending")


def test_a_process_that_loads_the_statuses_and_platforms_loads_no_enum() -> None:
    """Every one-shot CLI process loads deskctl.lifecycle and deskctl.platforms: neither loads enum, nor with it
    functools, collections and types (a fifth of a ``deskctl do`` process)."""
    program = ("import sys, deskctl.lifecycle, deskctl.platforms\n"
               "print(sorted({'enum', 'functools', 'collections', 'types'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout


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


def test_a_desktop_moves_along_the_table_and_ends_as_the_ledger_says() -> None:
    import deskctl
    from deskctl.ledger import open_ledger

    with deskctl.open_desktop("memory", geometry="320x200", preflight=False) as desk:
        assert desk.state is SessionStatus.READY
    assert desk.state is SessionStatus.ENDED and desk.end_reason == "closed"
    with pytest.raises(RuntimeError), deskctl.open_desktop("memory", geometry="320x200", preflight=False) as failed:
        raise RuntimeError("the harness failed")
    assert failed.state is SessionStatus.FAILED
    with open_ledger() as book:
        assert [book.get(d.id).status for d in (desk, failed)] == ["ended", "failed"]  # type: ignore[union-attr]
        kinds = [e.kind for e in book.events(desk.id)]
    assert kinds == ["intent", "create_sent", "created", "ready", "destroying", "ended"]


def test_a_cleanup_step_that_fails_is_logged_not_swallowed(tmp_path: Path) -> None:
    """The ledger goes away under an open desktop: the desktop is still destroyed, and the two records that
    could not be written are said on stderr (the deskctl.cleanup logger), where they used to vanish."""
    program = (
        "import deskctl\n"
        "desk = deskctl.open_desktop('memory', geometry='320x200', preflight=False)\n"
        "print(desk.id, desk.handle.data['dir'], flush=True)\n"
        "desk.ledger.close()\n"
        "desk.close()\n"
        "print(desk.state.value)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DESKCTL_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    session_id, directory, state = done.stdout.split()
    assert state == "ended" and not Path(directory).exists()  # cleanup came first
    assert f"deskctl: recording that {session_id} is being destroyed failed (internal): the ledger is closed" \
        in done.stderr
    assert f"deskctl: recording the end of {session_id} failed (internal): the ledger is closed" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_open_refused_before_create_is_failed_and_makes_nothing() -> None:
    import deskctl
    from deskctl.errors import UsageError
    from deskctl.ledger import open_ledger
    from deskctl.spec import DesktopSpec

    desk = deskctl.Desktop(DesktopSpec.build(provider="memory", geometry="320x200", max_usd=0.01, budget="nothere"),
                           run_preflight=False)
    with pytest.raises(UsageError):
        desk.open()  # the budget it names does not exist
    assert desk.state is SessionStatus.FAILED and desk.handle is None
    desk.close()  # nothing to do, and nothing recorded
    with open_ledger() as book:
        assert book.get(desk.id) is None
