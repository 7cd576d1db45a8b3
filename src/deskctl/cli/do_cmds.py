"""``deskctl do ID ACTION ...``: one click command per action of :mod:`deskctl.action_table`, made from its entry.

Nothing here names an action but two output hooks (:data:`_PLAIN`): an entry's parameters become the command's
arguments and options (``Param.cli``), its bounds click types that check them while parsing
(:class:`~deskctl.cli._common.Number`), its doc and details the help, and its result the output:

* no result: nothing on stdout; ``--json`` prints ``{"id", "action", "ok", **every parameter}`` (the convention
  the click-free path, :mod:`deskctl.cli._do_fast`, follows too);
* a result: printed (text as a line, a list one item a line, a point as ``X Y``); ``--json`` prints ``{"id",
  "action", "ok", **the arguments, result_key: the result}`` (the options, how it was done, are left out).

The optional arguments of an action are given all together or not at all (``click [X Y]``); the ``numbers``
form reads ``[X Y] [DY]`` (``scroll 3``, ``scroll 100 200 -3``); an action with a ``variadic`` parameter takes
everything after its arguments as that parameter (``launch APP ARGS...``, options before APP).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from deskctl.action_table import ACTIONS, ActionSpec, Param, invoke, jsonable, numbers_metavar
from deskctl.cli._common import Number, SuggestingGroup, echo_json, json_option, note
from deskctl.cli._do_fast import act as _act
from deskctl.cli._do_fast import attached as _attached
from deskctl.errors import UsageError

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["NEGATIVE_NUMBER", "ActionCommand", "command_for", "do"]

#: what an action command takes as a negative number, not an option (``scroll 100 100 -3``)
NEGATIVE_NUMBER = re.compile(r"^-\d+$")


class _DoGroup(SuggestingGroup):
    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("deskctl do", "SESSION_ID ACTION [ARGS]...")


class ActionCommand(click.Command):
    """An action whose arguments may be negative numbers (``scroll 100 100 -3``, ``click -5 10``): a ``-3`` is
    a value, not a flag; any other unknown ``-x`` is still an unknown option."""

    def __init__(self, *args: Any, spec: ActionSpec, **kwargs: Any) -> None:
        kwargs["context_settings"] = {**(kwargs.get("context_settings") or {}), "ignore_unknown_options": True}
        super().__init__(*args, **kwargs)
        self.spec = spec

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = set(ctx.help_option_names)
        for param in self.params:
            if isinstance(param, click.Option):
                known.update(param.opts, param.secondary_opts)
        for token in args:
            if token == "--":
                break
            if token.startswith("-") and len(token) > 1 and not NEGATIVE_NUMBER.match(token) \
                    and token.split("=", 1)[0] not in known:
                raise click.NoSuchOption(token, possibilities=sorted(known), ctx=ctx)
        return super().parse_args(ctx, args)


class _VariadicCommand(click.Command):
    """An action whose last parameter is the rest of the command line (``launch APP ARGS...``): everything after
    its arguments is that parameter's, options included (``--json`` goes before them)."""

    def __init__(self, *args: Any, spec: ActionSpec, **kwargs: Any) -> None:
        kwargs["context_settings"] = {**(kwargs.get("context_settings") or {}), "ignore_unknown_options": True,
                                      "allow_interspersed_args": False}
        super().__init__(*args, **kwargs)
        self.spec = spec


@click.group(cls=_DoGroup)
@click.argument("session_id")
@click.pass_context
def do(ctx: click.Context, session_id: str) -> None:
    """Send one action to a desktop: deskctl do ID click 10 20."""
    ctx.obj = session_id


# -- parameters ----------------------------------------------------------------------------------------------
def _click_type(param: Param, *, positional: bool) -> click.ParamType[Any, Any]:
    if param.kind in ("str", "json"):  # JSON as text: the Desktop method parses it (a bad one is its usage error)
        return click.STRING
    if param.kind in ("int", "float"):
        if param.bound is not None and not positional:
            return Number(param.bound)  # a flag is checked while parsing, with the bound's own code
        # a positional coordinate stays click's whole number: the desktop checks it (geometry.out_of_bounds)
        return click.INT if param.kind == "int" else click.FLOAT
    raise AssertionError(f"the CLI has no form for a {param.kind!r} parameter ({param.name}); give it cli='none' "
                         "or teach deskctl.cli.do_cmds the kind")


def _option_help(param: Param) -> str:
    return param.doc + ("" if not param.doc or param.doc.endswith(".") else ".")


def _parameters(spec: ActionSpec) -> list[click.Parameter]:
    taken = spec.params_on("cli")
    numbers = [p for p in taken if p.cli == "numbers"]
    assert not numbers or (len(numbers) >= 2 and len(numbers) != 4 and all(p.kind == "int" for p in numbers)), \
        f"{spec.name}: the numbers form is a point (two whole numbers) and at most one more, or two or more more"
    variadic = [p for p in taken if p.cli == "variadic"]
    assert len(variadic) <= 1 and all(p.kind == "strs" for p in variadic), \
        f"{spec.name}: one variadic parameter at most, a list of strings"
    params: list[click.Parameter] = []
    for p in taken:
        if p.cli == "argument":
            params.append(click.Argument([p.name], type=_click_type(p, positional=True), required=p.required))
        elif p.cli == "variadic":
            params.append(click.Argument([p.name], nargs=-1, type=click.UNPROCESSED))
        elif p.cli == "numbers" and p is numbers[0]:
            params.append(click.Argument(["numbers"], nargs=-1, type=click.INT, metavar=numbers_metavar(numbers)))
    for p in taken:
        if p.cli != "option":
            continue
        flag = "--" + p.name.replace("_", "-")
        if p.kind == "bool":
            assert p.default is False, f"{spec.name}.{p.name}: a flag is off unless given"
            params.append(click.Option([flag, p.name], is_flag=True, help=_option_help(p)))
        else:
            params.append(click.Option([flag, p.name], type=_click_type(p, positional=False), default=p.default,
                                       show_default=p.default is not None, help=_option_help(p)))
    return params


