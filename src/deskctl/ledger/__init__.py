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
(:func:`_create_private_file`); ``-wal`` and ``-shm`` take the mode of the database file. A process that ends in
``os._exit`` (the ``deskctl`` command) leaves its connection to the exit while the WAL is small
(:meth:`Ledger.close_for_exit`): no checkpoint and no WAL deleted and made again per call; the next process
recovers the WAL.

Every text written is passed through :func:`deskctl._redact.redact`: secrets never reach the ledger.

Every failure of the database is a :class:`~deskctl.errors.InfrastructureError` with code
``ledger.unavailable`` (exit 20); a malformed URL or a missing driver is :class:`~deskctl.errors.ConfigInvalid`.

The package's modules: :mod:`~deskctl.ledger._records` (the record types), :mod:`~deskctl.ledger._schema` (the
migrations and row conversions), :mod:`~deskctl.ledger._core` (pool, transactions, fork handling, migration),
:mod:`~deskctl.ledger._queries` (:class:`Ledger`: every record and query), :mod:`~deskctl.ledger._sqlite` (with
:mod:`~deskctl.ledger._driver`, which imports the SQLite driver without functools),
:mod:`~deskctl.ledger._postgres` and :mod:`~deskctl.ledger._open` (URLs and :func:`open_ledger`). Import from
``deskctl.ledger``: the modules are private. The statuses are :class:`deskctl.lifecycle.SessionStatus`'s.
"""

from __future__ import annotations

from deskctl.ledger._core import Transaction
from deskctl.ledger._open import check_ledger_url, default_ledger_url, ledger_id, open_ledger
from deskctl.ledger._queries import Ledger
from deskctl.ledger._records import Budget, Event, ModelTotals, ModelUsage, Reservation, SessionRecord, Totals
from deskctl.ledger._schema import SCHEMA_VERSION
from deskctl.ledger._sqlite import move_aside_command, sqlite_file_damaged
from deskctl.lifecycle import ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES

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
