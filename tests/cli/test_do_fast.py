"""`deskctl do` without click (cli/_do_fast.py): the same output, exit code and effect as through click for the
same argv, a table that is the click commands' own, and an import list that stays short."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import _module_desktop
from _cli import ACTION_UNWANTED, ONE_SHOT_UNWANTED, deskctl, importers, whole_process_imports
from _cli import fast_or_click as _run

#: argv after `do SID`, each taken by the fast path (the plain forms, the action's own errors)
FAST = [
    ["click", "5", "6"], ["click", "5", "6", "--json"], ["click", "--json", "7", "8", "--button", "right"],
    ["click", "9", "10", "--button=middle", "--json"], ["double-click", "11", "12", "--json"],
    ["triple-click", "13", "14"], ["right-click", "15", "16", "--json"], ["middle-click", "17", "18"],
    ["move", "19", "20", "--json"], ["drag", "1", "2", "30", "40", "--json"],
    ["drag", "3", "4", "31", "41", "--button", "right"],
    ["scroll", "22", "23", "-3", "--dx", "2", "--json"], ["scroll", "24", "25", "0", "--dx", "-2"],
    ["type", "hé", "--json"], ["key", "ctrl+a", "--json"], ["key-down", "shift"], ["key-up", "shift", "--json"],
    ["mouse-down", "26", "27", "--json"], ["mouse-up", "28", "29", "--json", "--button", "left"],
    # errors of the action itself, raised after parsing: the abort path prints them either way
    ["click", "5000", "5"], ["click", "5000", "5", "--json"], ["click", "-5", "5"],
    ["click", "5", "5", "--button", "sideways"], ["click", "5", "5", "--button", "-5", "--json"],
    ["click", "5", "5", "--button=-x"], ["key", "hyper", "--json"], ["key", "+"],
]

#: argv after `do SID` that the fast path leaves to click (help, parse errors, an argument left out, anything unusual)
DECLINED = [
    ["click", "5"], ["scroll", "20", "21", "--json"], ["click", "x", "5", "--json"], ["click", "5", "5", "--bogus"],
    ["click", "5", "5", "--json=1"], ["click", "--help"], ["click", "-h"], ["scroll", "1", "1", "1", "1"],
    ["type", "--", "-x"], ["click", "5", "5", "--button", "--json"], ["click", "5", "5", "--button"],
    ["clik", "5", "5"], [], ["--help"], ["click", "1.5", "2"], ["click", "5", "5", "-j"],
]


# the module's desktop and home (tests/_module_desktop.py), as fixtures of this module
module_home, same_home, session = _module_desktop.module_home, _module_desktop.same_home, _module_desktop.session


def _pointer_and_counts(sid: str, *, reset: bool = False) -> tuple[tuple[int, int], dict[str, int]]:
    """Where the pointer is (read over X directly, not counted as an action) and the ledger's action counts."""
    from deskctl.ledger import open_ledger
    from deskctl.providers._x11 import X11Driver, read_cookie

    with open_ledger() as book:
        record = book.get(sid)
    assert record is not None and record.handle is not None
    data = record.handle["data"]
    with X11Driver.open(str(data["display"]), cookie=read_cookie(data["cookie_file"])) as driver:
        if reset:
            driver.move(0, 0)
        pointer = driver.cursor_position()
    return pointer, dict(record.action_counts)


