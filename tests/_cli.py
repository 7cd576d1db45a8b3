"""The real ``deskctl`` entry point for the CLI tests: exit codes and output as a user sees them.

:func:`deskctl` runs ``deskctl.cli.main(argv)`` in this process, with the environment, working folder, stdin,
stdout and stderr of a child process (click's own test isolation, the environment and folder put back
afterwards): the same single abort path, fast ``do``/``down`` paths and click application a process runs,
without starting Python and importing deskctl for each call. :func:`deskctl_process` is the real child process,
for the tests of the process itself (signals, what it leaves running, what it imports, its start-up) and for
calls made while other threads of the test run (a call from another thread always gets a process).
``DESKCTL_TEST_CLI=process`` sends every call to a child process (to tell an in-process artefact from a bug).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

#: ``python -c FAST_RUNNER fast|click ARGS...``: deskctl's main with its fast paths on or off, then the modules
#: the process imported, written to $DESKCTL_TEST_MODULES (the fast-path tests compare both ways and the imports).
#: Nothing is imported before main (json would load re, enum, functools and collections, which the one-shot paths
#: must not).
FAST_RUNNER = """
import os, sys
from deskctl.cli import main
try:
    main(sys.argv[2:], fast=sys.argv[1] == "fast")
finally:
    modules = sorted(sys.modules)
    import json
    with open(os.environ["DESKCTL_TEST_MODULES"], "w") as out:
        json.dump(modules, out)
"""

#: ``python -c IMPORTERS_RUNNER MODULE,MODULE,... ARGS...``: deskctl's main (fast paths on), and for each of the
#: modules named that the process imported, the deskctl module whose import statement loaded it first, in a line
#: ``IMPORTERS {"module": "deskctl.importer"}`` on stderr (a module that is not to come back names who brought it).
#: Nothing is imported before main but what the interpreter has loaded already (see FAST_RUNNER).
IMPORTERS_RUNNER = """
import sys
watched, seen = set(sys.argv[1].split(",")), {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in watched and name not in seen:
            frame = sys._getframe(1)
            while frame is not None and not frame.f_globals.get("__name__", "").startswith("deskctl"):
                frame = frame.f_back
            seen[name] = frame.f_globals["__name__"] if frame is not None else None
        return None
sys.meta_path.insert(0, Watch())
from deskctl.cli import main
try:
    main(sys.argv[2:])
finally:
    found = dict(seen)
    import json
    sys.stderr.write("IMPORTERS " + json.dumps(found) + "\\n")
"""


def fast_or_click(args: list[str], *, fast: bool, tmp_path: Path,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """``args`` run by :data:`FAST_RUNNER` in a child process, its fast paths on or off: its exit code, stdout,
    stderr and the modules it imported (written under ``tmp_path``)."""
    import json

    modules = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", FAST_RUNNER, "fast" if fast else "click", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DESKCTL_TEST_MODULES": str(modules), **(env or {})})
    return {"exit": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
            "modules": json.loads(modules.read_text())}


def importers(args: list[str], modules: list[str], cwd: Path | None = None) -> dict[str, str | None]:
    """For each of ``modules`` that the CLI process of ``args`` imported, the deskctl module that imported it first
    (:data:`IMPORTERS_RUNNER`); the process must succeed."""
    import json

    assert all(module and "," not in module for module in modules), modules
    proc = subprocess.run([sys.executable, "-c", IMPORTERS_RUNNER, ",".join(modules), *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("IMPORTERS ")]
    found: dict[str, str | None] = json.loads(line.removeprefix("IMPORTERS "))
    return found


def deskctl_process(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = False,
                    input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m deskctl ARGS`` as a child process with this process's environment plus ``env``; ``check``
    raises on a non-zero exit with deskctl's stderr in the message."""
    proc = subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd, input=input,
                          stdin=subprocess.DEVNULL if input is None else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"deskctl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def deskctl(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = False,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``deskctl ARGS`` through ``deskctl.cli.main`` in this process, as :func:`deskctl_process` would run it:
    this process's environment plus ``env``, in ``cwd``, ``input`` (or nothing) on stdin; the exit code is
    what ``main`` exits with."""
    if os.environ.get("DESKCTL_TEST_CLI") == "process" or threading.current_thread() is not threading.main_thread():
        # another thread's call: stdout, stderr, the environment and the folder are the process's own
        return deskctl_process(*args, env=env, cwd=cwd, check=check, input=input)
    from click.testing import CliRunner

    from deskctl.cli import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    code: int | str | None = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with CliRunner().isolation(input=input or "", env=env) as (out, err, _):
            try:
                main(list(args))
            except SystemExit as exit_:
                code = exit_.code
            finally:
                with contextlib.suppress(ValueError):  # a command may close its own stdout
                    sys.stdout.flush()
                    sys.stderr.flush()
            stdout, stderr = out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
    finally:
        os.chdir(saved_cwd)
        for key in [k for k in os.environ if k not in saved_env]:
            del os.environ[key]
        for key, value in saved_env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
    if isinstance(code, str):  # sys.exit("message"), as Python itself reports it
        stderr, code = stderr + code + "\n", 1
    proc = subprocess.CompletedProcess(["deskctl", *args], code or 0, stdout, stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"deskctl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


#: what no one-shot CLI process imports (issue 23): re, the json package and typing (a tenth of a `deskctl do`), and
#: the standard library's chain of enum, threading, contextlib, functools, collections, weakref and importlib
#: (a quarter: each of the first three imports functools, which imports collections): locks and events come from
#: deskctl._threads, the two string enums from deskctl._strenum, the ledger's driver without functools
ONE_SHOT_UNWANTED = frozenset({
    "re", "json", "typing", "shlex", "signal", "enum", "threading", "contextlib", "functools", "collections",
    "collections.abc", "weakref", "_weakrefset", "importlib", "warnings", "types", "operator", "keyword", "reprlib",
})
#: and what an action or a screenshot loads none of: extension modules for a rarely taken branch (math for one
#: rounding, errno and select with deskctl._fds for running out of descriptors), and the framebuffer file's mapping
#: (a one-shot screenshot asks the X server: one GetImage costs less than mapping the file once)
ACTION_UNWANTED = ONE_SHOT_UNWANTED | {"math", "errno", "select", "deskctl._fds", "deskctl.providers._framebuffer",
                                       "mmap"}


def whole_process_imports(args: list[str], cwd: Path | None = None) -> set[str]:
    """The modules the installed `deskctl ARGS` (bin/deskctl next to this interpreter, with .pyc files as a user
    has them) imports, from `python -X importtime`; the process must succeed."""
    script = Path(sys.executable).with_name("deskctl")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-X", "importtime", str(script), *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "deskctl.cli" in imported
    return imported
