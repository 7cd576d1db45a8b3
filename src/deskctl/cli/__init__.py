"""The ``deskctl`` command line.

One module per command group under ``deskctl.cli``; each is imported only when its command runs, so
``deskctl --help`` stays fast. Data goes to stdout, messages to stderr. Every failure goes through one
abort path (:func:`main`): a :class:`~deskctl.errors.DeskctlError` prints its message (or, with ``--json``,
``{"error": {...}}``) and exits with the error's exit code.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import click

from deskctl.cli._common import SuggestingGroup, UnknownCommand
from deskctl.errors import DeskctlError, Interrupted

__all__ = ["cli", "main"]

#: command name -> ("module:attribute", one-line help). Add a line to register a command.
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("deskctl.cli.session_cmds:up", "Bring a detached desktop up and print its id."),
    "down": ("deskctl.cli.session_cmds:down", "Destroy desktops by id (or --all)."),
    "ls": ("deskctl.cli.session_cmds:ls", "List sessions with their state and spend so far."),
    "screenshot": ("deskctl.cli.session_cmds:screenshot", "Save a PNG screenshot of a desktop."),
    "do": ("deskctl.cli.session_cmds:do", "Send one action (click, type, key, ...) to a desktop."),
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
}


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
    ctx.obj = config


def wants_json(argv: list[str]) -> bool:
    return "--json" in argv


def emit_error(err: DeskctlError, *, as_json: bool) -> None:
    from deskctl.credentials import redact

    if as_json:
        click.echo(json.dumps(err.to_dict()), err=False)
        return
    where = f" [{err.provider}]" if err.provider else ""
    click.echo(f"error{where}: {redact(err.message)} ({err.code})", err=True)
    if err.remedy:
        click.echo(f"  remedy: {redact(err.remedy)}", err=True)


def _usage_code(exc: click.ClickException) -> str:
    """The stable code of a parse error click raised (the most specific class first)."""
    for kind, code in ((click.exceptions.NoSuchOption, "usage.unknown_option"),
                       (UnknownCommand, "usage.unknown_command"),
                       (click.exceptions.MissingParameter, "usage.missing_argument"),
                       (click.exceptions.BadParameter, "usage.bad_value")):
        if isinstance(exc, kind):
            return code
    return "usage.invalid"


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script: the single abort path, and the only caller of ``sys.exit``."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)
    try:
        # with standalone_mode=False click returns (not raises) the code of a command's ctx.exit(N)
        returned = cli.main(args=args, prog_name="deskctl", standalone_mode=False)
        if isinstance(returned, int) and not isinstance(returned, bool) and returned:
            sys.exit(returned)
    except DeskctlError as err:
        emit_error(err, as_json=as_json)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        emit_error(Interrupted("interrupted"), as_json=as_json)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        if as_json:
            click.echo(json.dumps({"error": {"code": _usage_code(exc), "message": exc.format_message(),
                                             "provider": None, "remedy": "see --help"}}))
        else:
            exc.show()
        sys.exit(2 if exc.exit_code in (1, 2) else exc.exit_code)
    except KeyboardInterrupt:
        emit_error(Interrupted("interrupted"), as_json=as_json)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # the one place an unexpected error becomes exit 1
        from deskctl.credentials import redact

        internal = DeskctlError(f"internal error: {type(exc).__name__}: {redact(str(exc))}")
        emit_error(internal, as_json=as_json)
        if "DESKCTL_DEBUG" in __import__("os").environ:
            raise
        sys.exit(1)
    sys.exit(0)
