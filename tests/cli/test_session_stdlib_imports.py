"""What the session's and the xvfb and docker providers' modules import in a one-shot CLI process (issue 23): none of
them runs an import of ``enum``, ``threading``, ``contextlib``, ``functools``, ``collections`` (``.abc``),
``weakref``, ``importlib``, ``warnings`` or ``re``, nor of a module that brings them (``typing``, ``json``,
``pathlib``, ``socket``, ...), at its top level or in a function the command calls. Together they cost a quarter of
the instructions of a ``deskctl do`` process; the end-to-end check that the whole process loads none of them is
the CLI's (tests/cli/test_do_fast.py and its neighbours). A process with the import statement hooked says which of
these modules ran which import, whatever other module loaded the target first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import _module_desktop
from _cli import deskctl_process

#: the banned modules and the modules whose import brings some of them
WATCHED = ["enum", "threading", "contextlib", "functools", "collections", "collections.abc", "weakref",
           "importlib", "warnings", "re",
           "typing", "json", "pathlib", "dataclasses", "subprocess", "shutil", "tempfile", "uuid", "inspect",
           "logging", "socket", "signal", "selectors", "ipaddress", "urllib.parse"]

#: the modules under test: a name, or a package's prefix (ending in a dot)
OURS = ["deskctl.session", "deskctl.session_state", "deskctl.session_steps", "deskctl.session_spend",
        "deskctl.supervisor", "deskctl.actions", "deskctl.providers.base", "deskctl.providers._x11provider",
        "deskctl.providers._guest", "deskctl.providers._handle_data", "deskctl.providers._procs",
        "deskctl.providers.xvfb", "deskctl.providers.xvfb.", "deskctl.providers.docker",
        "deskctl.providers.docker."]

#: ``python -c RUNNER ARGV_JSON``: deskctl's main with the import statement hooked; on stderr a line
#: ``STDLIB ["importer imports module", ...]`` for each import of a WATCHED module that one of OURS ran
RUNNER = """
import builtins, json, sys
watched, ours = set(json.loads(sys.argv[2])), json.loads(sys.argv[3])
seen = []
real = builtins.__import__
def hooked(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__") or ""
    if level == 0 and any(importer == o or (o.endswith(".") and importer.startswith(o)) for o in ours):
        for target in [name, *(f"{name}.{item}" for item in fromlist or ())]:
            if target in watched and f"{importer} imports {target}" not in seen:
                seen.append(f"{importer} imports {target}")
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = hooked
from deskctl.cli import main
try:
    main(json.loads(sys.argv[1]))
finally:
    sys.stderr.write("STDLIB " + json.dumps(seen) + "\\n")
"""


def _imports(args: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """The WATCHED imports OURS ran in the process ``deskctl ARGS`` (which must succeed), and the process."""
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(args), json.dumps(WATCHED), json.dumps(OURS)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("STDLIB ")]
    found: list[str] = json.loads(line.removeprefix("STDLIB "))
    return found, proc


# the module's xvfb desktop and home (tests/_module_desktop.py), as fixtures of this module
module_home, same_home, session = _module_desktop.module_home, _module_desktop.same_home, _module_desktop.session


@pytest.mark.parametrize("tail", [["do", "click", "5", "5"], ["do", "key", "a"], ["screenshot", "-o", "shot.png"]])
def test_an_xvfb_desktop_s_do_and_screenshot(session: str, tail: list[str], tmp_path: Path) -> None:
    args = [tail[0], session, *tail[1:]]
    if tail[0] == "screenshot":
        args[-1] = str(tmp_path / "shot.png")
    assert _imports(args)[0] == []


def test_an_xvfb_desktop_s_up_and_down() -> None:
    """``up``: only its create, which makes the session's folder under paths.runtime_dir() (a pathlib.Path, as the
    ledger's and the checks' modules on the same path use), imports pathlib; ``down`` works with os.path strs."""
    found, up = _imports(["up", "--provider", "xvfb", "--geometry", "320x240"])
    sid = up.stdout.strip()
    try:
        assert found == ["deskctl.providers.xvfb.create imports pathlib"]
        found, down = _imports(["down", sid])
        assert found == []
        assert down.stderr.startswith(f"{sid}: destroyed")
    finally:
        deskctl_process("down", sid)


@pytest.mark.docker
def test_a_docker_desktop_s_do_screenshot_and_down(deskctl_home: Path, tmp_path: Path) -> None:
    sid = deskctl_process("up", "--provider", "docker", "--geometry", "320x240", check=True).stdout.strip()
    try:
        for args in (["do", sid, "click", "5", "5"], ["do", sid, "key", "a"],
                     ["screenshot", sid, "-o", str(tmp_path / "shot.png")]):
            assert (_imports(args)[0], args) == ([], args)
        found, down = _imports(["down", sid])
        assert found == []
        assert down.stderr.startswith(f"{sid}: destroyed")
    finally:
        deskctl_process("down", sid)
