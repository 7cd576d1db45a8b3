"""The ledger never loses a row: a process that writes from two threads while other processes write and exit.

This is the loss seen in round 3 (a library process writing from 2 threads kept 51 of 101 rows): opening and
closing a second descriptor of the database file dropped every POSIX lock the process held on it, so another
process, closing its connection, believed it was the last user, checkpointed and deleted ``-wal``/``-shm`` under
the live process, which went on writing into an unlinked WAL. The test makes that sequence happen every time
(rounds handed over through pipes, no timing): each acknowledged write must be in the ledger afterwards, and the
file must pass ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.ledger import open_ledger

# A library user: one ledger, two threads (so two connections in the process), writing a round at each line
# on stdin; it prints how many rows it wrote (each an acknowledged record_intent) after each round.
_TWO_THREADS = r"""
import sys, threading, time
from deskctl.ledger import SessionRecord, open_ledger

book = open_ledger(sys.argv[1])
per_round = int(sys.argv[2])
written = 0
lock = threading.Lock()

def write(tag, n):
    global written
    for i in range(n):
        sid = f"dk-lib-{tag}-{time.time_ns()}-{i}"
        book.record_intent(SessionRecord(sid, "xvfb", "ubuntu", "1024x768", "host:1", False, "intent", time.time()))
        with lock:
            written += 1

