"""``Ledger.transaction()`` on both backends (a SQLite file and a real PostgreSQL): committed on a normal exit,
rolled back on any exception (which goes on as it was, unless it is the driver's: then ``ledger.unavailable``),
nested in the same thread on the same connection as the backend nests it, and the connection back in the pool
whatever happened."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deskctl.errors import InfrastructureError
from deskctl.ledger import Ledger, open_ledger


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    book = open_ledger(ledger_url)
    with book.transaction() as tx:
        tx.run("CREATE TABLE scratch (n INTEGER)")
    try:
        yield book
    finally:
        book.close()


def _numbers(ledger: Ledger) -> list[int]:
    with ledger.transaction(readonly=True) as tx:
        return [int(row[0]) for row in tx.run("SELECT n FROM scratch ORDER BY n")]


def test_a_normal_exit_commits(ledger: Ledger) -> None:
    with ledger.transaction() as tx:
        tx.run("INSERT INTO scratch (n) VALUES (?)", (1,))
        assert tx.change("UPDATE scratch SET n = ? WHERE n = ?", (2, 1)) == 1
    assert _numbers(ledger) == [2]


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()])
def test_an_exception_rolls_back_and_goes_on_as_it_was(ledger: Ledger, error: BaseException) -> None:
    with pytest.raises(type(error)) as caught, ledger.transaction() as tx:
        tx.run("INSERT INTO scratch (n) VALUES (?)", (1,))
        raise error
    assert caught.value is error
    assert _numbers(ledger) == []
    assert ledger._in_thread.conn is None and len(ledger._idle) == 1  # the connection is back, fit for the next
    with ledger.transaction() as tx:
        tx.run("INSERT INTO scratch (n) VALUES (?)", (3,))
    assert _numbers(ledger) == [3]


def test_a_failure_of_the_driver_in_the_body_is_ledger_unavailable_and_rolls_back(ledger: Ledger) -> None:
    with pytest.raises(InfrastructureError) as caught, ledger.transaction() as tx:
        tx.run("INSERT INTO scratch (n) VALUES (?)", (1,))
        tx.run("SELECT * FROM no_such_table")
    assert caught.value.code == "ledger.unavailable" and caught.value.exit_code == 20
    assert "failed while writing" in str(caught.value) and "no_such_table" in str(caught.value)
    assert isinstance(caught.value.__cause__, ledger._driver_errors())
    assert _numbers(ledger) == []
    with pytest.raises(InfrastructureError, match="failed while reading"), ledger.transaction(readonly=True) as tx:
        tx.run("SELECT * FROM no_such_table")
    assert ledger._in_thread.conn is None


def test_a_transaction_of_a_closed_ledger_is_refused_as_before(ledger_url: str) -> None:
    book = open_ledger(ledger_url)
    book.close()
    with pytest.raises(Exception, match="the ledger is closed") as caught, book.transaction():
        pass
    assert not isinstance(caught.value, InfrastructureError)


def test_a_nested_transaction_uses_the_same_connection_as_the_backend_nests_it(ledger: Ledger) -> None:
    if ledger.backend == "sqlite":  # BEGIN inside a transaction: SQLite refuses it, and the whole is rolled back
        with pytest.raises(InfrastructureError, match="within a transaction"), ledger.transaction() as outer:
            outer.run("INSERT INTO scratch (n) VALUES (?)", (1,))
            with ledger.transaction():
                pass
        assert _numbers(ledger) == []
    else:  # PostgreSQL: a savepoint; an exception in it undoes only its own writes
        with ledger.transaction() as outer:
            outer.run("INSERT INTO scratch (n) VALUES (?)", (1,))
            with pytest.raises(ValueError), ledger.transaction() as inner:
                inner.run("INSERT INTO scratch (n) VALUES (?)", (2,))
                raise ValueError("inner")
            with ledger.transaction() as inner:
                inner.run("INSERT INTO scratch (n) VALUES (?)", (3,))
        assert _numbers(ledger) == [1, 3]
    assert ledger._in_thread.conn is None and len(ledger._idle) == 1
