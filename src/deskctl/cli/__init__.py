"""The ``deskctl`` command line.

One module per command group under ``deskctl.cli``; each is imported only when its command runs, so
``deskctl --help`` stays fast. Data goes to stdout, messages to stderr. Every failure goes through one
abort path (:func:`main`): a :class:`~deskctl.errors.DeskctlError` prints its message (or, with ``--json``,
``{"error": {...}}``) and exits with the error's exit code.

This package imports no click: the click application is :mod:`deskctl.cli._app` (``deskctl.cli.cli``), loaded
for every command but the plain forms of ``deskctl do ID ACTION ...``, which :mod:`deskctl.cli._do_fast` runs
without it (a whole process per action: click's import was a third of the call), from a table made from the
click commands; anything else it leaves to click (help, parse errors), so the output is the same either way.
Likewise ``deskctl down ID...`` (:mod:`deskctl.cli._down`: a fleet's teardown is one process per desktop) and
``deskctl screenshot ID -o FILE`` (:mod:`deskctl.cli._shot`: a shell agent's look at the screen), ``deskctl cp
SRC DEST`` (:mod:`deskctl.cli._cp`: a script's copy, as it would run ``docker cp``), the plain forms of ``deskctl
up`` (:mod:`deskctl.cli._up_fast`: a desktop per process) and ``deskctl ls`` / ``deskctl cost`` with ``--json``
(:mod:`deskctl.cli._report`: a script's poll, a CI job's summary); and ``deskctl --help`` / ``--version``
(:func:`_plain_top`: click's own text, written out by ``python -m deskctl.cli._do_gen``).
"""

from __future__ import annotations

import sys

from deskctl.cli._output import Reported, emit_error
from deskctl.errors import DeskctlError, Interrupted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.cli._app import LazyGroup as LazyGroup
    from deskctl.cli._app import cli as cli
    from deskctl.ledger import Ledger

__all__ = ["cli", "close_ledger", "entry", "main", "one_shot_ledger"]

#: command name -> ("module:attribute", one-line help). Add a line to register a command.
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("deskctl.cli.session_cmds:up", "Bring a detached desktop up and print its id."),
    "down": ("deskctl.cli.session_cmds:down", "Destroy desktops by id (or --all)."),
    "ls": ("deskctl.cli.session_cmds:ls", "List sessions with their state and spend so far."),
    "screenshot": ("deskctl.cli.session_cmds:screenshot", "Save a PNG screenshot of a desktop."),
    "do": ("deskctl.cli.do_cmds:do", "Send one action (click, type, key, ...) to a desktop."),
    "exec": ("deskctl.cli.session_cmds:exec_cmd", "Run a command on a desktop."),
    "cp": ("deskctl.cli.cp_cmds:cp", "Copy files or directories to or from a desktop (docker cp syntax)."),
    "reap": ("deskctl.cli.session_cmds:reap", "Destroy leftovers of dead or expired sessions."),
    "providers": ("deskctl.cli.session_cmds:providers", "List providers and their capabilities."),
    "cost": ("deskctl.cli.cost_cmds:cost", "Summarise session time and cost."),
    "budget": ("deskctl.cli.cost_cmds:budget", "Set, show and check shared budgets."),
    "preflight": ("deskctl.cli.preflight_cmds:preflight", "Check, without creating anything, what can run."),
    "compat": ("deskctl.cli.preflight_cmds:compat", "Print the compatibility matrix with its sources."),
    "credentials": ("deskctl.cli.preflight_cmds:credentials", "Show where each credential comes from."),
    "login": ("deskctl.cli.preflight_cmds:login", "Store a provider secret in the OS keyring."),
    "logout": ("deskctl.cli.preflight_cmds:logout", "Remove a provider secret from the OS keyring."),
    "image": ("deskctl.cli.image_cmds:image", "Build and list desktop container images."),
    "trajectory": ("deskctl.cli.trajectory_cmds:trajectory", "Summarise or view a recorded trajectory."),
    "mcp": ("deskctl.cli.mcp_cmds:mcp", "Serve one desktop to an MCP client (stdio or streamable HTTP)."),
    "view": ("deskctl.cli.view_cmds:view", "Watch (and with --control, drive) a desktop in a browser."),
    "snapshot": ("deskctl.cli.snapshot_cmds:snapshot", "Snapshot a desktop; list (ls) or delete (rm) snapshots."),
    "restore": ("deskctl.cli.snapshot_cmds:restore", "Put a desktop back as it was at a snapshot."),
    "ledger": ("deskctl.cli.ledger_cmds:ledger", "Check the ledger's integrity (and repair a damaged SQLite file)."),
}



#: whether this process is the ``deskctl`` command's (:func:`entry`), which ends in ``os._exit``; in-process callers
#: of :func:`main` (tests, harnesses) keep False
_ENDS_IN_EXIT = False


def close_ledger(book: Ledger) -> None:
    """Close ``book`` at the end of a one-shot command (``do``, ``screenshot``, ``ls``, ``cost``): in the
    ``deskctl`` command's own process, by the process's exit (:meth:`~deskctl.ledger.Ledger.close_for_exit`: the
    SQLite WAL stays for the next call, which spares each call four syncs); elsewhere, closed as usual."""
    if _ENDS_IN_EXIT:
        book.close_for_exit()
    else:
        book.close()