def _both_ways(sid: str, args: list[str], tmp_path: Path,
               env: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    results = []
    for fast in (True, False):
        _, before = _pointer_and_counts(sid, reset=True)
        result = _run(args, fast=fast, tmp_path=tmp_path, env=env)
        pointer, after = _pointer_and_counts(sid)
        result["pointer"] = pointer
        result["counted"] = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
        results.append(result)
    return results[0], results[1]


def _shown(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "modules"}


def _in_table(tail: list[str]) -> bool:
    from deskctl.cli._do_table import VERBS

    return tail[0] in VERBS


@pytest.mark.parametrize("tail", FAST, ids=lambda tail: " ".join(tail))
def test_the_fast_path_gives_what_click_gives(session: str, tail: list[str], tmp_path: Path) -> None:
    fast, through_click = _both_ways(session, ["do", session, *tail], tmp_path)
    assert _shown(fast) == _shown(through_click)
    # an action the table leaves to click (its build_table reason) is slower, never different
    assert ("click" not in fast["modules"]) == _in_table(tail), "the fast path did not take this argv"
    assert "click" in through_click["modules"]


def test_the_plain_click_and_key_are_in_the_table() -> None:
    assert _in_table(["click"]) and _in_table(["key"]) and _in_table(["type"]) and _in_table(["move"])


@pytest.mark.parametrize("tail", DECLINED, ids=lambda tail: " ".join(tail) or "(nothing)")
def test_what_the_fast_path_declines_click_answers_as_before(session: str, tail: list[str], tmp_path: Path) -> None:
    fast, through_click = _both_ways(session, ["do", session, *tail], tmp_path)
    assert _shown(fast) == _shown(through_click)
    assert "click" in fast["modules"]
    assert fast["exit"] in (0, 2)


def test_an_unknown_session_is_the_same_error_both_ways(tmp_path: Path) -> None:
    for tail in (["click", "1", "1"], ["click", "1", "1", "--json"]):
        fast = _run(["do", "dk-nosuchone", *tail], fast=True, tmp_path=tmp_path)
        through_click = _run(["do", "dk-nosuchone", *tail], fast=False, tmp_path=tmp_path)
        assert _shown(fast) == _shown(through_click)
        assert fast["exit"] == 2 and "usage.not_found" in fast["stdout"] + fast["stderr"]
        assert "click" not in fast["modules"]


def test_config_defaults_go_through_click(session: str, tmp_path: Path) -> None:
    """`[defaults]` may set an action's option (click's default map): the fast path leaves such a call to click."""
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\nbutton = "right"\n')
    fast, through_click = _both_ways(session, ["do", session, "click", "5", "5", "--json"], tmp_path,
                                     env={"DESKCTL_CONFIG": str(config)})
    assert _shown(fast) == _shown(through_click)
    assert "click" in fast["modules"]
    assert fast["exit"] == 0 and json.loads(fast["stdout"])["button"] == "right"


def test_do_loads_no_click_pydantic_or_what_an_action_does_not_use(session: str, tmp_path: Path) -> None:
    """A whole process per action: what `deskctl do ID click` imports is what a click needs. A module in this list
    showing up again is a regression of its per-call cost (bench/bench_cli.py)."""
    result = _run(["do", session, "click", "5", "5", "--json"], fast=True, tmp_path=tmp_path)
    assert result["exit"] == 0, result["stderr"]
    unwanted = {"click", "pydantic", "pydantic_core", "deskctl.spec", "deskctl.metering", "deskctl.budget",
                "tomllib", "deskctl.cli._app", "deskctl.cli.session_cmds", "hashlib", "ctypes", "ctypes.util",
                "deskctl.credentials", "deskctl.recording", "difflib", "tarfile", "uuid",
                # the full X driver (python-xlib, its shims, MIT-SHM, the keymap code, the PNG encoder): a click
                # goes over the wire (core/x11wire.py), opened by core/x11open.py without loading core/x11.py
                "Xlib", "deskctl.core.x11", "deskctl.core.x11shm", "deskctl.core.x11keyboard", "deskctl.core.png",
                # dataclasses imports inspect (ast, dis, tokenize): a third of the process; the records on this path
                # (handles, ledger rows, screenshots, handle data) are deskctl._record classes
                "dataclasses", "inspect", "ast", "tokenize",
                # subprocess (with locale), shutil (with bz2, lzma): only bringing a desktop up or down runs programs
                "subprocess", "shutil", "bz2", "lzma",
                # the takeover code: without its lock file nobody holds the desktop (tests/episodes/test_takeover.py
                # holds a `deskctl do` to a person's hold)
                "deskctl.episodes", "deskctl.episodes.takeover", "fcntl"}
    assert sorted(unwanted & set(result["modules"])) == []


def test_do_leaves_socket_and_base64_to_the_one_module_that_still_needs_them(session: str) -> None:
    """The X connection of a `deskctl do` is a ``_socket`` socket and the host name comes from ``_socket``: the
    :mod:`socket` module (its enums) was about 7% of the instructions of the process. deskctl.owners is the last
    module on the path that imports it (owned elsewhere; it would take ``_socket.gethostname`` too)."""
    found = importers(["do", session, "click", "5", "5"], ["socket", "base64", "selectors"])
    assert found.get("socket") in (None, "deskctl.owners"), found
    assert found.get("selectors") in (None, "deskctl.owners"), found  # socket's own import
    assert "base64" not in found, found


#: what an xvfb desktop's `deskctl do` never uses: the provider's other parts (providers/xvfb/provider.py's _LATER)
#: and the modules only they need (Xvfb's spawn, the display's lock files, the processes' start times, shell lines)
XVFB_UNUSED = ["deskctl.providers.xvfb.preflight", "deskctl.providers.xvfb.browser", "deskctl.providers.xvfb.create",
               "deskctl.providers.xvfb.commands", "deskctl.providers.xvfb.spawn", "deskctl.providers.xvfb.display",
               "deskctl.providers._procs", "deskctl.core.shell"]


@pytest.mark.parametrize("tail", [["click", "5", "5"], ["key", "a"]])
def test_do_loads_none_of_the_xvfb_provider_s_other_parts(session: str, tail: list[str]) -> None:
    """Each module is a stat, open, read and close, and its code run: the xvfb provider takes its preflight,
    browser, create and commands when first used (providers/_later.py), and re-exports lazily. The guest's
    harness actions (providers/_guest.py) are the X11 providers' base class; their shell lines load on first use."""
    found = importers(["do", session, *tail], [*XVFB_UNUSED, "deskctl.providers._guest"])
    assert found.get("deskctl.providers._guest") in (None, "deskctl.providers._x11provider"), found
    assert {module: found[module] for module in XVFB_UNUSED if module in found} == {}


def test_do_loads_no_pathlib(session: str) -> None:
    """pathlib imports urllib.parse and ipaddress: about a tenth of the instructions of a `deskctl do` process. The
    ledger (its default file, the file made private), the takeover gate's lock path, the docker and the xvfb
    providers work with os.path strs (the xvfb provider imports pathlib in the functions that make a desktop)."""
    found = importers(["do", session, "click", "5", "5"], ["pathlib", "urllib.parse", "ipaddress", "shlex"])
    assert "pathlib" not in found and "urllib.parse" not in found and "ipaddress" not in found, found
    assert found.get("shlex") in (None, "deskctl.providers._guest"), found  # not the ledger's


def test_do_loads_no_typing_or_signal(session: str) -> None:
    """typing (about 13M instructions, a tenth of a `deskctl do` process) is for the type checkers: the modules on
    the path import its names under ``if TYPE_CHECKING:`` (a module's own ``TYPE_CHECKING = False``). signal's
    functions and constants are ``_signal``'s; signal.py adds its enums (3.5M)."""
    found = importers(["do", session, "click", "5", "5"], ["typing", "signal"])
    assert found == {}, found


_FORWARD_REFS = """
import json, sys, typing
made = []
real = typing.ForwardRef.__init__
def counted(self, arg, *args, **kwargs):
    made.append(str(arg))
    real(self, arg, *args, **kwargs)
typing.ForwardRef.__init__ = counted
from deskctl.cli import main
try:
    main(json.loads(sys.argv[1]))
finally:
    sys.stderr.write("FORWARD_REFS " + json.dumps(made) + "\\n")
"""


def test_do_makes_no_forward_reference(session: str) -> None:
    """A ``TypeVar(bound="Name")`` made at import compiles its string (a ForwardRef): the first compile() of a
    process costs about a tenth of an `import deskctl` in instructions. The modules of a `deskctl do` bind their
    TypeVars to the classes themselves."""
    proc = subprocess.run([sys.executable, "-c", _FORWARD_REFS, json.dumps(["do", session, "click", "5", "5"])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("FORWARD_REFS ")]
    assert json.loads(line.removeprefix("FORWARD_REFS ")) == []


def test_the_table_is_made_from_the_click_commands() -> None:
    """_do_table.py is what build_table() reads from the click commands now: after changing an action's arguments,
    `python -m deskctl.cli._do_gen` rewrites it."""
    from deskctl.cli import _do_gen, _do_table

    verbs, _ = _do_gen.build_table()
    assert verbs == _do_table.VERBS, "stale: run python -m deskctl.cli._do_gen"
    assert Path(_do_table.__file__).read_text() == _do_gen.render_table(), "run python -m deskctl.cli._do_gen"


@pytest.mark.parametrize(
    ("tail", "parsed"),
    [
        (["click", "5", "6"], {"x": 5, "y": 6, "button": "left", "space": None}),
        (["click", "-5", "+6", "--button=-x"], {"x": -5, "y": 6, "button": "-x", "space": None}),
        (["click", "5", "6", "--button", "-5", "--button", "right"],
         {"x": 5, "y": 6, "button": "right", "space": None}),
        (["drag", "1", "2", "-3", "4", "--button", "right"],
         {"x1": 1, "y1": 2, "x2": -3, "y2": 4, "button": "right", "space": None}),
        (["move", "1", "2", "--space", '{"region": [0, 0, 4, 4], "size": [2, 2]}'],
         {"x": 1, "y": 2, "space": '{"region": [0, 0, 4, 4], "size": [2, 2]}'}),
        (["type", "-"], {"text": "-"}),
        (["key", "ctrl+-"], {"chord": "ctrl+-"}),
    ],
)
def test_parse_reads_what_click_reads(tail: list[str], parsed: dict[str, Any]) -> None:
    from deskctl.cli._do_fast import parse

    assert parse(["do", "dk-1", *tail]) == ("dk-1", tail[0], parsed, False)
    assert parse(["do", "dk-1", *tail, "--json"]) == ("dk-1", tail[0], parsed, True)


@pytest.mark.parametrize("tail", [*DECLINED, ["click", "5", "5", "--json", "--"], ["click", "\u0665", "5", "5"],
                                  ["click", "--json"], ["drag", "1", "2", "3"]],
                         ids=lambda tail: " ".join(tail) or "(nothing)")
def test_parse_declines_what_it_does_not_read_as_click_does(tail: list[str]) -> None:
    from deskctl.cli._do_fast import parse

    assert parse(["do", "dk-1", *tail]) is None
    assert parse(["do", "-h", "click", "5", "5"]) is None


def test_the_fast_path_tells_negative_numbers_as_the_click_command_does() -> None:
    """`deskctl do ID scroll 100 100 -3`: the fast path's negative_number (no re import) answers as the click
    command's NEGATIVE_NUMBER pattern on every shape of token, Unicode digits and a final newline included."""
    import re

    from deskctl.cli._do_fast import negative_number
    from deskctl.cli._do_table import NEGATIVE_NUMBER
    from deskctl.cli.do_cmds import NEGATIVE_NUMBER as CLICK_PATTERN

    assert NEGATIVE_NUMBER == CLICK_PATTERN.pattern == r"^-\d+$"
    pieces = ["", "-", "--", "3", "42", "\u0663", "\u00b2", "x", "\n", " ", "-3", "+", ".5", "e", "\t", "0"]
    tokens = {a + b + c for a in pieces for b in pieces for c in pieces}
    assert len(tokens) > 2000
    for token in tokens:
        assert negative_number(token) == bool(re.match(NEGATIVE_NUMBER, token)), repr(token)


@pytest.mark.parametrize("verb", ["do", "key", "screenshot", "ls", "cost", "down"])
def test_the_installed_deskctl_command_loads_none_of_the_unwanted_modules(session: str, verb: str,
                                                                          tmp_path: Path) -> None:
    """The `deskctl` a user runs, as a whole process: none of ONE_SHOT_UNWANTED (pip's entry-point launcher imported
    re for Windows' argv[0], so bin/deskctl is a plain script); an action or a screenshot none of ACTION_UNWANTED."""
    script = Path(sys.executable).with_name("deskctl")
    assert script.read_text().startswith("#!") and "import re" not in script.read_text()
    if verb == "down":
        args = ["down", deskctl("up", "--geometry", "320x240", check=True).stdout.strip()]
    else:
        args = {"do": ["do", session, "click", "5", "5"], "key": ["do", session, "key", "shift"], "ls": ["ls"],
                "cost": ["cost"], "screenshot": ["screenshot", session, "-o", str(tmp_path / "s.png")]}[verb]
    unwanted = ACTION_UNWANTED if verb in ("do", "key", "screenshot") else ONE_SHOT_UNWANTED
    assert sorted(unwanted & whole_process_imports(args)) == []


def test_do_processes_leave_the_wal_to_each_other_and_lose_no_count(session: str, module_home: Path) -> None:
    """A shell loop of `deskctl do` (bin/deskctl, which ends in os._exit): each process leaves the ledger's WAL to
    the next instead of checkpointing and deleting it (four fsyncs a call; Ledger.close_for_exit), so the WAL is
    there between calls, is checkpointed away once past its bound, and never grows past it by more than a call's
    frames; every move is counted, as a fresh reader sees it, and the file is sound."""
    import sqlite3

    from deskctl.ledger._sqlite import KEEP_WAL_UNDER

    script = Path(sys.executable).with_name("deskctl")
    wal = module_home / "ledger.sqlite3-wal"
    _, before = _pointer_and_counts(session)
    calls = KEEP_WAL_UNDER // 4096 + 10  # a move writes one page (and its frame header): past the bound once
    sizes = []
    for n in range(calls):
        done = subprocess.run([sys.executable, str(script), "do", session, "move", str(n % 50), "7"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        sizes.append(wal.stat().st_size if wal.exists() else 0)
    assert sum(1 for size in sizes if size > 0) > calls // 2  # left for the next process
    assert any(later < earlier for earlier, later in itertools.pairwise(sizes))  # and put away past the bound
    assert max(sizes) < KEEP_WAL_UNDER + 64 * 1024
    _, after = _pointer_and_counts(session)
    assert after.get("move", 0) - before.get("move", 0) == calls
    conn = sqlite3.connect(module_home / "ledger.sqlite3")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
