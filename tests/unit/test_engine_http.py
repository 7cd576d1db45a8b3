"""engine_http.py's quote, urlencode and urlsplit answer the plain cases without urllib.parse: each must give
exactly what urllib.parse's gives, on every input (the plain ones and all the others, which it hands over)."""

from __future__ import annotations

import random
import urllib.parse

import pytest

from deskctl.providers.docker import engine_http

_CHARS = "azAZ09_.-~/:?#&=+ %@[]\t\n\u00e9\u212a"


def _words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    words = ["", "dk-0123456789", "0f" * 32, "my_container.1", "a b", "é"]
    words += ["".join(rng.choice(_CHARS) for _ in range(rng.randrange(0, 12))) for _ in range(count)]
    return words


@pytest.mark.parametrize("seed", range(3))
def test_quote_and_urlencode_are_urllib_parses(seed: int) -> None:
    words = _words(seed, 3000)
    assert [engine_http.quote(w) for w in words] == [urllib.parse.quote(w, safe="") for w in words]
    queries: list[dict[str, object]] = [{"force": 1, "v": 0}, {"path": "/tmp/x y"},
                                        {"until": 1733112000, "filters": '{"a": ["b"]}'}, {"flag": True, "none": None}]
    rng = random.Random(seed)
    queries += [{rng.choice(words): rng.choice([*words, 1, 2.5, True]) for _ in range(rng.randrange(1, 4))}
                for _ in range(2000)]
    assert [engine_http.urlencode(q) for q in queries] == [urllib.parse.urlencode(q) for q in queries]


def test_urlsplit_reads_what_urllib_parse_reads() -> None:
    urls = ["unix:///var/run/docker.sock", "unix:///tmp/a b/engine.sock", "unix://var/run/docker.sock",
            "UNIX:///x", "unix:///x?y", "unix:///x#y", "unix:///x\ty", "unix:///", "tcp://127.0.0.1:23751",
            "tcp://[::1]:2375", "https://Engine.Example:2376", "http+unix:///x", "/var/run/docker.sock"]
    for url in urls:
        ours, theirs = engine_http.urlsplit(url), urllib.parse.urlsplit(url)
        assert (ours.scheme, ours.path, ours.hostname, ours.port) == \
            (theirs.scheme, theirs.path, theirs.hostname, theirs.port), url