class one_shot_ledger:  # lower case: used as a function, ``with one_shot_ledger() as book``
    """``with one_shot_ledger() as book``: :func:`~deskctl.ledger.open_ledger`, let go by :func:`close_ledger` at
    the end of the block (a class: a one-shot process imports no contextlib)."""

    __slots__ = ("_book",)

    def __enter__(self) -> Ledger:
        from deskctl.ledger import open_ledger

        self._book = open_ledger()
        return self._book

    def __exit__(self, *exc: object) -> None:
        close_ledger(self._book)


def __getattr__(name: str) -> Any:
    if name in ("cli", "LazyGroup"):
        from deskctl.cli import _app

        return getattr(_app, name)
    raise AttributeError(f"module 'deskctl.cli' has no attribute {name!r}")


def wants_json(argv: list[str]) -> bool:
    return "--json" in argv


#: the commands whose plain forms run without click: the module whose ``run(args)`` handles them (true when it
#: did; false sends the call on to click), imported only for its own command
_FAST_PATHS = {"do": "deskctl.cli._do_fast", "screenshot": "deskctl.cli._shot", "cp": "deskctl.cli._cp",
               "up": "deskctl.cli._up_fast", "down": "deskctl.cli._down", "ls": "deskctl.cli._report",
               "cost": "deskctl.cli._report"}


def _plain_top(arg: str) -> bool:
    """``deskctl --help`` (``-h``) and ``deskctl --version`` printed without click, where click would print the
    same: the help as click wrote it at the width it gives a terminal of 80 columns or more
    (:mod:`deskctl.cli._help_text`, rewritten by ``python -m deskctl.cli._do_gen``; a test compares the two), the
    version as click's ``version_option`` words it. False (click prints it) on a narrower terminal, and under
    shell completion (``_DESKCTL_COMPLETE``), which click answers instead."""
    import os

    if arg not in ("--help", "-h", "--version") or "_DESKCTL_COMPLETE" in os.environ:
        return False
    if arg == "--version":
        from deskctl import __version__

        text = f"deskctl, version {__version__}\n"
    else:
        import shutil

        if shutil.get_terminal_size().columns < 80:  # click's test: min(columns, 80) - 2
            return False
        from deskctl.cli._help_text import TOP as text
    sys.stdout.write(text)
    return True


def main(argv: list[str] | None = None, *, fast: bool = True) -> Any:
    """Entry point of the console script: the single abort path, and the only caller of ``sys.exit``.
    ``fast=False`` sends ``deskctl do``, ``up``, ``down``, ``screenshot``, ``cp``, ``ls`` and ``cost`` through click
    too (the reference their fast paths are tested against). A command ends by returning (exit 0), by raising a
    :class:`~deskctl.errors.DeskctlError` (printed here, exit by its code) or, when it printed its outcome
    itself, by raising :class:`~deskctl.cli._output.Reported` (exit by its code)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)
    code = 0
    try:
        if fast and len(args) == 1 and _plain_top(args[0]):
            sys.exit(0)
        module = _FAST_PATHS.get(args[0]) if fast and args else None
        if module is not None and __import__(module, fromlist=["run"]).run(args):
            sys.exit(0)
        if _ENDS_IN_EXIT:
            __import__("gc").enable()  # off for the fast paths (entry); click's commands may live long (view, mcp)
        from deskctl.cli._app import run_click

        code = run_click(args, as_json=as_json)
    except Reported as done:
        code = done.code
    except DeskctlError as err:
        emit_error(err, as_json=as_json)
        code = err.exit_code
    except KeyboardInterrupt:
        emit_error(Interrupted("interrupted"), as_json=as_json)
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # the one place an unexpected error becomes exit 1
        from deskctl._redact import redact

        internal = DeskctlError(f"internal error: {type(exc).__name__}: {redact(str(exc))}")
        emit_error(internal, as_json=as_json)
        if "DESKCTL_DEBUG" in __import__("os").environ:
            raise
        code = 1
    sys.exit(code)


def entry() -> None:
    """The console script (``deskctl``, ``python -m deskctl``): :func:`main`, then out of the process without the
    interpreter's teardown, which frees every object and module one by one (about 8 ms of CPU, an eighth of a
    ``deskctl do`` call, and a fleet's ``down`` pays it per desktop). The one-shot fast paths run without the cyclic
    garbage collector (a process of a few dozen milliseconds; its passes over the objects that imports make were
    a thirtieth of a ``deskctl do``); every command click runs, long-lived ones among them, has it on. What an
    orderly exit owes is done first: stdout and stderr flushed, the ``atexit`` functions run. A thread that still
    runs (none of deskctl's commands leaves one) gets the ordinary exit, which waits for it. In-process callers of
    :func:`main` (tests, harnesses) keep the ordinary ``SystemExit`` and their collector as it is."""
    import os

    global _ENDS_IN_EXIT
    _ENDS_IN_EXIT = True
    __import__("gc").disable()  # no cycle collections while the fast paths import (main turns it back on for click)
    try:
        main()
        code: Any = 0
    except SystemExit as done:
        code = done.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (deskctl ls | head) or a closed stream: nothing to flush
            pass
    # threading's threads are the ones the ordinary exit waits for; without threading imported there are none
    threading = sys.modules.get("threading")
    if threading is not None and any(t.is_alive() and not t.daemon for t in threading.enumerate()
                                     if t is not threading.main_thread()):
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    os._exit(code)
