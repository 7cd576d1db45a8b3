"""Helpers shared by the command modules: the ``--json`` option, printing data to stdout, number flags."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from deskctl.cli._output import echo_json, iso_time
from deskctl.providers import DEFAULT_PROVIDER

__all__ = ["Number", "SuggestingGroup", "UnknownCommand", "desktop_options", "echo_json", "iso_time", "json_option",
           "note"]

F = TypeVar("F", bound=Callable[..., Any])


def json_option(func: F) -> F:
    """``--json``: print one machine-readable document on stdout (errors as ``{"error": {...}}``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")(func)


def note(message: str) -> None:
    """A message for the person (progress, hints): stderr, never stdout."""
    click.echo(message, err=True)


class Number(click.types.ParamType[float | int, Any]):
    """A flag's number, checked against the bound ``name`` of :data:`deskctl.limits.BOUNDS` while the flags are
    parsed, before anything runs: NaN, infinities and values out of range are usage errors (exit 2) with the
    bound's code. A ``[defaults]`` key of the configuration goes through the same check."""

    name = "number"

    def __init__(self, bound: str) -> None:
        self.bound = bound

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | int:
        from deskctl.limits import check_number

        flag = (param.opts[0] if param.opts else param.name) if param is not None else "value"
        number: float | int = check_number(self.bound, value, what=flag or "value")
        return number


class UnknownCommand(click.UsageError):
    """A command or action name that does not exist (``usage.unknown_command`` with ``--json``)."""


class SuggestingGroup(click.Group):
    """A group that answers an unknown subcommand with the closest names (also for lazily listed commands,
    which click's own suggestion does not see)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        name = args[0] if args else ""
        if (name and not name.startswith("-") and not ctx.resilient_parsing
                and self.get_command(ctx, name) is None):
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            hint = (" Did you mean " + " or ".join(repr(c) for c in close) + "?") if close else ""
            raise UnknownCommand(f"No such command {name!r}.{hint}", ctx=ctx)
        return super().resolve_command(ctx, args)


def provider_help() -> str:
    """The ``--provider`` help: the registry's names and aliases (no provider module is imported for it)."""
    from deskctl.providers import ALIASES, PROVIDERS

    aliases = ", ".join(f"{alias} for {name}" for alias, name in ALIASES.items())
    return f"Provider: {', '.join(PROVIDERS)} (aliases {aliases}); `deskctl providers` says what each offers."


def desktop_options(func: F) -> F:
    """The flags of a command that makes a desktop (``up``, ``mcp``): what ``spec_from_flags`` reads."""
    decorators = [
        click.option("--provider", "-p", default=DEFAULT_PROVIDER, show_default=True, envvar="DESKCTL_PROVIDER",
                     show_envvar=True, help=provider_help()),
        click.option("--platform", default="ubuntu", show_default=True, envvar="DESKCTL_PLATFORM", show_envvar=True,
                     help="ubuntu, windows or macos (aliases linux, win, mac)."),
        click.option("--geometry", "-g", default="1024x768", show_default=True, envvar="DESKCTL_GEOMETRY",
                     show_envvar=True, help="Screen size WxH, or 'native' for the provider's own size."),
        click.option("--window-geometry", help="Start-URL browser window WxH[+X+Y]."),
        click.option("--start-url", help="Open a browser at this URL when the desktop is up."),
        click.option("--window-manager/--no-window-manager", default=False, help="Run a window manager."),
        click.option("--ttl", envvar="DESKCTL_TTL", show_envvar=True,
                     help="Lifetime before the reaper may end it (90s, 15m, 2h; more than 0); default 1h."),
        click.option("--max-minutes", type=Number("max_minutes"), envvar="DESKCTL_MAX_MINUTES", show_envvar=True,
                     help="End the desktop after this many minutes."),
        click.option("--max-usd", type=Number("max_usd"), envvar="DESKCTL_MAX_USD", show_envvar=True,
                     help="Refuse, or end the desktop, past this cost."),
        click.option("--budget", envvar="DESKCTL_BUDGET", show_envvar=True, help="Shared budget to charge."),
        click.option("--unknown-cost", type=click.Choice(["refuse", "allow"]), envvar="DESKCTL_UNKNOWN_COST",
                     show_envvar=True,
                     help="With a money cap, refuse (default) or allow a provider whose price is unknown."),
        click.option("--label", "labels", multiple=True, help="Label KEY=VALUE (repeatable)."),
        click.option("--option", "-o", "options", multiple=True,
                     help="Provider option KEY=VALUE (repeatable; an option the provider does not read is an error)."),
        click.option("--host", envvar="DESKCTL_SSH_HOST", show_envvar=True, help="ssh: user@host[:port]."),
        click.option("--accept-new-host-key", is_flag=True, help="ssh: trust and record an unknown host key."),
        click.option("--ready-timeout", type=Number("ready_timeout"), default=120.0, show_default=True,
                     help="Seconds to wait for ready."),
        # a plain string: what cannot be a recording directory is usage.bad_record_dir, as documented
        click.option("--record", type=str,
                     help="Record a trajectory of every action into this directory (docs/recording.md)."),
        click.option("--record-settle", type=Number("record_settle"), default=0.0, show_default=True,
                     help="Seconds the after shot of a recorded action may wait for the screen to change."),
        click.option("--video", is_flag=True,
                     help="With --record: also record the session's screen as DIR/video.mp4 (needs ffmpeg)."),
        click.option("--video-fps", type=int, default=None, help="Video frames a second, 1-30 [default: 10]."),
        click.option("--video-max-seconds", type=float, default=None,
                     help="The video ends after this many seconds (the session goes on) [default: 3600]."),
        click.option("--video-max-mb", type=float, default=None,
                     help="The video ends at this file size in MiB [default: 1024]."),
    ]
    for decorate in reversed(decorators):
        func = decorate(func)
    return func
