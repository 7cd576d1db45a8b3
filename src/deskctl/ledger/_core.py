"""The ledger's plumbing: a small connection pool per process, transactions, what a forked child does with the
connections it inherited, and the forward migration of the schema (see :mod:`deskctl.ledger`)."""

from __future__ import annotations

import os
from _weakref import ref  # weakref.ref itself, without weakref's import (functools, collections)

from deskctl import _threads
from deskctl._redact import redact
from deskctl.errors import ConfigInvalid, DeskctlError, InfrastructureError
from deskctl.ledger import _schema
from deskctl.ledger._records import Budget, Reservation, SessionRecord
from deskctl.ledger._schema import (
    _ACTIVE_SQL,
    _BUDGET_COLUMNS,
    _MIGRATIONS,
    _RESERVATION_COLUMNS,
    _SESSION_COLUMNS,
    _budget_from_row,
    _reservation_from_row,
    _session_from_row,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from contextlib import AbstractContextManager
    from typing import Any, Self

__all__ = ["LedgerBase", "Transaction"]


class Transaction:
    """One open database transaction. ``run`` takes SQL with ``?`` placeholders on both backends."""

    def __init__(self, ledger: LedgerBase, cursor: Any) -> None:
        self._ledger = ledger
        self._cursor = cursor

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cursor.execute(self._ledger._sql(sql), tuple(params))
        if self._cursor.description is None:
            return []
        return [tuple(row) for row in self._cursor.fetchall()]

    def change(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run an UPDATE or DELETE; the number of rows it matched (one statement where a SELECT would take two)."""
        self._cursor.execute(self._ledger._sql(sql), tuple(params))
        return int(self._cursor.rowcount)

    # Typed helpers used by the budget module, so that it stays free of SQL dialects.
    def budget(self, name: str) -> Budget | None:
        rows = self.run(f"SELECT {', '.join(_BUDGET_COLUMNS)} FROM budgets WHERE name = ?", (name,))
        return _budget_from_row(rows[0]) if rows else None

    def open_reservations(self, budget: str, *, since: float) -> list[tuple[Reservation, SessionRecord | None]]:
        """The reservations of ``budget`` that need a look one by one, oldest first, each with its session
        (None when it has none, without action counts): every one still held whatever its age, and those made
        since ``since`` whose desktop may still exist (its session is active and its create was sent). Their
        number follows what is running, not the size of the ledger."""
        columns = ", ".join("r." + c for c in _RESERVATION_COLUMNS)
        rows = self.run(
            f"SELECT {columns} FROM reservations r WHERE r.budget = ? AND r.status = 'held' UNION "
            # From the few active sessions to their reservations: CROSS JOIN keeps that order in SQLite, and the
            # `|| ''` keeps its planner off the budget index, which would walk every reservation of the budget.
            f"SELECT {columns} FROM sessions s CROSS JOIN reservations r WHERE r.session_id = s.session_id "
            f"AND s.status IN ({_ACTIVE_SQL}) AND s.created_at IS NOT NULL AND r.budget || '' = ? "
            "AND r.created_at >= ? ORDER BY created_at, id",
            (budget, budget, since),
        )
        reservations = [_reservation_from_row(r) for r in rows]
        records = self.sessions_by_id({r.session_id for r in reservations})
        return [(r, records.get(r.session_id)) for r in reservations]

    def settled_totals(self, budget: str, *, since: float) -> tuple[int, float, int]:
        """(count, sum of known costs, count of unknown costs) of the reservations of ``budget`` made since
        ``since`` that are settled and whose desktop cannot exist any more: the complement of
        :meth:`open_reservations` in the window, summed by the database, never loaded."""
        rows = self.run(
            "SELECT COUNT(*), SUM(cost_usd), SUM(CASE WHEN cost_usd IS NULL THEN 1 ELSE 0 END) FROM reservations "
            "WHERE budget = ? AND status = 'settled' AND created_at >= ? AND session_id NOT IN "
            f"(SELECT session_id FROM sessions WHERE status IN ({_ACTIVE_SQL}) AND created_at IS NOT NULL)",
            (budget, since),
        )
        count, known, unknown = rows[0]
        return int(count or 0), float(known or 0.0), int(unknown or 0)

    def release_reservation(self, reservation_id: str, *, at: float, cost_usd: float | None) -> None:
        """Settle a hold that is over (expired, its desktop not running) at what its session cost."""
        self.run(
            "UPDATE reservations SET status = 'settled', settled_at = ?, cost_usd = ? WHERE id = ? AND status = 'held'",
            (at, cost_usd, reservation_id),
        )

    def insert_reservation(self, r: Reservation) -> None:
        self.run(
            f"INSERT INTO reservations ({', '.join(_RESERVATION_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(_RESERVATION_COLUMNS))})",
            (r.id, r.budget, r.session_id, r.amount_usd, int(r.unknown), r.created_at, r.expires_at, r.status,
             r.settled_at, r.cost_usd, r.rate_usd_per_hour, r.owner),
        )  # fmt: skip

    def model_spend(self, session_ids: Iterable[str]) -> dict[str, tuple[float, int]]:
        """Per session: (sum of known model costs, number of metered calls of unknown price); sessions without
        metered calls are left out."""
        wanted = sorted(set(session_ids))
        out: dict[str, tuple[float, int]] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            for sid, known, unknown in self.run(
                "SELECT session_id, SUM(usd), SUM(CASE WHEN usd IS NULL THEN 1 ELSE 0 END) FROM model_usage "
                f"WHERE session_id IN ({', '.join('?' * len(chunk))}) GROUP BY session_id",
                chunk,
            ):
                out[str(sid)] = (float(known or 0.0), int(unknown or 0))
        return out

    def settled_model_totals(self, budget: str, *, since: float) -> tuple[float, int]:
        """(sum of known model costs, count of sessions with a call of unknown price) of the sessions that
        :meth:`settled_totals` counts: their model spend, summed by the database."""
        rows = self.run(
            "SELECT SUM(u.usd), COUNT(DISTINCT CASE WHEN u.usd IS NULL THEN u.session_id END) FROM model_usage u "
            "WHERE u.session_id IN (SELECT r.session_id FROM reservations r WHERE r.budget = ? AND r.status = "
            "'settled' AND r.created_at >= ? AND r.session_id NOT IN "
            f"(SELECT session_id FROM sessions WHERE status IN ({_ACTIVE_SQL}) AND created_at IS NOT NULL))",
            (budget, since),
        )
        known, unknown = rows[0]
        return float(known or 0.0), int(unknown or 0)

    def session(self, session_id: str) -> SessionRecord | None:
        return self._ledger._get(self, session_id)

    def sessions_by_id(self, session_ids: Iterable[str]) -> dict[str, SessionRecord]:
        """These sessions, by id (without action counts); ids not in the ledger are left out."""
        wanted = sorted(set(session_ids))
        out: dict[str, SessionRecord] = {}
        for start in range(0, len(wanted), 500):  # well under every backend's limit of bound parameters
            chunk = wanted[start:start + 500]
            rows = self.run(
                f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions "
                f"WHERE session_id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )
            out.update((str(r[0]), _session_from_row(r, {})) for r in rows)
        return out


#: idle connections a ledger keeps per process for its next transactions (more are closed after use)
_IDLE_CONNECTIONS = 4
#: every ledger of this process, for the at-fork hook: a weak reference to each, which leaves the set with its
#: ledger (how weakref.WeakSet holds its items; _weakrefset imports types, which nothing else of a do process needs)
_LEDGERS: set[ref[LedgerBase]] = set()
#: connections a forked child inherited from its parent, with their ledger: put away before the first new one
_INHERITED: list[tuple[LedgerBase, Any]] = []
_INHERITED_LOCK = _threads.Lock()


def _after_fork_in_child() -> None:
    """In a forked child, before any other code runs: every ledger gets fresh locks (a thread of the parent may
    have held one) and forgets its connections, which belong to the parent and are never used here. No database
    call happens here: they are put away by the child's first transaction (:func:`_put_away_inherited_connections`).

    Rule: do not fork while another thread is inside a ledger call; the child's first transaction may then wait
    for a lock that thread held (SQLite's own rule: never carry a connection across a fork)."""
    global _INHERITED_LOCK
    _INHERITED_LOCK = _threads.Lock()
    for each in list(_LEDGERS):
        ledger = each()
        if ledger is None:
            continue
        ledger._lock = _threads.Lock()
        ledger._in_thread = _threads.local()
        if ledger._pid != os.getpid():
            ledger._forget_parent_connections()


def _put_away_inherited_connections() -> None:
    with _INHERITED_LOCK:
        inherited = list(_INHERITED)
        _INHERITED.clear()
    for ledger, conn in inherited:
        ledger._put_away_inherited(conn)


os.register_at_fork(after_in_child=_after_fork_in_child)


class LedgerBase:
    """The plumbing of :class:`~deskctl.ledger.Ledger`: its connection pool, transactions, fork handling and
    schema migration, and the hooks each backend fills in."""

    backend: str = "?"

    def __init__(self, url: str) -> None:
        self.url = url
        self._closed = False
        self._lock = _threads.Lock()
        #: connections opened by this process (``_pid``), and those of them waiting for the next transaction
        self._pid = os.getpid()
        self._connections: list[Any] = []
        self._idle: list[Any] = []
        #: the connection of the transaction this thread is in, if any
        self._in_thread = _threads.local()
        _LEDGERS.add(ref(self, _LEDGERS.discard))
        try:
            if not self._schema_is_current():
                self._migrate()
        except BaseException as exc:
            failure = self._failure(exc, "migrating the ledger schema")
            if failure is None:
                raise
            raise failure from exc

    # -- backend hooks ---------------------------------------------------------------------------------
    def _connect(self) -> Any:
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql

    def _begin(self, conn: Any, lock: str | None, readonly: bool) -> AbstractContextManager[Any]:
        """A context manager for one transaction on ``conn``: entering begins it and gives its cursor; leaving
        commits it, or rolls it back when an exception leaves it; it never swallows that exception."""
        raise NotImplementedError

    def _serial_pk(self) -> str:
        raise NotImplementedError

    def _sql_day(self, column: str) -> str:
        """SQL for the UTC day number (days since 1970-01-01) of the epoch seconds in ``column``."""
        raise NotImplementedError

    def _migrate(self) -> None:
        raise NotImplementedError

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    # -- plumbing --------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<Ledger {self.backend} {redact(self.url)}>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _checkout(self) -> Any:
        """A connection for one transaction: an idle one of this process, else a new one."""
        with self._lock:
            if self._closed:
                raise DeskctlError("the ledger is closed")
            if self._pid != os.getpid():  # a fork the at-fork hook did not see (os.fork always runs it)
                self._forget_parent_connections()
            if self._idle:
                return self._idle.pop()
        _put_away_inherited_connections()  # before this process opens a connection of its own
        conn = self._connect()
        with self._lock:
            self._connections.append(conn)
        return conn

    def _checkin(self, conn: Any) -> None:
        """Back to the pool after a transaction; closed instead when broken, surplus, or the ledger is closed."""
        reusable = not self._is_broken(conn)
        surplus = [conn]
        with self._lock:
            if conn not in self._connections:  # opened before a fork, or already forgotten
                return
            if reusable and not self._closed and len(self._idle) < _IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
            if not reusable:  # what broke this one (a server restart) most likely broke the idle ones too
                surplus, self._idle = surplus + self._idle, []
            for dropped in surplus:
                self._connections.remove(dropped)
        for dropped in surplus:
            try:
                dropped.close()
            except Exception:  # a broken connection may refuse to close; it is forgotten either way
                pass

    def _forget_parent_connections(self) -> None:
        """In a forked child (the caller holds ``_lock`` or is the only thread): the parent's connections are
        never handed out again; they are put away before this process opens one of its own."""
        with _INHERITED_LOCK:
            _INHERITED.extend((self, conn) for conn in self._connections)
        self._connections, self._idle = [], []
        self._pid = os.getpid()

    def _is_broken(self, conn: Any) -> bool:
        """Not fit for the next transaction: closed, dropped by the server, or still inside a transaction (a
        rollback that failed)."""
        return bool(getattr(conn, "closed", False) or getattr(conn, "broken", False))

    def _put_away_inherited(self, conn: Any) -> None:
        """Make sure this process never uses ``conn``, a connection of its parent (the caller forgets it)."""

    def _failure(self, exc: BaseException, doing: str) -> InfrastructureError | None:
        """What a failure of the database driver while ``doing`` is raised as (None for any other exception,
        which goes on as it is)."""
        if isinstance(exc, DeskctlError) or not isinstance(exc, self._driver_errors()):
            return None
        return InfrastructureError(
            f"ledger ({self.backend}) failed while {doing}: {redact(str(exc)).strip()}",
            code="ledger.unavailable", remedy=self._remedy(exc),
        )

    def _remedy(self, exc: BaseException) -> str:
        """What to do about ``exc``, a failure of the database driver."""
        return "check DESKCTL_LEDGER_URL and that the database is reachable and writable"

    def transaction(self, *, lock: str | None = None, readonly: bool = False) -> _TransactionScope:
        """A transaction (``with ledger.transaction() as tx``), committed on normal exit and rolled back on an
        exception. ``lock`` names a lock held until commit, serialising every transaction that names the same lock
        across all processes (SQLite serialises every write transaction anyway). ``readonly``: the caller only
        reads (a snapshot)."""
        return _TransactionScope(self, lock, readonly)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.transaction(readonly=True) as tx:
            return tx.run(sql, params)

    def close(self) -> None:
        """Close every connection this ledger opened in this process. Idempotent. A transaction still running in
        another thread keeps its connection until it ends (it is closed then)."""
        for conn in self._let_go():
            try:
                conn.close()
            except Exception:  # closing a broken connection may fail; it is gone either way
                pass

    def close_for_exit(self) -> None:
        """:meth:`close`, in a process that ends right after without the interpreter's teardown (``os._exit``:
        the ``deskctl`` command, :func:`deskctl.cli.entry`). The SQLite ledger leaves its connection to the exit
        (see there); nothing else differs."""
        self.close()

    def _let_go(self) -> list[Any]:
        """Mark this ledger closed; its idle connections, taken out of the pool for the caller to close."""
        with self._lock:
            self._closed = True
            if self._pid != os.getpid():
                self._forget_parent_connections()
            idle, self._idle = self._idle, []
            for conn in idle:
                self._connections.remove(conn)
        return idle

    def schema_version(self) -> int:
        rows = self._read("SELECT version FROM schema_version")
        return int(rows[0][0]) if rows else 0

    def _schema_is_current(self) -> bool:
        """Whether the schema needs no migration, by a plain read: opening an up-to-date ledger (every CLI call)
        then takes no write lock, so parallel deskctl processes do not queue behind each other to open it."""
        try:
            rows = self._read("SELECT version FROM schema_version")
        except InfrastructureError:  # no such table yet (or no answer): the migration decides, and reports
            return False
        return bool(rows) and int(rows[0][0]) == _schema.SCHEMA_VERSION

    def _apply_migrations(self, tx: Transaction) -> None:
        """Create ``schema_version`` and run every missing migration; the caller holds the migration lock."""
        tx.run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        rows = tx.run("SELECT version FROM schema_version")
        current = int(rows[0][0]) if rows else 0
        if not rows:
            tx.run("INSERT INTO schema_version (version) VALUES (0)")
        if current > _schema.SCHEMA_VERSION:
            raise ConfigInvalid(
                f"the ledger at {redact(self.url)} has schema version {current}, newer than this deskctl "
                f"understands ({_schema.SCHEMA_VERSION})",
                remedy="upgrade deskctl, or point DESKCTL_LEDGER_URL at another ledger",
            )
        for version in range(current + 1, _schema.SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                tx.run(statement.replace("{serial_pk}", self._serial_pk()))
            tx.run("UPDATE schema_version SET version = ?", (version,))

    _record = staticmethod(_session_from_row)

    def _get(self, tx: Transaction, session_id: str) -> SessionRecord | None:
        rows = tx.run(f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE session_id = ?", (session_id,))
        if not rows:
            return None
        counts = tx.run("SELECT kind, count FROM action_counts WHERE session_id = ?", (session_id,))
        return self._record(rows[0], {str(k): int(c) for k, c in counts})


class _TransactionScope:
    """What :meth:`LedgerBase.transaction` returns: entering takes this thread's connection (the one of the
    transaction it is already in, nested as the backend nests it, else one from the pool) and begins a transaction
    on it; leaving ends it (:meth:`LedgerBase._begin`), gives the connection back, and raises a failure of the
    driver, in the body or in the commit, as :class:`~deskctl.errors.InfrastructureError`. A class, not a
    ``contextlib.contextmanager``: a one-shot CLI process imports no contextlib."""

    __slots__ = ("_begun", "_conn", "_doing", "_ledger", "_lock", "_readonly")

    def __init__(self, ledger: LedgerBase, lock: str | None, readonly: bool) -> None:
        self._ledger = ledger
        self._lock = lock
        self._readonly = readonly
        self._doing = "reading" if readonly else "writing"
        self._begun: AbstractContextManager[Any] | None = None
        #: the connection this scope took from the pool (None when nested in this thread's transaction)
        self._conn: Any = None

    def __enter__(self) -> Transaction:
        ledger = self._ledger
        try:
            conn = getattr(ledger._in_thread, "conn", None)
            if conn is None:
                conn = self._conn = ledger._checkout()
                ledger._in_thread.conn = conn
            try:
                begun = ledger._begin(conn, self._lock, self._readonly)
                cursor = begun.__enter__()
            except BaseException:
                self._give_back()
                raise
        except BaseException as exc:
            failure = ledger._failure(exc, self._doing)
            if failure is None:
                raise
            raise failure from exc
        self._begun = begun
        return Transaction(ledger, cursor)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        begun, self._begun = self._begun, None
        assert begun is not None, "a transaction scope is left once, after it was entered"
        try:
            try:
                begun.__exit__(exc_type, exc, tb)  # commits, or rolls back (``exc`` goes on: see _begin)
            finally:
                self._give_back()
        except BaseException as error:
            failure = self._ledger._failure(error, self._doing)
            if failure is None:
                raise
            raise failure from error
        if exc is not None:
            failure = self._ledger._failure(exc, self._doing)
            if failure is not None:
                raise failure from exc

    def _give_back(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._ledger._in_thread.conn = None
            self._ledger._checkin(conn)
