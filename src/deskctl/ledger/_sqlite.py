"""The SQLite backend (the default): WAL mode, a busy timeout, every write in a ``BEGIN IMMEDIATE`` transaction;
the file made private (0600) before SQLite sees it, and what to do when the file is damaged."""

from __future__ import annotations

import os
import time

from deskctl._threads import get_ident
from deskctl.errors import InfrastructureError
from deskctl.ledger._driver import load_driver
from deskctl.ledger._queries import Ledger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["move_aside_command", "sqlite_file_damaged"]

# ``sqlite3`` is ``from _sqlite3 import *`` (connect, Connection, Error, ...: the same objects) plus the default
# adapters of datetime values, which the ledger never binds (times are epoch floats); its import of datetime was a
# twenty-fifth of the instructions of a whole `deskctl down` process. tests/cli/test_down_fast.py holds it out.


if TYPE_CHECKING:
    import _sqlite3 as sqlite3  # the module sqlite3 re-exports, without sqlite3.dbapi2's datetime import (above)
else:
    sqlite3 = load_driver()  # _sqlite3, without its import of functools (see deskctl.ledger._driver)


#: a process that ends in ``os._exit`` leaves the ledger's WAL to the next process while the WAL is smaller than
#: this (about 60 action counts of ``deskctl do``); past it, it closes as usual: checkpoint, WAL deleted
KEEP_WAL_UNDER = 256 << 10
#: the connections left open for this process's exit (:meth:`_SQLiteLedger.close_for_exit`); held here, so that
#: nothing closes them before the exit does
_LEFT_FOR_EXIT: list[Any] = []


class _SQLiteLedger(Ledger):
    backend = "sqlite"

    def __init__(self, path: str, url: str) -> None:
        self.path = path  # a str: pathlib (with urllib.parse, ipaddress) is not on the per-call CLI paths
        _create_private_file(path)
        super().__init__(url)

    def close_for_exit(self) -> None:
        """Leave this ledger's connections open for the process's exit (``os._exit`` right after: the ``deskctl``
        command), while the WAL is under :data:`KEEP_WAL_UNDER`.

        SQLite's last connection to close checkpoints the WAL into the database file and deletes it (a sync of
        each), and the next process's first write makes it again (a sync of its header and one of the folder):
        four ``fdatasync`` calls, 3-7 ms, the largest part of a ``deskctl do`` beyond the interpreter's start.
        A connection the exit closes does none of it: the WAL and its index stay, and the next process to open
        the ledger rebuilds the index from the WAL, SQLite's recovery (what it does after a process is killed;
        its cost grows with the WAL, hence the bound). A write is then exactly as durable as any commit under
        ``synchronous = NORMAL``: it survives the process, not a power cut before the next checkpoint. Past the
        bound this is :meth:`close`, whose checkpoint (when no other process has the ledger open) makes the WAL
        short again. No descriptor of the file is touched (see the module doc of :mod:`deskctl.ledger`)."""
        try:
            wal = os.stat(self.path + "-wal").st_size
        except OSError:
            wal = 0
        if wal >= KEEP_WAL_UNDER:
            self.close()
            return
        _LEFT_FOR_EXIT.extend(self._let_go())

    def _put_away_inherited(self, conn: Any) -> None:
        # SQLite keeps, per process, which locks its connections hold on a file; the child inherited the parent's
        # bookkeeping but not its locks, so a new connection here would take none (and another process could
        # then delete the WAL under it). Closing the inherited connections clears that bookkeeping; their locks
        # belong to the parent, so the close can neither release them nor checkpoint under the parent.
        try:
            conn.close()
        except Exception:  # a connection that will not close is forgotten all the same
            pass

    def _remedy(self, exc: BaseException) -> str:
        return _sqlite_remedy(self.path, exc)

    def _is_broken(self, conn: Any) -> bool:
        try:
            return bool(conn.in_transaction)
        except sqlite3.Error:  # closed
            return True

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error, OSError)

    def _serial_pk(self) -> str:
        return "INTEGER PRIMARY KEY AUTOINCREMENT"

    def _sql_day(self, column: str) -> str:
        # CAST truncates toward zero, which is the floor for every time after 1970
        return f"CAST({column} / 86400 AS INTEGER)"

    def _connect(self) -> sqlite3.Connection:
        # Never open the file by hand here: this process may hold other connections to it (see the module doc).
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so every write is one explicit transaction.
        conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 60000")
        deadline = time.monotonic() + 60.0
        while True:
            try:
                # Switching to WAL needs a moment of exclusive access; other openers may hold the file.
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
        if mode is None or str(mode[0]).lower() != "wal":
            raise InfrastructureError(
                f"the ledger {self.path} could not be put in WAL mode (got {mode!r})", code="ledger.unavailable",
                remedy="put the ledger on a local file system (WAL does not work over network file systems)",
            )  # fmt: skip
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _begin(self, conn: Any, lock: str | None, readonly: bool) -> _Begun:
        return _Begun(conn, readonly)

    def _migrate(self) -> None:
        with self.transaction() as tx:
            self._apply_migrations(tx)


