"""Redaction of every secret in every output (re-exported by :mod:`deskctl.credentials`, which documents it).

Apart from the credentials module so that what only redacts (the ledger, the CLI's output, every ``deskctl do``)
does not load the credential model with it.
"""

from __future__ import annotations

import re
import threading

__all__ = ["REDACTED", "redact", "register_secret"]

_lock = threading.Lock()
_secrets: set[str] = set()

# Shapes that look like secrets even when deskctl did not read them itself. Each needs a ':' or a '=' in the
# text; they are compiled when first needed (compiling them cost as much as the rest of a `deskctl do` import).
_PATTERN_SOURCES = (
    r"(?i)(authorization\s*[:=]\s*(?:bearer|basic)\s+)[^\s\"',]+",
    r"(?i)((?:api[_-]?key|token|secret|password|passwd|client_secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"',&]+",
    r"(?i)([?&](?:token|api_key|apikey|key|DAYTONA_SANDBOX_AUTH_KEY)=)[^&\s]+",
    # the password of a URL's userinfo (postgresql://u:PASSWORD@h, http://u:PASSWORD@h, tcp://u:PASSWORD@h)
    r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@\"'<>]*:)[^/\s@\"'<>]+(?=@)",
    # a bare user:PASSWORD@host (an ssh target written with a password)
    # (not an image pinned by digest: debian:bookworm@sha256:...)
    r"(?<![\w/:.@-])([\w.-]+:)[^\s@/:\"'<>]+(?=@(?!sha\d+:)[\w\[])",
    # a token alone as the userinfo of a web URL (https://TOKEN@host)
    r"(?i)(\bhttps?://)[^/\s:@\"'<>]+(?=@)",
)
_patterns: list[re.Pattern[str]] = []


def _compiled_patterns() -> list[re.Pattern[str]]:
    if not _patterns:
        compiled = [re.compile(source) for source in _PATTERN_SOURCES]
        with _lock:
            if not _patterns:
                _patterns.extend(compiled)
    return _patterns


REDACTED = "***"


def register_secret(value: str | None) -> None:
    """Remember a secret value so that :func:`redact` removes it wherever it appears."""
    if value and len(value) >= 4:
        with _lock:
            _secrets.add(value)


def redact(text: str | None) -> str:
    """``text`` with every registered secret, every secret-shaped ``key=value`` and the password of every URL
    (``scheme://user:***@host``, ``user:***@host``; the whole userinfo of an http(s) URL) replaced by ``***``."""
    if not text:
        return text or ""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    if ":" not in text and "=" not in text:  # no pattern can match
        return text
    for pattern in _compiled_patterns():
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text
