"""Redaction of every secret in every output (re-exported by :mod:`deskctl.credentials`, which documents it).

Apart from the credentials module so that what only redacts (the ledger, the CLI's output, every ``deskctl do``)
does not load the credential model with it.
"""

from __future__ import annotations

# threading.Lock itself (deskctl._threads.Lock is the same): without threading, whose import pulls functools and
# collections, and without deskctl._threads, as this module is the bottom of deskctl's layering with the errors
from _thread import allocate_lock as Lock

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

__all__ = ["REDACTED", "redact", "register_secret"]

_lock = Lock()
_secrets: set[str] = set()

# Shapes that look like secrets even when deskctl did not read them itself, each with what a text must contain
# for it to match at all: its gate, an exact necessary condition, tested in lower case on ASCII text (a text that
# is not ASCII runs every pattern: under (?i), U+212A (the Kelvin sign) matches 'k', U+0131 and U+0130 (dotless
# and dotted I) match 'i', U+017F (long s) matches 's'). A pattern is compiled when a text first passes its gate
# (compiling all of them cost as much as the rest of a `deskctl do` import; a ledger event's text passes none). A
# replacement keeps the text around what it removes and puts '***' between them: it makes no new text a gate could
# see, so the gates are read once per call. tests/unit/test_redact_gates.py holds them to the ungated function.
_PATTERN_SOURCES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # (source, every one of these, and at least one of these)
    (r"(?i)(authorization\s*[:=]\s*(?:bearer|basic)\s+)[^\s\"',]+", ("authorization",), (":", "=")),
    (r"(?i)((?:api[_-]?key|token|secret|password|passwd|client_secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"',&]+", (),
     ("api", "token", "secret", "passw")),
    (r"(?i)([?&](?:token|api_key|apikey|key|DAYTONA_SANDBOX_AUTH_KEY)=)[^&\s]+", ("=",), ("token", "key")),
    # the password of a URL's userinfo (postgresql://u:PASSWORD@h, http://u:PASSWORD@h, tcp://u:PASSWORD@h)
    (r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@\"'<>]*:)[^/\s@\"'<>]+(?=@)", ("://", "@"), ()),
    # a bare user:PASSWORD@host (an ssh target written with a password)
    # (not an image pinned by digest: debian:bookworm@sha256:...)
    (r"(?<![\w/:.@-])([\w.-]+:)[^\s@/:\"'<>]+(?=@(?!sha\d+:)[\w\[])", (":", "@"), ()),
    # a token alone as the userinfo of a web URL (https://TOKEN@host)
    (r"(?i)(\bhttps?://)[^/\s:@\"'<>]+(?=@)", ("://", "@", "http"), ()),
)
_patterns: dict[int, re.Pattern[str]] = {}  # re is imported when a pattern is first needed


def _pattern(index: int) -> re.Pattern[str]:
    found = _patterns.get(index)
    if found is None:
        import re

        found = re.compile(_PATTERN_SOURCES[index][0])
        with _lock:
            found = _patterns.setdefault(index, found)
    return found


def _may_match(index: int, lowered: str | None) -> bool:
    """Whether the text (``lowered``: it in lower case, None when it is not ASCII) passes pattern ``index``'s gate."""
    if lowered is None:
        return True
    _, every, some = _PATTERN_SOURCES[index]
    return all(word in lowered for word in every) and (not some or any(word in lowered for word in some))


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
    lowered = text.lower() if text.isascii() else None
    for index in range(len(_PATTERN_SOURCES)):
        if _may_match(index, lowered):
            text = _pattern(index).sub(lambda m: m.group(1) + REDACTED, text)
    return text
