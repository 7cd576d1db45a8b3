"""Many desktops in one process: every descriptor deskctl (and python-xlib under it) waits on may be numbered
1024 or more, where select() refuses to work; and a process that runs out of descriptors gets a coded
``capacity.file_descriptors`` error with nothing left behind.

Each case runs in a child process (its own descriptor table and open-file limit), on real Xvfb servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _procs import xvfb_servers_under

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")

# Fills the descriptor table up to number 1100 with /dev/null, then opens, drives and closes desktops: every
# socket, pipe and pidfd deskctl makes after that is numbered above 1024.
_HIGH_DESCRIPTORS = """
import json, os, sys
import deskctl
padding = []
while not padding or padding[-1] < 1100:
    padding.append(os.open("/dev/null", os.O_RDONLY))
desks = [deskctl.open_desktop("xvfb", geometry="320x240", preflight=False) for _ in range(3)]
numbers = []
for desk in desks:
    desk.click(5, 5)
    desk.type("a")
    shot = desk.screenshot()
    frame = desk.raw_frame()
    numbers.append([shot.width, shot.height, frame.width])
ids = [desk.id for desk in desks]
for desk in desks:
    desk.close()
print(json.dumps({"ids": ids, "sizes": numbers}))
"""

# Opens and closes one desktop (so every module is imported), leaves exactly N descriptors free (N from
# argv), then tries to open a desktop: it either works or fails with
# a deskctl error; prints the outcome.
_FEW_DESCRIPTORS = """
import json, os, resource, sys
import deskctl
from deskctl.errors import DeskctlError
free = int(sys.argv[1])
from deskctl.ledger import open_ledger
book = open_ledger()  # the ledger's own file first: the test is about the desktop's descriptors
deskctl.open_desktop("xvfb", geometry="320x240", preflight=False, ledger=book).close()  # every import done
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
padding = []
try:
    while True:
        padding.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for _ in range(free):
    os.close(padding.pop())
try:
    desk = deskctl.open_desktop("xvfb", geometry="320x240", preflight=False, ledger=book)
except DeskctlError as err:
    for fd in padding:
        os.close(fd)
    print(json.dumps({"code": err.code, "message": err.message}))
else:
    for fd in padding:
        os.close(fd)
    desk.close()
    print(json.dumps({"code": None, "id": desk.id}))
"""


def _run(script: str, home: Path, *args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          env=dict(os.environ, DESKCTL_HOME=str(home)), timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _statuses(home: Path) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-m", "deskctl", "ls", "--all", "--json"], capture_output=True,
                          text=True, env=dict(os.environ, DESKCTL_HOME=str(home)), timeout=60)
    assert done.returncode == 0, done.stderr
    return {row["id"]: row["status"] for row in json.loads(done.stdout)["sessions"]}


def test_desktops_work_when_their_descriptors_are_numbered_above_1024(tmp_path: Path) -> None:
    result = _run(_HIGH_DESCRIPTORS, tmp_path)
    assert result["sizes"] == [[320, 240, 320]] * 3
    statuses = _statuses(tmp_path)
    assert sorted(statuses) == sorted(result["ids"])  # type: ignore[arg-type]
    assert set(statuses.values()) == {"ended"}
    assert xvfb_servers_under(tmp_path) == {}


def test_running_out_of_descriptors_is_a_capacity_error_and_leaves_nothing(tmp_path: Path) -> None:
    outcomes = []
    for free in range(40):
        outcome = _run(_FEW_DESCRIPTORS, tmp_path, str(free))
        outcomes.append(outcome["code"])
        assert outcome["code"] in (None, "capacity.file_descriptors"), outcome
        assert xvfb_servers_under(tmp_path) == {}
        if outcome["code"] is None:
            break
    assert outcomes[0] == "capacity.file_descriptors", outcomes
    assert outcomes[-1] is None, f"no desktop opened even with 40 descriptors free: {outcomes}"
    statuses = _statuses(tmp_path)
    assert set(statuses.values()) <= {"ended", "failed"}, statuses


def test_the_reserve_is_released_for_a_cleanup_and_taken_back_after_it() -> None:
    """``with spare_descriptors():`` (what a cleanup after running out of descriptors runs in) closes the reserve
    for its block, and takes it back at its end, also when the block raises."""
    code = textwrap.dedent("""
        import json, os
        from deskctl._fds import raise_open_file_limit, spare_descriptors

        def count():
            return len(os.listdir("/proc/self/fd"))

        before = count()
        raise_open_file_limit()
        held = count() - before
        seen = []
        with spare_descriptors():
            seen.append(count() - before)
        try:
            with spare_descriptors():
                seen.append(count() - before)
                raise ValueError("cleanup failed")
        except ValueError:
            pass
        print(json.dumps({"held": held, "inside": seen, "after": count() - before}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"held": 8, "inside": [0, 0], "after": 8}
