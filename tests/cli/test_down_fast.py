"""`deskctl down ID...` without click (cli/_down.py): the same output, exit code and effect as through click for
the same argv, and no click import; anything but plain ids goes to click as before."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from _cli import FAST_RUNNER as _RUNNER
from _cli import deskctl_process as deskctl
from _cli import fast_or_click as _run
from _cli import importers
from _relay import pump
from deskctl.ledger import open_ledger


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "home"))


def _up() -> str:
    return deskctl("up", "--geometry", "320x240", check=True).stdout.strip()


def _status(sid: str) -> str:
    rows = json.loads(deskctl("ls", "--all", "--json", check=True).stdout)["sessions"]
    (status,) = [row["status"] for row in rows if row["id"] == sid]
    return str(status)


def test_down_of_running_sessions_is_the_same_without_click(tmp_path: Path) -> None:
    fast_id, click_id = _up(), _up()
    try:
        fast = _run(["down", fast_id], fast=True, tmp_path=tmp_path)
        through_click = _run(["down", click_id], fast=False, tmp_path=tmp_path)
    finally:
        deskctl("down", fast_id, click_id)
    assert fast["exit"] == through_click["exit"] == 0, fast["stderr"] + through_click["stderr"]
    assert fast["stderr"].replace(fast_id, "ID") == through_click["stderr"].replace(click_id, "ID")
    assert fast["stdout"] == through_click["stdout"] == ""
    assert "click" not in fast["modules"] and "click" in through_click["modules"]
    assert _status(fast_id) == _status(click_id) == "ended"


@pytest.mark.parametrize("tail", [["ENDED"], ["dk-0000000000"], ["ENDED", "dk-0000000000"],
                                  ["dk-0000000000", "dk-0000000001"]],
                         ids=["ended", "unknown", "ended and unknown", "two unknown"])
def test_ended_and_unknown_ids_are_the_same_without_click(tail: list[str], tmp_path: Path) -> None:
    ended = _up()
    deskctl("down", ended, check=True)
    args = ["down", *[ended if arg == "ENDED" else arg for arg in tail]]
    fast = _run(args, fast=True, tmp_path=tmp_path)
    through_click = _run(args, fast=False, tmp_path=tmp_path)
    assert {k: fast[k] for k in ("exit", "stdout", "stderr")} == \
        {k: through_click[k] for k in ("exit", "stdout", "stderr")}
    assert fast["exit"] == (0 if tail == ["ENDED"] else 2)
    assert "click" not in fast["modules"]


@pytest.mark.parametrize("tail", [[], ["--help"], ["--json", "dk-0000000000"], ["dk-0000000000", "--json"],
                                  ["--all"], ["--ignore-missing", "dk-0000000000"], ["-x"], [""]],
                         ids=lambda tail: " ".join(tail) or "(nothing)")
def test_what_the_fast_path_declines_click_answers_as_before(tail: list[str], tmp_path: Path) -> None:
    fast = _run(["down", *tail], fast=True, tmp_path=tmp_path)
    through_click = _run(["down", *tail], fast=False, tmp_path=tmp_path)
    assert {k: fast[k] for k in ("exit", "stdout", "stderr")} == \
        {k: through_click[k] for k in ("exit", "stdout", "stderr")}
    assert "click" in fast["modules"]
    assert fast["exit"] in (0, 2)


def test_config_defaults_go_through_click(tmp_path: Path) -> None:
    """`[defaults]` may set --ignore-missing: the fast path leaves such a call to click, which applies it."""
    config = tmp_path / "config.toml"
    config.write_text("[defaults]\nignore_missing = true\n")
    modules = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", _RUNNER, "fast", "down", "dk-0000000000"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DESKCTL_TEST_MODULES": str(modules), "DESKCTL_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "dk-0000000000: not in the ledger; ignored\n"
    assert "click" in json.loads(modules.read_text())


def test_down_loads_no_click_pydantic_or_dataclasses(tmp_path: Path) -> None:
    """A fleet's teardown is a `deskctl down` process per desktop: it imports what a destroy needs. dataclasses
    imports inspect (ast, dis, tokenize): a sixth of the process; the records on this path (the result, the rate,
    a budget's status) are deskctl._record classes. A module in this list showing up again is a regression of its
    per-call cost (bench/bench_fleet.py --downs)."""
    sid = _up()
    try:
        result = _run(["down", sid], fast=True, tmp_path=tmp_path)
    finally:
        deskctl("down", sid)
    assert result["exit"] == 0, result["stderr"]
    unwanted = {"click", "pydantic", "pydantic_core", "deskctl.spec", "deskctl.cli._app", "deskctl.cli.session_cmds",
                "dataclasses", "inspect", "ast", "tokenize", "Xlib", "deskctl.core.x11",
                "sqlite3.dbapi2", "datetime"}  # the ledger speaks _sqlite3 (see ledger/_sqlite.py)
    assert sorted(unwanted & set(result["modules"])) == []


def test_down_of_an_xvfb_desktop_loads_no_typing_or_signal() -> None:
    """As `deskctl do` (tests/cli/test_do_fast.py): typing is for the type checkers; the xvfb provider's SIGTERM and
    SIGKILL and the supervisor's handlers are ``_signal``'s (the names in its messages are its own table's)."""
    sid = _up()
    try:
        found = importers(["down", sid], ["typing", "signal"])
    finally:
        deskctl("down", sid)
    assert found == {}, found
    assert _status(sid) == "ended"


def test_down_of_an_xvfb_desktop_loads_none_of_the_provider_s_other_parts() -> None:
    """A destroy needs the provider's base (providers/xvfb/provider.py), its processes (_procs) and the display's
    lock files (display): not its preflight, browser, create (with spawn) or commands (with the shell lines), which
    the class takes when first used (providers/_later.py)."""
    unused = ["deskctl.providers.xvfb.preflight", "deskctl.providers.xvfb.browser", "deskctl.providers.xvfb.create",
              "deskctl.providers.xvfb.commands", "deskctl.providers.xvfb.spawn", "deskctl.core.shell"]
    sid = _up()
    try:
        found = importers(["down", sid], [*unused, "deskctl.providers._guest"])
    finally:
        deskctl("down", sid)
    assert found.get("deskctl.providers._guest") in (None, "deskctl.providers._x11provider"), found
    assert {module: found[module] for module in unused if module in found} == {}
    assert _status(sid) == "ended"


def test_down_of_an_xvfb_desktop_loads_no_actions_cookie_code_or_shutil() -> None:
    """Ending a desktop acts on nothing and reads no X cookie: the session's action classes (deskctl.actions) and
    the Xauthority code (deskctl.core.x11auth, with struct) are imported where a desktop is acted on or made. Its
    folder goes by deskctl.paths.remove_tree, not shutil (whose import brings bz2 and lzma)."""
    sid = _up()
    try:
        found = importers(["down", sid], ["deskctl.actions", "deskctl.core.x11auth", "struct", "shutil", "bz2"])
    finally:
        deskctl("down", sid)
    assert found == {}, found
    assert _status(sid) == "ended"


@contextmanager
def _engine_relay(path: Path) -> Iterator[list[bytearray]]:
    """A unix socket at ``path`` that relays every connection to the local Docker engine's socket, both ways; what
    each client sent, one bytearray per connection: what a process asked the engine, as it went."""
    from deskctl.providers.docker.engine_api import DEFAULT_SOCKET

    sent: list[bytearray] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.connect(DEFAULT_SOCKET)
            sent.append(bytearray())
            threading.Thread(target=pump, args=(client, engine, sent[-1].extend), daemon=True).start()
            threading.Thread(target=pump, args=(engine, client), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield sent
    finally:
        server.close()


@pytest.mark.docker
def test_docker_down_is_one_engine_request_and_loads_no_shutil(deskctl_home: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A docker desktop's `deskctl down`: one DELETE ?force=1 (the engine's 204 says the container is gone; an
    inspect after it could only say 404), its directories removed without shutil (whose import brings bz2, lzma
    and zlib), the engine's socket spoken without socket.py (its enums of constants: a twelfth of the process),
    and no PostgreSQL backend for a SQLite ledger: CPU is what 16 downs at once queue for on a small machine
    (bench/bench_fleet.py --downs)."""
    monkeypatch.setenv("DESKCTL_HOME", str(deskctl_home))  # short: the X socket's path under it is length-limited
    up = deskctl("up", "--provider", "docker", "--geometry", "320x240", check=True)
    sid = up.stdout.strip()
    with open_ledger() as book:
        record = book.get(sid)
    assert record is not None and record.handle is not None
    data = record.handle["data"]
    folders = [Path(data["session_dir"]), Path(data["fb_dir"])]
    assert all(folder.is_dir() for folder in folders)
    try:
        with _engine_relay(tmp_path / "engine.sock") as sent:
            result = _run(["down", sid], fast=True, tmp_path=tmp_path,
                          env={"DOCKER_HOST": f"unix://{tmp_path / 'engine.sock'}"})
    finally:
        deskctl("down", sid)
    requests = [f"{m[1].decode()} {m[2].decode()}" for stream in sent  # the request lines (no body has any)
                for m in re.finditer(rb"(?m)^([A-Z]+) (\S+) HTTP/1\.1\r$", bytes(stream))]
    assert result["exit"] == 0, result["stderr"]
    assert result["stderr"] == f"{sid}: destroyed ($0.0000)\n"
    assert [r.split("?")[0] for r in requests] == [f"DELETE /containers/{data['container']}"], requests
    assert "force=1" in requests[0]
    assert not any(folder.exists() for folder in folders)
    assert _status(sid) == "ended"
    unwanted = {"shutil", "bz2", "lzma", "socket", "selectors", "deskctl.ledger._postgres", "docker", "ssl",
                "sqlite3.dbapi2", "datetime",
                # pathlib (a tenth of the process with its urllib.parse and ipaddress, which engine_api.py's URL
                # quoting still loads): the ledger, the price catalog and the docker modules work with os.path strs
                "pathlib"}
    assert sorted(unwanted & set(result["modules"])) == []


#: the docker provider's modules a `deskctl down` of a docker desktop loads (and _redact, for its ledger events)
_DOCKER_DOWN_MODULES = ["deskctl.providers.docker", "deskctl.providers.docker.common",
                        "deskctl.providers.docker.provider", "deskctl.providers.docker.engine",
                        "deskctl.providers.docker.engine_api", "deskctl.providers.docker.engine_http",
                        "deskctl.providers.docker.watcher", "deskctl._redact"]


def _runtime_typing_imports(module: str) -> list[int]:
    """The lines of ``module`` that import typing other than under ``if TYPE_CHECKING:``."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    with open(spec.origin) as source:
        tree = ast.parse(source.read())
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            guarded |= {id(inner) for child in node.body for inner in ast.walk(child)}
    return [node.lineno for node in ast.walk(tree) if id(node) not in guarded and (
        (isinstance(node, ast.Import) and any(alias.name == "typing" for alias in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "typing"))]


@pytest.mark.docker
def test_docker_down_loads_only_what_a_destroy_needs(deskctl_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A docker desktop's `deskctl down` loads none of the provider's other parts (create, preflight, files,
    DevTools, the framebuffer, the watcher process's entry: provider.py takes their methods when first used), nor
    urllib.parse with ipaddress (the engine's URL and the request's quoting: engine_http.py), struct, or tarfile;
    and the docker modules it does load import typing only for annotations."""
    from _cli import importers

    monkeypatch.setenv("DESKCTL_HOME", str(deskctl_home))  # short: the X socket's path under it is length-limited
    sid = deskctl("up", "--provider", "docker", "--geometry", "320x240", check=True).stdout.strip()
    unwanted = ["deskctl.providers.docker.preflight", "deskctl.providers.docker.container",
                "deskctl.providers.docker.files", "deskctl.providers.docker.devtools",
                "deskctl.providers._framebuffer", "deskctl.providers.docker.watch",
                "deskctl.providers.docker.options", "deskctl.providers._tar", "tarfile",
                "urllib.parse", "ipaddress", "struct"]
    try:
        found = importers(["down", sid], unwanted + _DOCKER_DOWN_MODULES)
    finally:
        deskctl("down", sid)
    assert {name: found[name] for name in unwanted if name in found} == {}
    assert sorted(found) == sorted(_DOCKER_DOWN_MODULES)  # what the typing check below reads is what was loaded
    assert _status(sid) == "ended"
    assert {module: lines for module in _DOCKER_DOWN_MODULES
            if (lines := _runtime_typing_imports(module))} == {}


@pytest.mark.docker
def test_docker_one_shot_processes_load_none_of_the_unwanted_modules(deskctl_home: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As on xvfb (tests/cli/test_do_fast.py): the installed `deskctl` on a docker desktop, a whole process each for
    a click, a key, a screenshot and the down, loads none of ONE_SHOT_UNWANTED (the engine's JSON is _jsonc's, the
    provider's parts load when first used); the first three none of ACTION_UNWANTED either."""
    from _cli import ACTION_UNWANTED, ONE_SHOT_UNWANTED, whole_process_imports

    monkeypatch.setenv("DESKCTL_HOME", str(deskctl_home))  # short: the X socket's path under it is length-limited
    sid = deskctl("up", "--provider", "docker", "--geometry", "320x240", check=True).stdout.strip()
    try:
        for args in (["do", sid, "click", "5", "5"], ["do", sid, "key", "shift"],
                     ["screenshot", sid, "-o", str(tmp_path / "s.png")], ["down", sid]):
            unwanted = ONE_SHOT_UNWANTED if args[0] == "down" else ACTION_UNWANTED
            assert (args[0], sorted(unwanted & whole_process_imports(args))) == (args[0], [])
    finally:
        deskctl("down", sid)
    assert _status(sid) == "ended"
