"""``deskctl preflight``, ``compat``, ``credentials``, ``login``, ``logout``.

Domain logic lives in :mod:`deskctl.checks` and :mod:`deskctl.credentials`; this module parses flags,
prints data on stdout and messages on stderr. No value of a secret is ever printed.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from deskctl.cli._common import Number, echo_json, json_option, note
from deskctl.errors import UsageError

__all__ = ["compat", "credentials", "login", "logout", "preflight"]

@click.command("preflight")
@click.option("--platform", "platform_name", default="ubuntu", show_default=True, envvar="DESKCTL_PLATFORM",
              show_envvar=True, help="Desktop platform: ubuntu, windows, macos (aliases linux, win, mac).")
@click.option("--provider", "providers", multiple=True, envvar="DESKCTL_PROVIDER", show_envvar=True,
              help="Check only this provider (repeatable); all must be ready. Default: every provider that "
                   "serves the platform.")
@click.option("--agent", envvar="DESKCTL_AGENT", show_envvar=True,
              help="Harbor agent that will drive the desktop (computer-1, oracle, nop, ...).")
@click.option("--task-os", envvar="DESKCTL_TASK_OS", show_envvar=True,
              help="Harbor task OS: linux or windows. Default: the platform's own (windows for a Windows desktop).")
@click.option("--geometry", default="1024x768", show_default=True, envvar="DESKCTL_GEOMETRY", show_envvar=True,
              help="Screen size WxH, or 'native' for the provider's own.")
@click.option("--max-minutes", type=Number("max_minutes"), envvar="DESKCTL_MAX_MINUTES", show_envvar=True,
              help="Longest the session may run (for the cost projection).")
@click.option("--max-usd", type=Number("max_usd"), envvar="DESKCTL_MAX_USD", show_envvar=True,
              help="Cost cap: fail when the projected cost would pass it.")
@click.option("--timeout", type=Number("preflight_timeout"), default=10.0, show_default=True,
              envvar="DESKCTL_PREFLIGHT_TIMEOUT", show_envvar=True, help="Seconds each check may take.")
@click.option("--option", "-o", "options", multiple=True,
              help="Provider option KEY=VALUE for the named providers, as `deskctl up -o` (repeatable).")
@click.option("--host", envvar="DESKCTL_SSH_HOST", show_envvar=True, help="ssh: user@host[:port].")
@json_option
def preflight(platform_name: str, providers: tuple[str, ...], agent: str | None, task_os: str | None,
              geometry: str, max_minutes: float | None, max_usd: float | None, timeout: float,
              options: tuple[str, ...], host: str | None, as_json: bool) -> None:
    """Check, without creating anything, which providers can serve a desktop.

    The [defaults] and [providers.NAME] tables of the configuration apply as they do to `deskctl up`.

    \b
    Exit 0 when at least one provider is ready (every named one, with --provider), 3 when none is,
    2 for a usage error.
    """
    from deskctl.checks.compat import providers_for
    from deskctl.checks.runner import PreflightRequest
    from deskctl.checks.runner import preflight as run_preflight
    from deskctl.cli._app import current_app
    from deskctl.cli._spec import provider_options, spec_from_flags
    from deskctl.providers import DEFAULT_PROVIDER, resolve_name

    config = current_app().config
    names = [resolve_name(p) for p in providers]
    base = spec_from_flags(config, provider=names[0] if names else DEFAULT_PROVIDER, platform=platform_name,
                           geometry=geometry, max_minutes=max_minutes, max_usd=max_usd)
    if options and not names:
        raise UsageError("-o applies to the named providers: add --provider NAME", code="usage.bad_option")
    considered = names or providers_for(base.platform)
    flagged = names or ["ssh"]  # without --provider, --host (or DESKCTL_SSH_HOST) is the ssh provider's
    per_provider = {name: provider_options(name, config, options if name in names else (),
                                           host=host if name in flagged else None) for name in considered}
    request = PreflightRequest(
        base,
        providers=tuple(names) or None,
        agent=agent,
        task_os=task_os,
        timeout=timeout,
        provider_options=per_provider,
    )
    report = run_preflight(request)
    if as_json:
        document = report.to_dict()
        failure = report.first_failure()
        if not report.ok and failure is not None:
            from deskctl.checks.runner import error_for

            document["error"] = error_for(failure).to_dict()["error"]
        echo_json(document)
    else:
        click.echo(report.to_text())
    if report.exit_code:
        raise click.exceptions.Exit(report.exit_code)


@click.command("compat")
@click.option("--platform", "platform_name", envvar="DESKCTL_PLATFORM", show_envvar=True,
              help="Show only rows for this platform.")
@json_option
def compat(platform_name: str | None, as_json: bool) -> None:
    """Print the compatibility matrix, every row with its source and date.

    Extend or override it with a file of the same shape: $DESKCTL_COMPAT, else $DESKCTL_HOME/compat.json.
    """
    from deskctl.checks.compat import geometry_table, load_matrix, platform_table, platforms_for
    from deskctl.providers import known_provider_names
    from deskctl.spec import Platform

    matrix = load_matrix()
    only = Platform.parse(platform_name).value if platform_name else None
    installed = known_provider_names()

    def keep(row: dict[str, Any]) -> bool:
        if only is None:
            return True
        if "platforms" in row:
            return only in row["platforms"]
        return row.get("platform") in (None, only)

    tables = {name: [r for r in matrix.rows(name) if keep(r)]
              for name in ("agents", "task_os_platform", "geometry", "hidpi")}
    tables = {"platform_provider": [r for r in platform_table() if keep(r)], **tables}
    effective = {name: sorted(p.value for p in platforms_for(name)) for name in installed}
    effective_geometry = [r for r in geometry_table() if only is None or r["platform"] == only]
    if as_json:
        echo_json({"sources": matrix.sources, **tables, "installed_providers": effective,
                   "geometry_effective": effective_geometry, "model_downscale": matrix.raw["model_downscale"]})
        return
    click.echo("Platforms by provider (installed providers marked *)")
    for row in tables["platform_provider"]:
        mark = "*" if row["provider"] in installed else " "
        click.echo(f" {mark} {row['provider']:<13} {', '.join(row['platforms']):<24} {row.get('note', '')}"
                   f"  [{matrix.source_label(row)}]")
    click.echo("\nAgents by task OS")
    for row in tables["agents"]:
        click.echo(f"   {row['agent']:<13} {', '.join(row['task_os']):<24} [{matrix.source_label(row)}]")
    default = matrix.raw["default_agent_task_os"]
    click.echo(f"   {'(others)':<13} {', '.join(default['task_os']):<24} {default['note']}")
    click.echo("\nTask OS by desktop platform")
    for row in tables["task_os_platform"]:
        click.echo(f"   {row['platform']:<13} {', '.join(row['task_os']):<24} {row['note']}"
                   f"  [{matrix.source_label(row)}]")
    click.echo("\nGeometry and HiDPI scale by provider and platform (capabilities of installed providers, "
               "else data)")
    for row in effective_geometry:
        if row.get("settable"):
            sizes = f"settable {row['min']}..{row['max']}"
        else:
            sizes = "fixed " + (", ".join(row.get("fixed", [])) or "(native only)")
        label = "deskctl provider capabilities" if row["origin"] == "capabilities" else matrix.source_label(row)
        click.echo(f"   {row['provider']:<13} {row['platform']:<8} {sizes:<30} scale {row['scale']:g}"
                   f"  {row.get('note', '')}  [{label}]")


def _credential_providers() -> list[str]:
    from deskctl.credentials import credential_set
    from deskctl.providers import known_provider_names

    return [n for n in known_provider_names() if credential_set(n).variables]


def _check_provider(name: str) -> str:
    from deskctl.checks.compat import suggest
    from deskctl.providers import canonical_name

    known = _credential_providers()
    raw = canonical_name(name)
    if raw in known:
        return raw
    hint = suggest(raw, known)
    raise UsageError(
        f"no credentials are known for provider {name!r}" + (f" (did you mean {hint!r}?)" if hint else "")
        + f"; providers with credentials: {', '.join(known)}",
        code="usage.unknown_provider", remedy=f"deskctl login {hint}" if hint else None,
    )


@click.command("credentials")
@click.argument("providers", nargs=-1)
@json_option
def credentials(providers: tuple[str, ...], as_json: bool) -> None:
    """Show where each provider's variables would come from (environment, keyring or missing), redacted."""
    from deskctl.credentials import describe, keyring_status, presence_check

    names = [_check_provider(p) for p in providers] or _credential_providers()
    status = keyring_status()
    rows = {name: describe(name) for name in names}
    ready = {name: presence_check(name) for name in names}
    if as_json:
        echo_json({
            "keyring": {"usable": status.usable, "backend": status.backend, "message": status.message,
                        "remedy": status.remedy},
            "providers": {
                name: {"configured": ready[name][0], "message": ready[name][1], "remedy": ready[name][2],
                       "variables": [row.to_dict() for row in rows[name]]}
                for name in names
            },
        })
        return
    for name in names:
        ok, _message, remedy = ready[name]
        needs = any(row.required for row in rows[name])
        click.echo(f"{name}  ({'configured' if ok and needs else 'nothing required' if ok else 'not configured'})")
        for row in rows[name]:
            source = row.source if row.source != "missing" or row.required else "not set"
            click.echo(f"  {row.var:<27}{source}{'  ' + row.shown if row.shown else ''}")
        if not ok and remedy:
            click.echo(f"  remedy: {remedy}")
    click.echo(f"keyring: {status.message}")
    if not status.usable:
        note(f"warning: {status.message}; remedy: {status.remedy}")


