"""The suite passes when whoever starts it ignores SIGINT and SIGHUP (``nohup``, ``&`` in a script): pytest is started
here that way on the tests that interrupt their children (tests/conftest.py gives every child the default
dispositions back). Without that, each of them would wait out its timeout and fail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ignore_like_nohup_in_the_background() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_children_get_default_signals_when_the_suite_is_started_with_them_ignored(tmp_path: Path) -> None:
    # the asyncio program's SIGINT and SIGHUP cases: a child that ignored them would never end (wait 120 s);
    # pytest-timeout bounds each case well below that, so a regression fails instead of hanging
    selected = "tests/unit/test_aio.py::test_a_signal_to_an_asyncio_program_destroys_its_desktops"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "timeout=90",
         "--basetemp", str(tmp_path / "inner"), selected],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env, stdin=subprocess.DEVNULL,
        preexec_fn=_ignore_like_nohup_in_the_background)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout, proc.stdout[-2000:]
