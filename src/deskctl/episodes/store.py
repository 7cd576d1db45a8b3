"""The ledger's ``snapshots`` table (schema 6, :func:`deskctl.ledger._snapshot_migration`): every read and write
of it, through :meth:`deskctl.ledger.Ledger.transaction`, so that the table moves with the ledger as one piece."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.ledger import Ledger

__all__ = ["SNAPSHOT_STATUSES", "Snapshot", "delete_row", "find", "get", "insert", "list_snapshots",
           "record_restore", "set_status"]

#: ready: it exists and can be restored; deleting: the delete was sent; deleted: confirmed gone; leaked: the delete
#: could not be confirmed (`deskctl snapshot rm` or the reaper tries again)
SNAPSHOT_STATUSES = ("ready", "deleting", "deleted", "leaked")
_LIVE = ("ready", "deleting", "leaked")
_COLUMNS = ("snapshot_id", "name", "session_id", "provider", "owner", "status", "created_at", "expires_at",
            "deleted_at", "resource_id", "size_bytes", "usd_per_gb_month", "cost_usd", "restores", "data")


@dataclass
class Snapshot:
    """A snapshot of a desktop as the ledger records it. ``data`` is what the provider needs to restore it (for
    Docker: the image, the engine, the applications to relaunch); it is JSON and holds no secret."""

    snapshot_id: str
    name: str
    session_id: str
    provider: str
    owner: str
    status: str = "ready"
    created_at: float = field(default_factory=time.time)
    expires_at: float | None = None
    deleted_at: float | None = None
    resource_id: str | None = None
    size_bytes: int | None = None
    #: what the provider bills per GB and month of storage (None: unknown or not billed separately)
    usd_per_gb_month: float | None = None
    #: storage cost so far (None: unknown); 0 where the provider does not bill it
    cost_usd: float | None = None
    restores: int = 0
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.status in _LIVE

    def storage_cost(self, now: float | None = None) -> float | None:
        """Storage cost from creation until deletion (or ``now``), where the rate and size are known."""
        if self.usd_per_gb_month is None or self.size_bytes is None:
            return self.cost_usd
        end = self.deleted_at or (now if now is not None else time.time())
        months = max(0.0, end - self.created_at) / (30 * 86400)
        return self.usd_per_gb_month * self.size_bytes / 1e9 * months

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cost_usd"] = self.storage_cost()
        return out


def _row(row: tuple[Any, ...]) -> Snapshot:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["data"] = json.loads(values["data"] or "{}")
    values["restores"] = int(values["restores"] or 0)
    for key in ("size_bytes",):
        if values[key] is not None:
            values[key] = int(values[key])
    return Snapshot(**values)


def insert(ledger: Ledger, snap: Snapshot) -> None:
    values = asdict(snap)
    values["data"] = json.dumps(snap.data, sort_keys=True)
    with ledger.transaction() as tx:
        tx.run(f"INSERT INTO snapshots ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
               [values[c] for c in _COLUMNS])


def get(ledger: Ledger, snapshot_id: str) -> Snapshot | None:
    with ledger.transaction(readonly=True) as tx:
        rows = tx.run(f"SELECT {', '.join(_COLUMNS)} FROM snapshots WHERE snapshot_id = ?", (snapshot_id,))
    return _row(rows[0]) if rows else None


def find(ledger: Ledger, name: str) -> Snapshot | None:
    """The live snapshot called ``name`` (the newest, should there be several), else one with that id."""
    with ledger.transaction(readonly=True) as tx:
        rows = tx.run(f"SELECT {', '.join(_COLUMNS)} FROM snapshots WHERE name = ? AND status IN ('ready') "
                      "ORDER BY created_at DESC", (name,))
    if rows:
        return _row(rows[0])
    snap = get(ledger, name)
    return snap if snap is not None and snap.status == "ready" else None


def list_snapshots(ledger: Ledger, *, include_deleted: bool = False, session_id: str | None = None,
                   expired_before: float | None = None) -> list[Snapshot]:
    where: list[str] = []
    params: list[Any] = []
    if not include_deleted:
        where.append(f"status IN ({', '.join(repr(s) for s in _LIVE)})")
    if session_id is not None:
        where.append("session_id = ?")
        params.append(session_id)
    if expired_before is not None:
        where.append("expires_at IS NOT NULL AND expires_at <= ?")
        params.append(expired_before)
    sql = f"SELECT {', '.join(_COLUMNS)} FROM snapshots"
    if where:
        sql += " WHERE " + " AND ".join(where)
    with ledger.transaction(readonly=True) as tx:
        rows = tx.run(sql + " ORDER BY created_at", params)
    return [_row(r) for r in rows]


def set_status(ledger: Ledger, snapshot_id: str, status: str, *, at: float | None = None,
               cost_usd: float | None = None) -> None:
    assert status in SNAPSHOT_STATUSES, status
    with ledger.transaction() as tx:
        if status == "deleted":
            tx.run("UPDATE snapshots SET status = ?, deleted_at = ?, cost_usd = ? WHERE snapshot_id = ?",
                   (status, at or time.time(), cost_usd, snapshot_id))
        else:
            tx.run("UPDATE snapshots SET status = ? WHERE snapshot_id = ?", (status, snapshot_id))


def record_restore(ledger: Ledger, snapshot_id: str) -> None:
    with ledger.transaction() as tx:
        tx.run("UPDATE snapshots SET restores = restores + 1 WHERE snapshot_id = ?", (snapshot_id,))


def delete_row(ledger: Ledger, snapshot_id: str) -> None:
    """Forget a snapshot row whose resource was never made (a failed snapshot)."""
    with ledger.transaction() as tx:
        tx.run("DELETE FROM snapshots WHERE snapshot_id = ?", (snapshot_id,))
