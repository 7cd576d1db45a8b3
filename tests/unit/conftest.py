"""Fixtures of the unit tests.

``ledger_url`` runs a test once per ledger backend: a SQLite file in a temp dir, and a fresh database in a
private, real PostgreSQL cluster (started once per test run from Debian's binaries, see ``_pg.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from unit._pg import PostgresCluster, find_pg_bin


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    if not cluster.external and find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries are not installed (scripts/setup --dev installs them)")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> Iterator[str]:
    url = pg_cluster.new_database()
    try:
        yield url
    finally:
        pg_cluster.drop_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'ledger.sqlite3'}"
    url: str = request.getfixturevalue("pg_url")
    return url