def _numbers(spec: ActionSpec, given: tuple[int, ...]) -> dict[str, Any]:
    """``[X Y] [REST...]``: nothing, the rest, the point, or the point and the rest."""
    numbers = [p for p in spec.params_on("cli") if p.cli == "numbers"]
    point, rest = numbers[:2], numbers[2:]
    if len(given) == len(point) + len(rest):
        chosen = numbers
    elif len(given) == len(point):
        chosen = point
    elif len(given) == len(rest):
        chosen = rest
    elif not given:
        chosen = []
    else:
        raise UsageError(f"{spec.cli_name} takes {numbers_metavar(numbers)}, not {len(given)} numbers",
                         code="usage.invalid")
    values: dict[str, Any] = {p.name: p.default for p in numbers}
    values.update(zip((p.name for p in chosen), given, strict=True))
    return values


def _all_or_none(spec: ActionSpec, values: dict[str, Any]) -> None:
    optional = [p.name for p in spec.params_on("cli") if p.cli == "argument" and not p.required]
    given = [name for name in optional if values.get(name) is not None]
    if given and len(given) != len(optional):
        shown = " and ".join(name.upper() for name in optional)
        where = " (the pointer's position)" if optional == ["x", "y"] else ""
        raise UsageError(f"give {'both ' if len(optional) == 2 else ''}{shown}, or neither{where}",
                         code="usage.invalid")


# -- output ----------------------------------------------------------------------------------------------------
def _plain(spec: ActionSpec, value: Any, values: dict[str, Any]) -> None:
    value = jsonable(value)
    if spec.result_fields:
        click.echo(" ".join(str(v) for v in value))
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, dict):
                click.echo(json.dumps(item, ensure_ascii=False))  # a window, a node: one JSON object a line
            else:
                click.echo(str(item))
    elif isinstance(value, dict):
        echo_json(value)
    elif value is not None:
        click.echo(str(value))


def _raw(spec: ActionSpec, value: Any, values: dict[str, Any]) -> None:
    sys.stdout.write(str(value))  # as it is: no newline added
    sys.stdout.flush()


def _pid(spec: ActionSpec, value: Any, values: dict[str, Any]) -> None:
    if value is not None:
        click.echo(str(value))
    else:
        note(f"{values['app']} started; the desktop did not tell its process id")


#: the two actions whose plain output is not the default (their docs say so)
_PLAIN: dict[str, Callable[[ActionSpec, Any, dict[str, Any]], None]] = {"clipboard_get": _raw, "launch": _pid}


def _document(spec: ActionSpec, session_id: str, value: Any, values: dict[str, Any]) -> dict[str, Any]:
    shown = {p.name: list(values[p.name]) if p.kind == "strs" else values[p.name]
             for p in spec.params_on("cli") if p.cli in ("argument", "variadic", "numbers")}
    doc: dict[str, Any] = {"id": session_id, "action": spec.cli_name, "ok": True, **shown}
    value = jsonable(value)
    if spec.result_fields:
        doc.update(zip(spec.result_fields, value, strict=True))
    else:
        assert spec.result_key is not None
        doc[spec.result_key] = value
    return doc


def _callback(spec: ActionSpec) -> Callable[..., None]:
    assert spec.result in ("none", "text", "json"), \
        f"{spec.name}: the CLI's do has no output for a {spec.result!r} result; teach deskctl.cli.do_cmds"

    def run(as_json: bool, **values: Any) -> None:
        session_id: str = click.get_current_context().obj
        if "numbers" in values:
            values.update(_numbers(spec, values.pop("numbers")))
        _all_or_none(spec, values)
        for p in spec.params_on("cli"):
            if p.stdin and values.get(p.name) == "-":
                values[p.name] = sys.stdin.read()
        ordered = {p.name: values[p.name] for p in spec.params_on("cli")}

        def apply(desk: Desktop) -> Any:
            return invoke(desk, spec, ordered)

        if spec.result == "none":
            _act(session_id, spec.cli_name, as_json, apply, ordered)
            return
        with _attached(session_id) as desk:
            value = apply(desk)
        if as_json:
            echo_json(_document(spec, session_id, value, ordered))
        else:
            _PLAIN.get(spec.name, _plain)(spec, value, ordered)

    return run


def command_for(spec: ActionSpec) -> click.Command:
    """The click command of ``deskctl do ID <spec.cli_name>``."""
    params = _parameters(spec)
    json_param = _json_param()
    variadic = any(p.cli == "variadic" for p in spec.params_on("cli"))
    cls = _VariadicCommand if variadic else ActionCommand
    return cls(spec.cli_name, callback=_callback(spec), params=[json_param, *params] if variadic
               else [*params, json_param], help=spec.help, short_help=spec.doc, spec=spec)


def _json_param() -> click.Parameter:
    """The ``--json`` option every command has (:func:`~deskctl.cli._common.json_option`), as a parameter."""

    def holder() -> None:
        pass

    params: list[click.Parameter] = json_option(holder).__click_params__  # type: ignore[attr-defined]
    return params[0]


for _spec in ACTIONS:
    if "cli" in _spec.surfaces:
        do.add_command(command_for(_spec), _spec.cli_name)
del _spec
