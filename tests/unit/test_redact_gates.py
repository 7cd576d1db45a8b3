"""deskctl._redact runs a secret-shaped pattern only on a text that contains what it needs (its gate): the gated
function must answer exactly as the one that ran every pattern on every text (kept here as it was), on a large
generated corpus with every trigger word and character, in every case, and non-ASCII text (under (?i) the Kelvin
sign matches 'k', U+0131/U+0130 match 'i', U+017F matches 's')."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from deskctl import _redact
from deskctl._redact import REDACTED, redact, register_secret

#: the patterns and the function as they were before the gates (the reference)
_OLD_SOURCES = (
    r"(?i)(authorization\s*[:=]\s*(?:bearer|basic)\s+)[^\s\"',]+",
    r"(?i)((?:api[_-]?key|token|secret|password|passwd|client_secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"',&]+",
    r"(?i)([?&](?:token|api_key|apikey|key|DAYTONA_SANDBOX_AUTH_KEY)=)[^&\s]+",
    r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@\"'<>]*:)[^/\s@\"'<>]+(?=@)",
    r"(?<![\w/:.@-])([\w.-]+:)[^\s@/:\"'<>]+(?=@(?!sha\d+:)[\w\[])",
    r"(?i)(\bhttps?://)[^/\s:@\"'<>]+(?=@)",
)
_OLD_PATTERNS = [re.compile(source) for source in _OLD_SOURCES]


def _old_redact(text: str | None) -> str:
    if not text:
        return text or ""
    with _redact._lock:
        secrets = sorted(_redact._secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    if ":" not in text and "=" not in text:
        return text
    for pattern in _OLD_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def test_the_reference_is_the_modules_patterns() -> None:
    """The gates changed nothing in the patterns themselves."""
    assert tuple(source for source, _, _ in _redact._PATTERN_SOURCES) == _OLD_SOURCES


_WORDS = ["authorization", "bearer", "basic", "api_key", "api-key", "apikey", "api", "key", "token", "secret",
          "password", "passwd", "client_secret", "DAYTONA_SANDBOX_AUTH_KEY", "http", "https", "tcp", "postgresql",
          "user", "sha256", "debian", "bookworm", "host", "x", "ab", "0", "42"]
_PUNCT = [":", "=", "@", "?", "&", "/", "//", "://", "\"", "'", " ", "  ", "\t", "\n", ",", ".", "-", "_", "+", "<",
          ">", "[", "*", "***", ";", "#"]
_NON_ASCII = ["\u212a", "\u0131", "\u0130", "\u017f", "\u00e9", "\u00df", "\u03bc", "\u00b5", "\u2003", "\u00e0",
              "\u0585", "\U0001f600"]


def _cased(word: str, rng: random.Random) -> str:
    choice = rng.randrange(4)
    if choice == 0:
        return word
    if choice == 1:
        return word.upper()
    if choice == 2:
        return "".join(c.upper() if rng.random() < 0.5 else c for c in word)
    # a letter the regex engine folds to an ASCII one (non-ASCII text)
    folds = {"k": "\u212a", "i": "\u0131", "s": "\u017f", "I": "\u0130"}
    return "".join(folds[c] if c in folds and rng.random() < 0.5 else c for c in word)


#: shapes the patterns were written for, each way round
_SHAPES = ["Authorization: Bearer abc.def", "authorization=basic Zm9v", "API_KEY=sk-123", "api-key: 'v'",
           "client_secret = \"s3\"", "passwd:x", "https://h/x?token=abc&key=def", "/p?DAYTONA_SANDBOX_AUTH_KEY=k",
           "postgresql://u:pw@h/db", "tcp://u:p@10.0.0.1:2375", "root:hunter2@host", "debian:bookworm@sha256:abc",
           "a.b:c@[::1]", "https://TOKEN@github.example", "ToKeN\u212a=1", "\u0131pi_key=1", "pa\u017f\u017fword=x",
           "http\u017f://a:b@c", "\u212aey=v&token=t", "\u00e9 Authorization: Bearer x", "\u0130 api_key=1",
           "\u00e9 ?key=1", "\u00e9 http://u:p@h", "\u00e9 u:p@host", "\u00e9 https://t@h", "", ":", "=", "@"]


def _mutated(shape: str, rng: random.Random) -> str:
    """``shape`` with a few characters deleted, replaced or added (from the triggers, ASCII or not)."""
    chars = list(shape)
    pool = [*_PUNCT, *_NON_ASCII, "a", "E", "k", "K", "i", "I", "s", "S", "1"]
    for _ in range(rng.randrange(0, 4)):
        at = rng.randrange(len(chars) + 1)
        action = rng.randrange(3)
        if action == 0 and at < len(chars):
            del chars[at]
        elif action == 1 and at < len(chars):
            chars[at] = rng.choice(pool)
        else:
            chars.insert(at, rng.choice(pool))
    return "".join(chars)


def _corpus(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = [_mutated(rng.choice(_SHAPES), rng) for _ in range(count // 2)]
    texts = [_cased(text, rng) if rng.random() < 0.3 else text for text in texts]
    for _ in range(count - count // 2):
        parts = []
        for _ in range(rng.randrange(1, 14)):
            kind = rng.random()
            if kind < 0.45:
                parts.append(_cased(rng.choice(_WORDS), rng))
            elif kind < 0.9:
                parts.append(rng.choice(_PUNCT))
            elif kind < 0.97:
                parts.append(rng.choice(_NON_ASCII))
            else:
                parts.append(REDACTED if rng.random() < 0.5 else "ukey-keyring-5432")
        texts.append("".join(parts))
    return [*_SHAPES, *texts]


@pytest.mark.parametrize("seed", range(4))
def test_gated_redaction_is_the_same_as_running_every_pattern(seed: int) -> None:
    register_secret("ukey-keyring-5432")
    texts = _corpus(25_000, seed)
    differ = [(text, redact(text), _old_redact(text)) for text in texts if redact(text) != _old_redact(text)]
    assert differ == []
    # the corpus reaches every pattern, ASCII and not (else it would prove nothing)
    for pattern in _OLD_PATTERNS:
        assert any(text.isascii() and pattern.search(text) for text in texts), pattern.pattern
        assert any(not text.isascii() and pattern.search(text) for text in texts), pattern.pattern


def test_a_text_without_what_a_pattern_needs_compiles_none() -> None:
    """A ledger event's text (an id, a status, a cost): nothing compiled, in a fresh process."""
    code = ("import sys\nfrom deskctl._redact import redact, _patterns\n"
            "assert redact('dk-0123456789 destroyed ($0.0000) at 2026-12-02 05:00:00') == "
            "'dk-0123456789 destroyed ($0.0000) at 2026-12-02 05:00:00'\n"
            "print(sorted(_patterns))\n"
            "redact('see https://tok@host')\n"
            "print(sorted(_patterns))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.splitlines() == ["[]", "[3, 4, 5]"]
