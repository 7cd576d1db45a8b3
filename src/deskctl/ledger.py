"""The ledger: a durable record of every session, its events, its action counts, its end and its cost.

Two backends behind one class:

* SQLite (the default): ``$DESKCTL_LEDGER_URL`` unset gives ``deskctl.paths.home_dir()/"ledger.sqlite3"``;
  ``sqlite:///path/to/file`` (or a bare path) names another file. WAL mode, a busy timeout, and every write in a
  ``BEGIN IMMEDIATE`` transaction, so several deskctl processes at once never corrupt or lose records.
* PostgreSQL: ``postgresql://...`` (psycopg 3, imported only when used), for teams whose CI runners share one
  ledger and one budget.

Connections come from a small pool per process: a transaction takes one, no two transactions share one, and
a thread holds none between transactions (so the threads of a server never pile up connections). A connection
made before a fork is never used in the child: the child puts the inherited ones away first (see
:func:`_after_fork_in_child`). The schema is versioned (table ``schema_version``) and migrated forward on open,
under a lock, by whichever process comes first.

The SQLite file is never opened by hand once a connection may exist in the process: closing *any* descriptor of
a SQLite file drops every POSIX lock the process holds on it, after which another process believes it is the
last user and checkpoints and deletes ``-wal``/``-shm`` under the live one (rows lost, then a malformed file).
The file is made private (mode 0600) before SQLite ever sees it, by linking a fresh temporary file into place
(:func:`_create_private_file`); ``-wal`` and ``-shm`` take the mode of the database file.

Every text written is passed through :func:`deskctl.credentials.redact`: secrets never reach the ledger.

Every failure of the database is a :class:`~deskctl.errors.InfrastructureError` with code
``ledger.unavailable`` (exit 20); a malformed URL or a missing driver is :class:`~deskctl.errors.ConfigInvalid`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from deskctl._redact import redact, register_secret
from deskctl.errors import ConfigInvalid, DeskctlError, InfrastructureError

__all__ = [
    "ACTIVE_STATUSES",
    "SCHEMA_VERSION",
    "STATUSES",
    "TERMINAL_STATUSES",
    "Budget",
    "Event",
    "Ledger",
    "ModelTotals",
    "ModelUsage",
    "Reservation",
    "SessionRecord",
    "Totals",
    "Transaction",
    "check_ledger_url",
    "default_ledger_url",
    "ledger_id",
    "move_aside_command",
    "open_ledger",
    "sqlite_file_damaged",
]

STATUSES = ("intent", "creating", "ready", "ending", "destroying", "ended", "failed", "leaked")
#: a session in one of these states is over: nothing of it can still exist or bill
TERMINAL_STATUSES = frozenset({"ended", "failed"})
ACTIVE_STATUSES = frozenset(STATUSES) - TERMINAL_STATUSES
# SQL lists of the two sets: ``status IN (...)`` can use the status index, ``NOT IN`` cannot
_TERMINAL_SQL = ", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))
_ACTIVE_SQL = ", ".join(f"'{s}'" for s in sorted(ACTIVE_STATUSES))


@dataclass
class SessionRecord:
    """One session as the ledger knows it. Times are Unix epoch seconds (``time.time()``).

    ``created_at`` is the time the create *request* was sent: billable time starts there, because a
    provider may bill for a sandbox whose create response never arrived.
    """

    session_id: str
    provider: str
    platform: str
    geometry: str
    owner: str  # "host:pid" of the process that opened the session
    detached: bool
    status: str  # intent | creating | ready | destroying | ended | failed | leaked
    intent_at: float
    created_at: float | None = None
    ready_at: float | None = None
    ended_at: float | None = None
    expires_at: float | None = None
    handle: dict[str, Any] | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    billable_seconds: float | None = None
    cost_usd: float | None = None
    rate_usd_per_hour: float | None = None
    rate_source: str | None = None
    action_counts: dict[str, int] = field(default_factory=dict)
    budget: str | None = None
    #: the live display size seen when the session became ready
    width: int | None = None
    height: int | None = None

    @property
    def active(self) -> bool:
        """Not ended and not failed: the desktop may still exist (and bill)."""
        return self.status not in TERMINAL_STATUSES

    def elapsed_billable(self, now: float | None = None) -> float:
        """Billable seconds so far: recorded ones when ended, else from the create request until ``now``."""
        if self.billable_seconds is not None:
            return self.billable_seconds
        if self.created_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else (time.time() if now is None else now)
        return max(0.0, end - self.created_at)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Event:
    """Something that happened to a session: ``kind`` (``intent``, ``create_sent``, ``created``, ``ready``,
    ``ended``, or any kind the caller records) at ``at`` with JSON ``data``."""

    session_id: str
    at: float
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "at": self.at, "kind": self.kind, "data": dict(self.data)}


@dataclass(frozen=True)
class Budget:
    """A shared spending cap: at most ``max_usd`` over any trailing ``window_seconds``."""

    name: str
    max_usd: float
    window_seconds: float
    #: minutes assumed for a session that states no ``max_minutes`` when its cost is projected
    default_minutes: float
    #: ``refuse`` or ``allow`` a session whose rate is unknown
    unknown_cost: str
    created_at: float
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Reservation:
    """Money held against a budget for one session until it is settled (``cost_usd`` known) or expires."""

    id: str
    budget: str
    session_id: str
    amount_usd: float
    unknown: bool  # the session's rate was unknown (allowed by policy): its amount is not a real figure
    created_at: float
    expires_at: float
    status: str  # held | settled
    settled_at: float | None = None
    cost_usd: float | None = None
    rate_usd_per_hour: float | None = None
    owner: str | None = None  # host:pid of the process that made it

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Totals:
    """Sums over a group of sessions: how many, their billable seconds, their known cost and how many of them
    have an unknown one (not included in ``cost_usd``)."""

    sessions: int
    billable_seconds: float
    cost_usd: float
    unknown_sessions: int


@dataclass(frozen=True)
class ModelUsage:
    """Tokens a model spent for a session (``Desktop.meter``): ``role`` (``agent``, ``user``, ...), ``model``, the
    token counts and ``usd`` (None: the price is unknown, never 0); ``price_source`` says where ``usd`` came from."""

    session_id: str
    at: float
    role: str
    model: str
    input_tokens: int
    output_tokens: int
    usd: float | None
    price_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ModelTotals:
    """Model spend summed over a group: distinct sessions, metered calls, tokens, the known cost and how many
    calls have an unknown price (not included in ``usd``)."""

    sessions: int
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float
    unknown_calls: int


# -- schema ----------------------------------------------------------------------------------------------

#: migrations by target version; ``{serial_pk}`` is the one dialect difference
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            platform TEXT NOT NULL,
            geometry TEXT NOT NULL,
            owner TEXT NOT NULL,
            detached INTEGER NOT NULL,
            status TEXT NOT NULL,
            intent_at DOUBLE PRECISION NOT NULL,
            created_at DOUBLE PRECISION,
            ready_at DOUBLE PRECISION,
            ended_at DOUBLE PRECISION,
            expires_at DOUBLE PRECISION,
            handle TEXT,
            spec TEXT NOT NULL,
            labels TEXT NOT NULL,
            reason TEXT,
            billable_seconds DOUBLE PRECISION,
            cost_usd DOUBLE PRECISION,
            rate_usd_per_hour DOUBLE PRECISION,
            rate_source TEXT,
            budget TEXT,
            width INTEGER,
            height INTEGER
        )""",
        "CREATE INDEX sessions_status ON sessions (status)",
        "CREATE INDEX sessions_intent_at ON sessions (intent_at)",
        """CREATE TABLE action_counts (
            session_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            count BIGINT NOT NULL,
            PRIMARY KEY (session_id, kind)
        )""",
        """CREATE TABLE events (
            id {serial_pk},
            session_id TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX events_session ON events (session_id)",
    ),
    2: (
        """CREATE TABLE budgets (
            name TEXT PRIMARY KEY,
            max_usd DOUBLE PRECISION NOT NULL,
            window_seconds DOUBLE PRECISION NOT NULL,
            default_minutes DOUBLE PRECISION NOT NULL,
            unknown_cost TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        )""",
        """CREATE TABLE reservations (
            id TEXT PRIMARY KEY,
            budget TEXT NOT NULL,
            session_id TEXT NOT NULL,
            amount_usd DOUBLE PRECISION NOT NULL,
            unknown INTEGER NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            status TEXT NOT NULL,
            settled_at DOUBLE PRECISION,
            cost_usd DOUBLE PRECISION,
            rate_usd_per_hour DOUBLE PRECISION
        )""",
        "CREATE INDEX reservations_budget ON reservations (budget, created_at)",
        "CREATE INDEX reservations_session ON reservations (session_id)",
    ),
    # the owner (host:pid) of a reservation lets a hold whose process died be released before it expires
    3: ("ALTER TABLE reservations ADD COLUMN owner TEXT",),
    # Budget checks, `cost` and `ls` aggregate in SQL and read only the sessions that are still active, so a
    # ledger of 100k sessions answers in milliseconds: the held reservations of a budget and the settled ones
    # of its window come from one index, and the sums over ended sessions from another; both carry every
    # column their sums read, so that the database never visits the table row by row.
    4: (
        "CREATE INDEX reservations_budget_status ON reservations (budget, status, created_at, cost_usd, session_id)",
        "CREATE INDEX sessions_ended ON sessions "
        "(status, ended_at, intent_at, created_at, billable_seconds, cost_usd, provider)",
    ),
    # model spend beside desktop spend (Desktop.meter): one row per metered call; usd NULL is an unknown price
    5: (
        """CREATE TABLE model_usage (
            id {serial_pk},
            session_id TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            role TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL,
            usd DOUBLE PRECISION,
            price_source TEXT
        )""",
        "CREATE INDEX model_usage_session ON model_usage (session_id, usd)",
    ),
}
SCHEMA_VERSION = max(_MIGRATIONS)

_SESSION_COLUMNS = (
    "session_id", "provider", "platform", "geometry", "owner", "detached", "status", "intent_at", "created_at",
    "ready_at", "ended_at", "expires_at", "handle", "spec", "labels", "reason", "billable_seconds", "cost_usd",
    "rate_usd_per_hour", "rate_source", "budget", "width", "height",
)  # fmt: skip
_RESERVATION_COLUMNS = (
    "id", "budget", "session_id", "amount_usd", "unknown", "created_at", "expires_at", "status", "settled_at",
    "cost_usd", "rate_usd_per_hour", "owner",
)  # fmt: skip
_BUDGET_COLUMNS = ("name", "max_usd", "window_seconds", "default_minutes", "unknown_cost", "created_at", "updated_at")


def _dumps(value: Any) -> str:
    """JSON for a column, with every secret scrubbed."""
    return redact(json.dumps(value, sort_keys=True, default=str))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


class Transaction:
    """One open database transaction. ``run`` takes SQL with ``?`` placeholders on both backends."""

    def __init__(self, ledger: Ledger, cursor: Any) -> None:
        self._ledger = ledger
        self._cursor = cursor

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cursor.execute(self._ledger._sql(sql), tuple(params))
        if self._cursor.description is None:
            return []
        return [tuple(row) for row in self._cursor.fetchall()]

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
            out.update((str(r[0]), Ledger._record(r, {})) for r in rows)
        return out


def _budget_from_row(row: Sequence[Any]) -> Budget:
    name, max_usd, window, default_minutes, unknown_cost, created_at, updated_at = row
    return Budget(str(name), float(max_usd), float(window), float(default_minutes), str(unknown_cost),
                  float(created_at), float(updated_at))  # fmt: skip


def _reservation_from_row(row: Sequence[Any]) -> Reservation:
    rid, budget, session_id, amount, unknown, created_at, expires_at, status, settled_at, cost, rate, owner = row
    return Reservation(
        id=str(rid), budget=str(budget), session_id=str(session_id), amount_usd=float(amount),
        unknown=bool(unknown), created_at=float(created_at), expires_at=float(expires_at), status=str(status),
        settled_at=_float(settled_at), cost_usd=_float(cost), rate_usd_per_hour=_float(rate),
        owner=None if owner is None else str(owner),
    )  # fmt: skip


#: idle connections a ledger keeps per process for its next transactions (more are closed after use)
_IDLE_CONNECTIONS = 4
#: every ledger of this process, for the at-fork hook
_LEDGERS: weakref.WeakSet[Ledger] = weakref.WeakSet()
#: connections a forked child inherited from its parent, with their ledger: put away before the first new one
_INHERITED: list[tuple[Ledger, Any]] = []
_INHERITED_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """In a forked child, before any other code runs: every ledger gets fresh locks (a thread of the parent may
    have held one) and forgets its connections, which belong to the parent and are never used here. No database
    call happens here: they are put away by the child's first transaction (:func:`_put_away_inherited_connections`).

    Rule: do not fork while another thread is inside a ledger call; the child's first transaction may then wait
    for a lock that thread held (SQLite's own rule: never carry a connection across a fork)."""
    global _INHERITED_LOCK
    _INHERITED_LOCK = threading.Lock()
    for ledger in list(_LEDGERS):
        ledger._lock = threading.Lock()
        ledger._in_thread = threading.local()
        if ledger._pid != os.getpid():
            ledger._forget_parent_connections()


def _put_away_inherited_connections() -> None:
    with _INHERITED_LOCK:
        inherited = list(_INHERITED)
        _INHERITED.clear()
    for ledger, conn in inherited:
        ledger._put_away_inherited(conn)


os.register_at_fork(after_in_child=_after_fork_in_child)


class Ledger:
    """The session ledger. Obtain one with :func:`open_ledger`; safe to use from several threads and processes.

    Methods that move a session through its life also append the matching :class:`Event` (``intent``,
    ``create_sent``, ``created``, ``ready``, ``ended``), in the same transaction.
    """

    backend: str = "?"

    def __init__(self, url: str) -> None:
        self.url = url
        self._closed = False
        self._lock = threading.Lock()
        #: connections opened by this process (``_pid``), and those of them waiting for the next transaction
        self._pid = os.getpid()
        self._connections: list[Any] = []
        self._idle: list[Any] = []
        #: the connection of the transaction this thread is in, if any
        self._in_thread = threading.local()
        _LEDGERS.add(self)
        with self._guard("migrating the ledger schema"):
            if not self._schema_is_current():
                self._migrate()

    # -- backend hooks ---------------------------------------------------------------------------------
    def _connect(self) -> Any:
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql

    @contextmanager
    def _begin(self, conn: Any, lock: str | None, readonly: bool) -> Iterator[Any]:
        raise NotImplementedError
        yield  # pragma: no cover

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

    def __enter__(self) -> Ledger:
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

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except DeskctlError:
            raise
        except self._driver_errors() as exc:
            raise InfrastructureError(
                f"ledger ({self.backend}) failed while {doing}: {redact(str(exc)).strip()}",
                code="ledger.unavailable", remedy=self._remedy(exc),
            ) from exc

    def _remedy(self, exc: BaseException) -> str:
        """What to do about ``exc``, a failure of the database driver."""
        return "check DESKCTL_LEDGER_URL and that the database is reachable and writable"

    @contextmanager
    def transaction(self, *, lock: str | None = None, readonly: bool = False) -> Iterator[Transaction]:
        """A transaction, committed on normal exit and rolled back on an exception. ``lock`` names a lock held
        until commit, serialising every transaction that names the same lock across all processes (SQLite
        serialises every write transaction anyway). ``readonly``: the caller only reads (a snapshot)."""
        with self._guard("reading" if readonly else "writing"):
            outer = getattr(self._in_thread, "conn", None)
            if outer is not None:  # nested in this thread: the same connection, as the backend nests it
                with self._begin(outer, lock, readonly) as cursor:
                    yield Transaction(self, cursor)
                return
            conn = self._checkout()
            self._in_thread.conn = conn
            try:
                with self._begin(conn, lock, readonly) as cursor:
                    yield Transaction(self, cursor)
            finally:
                self._in_thread.conn = None
                self._checkin(conn)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.transaction(readonly=True) as tx:
            return tx.run(sql, params)

    def close(self) -> None:
        """Close every connection this ledger opened in this process. Idempotent. A transaction still running in
        another thread keeps its connection until it ends (it is closed then)."""
        with self._lock:
            self._closed = True
            if self._pid != os.getpid():
                self._forget_parent_connections()
            idle, self._idle = self._idle, []
            for conn in idle:
                self._connections.remove(conn)
        for conn in idle:
            try:
                conn.close()
            except Exception:  # closing a broken connection may fail; it is gone either way
                pass

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
        return bool(rows) and int(rows[0][0]) == SCHEMA_VERSION

    def _apply_migrations(self, tx: Transaction) -> None:
        """Create ``schema_version`` and run every missing migration; the caller holds the migration lock."""
        tx.run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        rows = tx.run("SELECT version FROM schema_version")
        current = int(rows[0][0]) if rows else 0
        if not rows:
            tx.run("INSERT INTO schema_version (version) VALUES (0)")
        if current > SCHEMA_VERSION:
            raise ConfigInvalid(
                f"the ledger at {redact(self.url)} has schema version {current}, newer than this deskctl "
                f"understands ({SCHEMA_VERSION})",
                remedy="upgrade deskctl, or point DESKCTL_LEDGER_URL at another ledger",
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                tx.run(statement.replace("{serial_pk}", self._serial_pk()))
            tx.run("UPDATE schema_version SET version = ?", (version,))

    def _event(self, tx: Transaction, session_id: str, kind: str, data: dict[str, Any] | None, at: float) -> None:
        tx.run(
            "INSERT INTO events (session_id, at, kind, data) VALUES (?, ?, ?, ?)",
            (session_id, at, kind, _dumps(data or {})),
        )

    # -- sessions --------------------------------------------------------------------------------------
    def record_intent(self, record: SessionRecord) -> None:
        """Write the session before anything is created, so a crash during create leaves a trace to reap."""
        values = (
            record.session_id, record.provider, record.platform, record.geometry, record.owner,
            int(record.detached), record.status, record.intent_at, record.created_at, record.ready_at,
            record.ended_at, record.expires_at, None if record.handle is None else _dumps(record.handle),
            _dumps(record.spec), _dumps(record.labels), None if record.reason is None else redact(record.reason),
            record.billable_seconds, record.cost_usd, record.rate_usd_per_hour, record.rate_source, record.budget,
            record.width, record.height,
        )  # fmt: skip
        with self.transaction() as tx:
            tx.run(
                f"INSERT INTO sessions ({', '.join(_SESSION_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_SESSION_COLUMNS))})",
                values,
            )
            for kind, count in record.action_counts.items():
                self._add_action(tx, record.session_id, kind, count)
            self._event(tx, record.session_id, "intent", {"owner": record.owner}, record.intent_at)

    def _update(self, session_id: str, assignments: dict[str, Any], event: tuple[str, dict[str, Any], float]) -> None:
        with self.transaction() as tx:
            self._update_in(tx, session_id, assignments)
            self._event(tx, session_id, *event)

    def _update_in(self, tx: Transaction, session_id: str, assignments: dict[str, Any]) -> None:
        rows = tx.run("SELECT status FROM sessions WHERE session_id = ?", (session_id,))
        if not rows:
            from deskctl.errors import NotFound

            raise NotFound(f"no session {session_id!r} in the ledger")
        columns = ", ".join(f"{name} = ?" for name in assignments)
        tx.run(f"UPDATE sessions SET {columns} WHERE session_id = ?", (*assignments.values(), session_id))

    def record_create_sent(self, session_id: str, at: float) -> None:
        """The create request is about to go out: billable time starts at ``at``."""
        self._update(session_id, {"status": "creating", "created_at": at}, ("create_sent", {}, at))

    def record_created(self, session_id: str, handle: dict[str, Any]) -> None:
        """The provider answered with a handle (stored as JSON, secrets scrubbed)."""
        self._update(
            session_id,
            {"handle": _dumps(handle)},
            ("created", {"resource_id": handle.get("resource_id")}, time.time()),
        )

    def record_ready(self, session_id: str, at: float, width: int, height: int) -> None:
        self._update(
            session_id,
            {"status": "ready", "ready_at": at, "width": width, "height": height},
            ("ready", {"width": width, "height": height}, at),
        )

    def record_status(self, session_id: str, status: str, *, reason: str | None = None) -> None:
        """Move a session to ``status`` (for example ``ending`` or ``leaked``) without ending its meter."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        assignments: dict[str, Any] = {"status": status}
        if reason is not None:
            assignments["reason"] = redact(reason)
        self._update(session_id, assignments, (status, {"reason": reason} if reason else {}, time.time()))

    def record_destroying(self, session_id: str, *, reason: str, by: str) -> None:
        """Written before a destroy is sent: until the end is recorded the ledger says ``destroying``, never
        ``ready``, so a process killed between the destroy and the end record (or a ledger that could not take
        it) leaves a row that ``deskctl reap`` finishes. ``by`` is the ``host:pid`` doing it."""
        with self.transaction() as tx:
            rows = tx.run("SELECT status FROM sessions WHERE session_id = ?", (session_id,))
            if rows and rows[0][0] in ("ended", "failed"):
                return  # the reaper (or another process) recorded the end already: an end is never reopened
            self._update_in(tx, session_id, {"status": "destroying", "reason": redact(reason)})
            self._event(tx, session_id, "destroying", {"reason": redact(reason), "by": by}, time.time())

    def record_meter(self, session_id: str, *, rate_usd_per_hour: float | None, rate_source: str | None,
                     budget: str | None = None) -> None:  # fmt: skip
        """Store the rate a session is metered at (and the budget it is charged to)."""
        with self.transaction() as tx:
            self._update_in(
                tx, session_id,
                {"rate_usd_per_hour": rate_usd_per_hour, "rate_source": rate_source, "budget": budget},
            )  # fmt: skip

    # -- model spend -----------------------------------------------------------------------------------
    def record_model_usage(self, usage: ModelUsage) -> None:
        """Add one metered model call of a session (its text scrubbed of secrets)."""
        with self.transaction() as tx:
            if not tx.run("SELECT status FROM sessions WHERE session_id = ?", (usage.session_id,)):
                from deskctl.errors import NotFound

                raise NotFound(f"no session {usage.session_id!r} in the ledger")
            tx.run(
                "INSERT INTO model_usage (session_id, at, role, model, input_tokens, output_tokens, usd, price_source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (usage.session_id, usage.at, redact(usage.role), redact(usage.model), int(usage.input_tokens),
                 int(usage.output_tokens), usage.usd,
                 None if usage.price_source is None else redact(usage.price_source)),
            )  # fmt: skip

    def model_usage(self, session_id: str) -> list[ModelUsage]:
        """The metered model calls of a session, oldest first."""
        rows = self._read(
            "SELECT session_id, at, role, model, input_tokens, output_tokens, usd, price_source FROM model_usage "
            "WHERE session_id = ? ORDER BY id", (session_id,))
        return [ModelUsage(str(s), float(a), str(r), str(m), int(i), int(o), _float(u), p)
                for s, a, r, m, i, o, u, p in rows]  # fmt: skip

    def model_spend(self, session_ids: Iterable[str]) -> dict[str, tuple[float, int]]:
        """Per session: (sum of known model costs, number of metered calls of unknown price); sessions without
        metered calls are left out."""
        with self.transaction(readonly=True) as tx:
            return tx.model_spend(session_ids)

    def model_totals(self, *, since: float | None = None, by: str | None = None,
                     active: bool | None = None) -> dict[str, ModelTotals]:  # fmt: skip
        """Model spend summed by the database per group of ``by`` (``role``, ``model``, ``provider``, ``day``,
        ``budget``; None: one group ``""``) over the sessions alive at or after ``since`` (as :meth:`sessions`).
        ``active``: only the sessions that are not over (True) or only those that are (False)."""
        keys = {
            None: "''", "role": "u.role", "model": "u.model", "provider": "s.provider",
            "day": self._sql_day("s.intent_at"),
            "budget": "COALESCE((SELECT MAX(r.budget) FROM reservations r WHERE r.session_id = s.session_id), '-')",
        }  # fmt: skip
        if by not in keys:
            raise ValueError(f"cannot group model spend by {by!r}")
        conditions: list[str] = []
        params: list[Any] = []
        if since is not None:
            conditions.append("(s.intent_at >= ? OR s.ended_at >= ? OR s.ended_at IS NULL)")
            params = [since, since]
        if active is not None:
            conditions.append(f"s.status IN ({_ACTIVE_SQL if active else _TERMINAL_SQL})")
        where = (" WHERE " + " AND ".join(conditions)) if conditions else ""
        rows = self._read(
            f"SELECT {keys[by]} AS k, COUNT(DISTINCT u.session_id), COUNT(*), SUM(u.input_tokens), "
            "SUM(u.output_tokens), SUM(u.usd), SUM(CASE WHEN u.usd IS NULL THEN 1 ELSE 0 END) "
            f"FROM model_usage u JOIN sessions s ON s.session_id = u.session_id{where} GROUP BY k",
            params,
        )
        out: dict[str, ModelTotals] = {}
        for key, sessions, calls, tokens_in, tokens_out, cost, unknown in rows:
            name = str(key)
            if by == "day":
                from datetime import UTC, datetime

                name = datetime.fromtimestamp(int(key) * 86400, UTC).strftime("%Y-%m-%d")
            out[name] = ModelTotals(int(sessions), int(calls), int(tokens_in or 0), int(tokens_out or 0),
                                    float(cost or 0.0), int(unknown or 0))
        return out

    def record_event(self, session_id: str, kind: str, data: dict[str, Any] | None = None) -> None:
        with self.transaction() as tx:
            self._event(tx, session_id, kind, data, time.time())

    def _add_action(self, tx: Transaction, session_id: str, kind: str, count: int) -> None:
        tx.run(
            "INSERT INTO action_counts (session_id, kind, count) VALUES (?, ?, ?) "
            "ON CONFLICT (session_id, kind) DO UPDATE SET count = action_counts.count + excluded.count",
            (session_id, kind, int(count)),
        )

    def add_actions(self, session_id: str, counts: dict[str, int]) -> None:
        """Add ``counts`` to the session's action counters, atomically (concurrent adders never lose one)."""
        if not counts:
            return
        with self.transaction() as tx:
            for kind, count in sorted(counts.items()):
                self._add_action(tx, session_id, kind, count)

    def record_end(
        self,
        session_id: str,
        *,
        status: str,
        reason: str,
        ended_at: float,
        billable_seconds: float | None,
        cost_usd: float | None,
        only_active: bool = False,
    ) -> bool:
        """The session is over (``ended``, ``failed``) or known to be left behind (``leaked``); ``cost_usd``
        None means the cost is unknown. A session that is over also settles its budget holds at ``cost_usd``
        in the same transaction, whoever ends it (its owner, ``deskctl down`` or the reaper).

        ``only_active``: write nothing (and return False) when the session is already ended or failed, so that
        the reaper never overwrites the end its owner recorded meanwhile."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        with self.transaction() as tx:
            if only_active:
                rows = tx.run("SELECT status FROM sessions WHERE session_id = ?", (session_id,))
                if rows and str(rows[0][0]) in TERMINAL_STATUSES:
                    return False
            self._update_in(
                tx, session_id,
                {"status": status, "reason": redact(reason), "ended_at": ended_at,
                 "billable_seconds": billable_seconds, "cost_usd": cost_usd},
            )  # fmt: skip
            self._event(tx, session_id, "ended", {"status": status, "reason": redact(reason),
                        "billable_seconds": billable_seconds, "cost_usd": cost_usd}, ended_at)  # fmt: skip
            if status in TERMINAL_STATUSES:
                tx.run(
                    "UPDATE reservations SET status = 'settled', settled_at = ?, cost_usd = ? "
                    "WHERE session_id = ? AND status = 'held'",
                    (ended_at, cost_usd, session_id),
                )
        return True

    def _get(self, tx: Transaction, session_id: str) -> SessionRecord | None:
        rows = tx.run(f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE session_id = ?", (session_id,))
        if not rows:
            return None
        counts = tx.run("SELECT kind, count FROM action_counts WHERE session_id = ?", (session_id,))
        return self._record(rows[0], {str(k): int(c) for k, c in counts})

    def get(self, session_id: str) -> SessionRecord | None:
        with self.transaction(readonly=True) as tx:
            return self._get(tx, session_id)

    def sessions(
        self, *, active: bool | None = None, since: float | None = None, provider: str | None = None
    ) -> list[SessionRecord]:
        """Sessions, oldest first. ``active=True``: not ended/failed; ``False``: ended or failed.
        ``since``: sessions alive at or after that time (started since, ended since, or still running)."""
        where: list[str] = []
        params: list[Any] = []
        if active is True:
            where.append(f"status IN ({_ACTIVE_SQL})")  # the status index: as fast at 100k ended sessions as at 0
        elif active is False:
            where.append(f"status IN ({_TERMINAL_SQL})")
        if since is not None:
            where.append("(intent_at >= ? OR ended_at >= ? OR ended_at IS NULL)")
            params += [since, since]
        if provider is not None:
            where.append("provider = ?")
            params.append(provider)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        with self.transaction(readonly=True) as tx:
            rows = tx.run(
                f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions{clause} ORDER BY intent_at, session_id", params
            )
            ids = [r[0] for r in rows]
            counts: dict[str, dict[str, int]] = {}
            if ids:
                for sid, kind, count in tx.run(
                    "SELECT a.session_id, a.kind, a.count FROM action_counts a JOIN sessions s "
                    f"ON s.session_id = a.session_id{clause.replace('intent_at', 's.intent_at')}",
                    params,
                ):
                    counts.setdefault(str(sid), {})[str(kind)] = int(count)
        return [self._record(r, counts.get(str(r[0]), {})) for r in rows]

    @staticmethod
    def _record(row: Sequence[Any], counts: dict[str, int]) -> SessionRecord:
        v = dict(zip(_SESSION_COLUMNS, row, strict=True))
        return SessionRecord(
            session_id=str(v["session_id"]), provider=str(v["provider"]), platform=str(v["platform"]),
            geometry=str(v["geometry"]), owner=str(v["owner"]), detached=bool(v["detached"]),
            status=str(v["status"]), intent_at=float(v["intent_at"]), created_at=_float(v["created_at"]),
            ready_at=_float(v["ready_at"]), ended_at=_float(v["ended_at"]), expires_at=_float(v["expires_at"]),
            handle=_loads(v["handle"]), spec=_loads(v["spec"]) or {}, labels=_loads(v["labels"]) or {},
            reason=v["reason"], billable_seconds=_float(v["billable_seconds"]), cost_usd=_float(v["cost_usd"]),
            rate_usd_per_hour=_float(v["rate_usd_per_hour"]), rate_source=v["rate_source"],
            action_counts=counts, budget=v["budget"],
            width=None if v["width"] is None else int(v["width"]),
            height=None if v["height"] is None else int(v["height"]),
        )  # fmt: skip

    def ended_totals(self, *, since: float | None = None, by: str | None = None,
                     now: float | None = None) -> dict[str, Totals]:  # fmt: skip
        """The sessions that are over (ended or failed), summed by the database: per group of ``by``
        (``provider``, ``day``: the UTC day of the intent as ``YYYY-MM-DD``, ``budget``: the budget of its
        reservation, ``-`` for none; None: one group ``""``). ``since`` keeps the sessions alive at or after it,
        as :meth:`sessions` does. Costs and billable time follow :func:`deskctl.metering.session_cost` and
        :meth:`SessionRecord.elapsed_billable`; memory is one row per group, whatever the size of the ledger."""
        now = time.time() if now is None else now
        keys = {
            None: "''",
            "provider": "provider",
            "day": self._sql_day("intent_at"),
            "budget": "COALESCE((SELECT MAX(r.budget) FROM reservations r WHERE r.session_id = s.session_id), '-')",
        }
        if by not in keys:
            raise ValueError(f"cannot group sessions by {by!r}")
        where = [f"status IN ({_TERMINAL_SQL})"]
        params: list[Any] = [now, now]
        if since is not None:
            where.append("(ended_at >= ? OR intent_at >= ? OR ended_at IS NULL)")
            params += [since, since]
        rows = self._read(
            f"SELECT {keys[by]} AS k, COUNT(*), "
            "SUM(CASE WHEN billable_seconds IS NOT NULL THEN billable_seconds WHEN created_at IS NULL THEN 0 "
            "WHEN COALESCE(ended_at, ?) > created_at THEN COALESCE(ended_at, ?) - created_at ELSE 0 END), "
            "SUM(cost_usd), SUM(CASE WHEN cost_usd IS NULL AND created_at IS NOT NULL THEN 1 ELSE 0 END) "
            f"FROM sessions s WHERE {' AND '.join(where)} GROUP BY k",
            params,
        )
        out: dict[str, Totals] = {}
        for key, count, billable, cost, unknown in rows:
            name = str(key)
            if by == "day":
                from datetime import UTC, datetime

                name = datetime.fromtimestamp(int(key) * 86400, UTC).strftime("%Y-%m-%d")
            out[name] = Totals(int(count), float(billable or 0.0), float(cost or 0.0), int(unknown or 0))
        return out

    def budget_of_sessions(self, session_ids: Iterable[str]) -> dict[str, str]:
        """The budget each of these sessions was charged to (sessions without a reservation are left out)."""
        wanted = sorted(set(session_ids))
        out: dict[str, str] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            for sid, budget in self._read(
                "SELECT session_id, MAX(budget) FROM reservations "
                f"WHERE session_id IN ({', '.join('?' * len(chunk))}) GROUP BY session_id",
                chunk,
            ):
                out[str(sid)] = str(budget)
        return out

    def events(self, session_id: str) -> list[Event]:
        rows = self._read("SELECT session_id, at, kind, data FROM events WHERE session_id = ? ORDER BY id",
                          (session_id,))  # fmt: skip
        return [Event(str(s), float(a), str(k), _loads(d) or {}) for s, a, k, d in rows]

    # -- budgets ---------------------------------------------------------------------------------------
    def set_budget(self, name: str, *, max_usd: float, window_seconds: float, default_minutes: float = 60.0,
                   unknown_cost: str = "refuse") -> Budget:  # fmt: skip
        """Create or replace the budget ``name``."""
        now = time.time()
        with self.transaction(lock=f"budget:{name}") as tx:
            existing = tx.budget(name)
            if existing is None:
                tx.run(
                    f"INSERT INTO budgets ({', '.join(_BUDGET_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, max_usd, window_seconds, default_minutes, unknown_cost, now, now),
                )
            else:
                tx.run(
                    "UPDATE budgets SET max_usd = ?, window_seconds = ?, default_minutes = ?, unknown_cost = ?, "
                    "updated_at = ? WHERE name = ?",
                    (max_usd, window_seconds, default_minutes, unknown_cost, now, name),
                )
            budget = tx.budget(name)
        assert budget is not None
        return budget

    def get_budget(self, name: str) -> Budget | None:
        with self.transaction(readonly=True) as tx:
            return tx.budget(name)

    def budgets(self) -> list[Budget]:
        rows = self._read(f"SELECT {', '.join(_BUDGET_COLUMNS)} FROM budgets ORDER BY name")
        return [_budget_from_row(r) for r in rows]

    def delete_budget(self, name: str) -> bool:
        with self.transaction(lock=f"budget:{name}") as tx:
            found = bool(tx.run("SELECT name FROM budgets WHERE name = ?", (name,)))
            tx.run("DELETE FROM budgets WHERE name = ?", (name,))
        return found

    def reservations(self, *, budget: str | None = None, session_id: str | None = None) -> list[Reservation]:
        where, params = [], []
        if budget is not None:
            where.append("budget = ?")
            params.append(budget)
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        rows = self._read(f"SELECT {', '.join(_RESERVATION_COLUMNS)} FROM reservations{clause} ORDER BY created_at",
                          params)  # fmt: skip
        return [_reservation_from_row(r) for r in rows]

    def settle_reservation(self, reservation_id: str, *, cost_usd: float | None, at: float | None = None) -> bool:
        """Replace a held amount by the actual cost (None: unknown). False when already settled or absent."""
        at = time.time() if at is None else at
        with self.transaction(readonly=True) as tx:
            rows = tx.run("SELECT budget, status FROM reservations WHERE id = ?", (reservation_id,))
            if not rows or rows[0][1] != "held":
                return False
        with self.transaction(lock=f"budget:{rows[0][0]}") as tx:
            rows = tx.run("SELECT status FROM reservations WHERE id = ?", (reservation_id,))
            if not rows or rows[0][0] != "held":
                return False
            tx.run(
                "UPDATE reservations SET status = 'settled', settled_at = ?, cost_usd = ? WHERE id = ?",
                (at, cost_usd, reservation_id),
            )
        return True


class _SQLiteLedger(Ledger):
    backend = "sqlite"

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        _create_private_file(path)
        super().__init__(url)

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
        conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None, check_same_thread=False)
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

    @contextmanager
    def _begin(self, conn: Any, lock: str | None, readonly: bool) -> Iterator[Any]:
        # IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so two read-then-write
        # transactions never deadlock or interleave: every write transaction is serialised. Readers take a
        # WAL snapshot and never block writers.
        cursor = conn.cursor()
        cursor.execute("BEGIN" if readonly else "BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            if conn.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        else:
            cursor.execute("COMMIT")
        finally:
            cursor.close()

    def _migrate(self) -> None:
        with self.transaction() as tx:
            self._apply_migrations(tx)


class _PostgresLedger(Ledger):
    backend = "postgresql"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise ConfigInvalid(
                "DESKCTL_LEDGER_URL names PostgreSQL but psycopg 3 is not installed",
                remedy="pip install 'psycopg[binary]>=3.1' (the postgres extra: pip install '.[postgres]' in a deskctl "
                       "checkout)",
            ) from exc
        self._psycopg = psycopg
        parts = urlsplit(url)
        if parts.password:
            register_secret(parts.password)
        super().__init__(url)

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        return (self._psycopg.Error, OSError)

    def _serial_pk(self) -> str:
        return "BIGSERIAL PRIMARY KEY"

    def _sql_day(self, column: str) -> str:
        return f"CAST(FLOOR({column} / 86400) AS BIGINT)"  # a plain CAST would round

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _connect(self) -> Any:
        return self._psycopg.connect(self.url, autocommit=True, connect_timeout=15)

    def _is_broken(self, conn: Any) -> bool:
        idle = self._psycopg.pq.TransactionStatus.IDLE
        return super()._is_broken(conn) or conn.info.transaction_status != idle

    @contextmanager
    def _begin(self, conn: Any, lock: str | None, readonly: bool) -> Iterator[Any]:
        with conn.transaction(), conn.cursor() as cursor:
            if lock is not None:
                # A transaction-scoped advisory lock: released at commit or rollback, even if we die.
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            yield cursor

    def _migrate(self) -> None:
        with self.transaction(lock="deskctl:schema") as tx:
            self._apply_migrations(tx)


#: SQLite result codes that mean the file itself is damaged (not busy, not missing)
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR")


def sqlite_file_damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the SQLite file is unreadable (malformed, not a database, an I/O error)."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    if any(name.startswith(code) for code in _DAMAGED):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text or "disk i/o error" in text


def move_aside_command(path: Path) -> str:
    """A shell command that moves the ledger file ``path`` aside as ``PATH.bad``, with its ``-wal`` and ``-shm``
    as ``PATH.bad-wal`` and ``PATH.bad-shm`` (so SQLite still reads the copy with its WAL)."""
    quoted = shlex.quote(str(path))
    return f"for s in '' -wal -shm; do [ ! -e {quoted}$s ] || mv {quoted}$s {quoted}.bad$s; done"


def _sqlite_remedy(path: Path, exc: BaseException) -> str:
    if sqlite_file_damaged(exc):
        return (f"the ledger file {path} is damaged: `deskctl ledger check --repair` copies what it can read into "
                f"a fresh file and keeps the bad one aside; or move it aside by hand: {move_aside_command(path)} "
                "(`deskctl reap --everything` finds desktops by label without a ledger)")
    return (f"check that {path} (and its directory) is on a local file system and writable; "
            "`deskctl ledger check` reports its state")


def _create_private_file(path: Path) -> None:
    """Make ``path`` an empty file of mode 0600 when it does not exist, without ever holding a descriptor of it.

    A fresh temporary file is written and closed, then hard-linked into place (which never replaces a file
    another process made meanwhile). Closing a descriptor of the ledger itself would drop this process's SQLite
    locks on it (see the module doc), so the file is only stat-ed here. Where hard links are refused, SQLite
    makes the file (with the umask's mode)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            return
    except OSError:
        return  # SQLite reports what is wrong when it opens the file
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
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


def default_ledger_url() -> str:
    """``$DESKCTL_LEDGER_URL``, else the SQLite file under :func:`deskctl.paths.home_dir`."""
    env = os.environ.get("DESKCTL_LEDGER_URL", "").strip()
    if env:
        return env
    from deskctl.paths import home_dir

    return "sqlite://" + str((home_dir() / "ledger.sqlite3").absolute())


def check_ledger_url(url: str | None = None) -> tuple[str, str]:
    """``(backend, url)`` of the ledger ``url`` names (default: :func:`default_ledger_url`), without opening it.

    A malformed URL is :class:`~deskctl.errors.ConfigInvalid` (exit 2) with its password redacted, so a command
    can refuse it before it writes anything. ``backend`` is ``"sqlite"`` (``url`` then is the file's path) or
    ``"postgresql"``."""
    url = default_ledger_url() if url is None else url.strip()
    remedy = "set DESKCTL_LEDGER_URL to sqlite:///path/to/file or postgresql://user@host:port/db"
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme and re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", url):  # sqlite:x, postgresql:x: a URL gone wrong
        raise ConfigInvalid(f"ledger URL {redact(url)!r} is not of the form scheme://...", remedy=remedy)
    if scheme in ("postgresql", "postgres"):
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- a port that is no number raises here, not in the driver
        except ValueError as exc:
            raise ConfigInvalid(f"ledger URL {redact(url)!r} is malformed: {exc}", remedy=remedy) from None
        if scheme == "postgres":
            url = urlunsplit(("postgresql", *parts[1:]))
        return "postgresql", url
    if scheme == "sqlite":
        rest = url[len("sqlite://"):]
        if not rest.startswith("/") or not rest.strip("/"):
            raise ConfigInvalid(f"ledger URL {redact(url)!r} is not of the form sqlite:///path/to/file",
                                remedy=remedy)
        return "sqlite", "/" + rest.lstrip("/")
    if scheme == "":
        if not url:
            raise ConfigInvalid("empty ledger URL", remedy=remedy)
        return "sqlite", str(Path(url).expanduser().absolute())
    raise ConfigInvalid(
        f"ledger URL {redact(url)!r} has an unknown scheme {scheme!r}; use sqlite:///path or postgresql://...",
        remedy=remedy,
    )



def ledger_id(url: str | None = None) -> str:
    """A short, stable name of the ledger ``url`` (default: :func:`default_ledger_url`) for the ``deskctl.ledger``
    label: 16 hex digits of a hash of its file path, or of its PostgreSQL server and database (never of a user
    or password), so the reaper finds this ledger's desktops by label even when the ledger cannot be read."""
    import hashlib

    backend, target = check_ledger_url(url)
    if backend == "postgresql":
        parts = urlsplit(target)
        host = parts.hostname or ""
        query = "&".join(sorted(q for q in parts.query.split("&") if q.startswith(("host=", "port="))))
        target = f"postgresql://{host}:{parts.port or ''}{parts.path}?{query}"
    else:
        target = "sqlite://" + target
    return hashlib.sha256(target.encode()).hexdigest()[:16]

def open_ledger(url: str | None = None) -> Ledger:
    """Open (creating and migrating as needed) the ledger at ``url``.

    ``None``: ``$DESKCTL_LEDGER_URL``, else ``home_dir()/"ledger.sqlite3"``. ``sqlite:///path`` or a bare path:
    that SQLite file. ``postgresql://user:pass@host:port/db`` (or ``postgres://``): PostgreSQL.
    """
    backend, target = check_ledger_url(url)
    if backend == "postgresql":
        return _PostgresLedger(target)
    path = Path(target)
    if path.is_dir():
        raise ConfigInvalid(f"ledger file {path} is a directory", remedy="point DESKCTL_LEDGER_URL at a file")
    return _SQLiteLedger(path, "sqlite://" + str(path))

