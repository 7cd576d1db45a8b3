"""`deskctl up` of an xvfb desktop checks the display and its size over the X11 wire: the process loads no
python-xlib (its import was a large part of the call), and the desktop it leaves is whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _cli import deskctl_process as deskctl

_RUNNER = """
import json, os, sys
from deskctl.cli import main
try:
    main(json.loads(sys.argv[1]))
finally:
    with open(os.environ["DESKCTL_TEST_MODULES"], "w") as out:
        json.dump(sorted(sys.modules), out)
"""


def test_up_loads_no_python_xlib_and_the_desktop_answers(tmp_path: Path) -> None:
    env = {**os.environ, "DESKCTL_HOME": str(tmp_path / "h"), "DESKCTL_TEST_MODULES": str(tmp_path / "m.json")}
    up = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(["up", "--geometry", "320x240", "--json"])],
                        capture_output=True, text=True, timeout=120, env=env)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    try:
        modules = set(json.loads((tmp_path / "m.json").read_text()))
        assert sorted(m for m in modules if m == "Xlib" or m.startswith("Xlib.") or m == "deskctl.core.x11") == []
        assert info["geometry"] == "320x240"
        shot = deskctl("screenshot", info["id"], "-o", str(tmp_path / "s.png"), "--json", env=env, check=True)
        assert (json.loads(shot.stdout)["width"], json.loads(shot.stdout)["height"]) == (320, 240)
        deskctl("do", info["id"], "click", "5", "5", env=env, check=True)
    finally:
        deskctl("down", info["id"], env=env, check=True)


def test_up_loads_neither_pydantic_nor_what_it_does_not_use(tmp_path: Path) -> None:
    """`deskctl up` of a desktop is a whole process a user or a fleet script pays for: neither its spec nor the
    provider's options are pydantic models (pydantic's import, with its plugin loader's importlib.metadata, was most
    of the process), and it does not load the video recorder without --video, thread-pool futures (and logging) for
    its preflight, or difflib without a misspelling. A module of this list showing up again is a regression of
    every `up` (bench/bench_cli.py, row "up + down")."""
    env = {**os.environ, "DESKCTL_HOME": str(tmp_path / "h"), "DESKCTL_TEST_MODULES": str(tmp_path / "m.json")}
    up = subprocess.run([sys.executable, "-c", _RUNNER,
                         json.dumps(["up", "--geometry", "320x240", "--json", "--label", "run=7"])],
                        capture_output=True, text=True, timeout=120, env=env)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    deskctl("down", info["id"], env=env, check=True)
    modules = set(json.loads((tmp_path / "m.json").read_text()))
    assert {"deskctl.spec", "deskctl.providers.options", "deskctl.checks.runner"} <= modules  # the path it means
    unwanted = {"pydantic", "pydantic_core", "importlib.metadata", "deskctl.recording_video", "concurrent.futures",
                "logging", "difflib"}
    assert sorted(unwanted & modules) == []
