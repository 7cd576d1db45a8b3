"""deskctl's data directory without DESKCTL_HOME: worked out as platformdirs does, without importing it (a CLI
call pays for every import), and found the same for every shape of XDG_DATA_HOME and HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.paths import home_dir

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux rule is deskctl's own")


@pytest.mark.parametrize("xdg", [None, "", "relative/data", "/abs/data", "/abs/data/", "~/data"])
@pytest.mark.parametrize("home", [None, "", "relative-home", "/home/somebody", "/home/somebody/"])
def test_the_data_directory_is_platformdirs_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 xdg: str | None, home: str | None) -> None:
    from platformdirs import user_data_dir

    from deskctl.paths import _user_data_dir

    for name, value in (("XDG_DATA_HOME", xdg), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert _user_data_dir() == user_data_dir("deskctl", appauthor=False)


def test_a_cli_call_without_deskctl_home_uses_it_and_imports_no_platformdirs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DESKCTL_HOME"}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))
    code = ("import json, sys; from deskctl.cli import main\n"
            "try:\n    main(['cost', '--json'])\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('platformdirs', 'tempfile'))))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "data" / "deskctl").is_dir()  # the ledger went where platformdirs says


def test_deskctl_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "mine"))
    assert home_dir() == tmp_path / "mine"
