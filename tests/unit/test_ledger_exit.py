"""Ledger.close_for_exit: a process that ends in os._exit (the `deskctl` command) leaves the SQLite ledger's WAL to
the next process instead of checkpointing and deleting it (four fsyncs a call), within a bound; every write is
there for the next process all the same, and the file stays sound. Each case runs in fresh processes: what is on
disk after a process ended is the point."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.ledger._sqlite import KEEP_WAL_UNDER

#: argv: ledger path, budget name, how (exit: close_for_exit then os._exit, as deskctl.cli.entry ends; close:
#: close() then a normal exit), the bound to use. Writes one budget row, then ends as told.
_WRITER = """
import os, sys
import deskctl.ledger._sqlite as backend
from deskctl.ledger import open_ledger
path, name, how, bound = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
backend.KEEP_WAL_UNDER = bound
book = open_ledger(path)
book.set_budget(name, max_usd=1.5, window_seconds=3600)
if how == "exit":
    book.close_for_exit()
    os._exit(0)
book.close()
"""

#: argv: ledger path. Prints the budgets' names, read by a fresh process.
_READER = """
import json, sys
from deskctl.ledger import open_ledger
with open_ledger(sys.argv[1]) as book:
    print(json.dumps(sorted(b.name for b in book.budgets())))
"""


def _python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-P", "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _wal(path: Path) -> int | None:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else None


def _sound(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_a_process_that_exits_leaves_its_writes_in_the_wal_for_the_next(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    _python(_WRITER, str(path), "first", "close", str(KEEP_WAL_UNDER))
    assert _wal(path) is None  # closed as usual, the last connection: checkpointed and deleted
    for n in range(5):
        _python(_WRITER, str(path), f"kept-{n}", "exit", str(KEEP_WAL_UNDER))
        size = _wal(path)
        assert size is not None and 0 < size < KEEP_WAL_UNDER  # left for the next process, which appends to it
    assert json.loads(_python(_READER, str(path))) == ["first"] + [f"kept-{n}" for n in range(5)]
    assert _wal(path) is None  # the reader closed as usual: everything is in the database file now
    assert _sound(path) == "ok"


def test_past_the_bound_the_exit_closes_as_usual(tmp_path: Path) -> None:
    """The next process's recovery reads the whole WAL, and SQLite's recovery forgets what was checkpointed, so an
    unbounded WAL would make every call slower (and past 1000 pages every write a checkpoint)."""
    path = tmp_path / "l.sqlite3"
    sizes = []
    for n in range(6):
        _python(_WRITER, str(path), f"b{n}", "exit", "12000")  # about three commits' worth
        sizes.append(_wal(path))
    assert None in sizes and any(sizes)  # kept while small, checkpointed and deleted once past the bound
    assert all(size is None or size < 12000 + 20000 for size in sizes), sizes
    assert json.loads(_python(_READER, str(path))) == [f"b{n}" for n in range(6)]
    assert _sound(path) == "ok"


@pytest.mark.parametrize("how", ["entry", "main"])
def test_only_the_deskctl_command_leaves_the_wal(tmp_path: Path, how: str) -> None:
    """`deskctl.cli.entry` (the command, `python -m deskctl`) ends in os._exit: its one-shot commands leave the WAL.
    A harness calling `deskctl.cli.main` goes on living: its ledger is closed as usual."""
    path = tmp_path / "l.sqlite3"
    _python(_WRITER, str(path), "seed", "exit", str(KEEP_WAL_UNDER))  # a WAL with a frame in it
    env = {"DESKCTL_LEDGER_URL": f"sqlite://{path}", "DESKCTL_HOME": str(tmp_path / "home")}
    code = ("import sys; from deskctl.cli import entry; sys.argv = ['deskctl', 'cost', '--json']; entry()"
            if how == "entry" else "from deskctl.cli import main; main(['cost', '--json'])")
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60,
                          env={**_environ(), **env})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sessions" in json.loads(done.stdout)["total"]
    assert (_wal(path) is not None) == (how == "entry")
    assert _sound(path) == "ok"


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("DESKCTL_")}


def test_a_ledger_removed_by_hand_beside_a_left_wal_starts_fresh_and_sound(tmp_path: Path) -> None:
    """`rm ledger.sqlite3` to start over, now that a WAL is usually left beside it: SQLite deletes the WAL of a
    database that is empty (it belongs to the removed one) instead of replaying it into the new file."""
    path = tmp_path / "l.sqlite3"
    for n in range(3):
        _python(_WRITER, str(path), f"old-{n}", "exit", str(KEEP_WAL_UNDER))
    assert _wal(path)
    path.unlink()
    _python(_WRITER, str(path), "new", "exit", str(KEEP_WAL_UNDER))
    assert json.loads(_python(_READER, str(path))) == ["new"]
    assert _sound(path) == "ok"