for line in sys.stdin:
    if line.strip() == "stop":
        break
    threads = [threading.Thread(target=write, args=(f"{line.strip()}-{t}", per_round)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(written, flush=True)
book.close()
print(written, flush=True)
"""

# Another process: opens the ledger, writes its rows, closes (its close is the one that may checkpoint and
# delete the WAL when it believes it is the last user).
_OTHER = r"""
import sys, time
from deskctl.ledger import SessionRecord, open_ledger

with open_ledger(sys.argv[1]) as book:
    for i in range(int(sys.argv[3])):
        sid = f"dk-other-{sys.argv[2]}-{i}"
        book.record_intent(SessionRecord(sid, "xvfb", "ubuntu", "1024x768", "host:2", False, "intent", time.time()))
print(sys.argv[3], flush=True)
"""


def test_two_threads_and_other_processes_lose_no_row(ledger_url: str) -> None:
    rounds, per_round, per_other = 6, 5, 5
    open_ledger(ledger_url).close()  # the schema exists before anyone races to write
    library = subprocess.Popen([sys.executable, "-c", _TWO_THREADS, ledger_url, str(per_round)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert library.stdin is not None and library.stdout is not None
    acknowledged_other = 0
    try:
        for r in range(rounds):
            library.stdin.write(f"r{r}\n")
            library.stdin.flush()
            assert library.stdout.readline().strip(), library.stderr.read() if library.stderr else ""
            other = subprocess.run([sys.executable, "-c", _OTHER, ledger_url, str(r), str(per_other)],
                                   capture_output=True, text=True, timeout=120)
            assert other.returncode == 0, other.stderr
            acknowledged_other += int(other.stdout.strip())
        out, err = library.communicate("stop\n", timeout=120)
    finally:
        if library.poll() is None:
            library.kill()
            library.wait()
    assert library.returncode == 0, err
    acknowledged_library = int(out.split()[-1])
    assert acknowledged_library == rounds * 2 * per_round, err[-3000:]

    with open_ledger(ledger_url) as book:
        ids = [s.session_id for s in book.sessions()]
        in_ledger = (sum(i.startswith("dk-lib-") for i in ids), sum(i.startswith("dk-other-") for i in ids))
        assert in_ledger == (acknowledged_library, acknowledged_other)
        events = sum(len(book.events(i)) for i in ids)
        assert events == acknowledged_library + acknowledged_other  # one intent event per row
        if book.backend == "sqlite":
            with book.transaction(readonly=True) as tx:
                assert tx.run("PRAGMA integrity_check") == [("ok",)]


def test_the_file_is_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    import os
    import stat

    old = os.umask(0)
    try:
        with open_ledger(f"sqlite://{tmp_path / 'l.sqlite3'}") as book:
            book.record_event("dk-none", "note")
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert modes == {"l.sqlite3": 0o600, "l.sqlite3-wal": 0o600, "l.sqlite3-shm": 0o600}


def test_a_forked_child_writes_through_its_own_connection_and_loses_nothing(tmp_path: Path) -> None:
    """A ledger used before fork: the child never uses the parent's connection and takes its own locks, so the
    parent closing first (and other processes writing and closing) never deletes the WAL under the child."""
    url = f"sqlite://{tmp_path / 'f.sqlite3'}"
    proc = subprocess.run([sys.executable, "-c", _FORK, url], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    with open_ledger(url) as book:
        ids = [s.session_id for s in book.sessions()]
        counts = {who: sum(i.startswith(f"dk-{who}-") for i in ids) for who in ("parent", "child", "other")}
        assert counts == {"parent": 20, "child": 20, "other": 10}
        with book.transaction(readonly=True) as tx:
            assert tx.run("PRAGMA integrity_check") == [("ok",)]


_FORK = r"""
import os, subprocess, sys, time
from deskctl.ledger import SessionRecord, open_ledger

url = sys.argv[1]
def rec(sid):
    return SessionRecord(sid, "xvfb", "ubuntu", "1024x768", "host:1", False, "intent", time.time())
OTHER = ("import sys, time; from deskctl.ledger import SessionRecord, open_ledger\n"
         "with open_ledger(sys.argv[1]) as b:\n"
         "    for i in range(5):\n"
         "        b.record_intent(SessionRecord(f'dk-other-{sys.argv[2]}-{i}', 'xvfb', 'ubuntu', '1x1', 'h:2', "
         "False, 'intent', time.time()))\n")

book = open_ledger(url)
for i in range(10):
    book.record_intent(rec(f"dk-parent-a-{i}"))
to_child, from_parent = os.pipe()
to_parent, from_child = os.pipe()
pid = os.fork()
if pid == 0:
    for i in range(10):
        book.record_intent(rec(f"dk-child-a-{i}"))
    os.write(from_child, b"a")
    os.read(to_child, 1)  # the parent has closed its ledger
    for i in range(10):
        book.record_intent(rec(f"dk-child-b-{i}"))
    os.write(from_child, b"b")
    os.read(to_child, 1)  # another process has written and closed
    book.close()
    os._exit(0)
os.read(to_parent, 1)
subprocess.run([sys.executable, "-c", OTHER, url, "1"], check=True)
for i in range(10):
    book.record_intent(rec(f"dk-parent-b-{i}"))
book.close()
os.write(from_parent, b"x")
os.read(to_parent, 1)
subprocess.run([sys.executable, "-c", OTHER, url, "2"], check=True)
os.write(from_parent, b"x")
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_threads_that_come_and_go_do_not_pile_up_connections(tmp_path: Path) -> None:
    """A server's request threads (``deskctl view``) each write once: the process keeps a few connections, not
    one per thread that ever wrote (each was a descriptor of the file, and with the old code a lock drop)."""
    import os
    import threading
    import time

    from deskctl.ledger import SessionRecord

    path = tmp_path / "t.sqlite3"

    def descriptors() -> int:
        return sum(os.readlink(f"/proc/self/fd/{fd}") == str(path) for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))  # fmt: skip

    with open_ledger(f"sqlite://{path}") as book:
        book.record_intent(SessionRecord("dk-t", "xvfb", "ubuntu", "1x1", "h:1", False, "intent", time.time()))
        for _ in range(10):
            threads = [threading.Thread(target=book.add_actions, args=("dk-t", {"click": 1})) for _t in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        got = book.get("dk-t")
        assert got is not None and got.action_counts == {"click": 50}
        assert 1 <= descriptors() <= 5
    assert descriptors() == 0


@pytest.mark.postgres
def test_action_counts_survive_a_dropped_ledger_connection(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server drops the ledger's connections while a desktop is in use: the clicks counted so far still reach
    the ledger when it is released (they were cleared before the write, and the failed write dropped them)."""
    import psycopg

    import deskctl

    monkeypatch.setenv("DESKCTL_LEDGER_URL", pg_url)
    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True, ttl="10m")
    try:
        for _ in range(3):
            desk.click(5, 5)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")  # fmt: skip
        desk.release()  # its first ledger call since: the count flush
        with open_ledger(pg_url) as book:
            record = book.get(desk.id)
        assert record is not None and record.action_counts == {"click": 3}
    finally:
        deskctl.attach(desk.id).close()


def test_the_at_fork_hook_holds_its_ledgers_weakly(tmp_path: Path) -> None:
    """The hook's registry (weak references) keeps no ledger alive: one dropped leaves it, and a fork then
    resets the ledgers still alive only."""
    code = (
        "import gc, os, sys\n"
        "from deskctl.ledger import _core, open_ledger\n"
        "a, b = open_ledger(sys.argv[1] + 'a'), open_ledger(sys.argv[1] + 'b')\n"
        "lock = b._lock\n"
        "del a\n"
        "gc.collect()\n"
        "assert [each() for each in _core._LEDGERS] == [b], _core._LEDGERS\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if b._lock is not lock and b.schema_version() > 0 else 1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, f"sqlite://{tmp_path / 'l'}"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
