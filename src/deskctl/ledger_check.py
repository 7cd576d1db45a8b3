"""Check the ledger's health, and repair a damaged SQLite ledger (``deskctl ledger check [--repair]``).

A check never writes: for SQLite it opens the file through SQLite only (never by hand, see
:mod:`deskctl.ledger`), runs ``PRAGMA integrity_check``, reads the journal mode, the schema version and the row
counts, and looks at the size of ``-wal``; for PostgreSQL it connects and reads the schema version and every
table. A repair (SQLite only) moves the damaged file (with its ``-wal`` and ``-shm``) aside under a UTC time
stamp, copies every row it can still read into a fresh ledger at the same path, and checks the result. It
refuses while another process has the file open: it would go on writing into the file moved aside.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from deskctl._redact import redact
from deskctl.errors import InfrastructureError
from deskctl.ledger import SCHEMA_VERSION, check_ledger_url, move_aside_command, open_ledger

__all__ = ["CheckReport", "Finding", "RepairReport", "check_ledger", "processes_using", "repair_ledger"]

#: the tables a ledger holds, in the order a repair copies them
TABLES = ("sessions", "action_counts", "events", "budgets", "reservations", "model_usage", "snapshots")


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok | warn | fail
    detail: str


@dataclass
class CheckReport:
    backend: str
    url: str  # secrets redacted
    findings: list[Finding] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(f.status != "fail" for f in self.findings)

    def add(self, name: str, status: str, detail: str) -> None:
        self.findings.append(Finding(name, status, redact(detail)))

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "url": self.url, "ok": self.ok, "rows": dict(self.rows),
                "findings": [asdict(f) for f in self.findings]}  # fmt: skip


@dataclass
class RepairReport:
    path: str
    moved_aside: list[str] = field(default_factory=list)
    copied: dict[str, int] = field(default_factory=dict)
    #: tables whose rows could not all be read, with the error that stopped the copy
    unreadable: dict[str, str] = field(default_factory=dict)
    after: CheckReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "moved_aside": list(self.moved_aside), "copied": dict(self.copied),
                "unreadable": dict(self.unreadable), "after": self.after.to_dict() if self.after else None}


def _sqlite_uri(path: Path, mode: str) -> str:
    return f"file:{quote(str(path))}?mode={mode}"


def check_ledger(url: str | None = None) -> CheckReport:
    """The health of the ledger ``url`` (default: ``$DESKCTL_LEDGER_URL``, else the SQLite file). Never writes."""
    backend, target = check_ledger_url(url)
    report = CheckReport(backend, redact(target if backend == "postgresql" else "sqlite://" + target))
    if backend == "postgresql":
        _check_postgres(target, report)
    else:
        _check_sqlite(Path(target), report)
    return report


def _check_sqlite(path: Path, report: CheckReport) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        report.add("file", "ok", f"{path} does not exist yet (the first command that records a session makes it)")
        return
    except OSError as exc:
        report.add("file", "fail", f"{path}: {exc.strerror or exc}")
        return
    mode = info.st_mode & 0o777
    report.add("file", "warn" if mode & 0o077 else "ok",
               f"{path}: {info.st_size} bytes, mode {mode:o}" + (" (readable by others)" if mode & 0o077 else ""))
    wal = Path(f"{path}-wal")
    try:
        conn = sqlite3.connect(_sqlite_uri(path, "rw"), uri=True, timeout=30.0, isolation_level=None)
    except sqlite3.Error as exc:
        report.add("open", "fail", f"SQLite cannot open {path}: {exc}")
        return
    try:
        try:
            problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)")]
        except sqlite3.Error as exc:
            report.add("integrity", "fail", f"PRAGMA integrity_check failed: {exc}")
            return
        if problems == ["ok"]:
            report.add("integrity", "ok", "PRAGMA integrity_check: ok")
        else:
            report.add("integrity", "fail", "PRAGMA integrity_check: " + "; ".join(problems))
        try:
            journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        except sqlite3.Error as exc:
            report.add("journal", "fail", f"cannot read the journal mode: {exc}")
            return
        frames = 0
        if wal.exists():
            frames = max(0, (wal.stat().st_size - 32) // (page_size + 24))
        report.add("journal", "ok" if journal == "wal" else "warn",
                   f"journal_mode {journal}; -wal {'holds ' + str(frames) + ' frame(s)' if wal.exists() else 'absent'}")
        try:
            rows = conn.execute("SELECT version FROM schema_version").fetchall()
        except sqlite3.Error as exc:
            report.add("schema", "fail", f"no schema version: {exc}")
            return
        _schema_finding(report, int(rows[0][0]) if rows else 0)
        for table in TABLES:
            try:
                report.rows[table] = int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            except sqlite3.Error as exc:
                report.add(f"table {table}", "fail", f"cannot count {table}: {exc}")
    finally:
        conn.close()


def _schema_finding(report: CheckReport, version: int) -> None:
    if version == SCHEMA_VERSION:
        report.add("schema", "ok", f"schema version {version}")
    elif version < SCHEMA_VERSION:
        report.add("schema", "warn", f"schema version {version}; the next deskctl command migrates it to "
                                     f"{SCHEMA_VERSION}")  # fmt: skip
    else:
        report.add("schema", "fail", f"schema version {version} is newer than this deskctl understands "
                                     f"({SCHEMA_VERSION}): upgrade deskctl")  # fmt: skip


def _check_postgres(url: str, report: CheckReport) -> None:
    try:
        import psycopg
    except ImportError:
        report.add("driver", "fail", "psycopg 3 is not installed (pip install 'psycopg[binary]>=3.1')")
        return
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=15)
    except (psycopg.Error, OSError) as exc:
        report.add("connect", "fail", f"cannot connect: {exc}")
        return
    with conn:
        report.add("connect", "ok", f"connected to PostgreSQL {conn.info.server_version}")
        try:
            rows = conn.execute("SELECT version FROM schema_version").fetchall()
        except psycopg.Error as exc:
            report.add("schema", "fail", f"no schema version: {str(exc).strip()}")
            return
        _schema_finding(report, int(rows[0][0]) if rows else 0)
        for table in TABLES:
            try:
                count = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
                report.rows[table] = int(count[0]) if count else 0
            except psycopg.Error as exc:
                report.add(f"table {table}", "fail", f"cannot read {table}: {str(exc).strip()}")


def processes_using(path: Path) -> list[int]:
    """The ids of the other processes (of this user, as /proc shows them) that have ``path``, its ``-wal`` or its
    ``-shm`` open. Empty where /proc is not there."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue  # gone meanwhile, or not ours to look at
        if any(link.removesuffix(" (deleted)") in names for link in links):
            found.append(int(entry.name))
    return sorted(found)


