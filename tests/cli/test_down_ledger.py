"""What `deskctl down ID` asks of the SQLite ledger, statement by statement (traced in the CLI process): the
write-ahead `destroying` is committed in a write transaction of its own before the end's, one write transaction
each, and the reads stay few (16 concurrent downs queue on the ledger's one write lock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _cli import deskctl

_RUNNER = """
import json, os, sys
from deskctl.ledger import _sqlite
statements = []
connect = _sqlite._SQLiteLedger._connect
def traced(self):
    conn = connect(self)
    conn.set_trace_callback(statements.append)
    return conn
_sqlite._SQLiteLedger._connect = traced
from deskctl.cli import main
try:
    main(["down", sys.argv[1]], fast=True)
finally:
    with open(os.environ["DESKCTL_TEST_TRACE"], "w") as out:
        json.dump(statements, out)
"""


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "home"))


def _transactions(statements: list[str]) -> list[list[str]]:
    """The statements after the connection's setup, grouped by transaction (BEGIN ... COMMIT)."""
    out: list[list[str]] = []
    for statement in statements:
        if statement.startswith("BEGIN"):
            out.append([statement])
        elif out and not statement.startswith("PRAGMA"):
            out[-1].append(statement)
    return out


def test_down_writes_ahead_then_the_end_and_reads_little(tmp_path: Path) -> None:
    sid = deskctl("up", "--geometry", "320x240", check=True).stdout.strip()
    trace = tmp_path / "trace.json"
    try:
        proc = subprocess.run([sys.executable, "-c", _RUNNER, sid], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "DESKCTL_TEST_TRACE": str(trace)})
    finally:
        deskctl("down", sid)
    assert proc.returncode == 0, proc.stderr
    transactions = _transactions(json.loads(trace.read_text()))
    writes = [t for t in transactions if t[0] == "BEGIN IMMEDIATE"]
    reads = [t for t in transactions if t[0] == "BEGIN"]
    # the write-ahead and the end: two write transactions, in that order, each committed (never merged: the
    # destroy is sent between them, and `deskctl reap` finishes a row left `destroying`)
    assert len(writes) == 2, transactions
    assert "'destroying'" in " ".join(writes[0]) and writes[0][-1] == "COMMIT"
    assert "'ended'" in " ".join(writes[1]) and writes[1][-1] == "COMMIT"
    # under the write lock, no statement but the writes: the UPDATE's matched rows say whether the row exists
    assert [sum(s.startswith("SELECT") for s in t) for t in writes] == [0, 0], writes
    # reads: the schema version, the session's row on attach, what attaching needs beside it, the outcome
    assert len(reads) <= 4, reads
