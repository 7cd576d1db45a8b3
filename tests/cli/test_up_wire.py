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


def _importers(importtime: str) -> dict[str, str]:
    """``python -X importtime`` output -> each module's top-level importer (the outermost import it was under)."""
    top: dict[str, str] = {}
    outer = ""
    rows = [line.split("|") for line in importtime.splitlines() if line.startswith("import time:")][1:]
    for row in reversed(rows):  # a module's line comes after the lines of what it imported
        name = row[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        if depth == 0:
            outer = name.strip()
        top[name.strip()] = outer
    return top


def test_up_loads_neither_pydantic_for_its_spec_nor_what_it_does_not_use(tmp_path: Path) -> None:
    """`deskctl up` of a desktop is a whole process a user or a fleet script pays for: its spec is no pydantic model
    (pydantic's import was most of the process), and it does not load the video recorder without --video, the
    thread-pool futures (and logging) for its preflight, or difflib without a misspelling. pydantic may only come
    in through the providers' option models (deskctl.providers.options), until they drop it too."""
    env = {**os.environ, "DESKCTL_HOME": str(tmp_path / "h"), "DESKCTL_TEST_MODULES": str(tmp_path / "m.json")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    up = subprocess.run([sys.executable, "-X", "importtime", "-c", _RUNNER,
                         json.dumps(["up", "--geometry", "320x240", "--json", "--label", "run=7"])],
                        capture_output=True, text=True, timeout=120, env=env)
    assert up.returncode == 0, up.stderr[-2000:]
    info = json.loads(up.stdout)
    deskctl("down", info["id"], env=env, check=True)
    modules = set(json.loads((tmp_path / "m.json").read_text()))
    assert "deskctl.spec" in modules  # the test sees the path it means to
    unwanted = {"deskctl.recording_video", "concurrent.futures", "logging", "difflib"}
    assert sorted(unwanted & modules) == []
    importers = _importers(up.stderr)
    loaded = {m for m in modules if m.split(".")[0] in ("pydantic", "pydantic_core")}
    through = {importers[m] for m in loaded if m in importers}  # (a module imported by a module's __getattr__
    assert through <= {"deskctl.providers.options"}, through   # has no line of its own)
    assert bool(through) == bool(loaded)
