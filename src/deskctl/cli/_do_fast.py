"""``deskctl do ID ACTION ARGS...`` without click.

An agent that drives a desktop through the CLI pays a whole process per action, and click's import alone was
a third of it. :func:`run` takes the plain forms of an action (the action's arguments and options, ``--json``)
and runs them through :func:`act`, the same code the click command runs. It reads the actions' arguments from
:mod:`deskctl.cli._do_table`, a table made from the click commands themselves (:func:`build_table`; a test
checks it is current), which are made from :mod:`deskctl.action_table`, so there is no second definition of an
action (and neither click nor the action table is imported on this path). Whatever it does not take as click would
(``--help``, a bad number, an argument left out or one too many, an unknown option, ``--``, ``[defaults]`` in a
config file) it leaves to click, untouched: help, parse errors and their exit codes come from click alone. It
takes an action only with all its arguments given, so a command that gives a left-out argument a meaning of its
own (a click at the pointer) keeps it.

An action runs as ``Desktop.<its method>(**its parameters)``, and its ``--json`` document is
``{"id", "action", "ok", **its parameters}``: the convention every click command of an action without a result
follows (test: both ways give the same output and the same effect for the same argv). The table holds every
such action whose parameters it can read as click does; :func:`build_table` says why it left out the others.

    python -m deskctl.cli._do_gen    # rewrite _do_table.py after changing an action's arguments
"""

from __future__ import annotations

import os

from deskctl.cli import close_ledger
from deskctl.cli._output import echo_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from deskctl.ledger import Ledger
    from deskctl.session import Desktop

__all__ = ["act", "attached", "parse", "run"]


def attached(session_id: str) -> _Attached:
    """The running session ``session_id`` (``with attached(ID) as desk``), released (not destroyed) at the end of
    the ``with``, and the ledger it was read from closed."""
    return _Attached(session_id)


class _Attached:
    """:func:`attached`'s ``with`` block (a class: a one-shot CLI process imports no contextlib)."""

    __slots__ = ("_book", "_desk", "_session_id")

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._book: Ledger | None = None
        self._desk: Desktop | None = None

    def __enter__(self) -> Desktop:
        from deskctl.ledger import open_ledger
        from deskctl.session import attach

        book = open_ledger()
        try:
            desk = attach(self._session_id, ledger=book)
        except BaseException:
            book.close()
            raise
        self._book, self._desk = book, desk
        return desk

    def __exit__(self, *exc: object) -> None:
        book, desk = self._book, self._desk
        self._book = self._desk = None
        assert book is not None and desk is not None, "left once, after it was entered"
        try:
            desk.release()
        finally:
            close_ledger(book)


def act(session_id: str, name: str, as_json: bool, apply: Callable[[Desktop], object],
        args: dict[str, Any]) -> None:
    """One action on a running desktop, and with ``as_json`` its document: what every ``deskctl do`` action
    does, on the click path and on this one."""
    from deskctl.core.x11wire import prefer_wire

    prefer_wire()  # one action in this process: X11 input over the wire, without python-xlib
    try:
        with attached(session_id) as desk:
            apply(desk)
    finally:
        prefer_wire(False)  # a process that goes on (a harness calling main()) gets full drivers again
    if as_json:
        echo_json({"id": session_id, "action": name, "ok": True, **args})


def _convert(kind: str, raw: str) -> Any:
    """A value as click's INT or STRING type converts it; ValueError when click would refuse it."""
    return int(raw) if kind == "int" else raw


def negative_number(token: str) -> bool:
    """Whether the action command takes ``token`` as a negative number (``scroll 100 100 -3``): a match of its
    ``NEGATIVE_NUMBER`` (``^-\\d+$``: a minus, Unicode decimal digits, a final newline as ``$`` allows), without
    importing re for one pattern (tests/cli/test_do_fast.py holds the two to the same answers)."""
    digits = token[1:-1] if token.endswith("\n") else token[1:]
    return token.startswith("-") and digits.isdecimal()


def parse(args: list[str]) -> tuple[str, str, dict[str, Any], bool] | None:
    """``(session id, action, its parameters, --json)`` for an argv click would parse into exactly that, or None
    when click is to handle it (anything but the plain forms, and every parse error)."""
    if len(args) < 3 or args[0] != "do" or args[1].startswith("-"):
        return None
    from deskctl.cli._do_table import VERBS

    session_id, name, rest = args[1], args[2], args[3:]
    spec = VERBS.get(name)
    if spec is None:
        return None

    def option_like(token: str) -> bool:  # what the action command treats as an option (not "-", not "-3")
        return token.startswith("-") and len(token) > 1 and not negative_number(token)

    options: dict[str, dict[str, Any]] = spec["options"]
    values = {option["name"]: option["default"] for option in options.values()}
    positional: list[str] = []
    index = 0
    try:
        while index < len(rest):
            token = rest[index]
            index += 1
            if not option_like(token):
                positional.append(token)
                continue
            name_part, equals, explicit = token.partition("=")
            option = options.get(name_part) if equals and token.startswith("--") else options.get(token)
            if option is None:
                return None
            if option["type"] == "flag":
                if equals:
                    return None
                values[option["name"]] = True
                continue
            if not equals:
                if index == len(rest) or option_like(rest[index]):
                    return None
                explicit = rest[index]
                index += 1
            values[option["name"]] = _convert(option["type"], explicit)
        arguments: list[dict[str, Any]] = spec["arguments"]
        if len(positional) != len(arguments):  # an argument left out may mean something to the command: click's
            return None
        for argument, raw in zip(arguments, positional, strict=True):
            values[argument["name"]] = _convert(argument["type"], raw)
    except ValueError:
        return None
    as_json = bool(values.pop("as_json", False))
    return session_id, name, values, as_json


def clickless() -> bool:
    """Whether a command parsed by a fast path may run without click: not during shell completion (click's), and
    no ``[defaults]`` in deskctl.toml (they may set a command's options: click applies them; a config that does not
    load is reported by click's path, the same way as for any other command)."""
    if "_DESKCTL_COMPLETE" in os.environ:
        return False
    from deskctl.config import load_config

    try:
        config = load_config()
    except Exception:
        return False
    return not config.defaults


def run(args: list[str]) -> bool:
    """Run ``deskctl do`` for ``args`` without click; False (having done nothing) when click is to run it.
    Errors are raised, for the abort path of :func:`deskctl.cli.main`."""
    parsed = parse(args)
    if parsed is None or not clickless():
        return False
    session_id, name, params, as_json = parsed
    from deskctl.cli._do_table import VERBS

    method: str = VERBS[name]["method"]
    act(session_id, name, as_json, lambda desk: getattr(desk, method)(**params), params)
    return True