def _login_vars(provider: str, var: str | None) -> list[str]:
    from deskctl.checks.compat import suggest
    from deskctl.credentials import credential_set

    cset = credential_set(provider)
    if var is None:
        return list(cset.required_any[0]) if cset.required_any else [v for v in cset.variables if cset.is_secret(v)]
    name = var.strip().upper()
    if name not in cset.variables:
        hint = suggest(name, cset.variables)
        raise UsageError(
            f"{provider} does not read {var!r}" + (f" (did you mean {hint!r}?)" if hint else "")
            + f"; its variables: {', '.join(cset.variables)}",
            code="usage.unknown_variable", remedy=f"--var {hint}" if hint else None,
        )
    return [name]


def _read_secret(prompt: str) -> str:
    if sys.stdin.isatty():
        value: str = click.prompt(prompt, hide_input=True, err=True)
    else:
        note(f"{prompt} (reading from stdin)")
        value = sys.stdin.readline().rstrip("\r\n")
    return value.strip()


@click.command("login")
@click.argument("provider")
@click.option("--var", "var", help="The one variable to store (default: the provider's required ones).")
def login(provider: str, var: str | None) -> None:
    """Store a provider secret in the OS keyring (prompted without echo; read from stdin when piped)."""
    from deskctl._redact import register_secret
    from deskctl.credentials import keyring_status, store_secret

    name = _check_provider(provider)
    variables = _login_vars(name, var)
    status = keyring_status()
    if not status.usable:
        from deskctl.errors import ConfigInvalid

        raise ConfigInvalid(f"cannot store credentials: {status.message}", provider=name, remedy=status.remedy)
    for variable in variables:
        value = _read_secret(f"{variable} for {name}")
        if not value:
            raise UsageError(f"empty value for {variable}; nothing stored", code="usage.empty_value",
                             provider=name)
        register_secret(value)
        store_secret(name, variable, value)
        note(f"stored {variable} for {name} in the keyring ({status.backend})")


@click.command("logout")
@click.argument("provider")
@click.option("--var", "var", help="Remove only this variable (default: every stored variable of the provider).")
@json_option
def logout(provider: str, var: str | None, as_json: bool) -> None:
    """Remove a provider's secrets from the OS keyring."""
    from deskctl.credentials import credential_set, delete_secret

    name = _check_provider(provider)
    variables = _login_vars(name, var) if var else list(credential_set(name).variables)
    removed = [v for v in variables if delete_secret(name, v)]
    if as_json:
        echo_json({"provider": name, "removed": removed})
        return
    if removed:
        note(f"removed from the keyring for {name}: {', '.join(removed)}")
    else:
        note(f"nothing stored in the keyring for {name}")
