"""The PostgreSQL backend (psycopg 3, imported only when used), for teams whose CI runners share one ledger and
one budget: transaction-scoped advisory locks serialise what SQLite's write lock serialises."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from deskctl._redact import register_secret
from deskctl.errors import ConfigInvalid
from deskctl.ledger._queries import Ledger

__all__: list[str] = []


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