class _Begun:
    """One SQLite transaction (:meth:`_SQLiteLedger._begin`): ``BEGIN`` on entering, ``COMMIT`` on a normal exit,
    ``ROLLBACK`` on an exception, and the cursor closed either way."""

    __slots__ = ("_conn", "_cursor", "_readonly")

    def __init__(self, conn: Any, readonly: bool) -> None:
        self._conn = conn
        self._readonly = readonly
        self._cursor: Any = None

    def __enter__(self) -> Any:
        # IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so two read-then-write
        # transactions never deadlock or interleave: every write transaction is serialised. Readers take a
        # WAL snapshot and never block writers.
        cursor = self._cursor = self._conn.cursor()
        cursor.execute("BEGIN" if self._readonly else "BEGIN IMMEDIATE")
        return cursor

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        cursor = self._cursor
        try:
            if exc is None:
                cursor.execute("COMMIT")
            elif self._conn.in_transaction:
                cursor.execute("ROLLBACK")
        finally:
            cursor.close()


#: SQLite result codes that mean the file itself is damaged (not busy, not missing)
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR")


def sqlite_file_damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the SQLite file is unreadable (malformed, not a database, an I/O error)."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    if any(name.startswith(code) for code in _DAMAGED):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text or "disk i/o error" in text


def move_aside_command(path: Path | str) -> str:
    """A shell command that moves the ledger file ``path`` aside as ``PATH.bad``, with its ``-wal`` and ``-shm``
    as ``PATH.bad-wal`` and ``PATH.bad-shm`` (so SQLite still reads the copy with its WAL)."""
    import shlex  # here: only a damaged ledger's remedy quotes a path

    quoted = shlex.quote(str(path))
    return f"for s in '' -wal -shm; do [ ! -e {quoted}$s ] || mv {quoted}$s {quoted}.bad$s; done"


def _sqlite_remedy(path: str, exc: BaseException) -> str:
    if sqlite_file_damaged(exc):
        return (f"the ledger file {path} is damaged: `deskctl ledger check --repair` copies what it can read into "
                f"a fresh file and keeps the bad one aside; or move it aside by hand: {move_aside_command(path)} "
                "(`deskctl reap --everything` finds desktops by label without a ledger)")
    return (f"check that {path} (and its directory) is on a local file system and writable; "
            "`deskctl ledger check` reports its state")


def _create_private_file(path: str) -> None:
    """Make ``path`` an empty file of mode 0600 when it does not exist, without ever holding a descriptor of it.

    A fresh temporary file is written and closed, then hard-linked into place (which never replaces a file
    another process made meanwhile). Closing a descriptor of the ledger itself would drop this process's SQLite
    locks on it (see the module doc), so the file is only stat-ed here. Where hard links are refused, SQLite
    makes the file (with the umask's mode)."""
    folder, name = os.path.split(path)
    try:
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(path):
            return
    except OSError:
        return  # SQLite reports what is wrong when it opens the file
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{get_ident()}.new")
    try:
        fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except OSError:
        pass  # EEXIST: another process made it meanwhile; no hard links here: SQLite makes it
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass
