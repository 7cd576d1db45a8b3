"""Which ledger a URL names (``$DESKCTL_LEDGER_URL``, a SQLite file or PostgreSQL), its stable id for the
``deskctl.ledger`` label, and :func:`open_ledger`."""

from __future__ import annotations

import os

from deskctl._redact import redact
from deskctl.errors import ConfigInvalid
from deskctl.ledger._queries import Ledger
from deskctl.ledger._sqlite import _SQLiteLedger
from deskctl.paths import pure_path_str

# pathlib (which imports urllib.parse and ipaddress) and urllib.parse are imported where a PostgreSQL URL or a bare
# path needs them: a SQLite ledger named by $DESKCTL_HOME or a sqlite:// URL (every per-call CLI process) skips them

__all__ = ["check_ledger_url", "default_ledger_url", "ledger_id", "open_ledger"]


def default_ledger_url() -> str:
    """``$DESKCTL_LEDGER_URL``, else the SQLite file under :func:`deskctl.paths.home_dir`."""
    env = os.environ.get("DESKCTL_LEDGER_URL", "").strip()
    if env:
        return env
    from deskctl.paths import home_path

    # str((home_dir() / "ledger.sqlite3").absolute()), without pathlib
    path = os.path.join(home_path(), "ledger.sqlite3")
    return "sqlite://" + pure_path_str(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


def check_ledger_url(url: str | None = None) -> tuple[str, str]:
    """``(backend, url)`` of the ledger ``url`` names (default: :func:`default_ledger_url`), without opening it.

    A malformed URL is :class:`~deskctl.errors.ConfigInvalid` (exit 2) with its password redacted, so a command
    can refuse it before it writes anything. ``backend`` is ``"sqlite"`` (``url`` then is the file's path) or
    ``"postgresql"``."""
    url = default_ledger_url() if url is None else url.strip()
    remedy = "set DESKCTL_LEDGER_URL to sqlite:///path/to/file or postgresql://user@host:port/db"
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme and ":" in url and _looks_like_scheme(url.split(":", 1)[0]):  # sqlite:x: a URL gone wrong
        raise ConfigInvalid(f"ledger URL {redact(url)!r} is not of the form scheme://...", remedy=remedy)
    if scheme in ("postgresql", "postgres"):
        from urllib.parse import urlsplit, urlunsplit

        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- a port that is no number raises here, not in the driver
        except ValueError as exc:
            raise ConfigInvalid(f"ledger URL {redact(url)!r} is malformed: {exc}", remedy=remedy) from None
        if scheme == "postgres":
            url = urlunsplit(("postgresql", *parts[1:]))
        return "postgresql", url
    if scheme == "sqlite":
        rest = url[len("sqlite://"):]
        if not rest.startswith("/") or not rest.strip("/"):
            raise ConfigInvalid(f"ledger URL {redact(url)!r} is not of the form sqlite:///path/to/file",
                                remedy=remedy)
        return "sqlite", "/" + rest.lstrip("/")
    if scheme == "":
        if not url:
            raise ConfigInvalid("empty ledger URL", remedy=remedy)
        from pathlib import Path

        return "sqlite", str(Path(url).expanduser().absolute())
    raise ConfigInvalid(
        f"ledger URL {redact(url)!r} has an unknown scheme {scheme!r}; use sqlite:///path or postgresql://...",
        remedy=remedy,
    )


def _looks_like_scheme(word: str) -> bool:
    """``re.match(r"^[A-Za-z][A-Za-z0-9+.-]+$", word)`` without re: a URL's scheme (sqlite, postgresql+psycopg)."""
    return len(word) >= 2 and word[0].isascii() and word[0].isalpha() and all(
        c.isascii() and (c.isalnum() or c in "+.-") for c in word[1:])


def ledger_id(url: str | None = None) -> str:
    """A short, stable name of the ledger ``url`` (default: :func:`default_ledger_url`) for the ``deskctl.ledger``
    label: 16 hex digits of a hash of its file path, or of its PostgreSQL server and database (never of a user
    or password), so the reaper finds this ledger's desktops by label even when the ledger cannot be read."""
    backend, target = check_ledger_url(url)
    if backend == "postgresql":
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        host = parts.hostname or ""
        query = "&".join(sorted(q for q in parts.query.split("&") if q.startswith(("host=", "port="))))
        target = f"postgresql://{host}:{parts.port or ''}{parts.path}?{query}"
    else:
        target = "sqlite://" + target
    return _sha256_hex(target.encode())[:16]


def _sha256_hex(data: bytes) -> str:
    """``hashlib.sha256(data).hexdigest()`` from CPython's own SHA-256 module, the same digest without hashlib's
    import (OpenSSL's bindings: a sixteenth of a whole ``deskctl up``, which labels its desktop with
    :func:`ledger_id`); hashlib where that module is missing."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # Python 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # Python 3.11
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return str(sha256(data).hexdigest())


def open_ledger(url: str | None = None) -> Ledger:
    """Open (creating and migrating as needed) the ledger at ``url``.

    ``None``: ``$DESKCTL_LEDGER_URL``, else ``home_dir()/"ledger.sqlite3"``. ``sqlite:///path`` or a bare path:
    that SQLite file. ``postgresql://user:pass@host:port/db`` (or ``postgres://``): PostgreSQL.
    """
    backend, target = check_ledger_url(url)
    if backend == "postgresql":
        from deskctl.ledger._postgres import _PostgresLedger  # here: a SQLite ledger (every `deskctl down`) skips it

        return _PostgresLedger(target)
    path = pure_path_str(target)  # str(Path(target))
    if _is_dir(path):
        raise ConfigInvalid(f"ledger file {path} is a directory", remedy="point DESKCTL_LEDGER_URL at a file")
    return _SQLiteLedger(path, "sqlite://" + path)


def _is_dir(path: str) -> bool:
    """``Path(path).is_dir()``: False where ``path`` does not exist (or a part of it is no folder, or a link loop),
    the error raised where it cannot be looked at (no permission)."""
    import stat

    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):  # ENOENT, ENOTDIR (a new ledger: every first call)
        return False
    except OSError as exc:
        import errno

        if exc.errno in (errno.EBADF, errno.ELOOP):
            return False
        raise
    except ValueError:  # a NUL in the path
        return False

