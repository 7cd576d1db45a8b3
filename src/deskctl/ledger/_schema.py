"""The ledger's schema: the migrations by version (run forward on open), the column lists, and the conversion
of rows to records. A migration is never edited once released: a new version is added."""

from __future__ import annotations

from deskctl._jsonc import dumps, loads  # json's own codec, without the json package's import (re)
from deskctl._redact import redact
from deskctl.ledger._records import Budget, Reservation, SessionRecord
from deskctl.lifecycle import ACTIVE_STATUSES, TERMINAL_STATUSES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# SQL lists of the two sets: ``status IN (...)`` can use the status index, ``NOT IN`` cannot
_TERMINAL_SQL = ", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))
_ACTIVE_SQL = ", ".join(f"'{s}'" for s in sorted(ACTIVE_STATUSES))

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


# -- schema 6: snapshots (deskctl.episodes) ----------------------------------------------------------------
# One row per snapshot of a desktop (Desktop.snapshot): who made it, from which session, what the provider keeps
# (resource_id: a Docker image), its size and the storage rate where the provider bills it, and its expiry (the
# reaper deletes it then, like a desktop). deskctl.episodes.store reads and writes it; this section is
# self-contained so that it moves as one piece.
def _snapshot_migration() -> tuple[str, ...]:
    return (
        """CREATE TABLE snapshots (
            snapshot_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            session_id TEXT NOT NULL,
            provider TEXT NOT NULL,
            owner TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION,
            deleted_at DOUBLE PRECISION,
            resource_id TEXT,
            size_bytes BIGINT,
            usd_per_gb_month DOUBLE PRECISION,
            cost_usd DOUBLE PRECISION,
            restores BIGINT NOT NULL,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX snapshots_name ON snapshots (name, status)",
        "CREATE INDEX snapshots_status ON snapshots (status, expires_at)",
    )


_MIGRATIONS[6] = _snapshot_migration()
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
    return redact(dumps(value, sort_keys=True))


def _loads(text: str | None) -> Any:
    return None if text is None else loads(text)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


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


def _session_from_row(row: Sequence[Any], counts: dict[str, int]) -> SessionRecord:
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
