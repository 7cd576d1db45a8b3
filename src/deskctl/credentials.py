"""Credentials: where each provider's secrets come from, and redaction of every secret in every output.

Resolution order for a variable: the process environment, then the OS keyring (service ``deskctl``,
username ``PROVIDER:VARIABLE``). Every secret value deskctl reads is registered with :func:`register_secret`
so that :func:`redact` can scrub it from messages, logs, errors, the ledger and JSON.
"""

from __future__ import annotations

import re
import threading

__all__ = ["redact", "register_secret"]

_lock = threading.Lock()
_secrets: set[str] = set()

# Shapes that look like secrets even when deskctl did not read them itself.
_PATTERNS = [
    re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|basic)\s+)[^\s\"',]+"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password|passwd|client_secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"',&]+"),
    re.compile(r"(?i)([?&](?:token|api_key|apikey|key|DAYTONA_SANDBOX_AUTH_KEY)=)[^&\s]+"),
]

REDACTED = "***"


def register_secret(value: str | None) -> None:
    """Remember a secret value so that :func:`redact` removes it wherever it appears."""
    if value and len(value) >= 4:
        with _lock:
            _secrets.add(value)


def redact(text: str | None) -> str:
    """``text`` with every registered secret and every secret-shaped ``key=value`` replaced by ``***``."""
    if not text:
        return text or ""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text