def repair_ledger(url: str | None = None, *, now: float | None = None) -> RepairReport:
    """Move a damaged SQLite ledger aside and copy what can be read of it into a fresh one at the same path.

    Refuses (``ledger.unavailable``, exit 20) for PostgreSQL (repair it with the server's own tools) and while
    another process has the file open."""
    backend, target = check_ledger_url(url)
    if backend != "sqlite":
        raise InfrastructureError(
            "deskctl repairs only a SQLite ledger", code="ledger.unavailable",
            remedy="repair a PostgreSQL ledger with the server's tools; `deskctl ledger check` reports its state",
        )  # fmt: skip
    path = Path(target)
    busy = processes_using(path)
    if busy:
        raise InfrastructureError(
            f"the ledger {path} is open in process(es) {', '.join(map(str, busy))}: a repair now would lose what "
            "they write", code="ledger.unavailable",
            remedy="stop those processes (deskctl commands, views, MCP servers, library users) and run it again",
        )  # fmt: skip
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    aside = Path(f"{path}.bad-{stamp}")
    report = RepairReport(str(path))
    for suffix in ("", "-wal", "-shm"):  # the WAL keeps its name beside the copy, so SQLite still reads it
        source = Path(f"{path}{suffix}")
        if source.exists():
            try:
                os.rename(source, f"{aside}{suffix}")
            except OSError as exc:
                raise InfrastructureError(
                    f"cannot move {source} aside: {exc.strerror or exc}", code="ledger.unavailable",
                    remedy=f"move it aside by hand: {move_aside_command(path)}",
                ) from None
            report.moved_aside.append(f"{aside}{suffix}")
    salvaged = _read_what_can_be_read(aside, report) if report.moved_aside else {}
    with open_ledger("sqlite://" + str(path)) as fresh, fresh.transaction() as tx:
        for table, (columns, rows) in salvaged.items():
            wanted = [c for c in columns if c in _columns(tx, table)]
            keep = [columns.index(c) for c in wanted]
            for row in rows:
                tx.run(f"INSERT OR IGNORE INTO {table} ({', '.join(wanted)}) VALUES ({', '.join('?' * len(wanted))})",
                       [row[i] for i in keep])  # fmt: skip
            report.copied[table] = len(rows)
    report.after = check_ledger("sqlite://" + str(path))
    return report


def _columns(tx: Any, table: str) -> list[str]:
    return [str(r[1]) for r in tx.run(f"PRAGMA table_info({table})")]


def _read_what_can_be_read(path: Path, report: RepairReport) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every row of every ledger table of the file at ``path`` that SQLite can still read, table by table; a
    table stops at its first unreadable row (the error is in ``report.unreadable``)."""
    out: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
    try:
        conn = sqlite3.connect(_sqlite_uri(path, "ro"), uri=True, timeout=30.0, isolation_level=None)
    except sqlite3.Error as exc:
        report.unreadable["*"] = str(exc)
        return out
    try:
        for table in TABLES:
            rows: list[tuple[Any, ...]] = []
            columns: list[str] = []
            try:
                columns = [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]
                if not columns:
                    report.unreadable[table] = "no such table"
                    continue
                for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table}"):
                    rows.append(tuple(row))
            except sqlite3.Error as exc:
                report.unreadable[table] = str(exc)
                if not rows:
                    continue
            out[table] = (columns, rows)
    finally:
        conn.close()
    return out
