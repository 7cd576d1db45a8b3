"""Fixtures of the chaos tests: the ledger under test, once a SQLite file and once a database in a private, real
PostgreSQL cluster (the one the unit tests start, see ``unit/_pg.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from unit.conftest import pg_cluster, pg_url  # the fixtures, registered for this folder

__all__ = ["chaos_ledger_url", "pg_cluster", "pg_url"]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def chaos_ledger_url(request: pytest.FixtureRequest, deskctl_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ledger every process of the test uses (set as DESKCTL_LEDGER_URL, which they all inherit)."""
    if request.param == "sqlite":
        url = f"sqlite://{deskctl_home / 'ledger.sqlite3'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    monkeypatch.setenv("DESKCTL_LEDGER_URL", url)
    return url
