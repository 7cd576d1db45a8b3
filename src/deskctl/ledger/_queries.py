"""The ledger's questions and answers: every record a session's life writes (intent, create, ready, destroying,
end, events, action counts, model spend) and every query of sessions, totals and budgets, over either backend."""

from __future__ import annotations

import time

from deskctl._redact import redact
from deskctl.ledger._core import LedgerBase, Transaction
from deskctl.ledger._records import Budget, Event, ModelTotals, ModelUsage, Reservation, SessionRecord, Totals
from deskctl.ledger._schema import (
    _ACTIVE_SQL,
    _BUDGET_COLUMNS,
    _RESERVATION_COLUMNS,
    _SESSION_COLUMNS,
    _TERMINAL_SQL,
    _budget_from_row,
    _dumps,
    _float,
    _loads,
    _reservation_from_row,
)
from deskctl.lifecycle import STATUSES, TERMINAL_STATUSES, SessionStatus, check_move

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = ["Ledger"]


class Ledger(LedgerBase):
    """The session ledger. Obtain one with :func:`open_ledger`; safe to use from several threads and processes.

    Methods that move a session through its life also append the matching :class:`Event` (``intent``,
    ``create_sent``, ``created``, ``ready``, ``ended``), in the same transaction.
    """

    # An event's data is made into its (scrubbed) JSON text by the caller before the transaction begins: a write
    # transaction holds the ledger's one write lock, for which every other writing process waits (SQLite's busy
    # handler sleeps 1, 2, 5, ... 100 ms between its tries), and the first scrub of a process compiles its patterns.
    def _event(self, tx: Transaction, session_id: str, kind: str, text: str, at: float) -> None:
        tx.run("INSERT INTO events (session_id, at, kind, data) VALUES (?, ?, ?, ?)", (session_id, at, kind, text))

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
        text = _dumps({"owner": record.owner})
        with self.transaction() as tx:
            tx.run(
                f"INSERT INTO sessions ({', '.join(_SESSION_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_SESSION_COLUMNS))})",
                values,
            )
            for kind, count in record.action_counts.items():
                self._add_action(tx, record.session_id, kind, count)
            self._event(tx, record.session_id, "intent", text, record.intent_at)

    def _update(self, session_id: str, assignments: dict[str, Any], event: tuple[str, dict[str, Any], float]) -> None:
        kind, data, at = event
        text = _dumps(data)
        with self.transaction() as tx:
            self._update_in(tx, session_id, assignments)
            self._event(tx, session_id, kind, text, at)

    def _update_in(self, tx: Transaction, session_id: str, assignments: dict[str, Any]) -> None:
        # one statement under the write lock: the rows it matched say whether the session exists
        columns = ", ".join(f"{name} = ?" for name in assignments)
        if not tx.change(f"UPDATE sessions SET {columns} WHERE session_id = ?", (*assignments.values(), session_id)):
            from deskctl.errors import NotFound

            raise NotFound(f"no session {session_id!r} in the ledger")

    def record_create_sent(self, session_id: str, at: float) -> None:
        """The create request is about to go out: billable time starts at ``at``."""
        self._update(session_id, {"status": SessionStatus.CREATING.value, "created_at": at}, ("create_sent", {}, at))

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
            {"status": SessionStatus.READY.value, "ready_at": at, "width": width, "height": height},
            ("ready", {"width": width, "height": height}, at),
        )

    def record_status(self, session_id: str, status: str, *, reason: str | None = None) -> None:
        """Move a session to ``status`` (for example ``leaked``) without ending its meter. ``ValueError`` for an
        unknown status or a move that :data:`deskctl.lifecycle.TRANSITIONS` does not allow (an end is never
        reopened)."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        assignments: dict[str, Any] = {"status": status}
        if reason is not None:
            assignments["reason"] = redact(reason)
        text = _dumps({"reason": reason} if reason else {})
        with self.transaction() as tx:
            rows = tx.run("SELECT status FROM sessions WHERE session_id = ?", (session_id,))
            if rows:
                check_move(str(rows[0][0]), status)
            self._update_in(tx, session_id, assignments)
            self._event(tx, session_id, status, text, time.time())

    def record_destroying(self, session_id: str, *, reason: str, by: str) -> None:
        """Written before a destroy is sent: until the end is recorded the ledger says ``destroying``, never
        ``ready``, so a process killed between the destroy and the end record (or a ledger that could not take
        it) leaves a row that ``deskctl reap`` finishes. ``by`` is the ``host:pid`` doing it."""
        reason = redact(reason)
        text = _dumps({"reason": reason, "by": by})
        with self.transaction() as tx:
            # one statement under the write lock: an end (the reaper's, another process's) is never reopened
            if not tx.change(
                f"UPDATE sessions SET status = ?, reason = ? WHERE session_id = ? AND status NOT IN ({_TERMINAL_SQL})",
                (SessionStatus.DESTROYING.value, reason, session_id),
            ):
                if not tx.run("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)):
                    from deskctl.errors import NotFound

                    raise NotFound(f"no session {session_id!r} in the ledger")
                return  # over already: nothing to write
            self._event(tx, session_id, "destroying", text, time.time())

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
        text = _dumps(data or {})
        with self.transaction() as tx:
            self._event(tx, session_id, kind, text, time.time())

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
        reason = redact(reason)
        text = _dumps({"status": status, "reason": reason, "billable_seconds": billable_seconds,
                       "cost_usd": cost_usd})
        with self.transaction() as tx:
            if only_active:
                rows = tx.run("SELECT status FROM sessions WHERE session_id = ?", (session_id,))
                if rows and str(rows[0][0]) in TERMINAL_STATUSES:
                    return False
            self._update_in(
                tx, session_id,
                {"status": status, "reason": reason, "ended_at": ended_at,
                 "billable_seconds": billable_seconds, "cost_usd": cost_usd},
            )  # fmt: skip
            self._event(tx, session_id, "ended", text, ended_at)
            if status in TERMINAL_STATUSES:
                tx.run(
                    "UPDATE reservations SET status = 'settled', settled_at = ?, cost_usd = ? "
                    "WHERE session_id = ? AND status = 'held'",
                    (ended_at, cost_usd, session_id),
                )
        return True

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

    def attach_state(self, session_id: str, *, event_kind: str) -> tuple[list[Event], tuple[float, int]]:
        """What attaching to a session reads beside its row, in one snapshot: its events of ``event_kind``
        (oldest first) and its model spend (sum of known costs, number of calls of unknown price)."""
        with self.transaction(readonly=True) as tx:
            rows = tx.run("SELECT session_id, at, kind, data FROM events WHERE session_id = ? AND kind = ? "
                          "ORDER BY id", (session_id, event_kind))  # fmt: skip
            spend = tx.model_spend([session_id]).get(session_id, (0.0, 0))
        return [Event(str(s), float(a), str(k), _loads(d) or {}) for s, a, k, d in rows], spend

    def status_and_cost(self, session_id: str) -> tuple[str, float | None] | None:
        """The status and recorded cost of a session (None when the ledger does not know it): one row, without
        the action counts :meth:`get` reads too."""
        rows = self._read("SELECT status, cost_usd FROM sessions WHERE session_id = ?", (session_id,))
        if not rows:
            return None
        status, cost = rows[0]
        return str(status), None if cost is None else float(cost)

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
