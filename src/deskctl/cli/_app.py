"""The click application behind ``deskctl`` (:func:`deskctl.cli.main` runs it): the top-level group, which
imports each command module only when its command runs, and click's parse errors as deskctl's usage errors."""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING, NoReturn

import click

from deskctl.cli import COMMANDS
from deskctl.cli._common import SuggestingGroup, UnknownCommand
from deskctl.cli._output import Reported, echo, emit_error
from deskctl.errors import DeskctlError, Interrupted

if TYPE_CHECKING:
    from deskctl.config import Config

__all__ = ["App", "LazyGroup", "cli", "current_app", "run_click"]


class App:
    """The application object every command finds in ``ctx.obj`` (hatch's shape): the configuration the command
    runs with, read once per process, and the command's way out besides returning: :meth:`abort` (an error) and
    :meth:`exit` (an outcome it printed itself), both ending at the one abort path, :func:`deskctl.cli.main`."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def abort(self, error: DeskctlError, *, reported: bool = False) -> NoReturn:
        """End the command with ``error``; ``reported``: its ``--json`` document carries the error already, so
        only its exit code is left to give."""
        if reported:
            raise Reported(error.exit_code)
        raise error

    def exit(self, code: int) -> NoReturn:
        """End the command with exit code ``code``, its output written."""
        raise Reported(code)


def current_app() -> App:
    """The :class:`App` of the running command (one made from the configuration outside a command)."""
    ctx = click.get_current_context(silent=True)
    app = ctx.find_object(App) if ctx is not None else None
    if app is None:
        from deskctl.config import load_config

        app = App(load_config())
    return app


def _available(target: str) -> bool:
    from importlib.util import find_spec

    return find_spec(target.split(":", 1)[0]) is not None


class LazyGroup(SuggestingGroup):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (target, _) in COMMANDS.items() if _available(target))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or not _available(entry[0]):
            return None
        module_name, _, attr = entry[0].partition(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="deskctl")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """deskctl: desktops for computer-use agents, preflighted, pinned, cleaned up and metered.

    \b
    Exit codes: 0 ok, 1 internal, 2 usage, 3 preflight, 4 budget, 5 cleanup incomplete,
    6 wait timed out, 20 infrastructure, 130/143 interrupted (after cleanup).

    Option precedence: flags > environment > ./deskctl.toml > ~/.config/deskctl/config.toml > defaults.
    A key of the [defaults] table is an option's long name and sets it for every command that has it.

    Shell completion: eval "$(_DESKCTL_COMPLETE=bash_source deskctl)" (zsh_source, fish_source).
    """
    from deskctl.config import load_config

    config = load_config()
    if config.defaults and not ctx.resilient_parsing:
        from deskctl.cli._spec import defaults_map

        ctx.default_map = defaults_map(ctx, cli, config)
    ctx.obj = App(config)


def _usage_code(exc: click.ClickException) -> str:
    """The stable code of a parse error click raised (the most specific class first)."""
    for kind, code in ((click.exceptions.NoSuchOption, "usage.unknown_option"),
                       (UnknownCommand, "usage.unknown_command"),
                       (click.exceptions.MissingParameter, "usage.missing_argument"),
                       (click.exceptions.BadParameter, "usage.bad_value")):
        if isinstance(exc, kind):
            return code
    return "usage.invalid"


def run_click(args: list[str], *, as_json: bool) -> int:
    """Run ``args`` through click and return the exit code; click's own outcomes (an abort, an exit code, a parse
    error) become deskctl's here, and a :class:`~deskctl.errors.DeskctlError` (or
    :class:`~deskctl.cli._output.Reported`) goes on to the abort path of :func:`deskctl.cli.main`."""
    try:
        # with standalone_mode=False click returns (not raises) the code of a command's ctx.exit(N)
        returned = cli.main(args=args, prog_name="deskctl", standalone_mode=False)
        if isinstance(returned, int) and not isinstance(returned, bool) and returned:
            return returned
        return 0
    except click.exceptions.Abort:
        emit_error(Interrupted("interrupted"), as_json=as_json)
        return 130
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        if as_json:
            echo(json.dumps({"error": {"code": _usage_code(exc), "message": exc.format_message(),
                                       "provider": None, "remedy": "see --help"}}))
        else:
            exc.show()
        return 2 if exc.exit_code in (1, 2) else exc.exit_code
