"""Output every command shares, without click: a line to stdout or stderr, the ``--json`` document, the error
message. ``deskctl do`` prints through these on its click-free path (:mod:`deskctl.cli._do_fast`) and on the
click path alike, so both print the same bytes."""

from __future__ import annotations

import sys

from deskctl.errors import DeskctlError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Reported", "echo", "echo_json", "emit_error", "iso_time"]

#: keys that hold a moment (Unix time inside deskctl) besides those ending in ``_at``
_TIME_KEYS = {"now", "since"}


class Reported(Exception):
    """End the command with exit code ``code``: what it had to say is printed already (a ``--json`` document that
    carries the error, a command's own exit status). Raised to the one abort path, :func:`deskctl.cli.main`, the
    only caller of ``sys.exit``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def echo(message: str, *, err: bool = False) -> None:
    """``message`` and a newline on stdout (``err``: stderr), flushed; what ``click.echo`` does with a string:
    ANSI escapes are dropped when the stream is not a terminal, and a stream whose encoding is ASCII (a
    misconfigured locale) gets UTF-8 with undecodable characters replaced."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    out = message + "\n"
    if "\033" in out and not _isatty(stream):
        import re

        out = re.sub(r"\033\[[;?0-9]*[a-zA-Z]", "", out)
    buffer = getattr(stream, "buffer", None)
    if buffer is not None and _is_ascii(getattr(stream, "encoding", None) or "ascii"):
        stream.flush()
        buffer.write(out.encode("utf-8", "replace"))
        buffer.flush()
        return
    stream.write(out)
    stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def _is_ascii(encoding: str) -> bool:
    import codecs

    try:
        return codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return False


def _shape(key: str, value: float) -> Any:
    """The one ``--json`` shape of a number by its key: times ISO-8601, ``*_ms`` to 0.1 ms, seconds to 1 ms."""
    if key.endswith("_at") or key in _TIME_KEYS:
        return iso_time(value)
    if key.endswith("_ms"):
        return round(value, 1)
    if key == "seconds" or key.endswith("_seconds") or key.startswith("seconds_"):
        return round(value, 3)
    return value


def _scrub(value: Any, key: str = "") -> Any:
    from deskctl._redact import redact

    if isinstance(value, str):
        return redact(value)
    if isinstance(value, float | int) and not isinstance(value, bool) and key:
        return _shape(key, value) if isinstance(value, float) or key.endswith("_at") or key in _TIME_KEYS \
            else value
    if isinstance(value, dict):
        return {k: _scrub(item, str(k)) for k, item in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(item, key) for item in value]
    return value


def echo_json(data: dict[str, Any]) -> None:
    """One JSON object on stdout, in the shape every command shares: times as ISO-8601 UTC strings (keys
    ending in ``_at``, ``now``, ``since``), durations in seconds rounded to the millisecond, ``*_ms`` to 0.1 ms.
    Every string in it is redacted (a URL's password, registered secrets): the values are scrubbed, not the
    JSON text, so a key such as ``"secret": true`` stays valid JSON."""
    import json  # here: a command without --json (most) skips the json package's import (with re)

    echo(json.dumps(_scrub(data), indent=2, sort_keys=True, default=str))


def iso_time(epoch: float | None) -> str | None:
    """A Unix time as ISO-8601 UTC with milliseconds (``2026-12-01T03:16:44.123Z``), the shape of every time in
    ``--json`` output; None stays None, and so does a time no date can show (past the year 9999: a row written
    before limits.py bounded --ttl), so that one such row never makes `ls --json` fail."""
    import math

    if epoch is None or not math.isfinite(epoch):
        return None
    from datetime import UTC, datetime

    try:
        moment = datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def emit_error(err: DeskctlError, *, as_json: bool) -> None:
    """A :class:`~deskctl.errors.DeskctlError` as the one abort path prints it: ``{"error": {...}}`` on stdout
    with ``--json``, else ``error [provider]: message (code)`` and its remedy on stderr, redacted."""
    from deskctl._redact import redact

    if as_json:
        from deskctl._jsonc import dumps

        echo(dumps(err.to_dict()))
        return
    where = f" [{err.provider}]" if err.provider else ""
    echo(f"error{where}: {redact(err.message)} ({err.code})", err=True)
    if err.remedy:
        echo(f"  remedy: {redact(err.remedy)}", err=True)
