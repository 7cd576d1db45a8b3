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

    python -m deskctl.cli._do_fast    # rewrite _do_table.py after changing an action's arguments
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from deskctl.cli._output import echo_json

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["act", "attached", "build_table", "parse", "run"]


@contextmanager
def attached(session_id: str) -> Iterator[Desktop]:
    """The running session ``session_id``, released (not destroyed) at the end of the ``with``."""
    from deskctl.ledger import open_ledger
    from deskctl.session import attach

    with open_ledger() as book:
        desk = attach(session_id, ledger=book)
        try:
            yield desk
        finally:
            desk.release()


def act(session_id: str, name: str, as_json: bool, apply: Callable[[Desktop], object],
        args: dict[str, Any]) -> None:
    """One action on a running desktop, and with ``as_json`` its document: what every ``deskctl do`` action
    does, on the click path and on this one."""
    from deskctl.core.x11 import prefer_wire

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


def parse(args: list[str]) -> tuple[str, str, dict[str, Any], bool] | None:
    """``(session id, action, its parameters, --json)`` for an argv click would parse into exactly that, or None
    when click is to handle it (anything but the plain forms, and every parse error)."""
    if len(args) < 3 or args[0] != "do" or args[1].startswith("-"):
        return None
    from deskctl.cli._do_table import NEGATIVE_NUMBER, VERBS

    session_id, name, rest = args[1], args[2], args[3:]
    spec = VERBS.get(name)
    if spec is None:
        return None
    import re

    negative = re.compile(NEGATIVE_NUMBER)

    def option_like(token: str) -> bool:  # what the action command treats as an option (not "-", not "-3")
        return token.startswith("-") and len(token) > 1 and not negative.match(token)

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


def run(args: list[str]) -> bool:
    """Run ``deskctl do`` for ``args`` without click; False (having done nothing) when click is to run it.
    Errors are raised, for the abort path of :func:`deskctl.cli.main`."""
    if "_DESKCTL_COMPLETE" in os.environ:  # shell completion is click's
        return False
    parsed = parse(args)
    if parsed is None:
        return False
    from deskctl.config import load_config

    try:
        config = load_config()
    except Exception:  # click's path reports it, the same way as for any other command
        return False
    if config.defaults:  # [defaults] may set an action's option: click applies them
        return False
    session_id, name, params, as_json = parsed
    from deskctl.cli._do_table import VERBS

    method: str = VERBS[name]["method"]
    act(session_id, name, as_json, lambda desk: getattr(desk, method)(**params), params)
    return True


# -- the table, made from the click commands ---------------------------------------------------------------
def build_table() -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments and options of every ``deskctl do`` action without a result, read from its click command,
    and the actions left to click with the reason (a parameter :func:`parse` would not read as click does)."""
    import click

    from deskctl.action_table import ACTIONS
    from deskctl.cli import do_cmds

    def kind(param: click.Parameter) -> str:
        if type(param.type) is click.types.IntParamType:
            return "int"
        if type(param.type) is click.types.StringParamType:
            return "str"
        raise ValueError(f"{param.name} is of type {param.type.name}")

    samples = {"int": "0", "str": "x"}
    verbs: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    context = click.Context(do_cmds.do, info_name="do")
    for spec in ACTIONS:
        if "cli" not in spec.surfaces:
            continue
        if spec.result != "none":
            skipped[spec.cli_name] = f"a {spec.result} result, printed by the click command"
            continue
        if any(p.py != p.name or p.stdin for p in spec.params_on("cli")):
            skipped[spec.cli_name] = "a parameter the Desktop method names otherwise, or that reads stdin"
            continue
        try:
            verbs[spec.cli_name] = {"method": spec.method,
                                    **_describe(spec.cli_name, context, do_cmds, kind, samples)}
        except ValueError as exc:
            skipped[spec.cli_name] = str(exc)
    return verbs, skipped


def _describe(name: str, context: Any, do_cmds: Any, kind: Callable[[Any], str],
              samples: dict[str, str]) -> dict[str, Any]:
    import click

    command = do_cmds.do.get_command(context, name)
    if not isinstance(command, do_cmds.ActionCommand):
        raise ValueError("not an action command")
    for param in command.params:
        if (param.callback is not None or not param.expose_value or param.envvar or param.multiple
                or param.nargs != 1 or param.is_eager or param.name is None
                or (isinstance(param, click.Option) and (param.secondary_opts or param.count or param.required
                                                         or param.prompt))):
            raise ValueError(f"{param.name}: a parameter kind the fast path does not parse")
    arguments = [param for param in command.params if isinstance(param, click.Argument)]
    given = [samples[kind(param)] for param in arguments]
    # the values the callback gets for options not given: click's own defaults, converted
    defaults = command.make_context(name, list(given), parent=context).params
    options: dict[str, dict[str, Any]] = {}
    for param in command.params:
        assert param.name is not None
        if not isinstance(param, click.Option):
            continue
        if param.is_flag:
            on = command.make_context(name, [*given, param.opts[0]], parent=context).params[param.name]
            if defaults[param.name] is not False or on is not True:
                raise ValueError(f"{param.name}: a flag that is not a plain on-switch")
            entry: dict[str, Any] = {"name": param.name, "type": "flag", "default": False}
        else:
            entry = {"name": param.name, "type": kind(param), "default": defaults[param.name]}
        for opt in param.opts:
            options[opt] = entry
    return {"arguments": [{"name": param.name, "type": kind(param)} for param in arguments], "options": options}


def render_table() -> str:
    """The source of ``_do_table.py``: one line per argument and option, in a stable order."""
    from deskctl.cli import do_cmds

    lines = ['"""Generated by ``python -m deskctl.cli._do_fast`` from the click commands of ``deskctl do``: the',
             "arguments and options of each action its click-free path takes. Do not edit; rewrite it.\"\"\"",
             "", "from typing import Any", "",
             "#: what the action commands take as a negative number, not an option",
             f"NEGATIVE_NUMBER = {do_cmds.NEGATIVE_NUMBER.pattern!r}", ""]
    verbs, skipped = build_table()
    lines += [f"# left to click: {name} ({reason})" for name, reason in sorted(skipped.items())]
    lines.append("VERBS: dict[str, Any] = {")
    for name, verb in sorted(verbs.items()):
        lines.append(f"    {name!r}: {{")
        lines.append(f'        "method": {verb["method"]!r},')
        lines.append('        "arguments": [')
        lines += [f"            {argument!r}," for argument in verb["arguments"]]
        lines.append("        ],")
        lines.append('        "options": {')
        lines += [f"            {opt!r}: {option!r}," for opt, option in sorted(verb["options"].items())]
        lines.append("        },")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines).replace("'", '"') + "\n"


if __name__ == "__main__":
    from pathlib import Path

    target = Path(__file__).with_name("_do_table.py")
    target.write_text(render_table())
    print(f"wrote {target}")
