"""The console script's way out (``deskctl.cli.entry``): it skips the interpreter's teardown, and still leaves
nothing undone: the whole output flushed into a pipe, the exit code main chose, the atexit functions run, and a
thread that still runs waited for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent  # the console script beside this interpreter


def test_the_whole_output_goes_through_a_pipe_with_the_exit_code() -> None:
    listed = subprocess.run([str(BIN / "deskctl"), "providers", "--json"], capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert {"docker", "xvfb", "ssh"} <= {p["name"] for p in json.loads(listed.stdout)["providers"]}
    refused = subprocess.run([sys.executable, "-m", "deskctl", "up", "--geometry", "5x5", "--json"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert json.loads(refused.stdout)["error"]["code"] == "usage.bad_geometry"


def test_atexit_functions_run_and_a_running_thread_is_waited_for(tmp_path: Path) -> None:
    code = f"""
import atexit, sys, threading, time
atexit.register(lambda: open({str(tmp_path / 'atexit')!r}, 'w').write('ran'))
def late():
    time.sleep(0.5)
    open({str(tmp_path / 'thread')!r}, 'w').write('done')
threading.Thread(target=late).start()
sys.argv = ['deskctl', '--version']
from deskctl.cli import entry
entry()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ})
    assert done.returncode == 0, done.stderr
    assert "version" in done.stdout
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "done"


def test_without_a_thread_the_process_ends_through_os_exit(tmp_path: Path) -> None:
    # an object whose finaliser the interpreter's teardown would run: skipped, so the teardown was skipped
    code = f"""
import sys
class Marker:
    def __del__(self, _open=open):
        _open({str(tmp_path / 'teardown')!r}, 'w').write('ran')
keep = Marker()
sys.argv = ['deskctl', '--version']
from deskctl.cli import entry
entry()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "teardown").exists()


def test_the_fast_paths_run_without_the_cycle_collector_and_click_with_it(tmp_path: Path) -> None:
    """entry() turns the cyclic garbage collector off for the one-shot fast paths (a few dozen milliseconds of
    imports) and main() on again before click runs a command, which may live long (view, mcp); an in-process
    caller of main() keeps its collector as it was."""
    probe = tmp_path / "gc_probe.py"
    probe.write_text("import gc, sys\n"
                     "def run(args):\n"
                     "    sys.stdout.write(f'fast:{gc.isenabled()}\\n')\n"
                     "    return args[1:] == ['taken']\n")

    def run(how: str, answer: str) -> list[str]:
        code = f"""
import atexit, gc, sys
sys.path.insert(0, {str(tmp_path)!r})
import deskctl.cli as cli
cli._FAST_PATHS['providers'] = 'gc_probe'
atexit.register(lambda: sys.stdout.write(f'end:{{gc.isenabled()}}\\n'))
sys.argv = ['deskctl', 'providers', {answer!r}]
if {how!r} == 'entry':
    cli.entry()
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
"""
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return [line for line in done.stdout.splitlines() if line.startswith(("fast:", "end:"))]

    assert run("entry", "taken") == ["fast:False", "end:False"]  # the fast path ran, the process ended
    assert run("entry", "declined") == ["fast:False", "end:True"]  # click ran the command (an error: no matter)
    assert run("main", "taken") == ["fast:True", "end:True"]  # main in-process: the caller's collector untouched
    assert run("main", "declined") == ["fast:True", "end:True"]
