"""deskctl.ledger._driver: the SQLite driver imported without functools, run alone in a fresh interpreter (the rest
of deskctl is not imported with it, so what the driver's own import loads is all there is to see)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import deskctl.ledger._driver as driver_module

#: runs deskctl/ledger/_driver.py as a module of its own, then SQL through a connection of the driver it loads;
#: argv[2] "functools" imports functools first. Prints what the driver's import loaded and what the SQL returned,
#: as JSON (imported last: json's import loads functools).
_RUNNER = """
import sys
if sys.argv[2] == "functools":
    import functools
path = sys.argv[1]
namespace = {"__name__": "ledger_driver"}
exec(compile(open(path, encoding="utf-8").read(), path, "exec"), namespace)
driver = namespace["load_driver"]()
loaded = sorted(m for m in ("functools", "collections", "keyword", "operator", "reprlib") if m in sys.modules)
conn = driver.connect(":memory:", isolation_level=None)
conn.execute("CREATE TABLE t (n INTEGER)")
for n in range(300):  # more distinct statements than the cache holds (128), each run twice
    conn.execute(f"INSERT INTO t VALUES ({n})")
    conn.execute(f"INSERT INTO t VALUES ({n})")
total = conn.execute("SELECT COUNT(*), SUM(n) FROM t").fetchone()
small = driver.connect(":memory:", cached_statements=0).execute("SELECT 2").fetchone()
import functools, json  # json (re) imports functools too: both after the driver's import
same = driver is sys.modules["_sqlite3"]
print(json.dumps({"loaded": loaded, "total": list(total), "small": list(small), "same": same,
                  "real_functools": hasattr(functools, "partial") and hasattr(functools, "reduce")}))
"""


def _run(first: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-P", "-c", _RUNNER, str(Path(driver_module.__file__)), first],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_driver_loads_without_functools_and_works() -> None:
    result = _run("nothing")
    assert result["loaded"] == []  # neither functools nor what it imports
    assert result["total"] == [600, 2 * sum(range(300))] and result["small"] == [2] and result["same"] is True
    assert result["real_functools"] is True  # the stand-in left sys.modules: functools imports for real afterwards


def test_with_functools_already_imported_the_driver_takes_the_real_one() -> None:
    result = _run("functools")
    assert "functools" in result["loaded"]  # type: ignore[operator]
    assert result["total"] == [600, 2 * sum(range(300))] and result["same"] is True
    assert result["real_functools"] is True


def test_lru_cache_caches_as_functools_does() -> None:
    import functools

    calls: list[int] = []

    def square(n: int) -> int:
        calls.append(n)
        return n * n

    ours, theirs = driver_module.lru_cache(2)(square), functools.lru_cache(2)(square)
    for cached in (ours, theirs):
        calls.clear()
        assert [cached(n) for n in (1, 2, 1, 3, 1, 2)] == [1, 4, 1, 9, 1, 4]
        assert calls == [1, 2, 3, 2]  # 2 was the least recently used when 3 came
        hits, misses, maxsize, size = cached.cache_info()
        assert (hits, misses, maxsize, size) == (2, 4, 2, 2)
    assert driver_module.lru_cache(-5)(square).cache_info()[2] == 0  # as functools: a negative size is 0
