"""The harness verbs of issue 14 through the real `deskctl` entry point on real Xvfb desktops: `exec` with
--cwd/--env/--background, `cp` of a tree both ways, `do` clipboard / launch / windows / wait-for / open-url and
clicks at the pointer; bad input refused with its code before a desktop is reached."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from _cli import deskctl
from _small_disk import small_disk
from deskctl.ledger import open_ledger
from deskctl.providers._x11 import X11Address, read_cookie
from probe import Probe

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")


@pytest.fixture
def sid() -> Iterator[str]:
    """A detached xvfb desktop for one test, brought down after it."""
    session = deskctl("up", "--geometry", "640x480", check=True).stdout.strip()
    try:
        yield session
    finally:
        deskctl("down", session)


# -- bad input ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        # refused before the ledger is read: the id does not exist, yet the error is about the flag
        (["exec", "dk-missing", "--env", "1A=x", "--", "true"], "usage.bad_env", "invalid environment variable"),
        (["exec", "dk-missing", "--env", "A-B=x", "--", "true"], "usage.bad_env", "'A-B'"),
        (["exec", "dk-missing", "--env", "NOVALUE", "--", "true"], "usage.bad_env", "not of the form KEY=VALUE"),
        (["exec", "dk-missing", "--user", "a b", "--", "true"], "usage.bad_user", "invalid user name"),
        (["exec", "dk-missing", "--timeout", "0", "--", "true"], "usage.bad_limit", "greater than 0"),
        (["exec", "dk-missing", "--", "true"], "usage.not_found", "no session 'dk-missing'"),
        (["cp", "a", "b"], "usage.invalid", "neither 'a' nor 'b' is on a desktop"),
        (["cp", "dk-a:/x", "dk-b:/y"], "usage.invalid", "are both on a desktop"),
        (["cp", "dk-a:", "/tmp"], "usage.invalid", "names no path on the desktop"),
        (["cp", "/no/such/source", "dk-missing:/tmp/"], "usage.no_such_file", "/no/such/source"),
        (["cp", "dk-missing:/etc/hostname", "."], "usage.not_found", "no session 'dk-missing'"),
        (["do", "dk-missing", "click", "5"], "usage.invalid", "give both X and Y, or neither"),
        (["do", "dk-missing", "scroll", "1", "2", "3", "4"], "usage.invalid", "not 4 numbers"),
        (["do", "dk-missing", "wait-for", "x", "--timeout", "0"], "usage.bad_limit", "greater than 0"),
        (["do", "dk-missing", "clipboard"], "usage.not_found", "no session 'dk-missing'"),
        (["do", "dk-missing", "launch"], "usage.missing_argument", "APP"),
    ],
)
def test_bad_input_is_exit_2_with_a_stable_code(args: list[str], code: str, fragment: str) -> None:
    proc = deskctl(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    if code != "usage.missing_argument":  # click's own parse errors print click's usage text
        assert f"({code})" in proc.stderr and fragment in proc.stderr, proc.stderr
    at = 3 if args[0] == "do" else 2  # deskctl's own flags go before an exec'd command's `--`
    as_json = deskctl(*args[:at], "--json", *args[at:])
    assert as_json.returncode == 2
    doc = json.loads(as_json.stdout)
    assert doc["error"]["code"] == code and fragment in doc["error"]["message"]


def test_cp_of_an_existing_source_to_an_unknown_session_is_not_found(tmp_path: Path) -> None:
    source = tmp_path / "f.txt"
    source.write_text("x")
    proc = deskctl("cp", str(source), "dk-missing:/tmp/")
    assert proc.returncode == 2 and "(usage.not_found)" in proc.stderr


def test_exec_with_a_bad_env_runs_nothing_on_a_live_desktop(sid: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = deskctl("exec", sid, "--env", "GOOD=1", "--env", "2BAD=x", "--", "touch", str(marker))
    assert proc.returncode == 2 and "(usage.bad_env)" in proc.stderr
    assert not marker.exists()


# -- exec options ---------------------------------------------------------------------------------------------------
def test_exec_cwd_env_and_json(sid: str, tmp_path: Path) -> None:
    where = tmp_path / "work dir"
    where.mkdir()
    line = 'pwd; printf "%s|%s|%s\\n" "$DK_A" "$DK_B" "${DK_EMPTY-unset}"'
    proc = deskctl("exec", sid, "--cwd", str(where), "--env", "DK_A=two words", "--env", "DK_B=a=b $HOME",
                   "--env", "DK_EMPTY=", "--", line)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{where}\ntwo words|a=b $HOME|\n"
    doc = json.loads(deskctl("exec", sid, "--json", "--cwd", str(where), "--", "pwd; exit 4").stdout)
    assert (doc["exit_code"], doc["stdout"]) == (4, f"{where}\n")
    missing = deskctl("exec", sid, "--cwd", str(where / "missing"), "--", "touch", str(where / "ran"))
    assert missing.returncode != 0
    assert not (where / "ran").exists()


def test_exec_background_prints_the_pid_at_once(sid: str) -> None:
    # --timeout is shorter than the command: a foreground run would end with 124
    started = deskctl("exec", sid, "--background", "--timeout", "20", "--", "sleep", "120")
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.strip())
    try:
        assert deskctl("exec", sid, "--", f"kill -0 {pid}").returncode == 0
        assert "sleep" in deskctl("exec", sid, "--", f"cat /proc/{pid}/cmdline").stdout
    finally:
        deskctl("exec", sid, "--", f"kill {pid}")
    doc = json.loads(deskctl("exec", sid, "--background", "--json", "--", "sleep 120").stdout)
    assert set(doc) == {"pid"} and isinstance(doc["pid"], int) and doc["pid"] > 1
    deskctl("exec", sid, "--", f"kill {doc['pid']}")


# -- cp -------------------------------------------------------------------------------------------------------------
def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def _make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024 + 5))
    (root / "sub" / "ünïcode ✓.txt").write_text("héllo\n", encoding="utf-8")
    (root / "sub" / "deeper" / "empty").write_bytes(b"")
    (root / "with space's.txt").write_text("quoted\n")


def test_cp_a_tree_to_the_desktop_and_back(sid: str, tmp_path: Path) -> None:
    source = tmp_path / "data"
    _make_tree(source)
    remote = tmp_path / "on-the-desktop"  # the xvfb desktop's machine is this one
    # a trailing '/' on the desktop: into it, under the source's name (made, with its parents)
    up = deskctl("cp", str(source), f"{sid}:{remote}/", "--json")
    assert up.returncode == 0, up.stderr
    doc = json.loads(up.stdout)
    assert doc == {"id": sid, "source": str(source), "destination": f"{sid}:{remote}/data",
                   "files": 4, "bytes": sum(len(c) for c in _tree(source).values() if c is not None)}
    big = hashlib.sha256((source / "big.bin").read_bytes()).hexdigest()
    seen = deskctl("exec", sid, "--", "sha256sum", f"{remote}/data/big.bin")
    assert seen.stdout.split()[0] == big, seen.stderr
    listed = deskctl("exec", sid, "--cwd", f"{remote}/data", "--", "find . -mindepth 1 | sort").stdout.splitlines()
    assert sorted(p[2:] for p in listed) == sorted(_tree(source))

    # without a trailing '/': the destination is the copy itself
    assert deskctl("cp", str(source), f"{sid}:{remote}/renamed").returncode == 0
    assert _tree(remote / "renamed") == _tree(source)

    # back: into an existing local directory by stat, under the remote source's name
    back = tmp_path / "back"
    back.mkdir()
    down = deskctl("cp", f"{sid}:{remote}/data", str(back))
    assert down.returncode == 0, down.stderr
    assert down.stderr == f"copied {sid}:{remote}/data to {back}/data (4 files, {doc['bytes']} bytes)\n"
    assert _tree(back / "data") == _tree(source)
    # to a path that does not exist: that path is the copy
    assert deskctl("cp", f"{sid}:{remote}/data", str(tmp_path / "fresh" / "copy")).returncode == 0
    assert _tree(tmp_path / "fresh" / "copy") == _tree(source)


def test_cp_one_file_both_ways_and_a_missing_remote_source(sid: str, tmp_path: Path) -> None:
    local = tmp_path / "note.txt"
    local.write_text("first\n")
    remote = tmp_path / "remote"
    assert deskctl("cp", str(local), f"{sid}:{remote}/").returncode == 0
    assert deskctl("exec", sid, "--", "cat", f"{remote}/note.txt").stdout == "first\n"
    local.write_text("second\n")  # a file that is there is replaced
    assert deskctl("cp", str(local), f"{sid}:{remote}/note.txt").returncode == 0
    assert deskctl("exec", sid, "--", "cat", f"{remote}/note.txt").stdout == "second\n"
    out = tmp_path / "out"
    out.mkdir()
    assert deskctl("cp", f"{sid}:{remote}/note.txt", str(out)).returncode == 0
    assert (out / "note.txt").read_text() == "second\n"
    missing = deskctl("cp", f"{sid}:{remote}/nope", str(out), "--json")
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["error"]["code"] == "usage.no_such_file"
    assert sorted(p.name for p in out.iterdir()) == ["note.txt"]


def test_cp_of_a_folder_into_itself_is_refused_both_ways(sid: str, tmp_path: Path) -> None:
    # the xvfb desktop's filesystem is this host's: a folder copied under itself would copy what it is making
    folder = tmp_path / "a"
    (folder / "sub").mkdir(parents=True)
    (folder / "f.txt").write_text("x\n")
    before = _tree(folder)
    for args in ([str(folder), f"{sid}:{folder}/sub/inner"], [f"{sid}:{folder}", str(folder / "sub" / "inner")],
                 [f"{sid}:{folder}", str(folder / "sub")]):  # an existing folder: into it, as folder/sub/a
        proc = deskctl("cp", *args, "--json")
        assert proc.returncode == 2, (args, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "usage.bad_path" and "into itself" in error["message"], error
    # onto itself: one clear sentence, not a list of characters
    same = deskctl("cp", str(folder), f"{sid}:{folder}")
    assert same.returncode == 2
    assert same.stderr == (f"error [xvfb]: cannot copy {folder} onto itself ({folder} is the same path) "
                           "(usage.bad_path)\n  remedy: name another destination\n"), same.stderr
    assert _tree(folder) == before


def test_cp_of_a_folder_that_does_not_fit_leaves_no_half_folder(sid: str, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    with small_disk(tmp_path / "small") as small:  # full in the middle of the copy
        (small / "keep.txt").write_text("keep\n")
        proc = deskctl("cp", str(tree), f"{sid}:{small}/tree", "--json")
        assert proc.returncode == 2, proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "usage.bad_path" and "No space left" in error["message"], error
        assert sorted(p.name for p in small.iterdir()) == ["keep.txt"]
        # into a folder that is there, what was there stays
        (small / "tree").mkdir()
        (small / "tree" / "mine.txt").write_text("mine\n")
        assert deskctl("cp", str(tree), f"{sid}:{small}/tree").returncode == 2
        assert (small / "tree" / "mine.txt").read_text() == "mine\n"


# -- do: clipboard, launch, windows, wait-for, open-url ------------------------------------------------------------
def test_do_clipboard_set_and_print(sid: str) -> None:
    text = "héllo\nwörld ✓ 'q' \"d\" $x"
    assert deskctl("do", sid, "clipboard-set", text, check=True).stdout == ""
    assert deskctl("do", sid, "clipboard", check=True).stdout == text  # as it is: no newline added
    assert json.loads(deskctl("do", sid, "clipboard", "--json", check=True).stdout) == {
        "id": sid, "action": "clipboard", "ok": True, "text": text}
    assert deskctl("exec", sid, "--", "xclip", "-selection", "clipboard", "-o").stdout == text


def test_do_clipboard_set_of_a_mebibyte_round_trips(sid: str) -> None:
    # once passed in the command line: 100 KiB was past Linux's limit on one argument
    text = ("0123456789abcdef" * 65536)[:-3] + "✓\n"
    assert len(text.encode()) > 1024 * 1024
    # the CLI's own argument has that limit too: TEXT "-" reads stdin
    put = subprocess.run([sys.executable, "-m", "deskctl", "do", sid, "clipboard-set", "-"], input=text,
                         capture_output=True, text=True, timeout=120)
    assert (put.returncode, put.stdout) == (0, ""), put.stderr
    assert deskctl("do", sid, "clipboard", check=True).stdout == text
    assert deskctl("exec", sid, "--", "ls /tmp | grep -c deskctl-clip- || true").stdout == "0\n"  # nothing left


def test_a_failed_clipboard_set_says_what_the_tool_said_redacted(sid: str, tmp_path: Path) -> None:
    # an xclip that fails as a broken display makes it fail (the xvfb desktop's commands get deskctl's PATH)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xclip").write_text("#!/bin/sh\necho 'Error: Can'\\''t open display: token=hunter2-abcdef' >&2\n"
                                   "exit 1\n")
    (bin_dir / "xclip").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for text in ("short", "x" * 200_000):  # in the command line, and as a file
        failed = subprocess.run([sys.executable, "-m", "deskctl", "do", sid, "clipboard-set", "-"], input=text,
                                capture_output=True, text=True, timeout=120, env=env)
        assert failed.returncode == 20, failed.stderr
        assert "Error: Can't open display: token=***" in failed.stderr, failed.stderr
        assert "hunter2" not in failed.stderr


def test_do_launch_of_a_missing_program_is_a_usage_error(sid: str) -> None:
    for app in ("no-such-program-deskctl", "/no/such/dir/app", ""):
        proc = deskctl("do", sid, "launch", app, "--json")
        assert proc.returncode == 2, (app, proc.stdout, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "usage.no_such_program", error
    said = deskctl("do", sid, "launch", "no-such-program-deskctl")
    assert said.stderr.startswith("error [xvfb]: no program 'no-such-program-deskctl' on the desktop "
                                  "(usage.no_such_program)\n"), said.stderr
    browser = deskctl("do", sid, "open-url", "https://example.invalid/", "--browser", "no-such-browser", "--json")
    assert browser.returncode == 2 and json.loads(browser.stdout)["error"]["code"] == "usage.no_such_program"


def test_do_launch_then_wait_for_and_windows(sid: str) -> None:
    title = f"deskctl-cli-{uuid.uuid4().hex[:8]}"
    launched = deskctl("do", sid, "launch", "xmessage", "-title", title, "hello from the CLI")
    assert launched.returncode == 0, launched.stderr
    pid = int(launched.stdout.strip())
    try:
        waited = deskctl("do", sid, "wait-for", title[:-2], "--timeout", "60")
        assert (waited.returncode, waited.stdout) == (0, title + "\n"), waited.stderr
        assert title in deskctl("do", sid, "windows", check=True).stdout.splitlines()
        doc = json.loads(deskctl("do", sid, "windows", "--json", check=True).stdout)
        assert doc["action"] == "windows" and title in doc["titles"]
        found = json.loads(deskctl("do", sid, "wait-for", title, "--json", check=True).stdout)
        assert found == {"id": sid, "action": "wait-for", "ok": True, "title": title, "window": title}
    finally:
        deskctl("exec", sid, "--", f"kill {pid}")
    gone = f"no-such-window-{uuid.uuid4().hex}"
    late = deskctl("do", sid, "wait-for", gone, "--timeout", "1")
    assert late.returncode == 6
    assert late.stderr == f"error [xvfb]: a window titled {gone!r} did not appear within 1s (wait.timeout)\n"
    late_json = deskctl("do", sid, "wait-for", gone, "--timeout", "1", "--json")
    assert late_json.returncode == 6 and json.loads(late_json.stdout)["error"]["code"] == "wait.timeout"


def test_do_open_url_hands_the_url_to_the_browser(sid: str, tmp_path: Path) -> None:
    browser = tmp_path / "browser.sh"
    browser.write_text('#!/bin/sh\nprintf "%s" "$1" > "$(dirname "$0")/opened"\n'
                       'exec xmessage -title "opened $1" "$1"\n')
    browser.chmod(0o755)
    url = f"https://example.invalid/path?q={uuid.uuid4().hex[:6]}&x=1"
    assert deskctl("do", sid, "open-url", url, "--browser", str(browser), check=True).stdout == ""
    # the browser's xmessage ends with the desktop's X server when the fixture brings it down
    assert deskctl("do", sid, "wait-for", f"opened {url}", "--timeout", "60").returncode == 0
    assert (tmp_path / "opened").read_text() == url


@pytest.mark.parametrize("url", ["not a url", "example.com", "https://", "file:relative.html", "mailto:a@b"])
def test_do_open_url_refuses_what_is_no_url_before_the_browser_runs(sid: str, tmp_path: Path, url: str) -> None:
    browser = tmp_path / "browser.sh"
    browser.write_text('#!/bin/sh\nprintf "%s" "$1" > "$(dirname "$0")/opened"\n')
    browser.chmod(0o755)
    proc = deskctl("do", sid, "open-url", url, "--browser", str(browser), "--json")
    assert proc.returncode == 2, proc.stderr  # once: exit 0, and the opener failed unseen on the desktop
    assert json.loads(proc.stdout)["error"]["code"] == "usage.bad_url"
    assert not (tmp_path / "opened").exists()


# -- do: clicks and scrolls at the pointer ------------------------------------------------------------------------
def test_do_click_and_scroll_at_the_pointer(sid: str) -> None:
    with open_ledger() as book:
        record = book.get(sid)
    assert record is not None and record.handle is not None
    data = record.handle["data"]
    with Probe.open(X11Address(display=str(data["display"])), read_cookie(data["cookie_file"])) as probe:
        deskctl("do", sid, "move", "123", "145", check=True)
        clicked = json.loads(deskctl("do", sid, "click", "--json", check=True).stdout)
        assert clicked == {"id": sid, "action": "click", "ok": True, "x": None, "y": None, "button": "left",
                           "space": None}
        deskctl("do", sid, "scroll", "2", check=True)  # one number: DY, at the pointer
        deskctl("do", sid, "right-click", check=True)
        deskctl("do", sid, "scroll", "300", "200", "-1", check=True)  # the old form still works
        probe.wait_for(lambda p: len(p.releases()) >= 5, "a click, two wheel clicks down, a right click, one up")
        assert [(e.button, e.pos) for e in probe.presses()] == [(1, (123, 145)), (5, (123, 145)), (5, (123, 145)),
                                                                (3, (123, 145)), (4, (300, 200))]
