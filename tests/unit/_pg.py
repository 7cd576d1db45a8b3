"""A private, real PostgreSQL cluster for the ledger and budget tests.

``PostgresCluster`` runs Debian's own binaries (``/usr/lib/postgresql/<v>/bin``): ``initdb`` into a temp
directory (as the ``postgres`` user when we are root, since PostgreSQL refuses to run as root), trust
authentication, and no TCP at all: the server listens only on a unix socket inside that private directory, so
no port can clash and no other user can connect.
``stop()`` shuts it down and removes every file. Each test gets its own database from :meth:`new_database`.

``DESKCTL_TEST_POSTGRES_URL`` points the tests at an existing server instead (its user must be allowed to
create databases).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["PostgresCluster", "find_pg_bin"]


def find_pg_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<v>/bin`` with ``initdb`` and ``pg_ctl``, or None."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    for initdb in reversed(candidates):
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").exists() and (bindir / "postgres").exists():
            return bindir
    return None


class PostgresCluster:
    def __init__(self) -> None:
        self.external = os.environ.get("DESKCTL_TEST_POSTGRES_URL") or None
        self.tmp: Path | None = None
        self.port = 0
        self.bindir: Path | None = None
        self._as_user: list[str] = []

    @property
    def admin_url(self) -> str:
        if self.external:
            return self.external
        return f"postgresql://postgres@/postgres?host={self.tmp}&port={self.port}"

    def start(self) -> None:
        if self.external:
            return
        bindir = find_pg_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL binaries not found under /usr/lib/postgresql (apt-get install postgresql)")
        self.bindir = bindir
        self.tmp = Path(tempfile.mkdtemp(prefix="deskctl-pg-"))
        data = self.tmp / "data"
        if os.geteuid() == 0:
            shutil.chown(self.tmp, user="postgres", group="postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.port = 5432  # only names the socket file (.s.PGSQL.5432) in our private directory
        self._run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                   "--no-sync", "--no-instructions"])  # fmt: skip
        options = (
            f"-c listen_addresses='' -c port={self.port} -c unix_socket_directories={self.tmp} "
            "-c fsync=off -c full_page_writes=off -c max_connections=100 -c shared_buffers=16MB"
        )
        self._run([str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(self.tmp / "log"),
                   "-w", "-t", "60", "start"])  # fmt: skip

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run([*self._as_user, *argv], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = ""
            if self.tmp is not None and (self.tmp / "log").exists():
                log = (self.tmp / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{argv[0]} failed ({result.returncode}): {result.stderr[-2000:]}\n{log}")

    def new_database(self) -> str:
        """Create an empty database and return its URL."""
        import psycopg

        name = "deskctl_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(self.admin_url)
        return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))

    def drop_database(self, url: str) -> None:
        import psycopg

        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.external or self.tmp is None:
            return
        try:
            if self.bindir is not None and (self.tmp / "data" / "postmaster.pid").exists():
                self._run([str(self.bindir / "pg_ctl"), "-D", str(self.tmp / "data"), "-m", "immediate", "-w",
                           "stop"])  # fmt: skip
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
