"""Session commands: up, down, ls, screenshot, exec, reap, providers (``do`` is cli/do_cmds.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from deskctl.cli._app import current_app
from deskctl.cli._common import Number, desktop_options, echo_json, json_option, note
from deskctl.cli._do_fast import attached as _attached
from deskctl.errors import UsageError

if TYPE_CHECKING:
    from deskctl.config import Config
    from deskctl.ledger import Ledger

def _ledger() -> Ledger:
    from deskctl.ledger import open_ledger

    return open_ledger()  # a context manager: closed at the end of the `with`


@click.command()
@desktop_options
@click.option("--wait-for", "wait_title", metavar="TITLE", default=None,
              help="Then wait (within --ready-timeout) for a window whose title contains TITLE.")
@click.option("--wait-for-url", "wait_url", metavar="URL", default=None,
              help="Then wait for a browser page whose URL or title contains URL (Chromium's DevTools list on "
                   "port 9222).")
@click.option("--wait-for-command", "wait_command", metavar="CMD", default=None,
              help="Then wait until CMD, run on the desktop, exits 0.")
@json_option
def up(provider: str, platform: str, geometry: str, window_geometry: str | None, start_url: str | None,
       window_manager: bool, ttl: str | None, max_minutes: float | None, max_usd: float | None,
       budget: str | None, unknown_cost: str | None, labels: tuple[str, ...], options: tuple[str, ...],
       host: str | None, accept_new_host_key: bool,
       ready_timeout: float, record: str | None, record_settle: float, video: bool, video_fps: int | None,
       video_max_seconds: float | None, video_max_mb: float | None, wait_title: str | None,
       wait_url: str | None, wait_command: str | None, as_json: bool) -> None:
    """Bring a detached desktop up: preflight, create, wait, verify geometry; print its id.

    It keeps running after this command returns, until `deskctl down ID`, its --ttl, or `deskctl reap`.
    With --wait-for/--wait-for-url/--wait-for-command it also waits for the application; not in time is
    readiness.timeout (exit 20) and the desktop is destroyed (docs/observation.md).
    """
    from deskctl.cli._up_fast import bring_up

    bring_up(_config(), provider=provider, platform=platform, geometry=geometry, window_geometry=window_geometry,
             start_url=start_url, window_manager=window_manager, ttl=ttl, max_minutes=max_minutes, max_usd=max_usd,
             budget=budget, unknown_cost=unknown_cost, labels=labels, options=options, host=host,
             accept_new_host_key=accept_new_host_key, ready_timeout=ready_timeout, record=record,
             record_settle=record_settle, video=video, video_fps=video_fps, video_max_seconds=video_max_seconds,
             video_max_mb=video_max_mb, wait_title=wait_title, wait_url=wait_url, wait_command=wait_command,
             as_json=as_json)


def _config() -> Config:
    return current_app().config


@click.command()
@click.argument("session_ids", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Destroy every session that is not ended.")
@click.option("--ignore-missing", is_flag=True, help="An id the ledger does not know is not an error.")
@json_option
def down(session_ids: tuple[str, ...], everything: bool, ignore_missing: bool, as_json: bool) -> None:
    """Destroy desktops by id (confirmed), record their end and cost.

    Idempotent: a session that has already ended (or failed) is reported as such and is not an error (exit 0),
    as after a `deskctl down` that was run twice. An unknown id is usage.not_found (exit 2), unless
    --ignore-missing.
    """
    from deskctl.cli._down import destroy

    destroy(session_ids, everything=everything, ignore_missing=ignore_missing, as_json=as_json)


@click.command(name="ls")
@click.option("--all", "show_all", is_flag=True, help="Include ended sessions.")
@click.option("--since", help="Only sessions started within this duration (e.g. 24h).")
@json_option
def ls(show_all: bool, since: str | None, as_json: bool) -> None:
    """List sessions that are not ended (or --all), with their spend so far: the desktop's and, where the harness
    metered it (Desktop.meter), the models'."""
    from deskctl.cli._report import list_sessions

    list_sessions(show_all, since, as_json)


@click.command()
@click.argument("session_id")
@click.option("--output", "-o", "output", required=True,
              help="PNG file to write ('-' for stdout).")
@click.option("--max-size", "max_size", metavar="WxH", default=None,
              help="Shrink the image to fit inside WxH (aspect kept, never enlarged).")
@click.option("--scale", type=float, default=None, help="Image pixels per desktop pixel (0 < scale <= 8).")
@click.option("--region", metavar="X,Y,W,H", default=None, help="Only this part of the screen (a zoom).")
@json_option
def screenshot(session_id: str, output: str, max_size: str | None, scale: float | None, region: str | None,
               as_json: bool) -> None:
    """Save a PNG screenshot of a desktop; its pixels are the action coordinate space.

    With --max-size, --scale or --region the image is resized or cropped; its transform is printed (stderr, or
    "transform" with --json), and `deskctl do ID click X Y --space TRANSFORM` maps a point of it back.
    """
    from deskctl.cli._shot import take

    take(session_id, output, max_size, scale, region, as_json)


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--env K=V`` flags as a mapping; a flag without ``=`` or with a name a shell cannot set is
    ``usage.bad_env`` (exit 2), before the desktop is reached."""
    from deskctl.providers._guest import check_exec_options

    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--env {pair!r} is not of the form KEY=VALUE", code="usage.bad_env",
                             remedy="--env NAME=value (repeatable); NAME= sets an empty value")
        env[name] = value
    return check_exec_options(env, None, None)


@click.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("session_id")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--cwd", help="Directory on the desktop to run the command in (missing: the command fails unrun).")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Add a variable to the command's environment (repeatable).")
@click.option("--user", help="Run as this user of the desktop (Linux: sudo -n -u USER).")
@click.option("--background", is_flag=True,
              help="Start it detached (a GUI app) and print its process id at once, without waiting.")
@click.option("--timeout", type=Number("exec_timeout"), default=60.0, show_default=True,
              help="Seconds before the command is killed (exit code 124).")
@json_option
def exec_cmd(session_id: str, command: tuple[str, ...], cwd: str | None, env_pairs: tuple[str, ...],
             user: str | None, background: bool, timeout: float, as_json: bool) -> None:
    """Run a command on a desktop: deskctl exec ID [OPTIONS] -- CMD ARGS...

    Prints its stdout and stderr and exits with its exit code (with --json: one document, and the same exit code).
    A single CMD argument is a shell line ("cd /tmp && ls"); several are quoted as words. With --background it
    prints the process id on the desktop (--json: {"pid": N}) and exits 0 once the command has started.
    """
    import shlex

    from deskctl.providers._guest import check_exec_options

    env = _parse_env(env_pairs)
    check_exec_options(None, user, None)  # a bad --user is usage.bad_user before the desktop is reached
    line = command[0] if len(command) == 1 else shlex.join(command)
    with _attached(session_id) as desk:
        result = desk.exec(line, timeout=timeout, cwd=cwd, env=env or None, user=user, background=background)
    if background and result.exit_code == 0:
        if as_json:
            echo_json({"pid": result.pid})
        elif result.pid is not None:
            click.echo(str(result.pid))
        else:
            note("started; the desktop did not tell its process id")
        return
    if as_json:
        echo_json(result.to_dict())
        current_app().exit(result.exit_code)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.stdout.flush()
    current_app().exit(result.exit_code)


def _reap_snapshots(book: Any, providers: tuple[str, ...]) -> list[dict[str, Any]]:
    """Delete the ledger's snapshots that are due (their ttl passed, or a dead process left them deleting)."""
    from deskctl.episodes import reap_snapshots
    from deskctl.providers import resolve_name

    wanted = {resolve_name(p) for p in providers}
    done = reap_snapshots(book, provider_filter=wanted or None)
    return [snap.to_dict() for snap in done]


@click.command()
@click.option("--provider", "providers", multiple=True, help="Only sweep this provider (repeatable).")
@click.option("--dry-run", is_flag=True, help="Say what would be destroyed; destroy nothing.")
@click.option("--everything", is_flag=True,
              help="Also leftovers whose session is not in this ledger (another DESKCTL_HOME, user or team).")
@click.option("--confirmed-gone", "confirmed", multiple=True, metavar="ID",
              help="Close the row of session ID, reported unconfirmed, after you deleted its desktop where the "
                   "remedy said (repeatable); sweeps nothing else.")
@json_option
def reap(providers: tuple[str, ...], dry_run: bool, everything: bool, confirmed: tuple[str, ...],
         as_json: bool) -> None:
    """Destroy leftovers: desktops whose owner died, that expired, that are gone, or whose session already ended.

    Sweeps every provider by the deskctl labels and the ledger, touching only desktops of this ledger unless
    --everything. A `ready` session whose desktop is gone is recorded failed; a `destroying` one is finished.
    A session whose create answer was lost is closed only when its provider can list what exists and lacks it;
    else (use.computer) it stays and is reported unconfirmed with where to find it, until --confirmed-gone ID.
    When the ledger cannot be read (a damaged file), the sweep goes by label alone and records nothing.
    Exits 5 when something could not be destroyed or confirmed gone.
    """
    from deskctl.errors import CleanupIncomplete, InfrastructureError
    from deskctl.ledger import ledger_id
    from deskctl.providers import resolve_name
    from deskctl.reaper import reap as do_reap

    if confirmed:
        from deskctl.reaper import confirm_gone

        with _ledger() as book:
            closed = [confirm_gone(book, sid) for sid in dict.fromkeys(confirmed)]
        if as_json:
            echo_json({"reaped": [r.to_dict() for r in closed], "ledger": "ok"})
        else:
            for r in closed:
                click.echo(f"{r.session_id}\t{r.provider}\t{r.action}\t{r.reason}")
        return
    for asked in providers:  # a misspelt name would sweep nothing and say so with exit 0
        try:
            resolve_name(asked)
        except UsageError as exc:
            if exc.code == "usage.unknown_provider":
                raise
    config = _config()
    try:
        book = _ledger()
    except InfrastructureError as exc:
        if exc.code != "ledger.unavailable":
            raise
        # Desktops must still be found and destroyed when the ledger cannot be read: by label alone (this
        # ledger's `deskctl.ledger` label, or every labelled leftover with --everything), recording nothing.
        note(f"the ledger cannot be read ({exc.message}); sweeping by label only, nothing is recorded")
        if exc.remedy:
            note(f"  to fix the ledger: {exc.remedy}")
        results = do_reap(None, providers=list(providers) or None, dry_run=dry_run, everything=everything,
                          provider_options=config.providers, ledger_label=ledger_id())
        snapshots = []
        unreadable = True
    else:
        with book:
            results = do_reap(book, providers=list(providers) or None, dry_run=dry_run, everything=everything,
                              provider_options=config.providers)
            # snapshots are reaped like desktops: past their ttl, or left half-deleted by a process that died
            snapshots = [] if dry_run else _reap_snapshots(book, providers)
        unreadable = False
    failed = [r for r in results if r.action == "failed"]
    unconfirmed = [r for r in results if r.action == "unconfirmed"]
    err: CleanupIncomplete | None = None
    if failed or unconfirmed:
        parts = []
        if failed:
            parts.append(f"{len(failed)} desktop(s) could not be destroyed: " + ", ".join(r.session_id for r in failed))
        if unconfirmed:
            parts.append(f"{len(unconfirmed)} session(s) may have a desktop that no listing can confirm gone: "
                         + ", ".join(r.session_id for r in unconfirmed))
        remedies = (["deskctl reap (again)"] if failed else []) + [f"{r.session_id}: {r.remedy}" for r in unconfirmed]
        err = CleanupIncomplete("; ".join(parts), remedy="; ".join(remedies),
                                details={"left": [r.session_id for r in [*failed, *unconfirmed]]})
    if as_json:
        doc: dict[str, Any] = {"reaped": [r.to_dict() for r in results], "ledger": "unreadable" if unreadable else "ok",
                               "snapshots": snapshots}
        if err is not None:
            doc.update(err.to_dict())
        echo_json(doc)
    else:
        for r in results:
            click.echo(f"{r.session_id}\t{r.provider}\t{r.action}\t{r.reason}" + (f"\t{r.error}" if r.error else ""))
        for snap in snapshots:
            click.echo(f"{snap['snapshot_id']}\t{snap['provider']}\tsnapshot deleted\t{snap['name']}")
        if not results:
            note("nothing to reap")
    if err is not None:
        current_app().abort(err, reported=as_json)


@click.command()
@click.option("--check", is_flag=True,
              help="Also run each provider's preflight (all at once, nothing is created) and say whether it is "
                   "ready, and why not.")
@json_option
def providers(check: bool, as_json: bool) -> None:
    """List providers with their capabilities (and why one cannot load); with --check, whether each is ready."""
    from deskctl.errors import DeskctlError
    from deskctl.providers import (
        DEFAULT_PROVIDER,
        PROVIDERS,
        describe_options,
        known_provider_names,
        load_provider_class,
    )

    rows: list[dict[str, Any]] = []
    for name in known_provider_names():
        try:
            cls = load_provider_class(name)
        except DeskctlError as exc:
            rows.append({"name": name, "available": False, "error": exc.message, "remedy": exc.remedy})
            continue
        rows.append({"name": name, "available": True, "default": name == DEFAULT_PROVIDER,
                     "aliases": list(cls.aliases), "credential_vars": list(cls.credentials.variables),
                     **cls.capabilities.to_dict(), "options": describe_options(cls)})
    if check:
        _check_readiness(rows)
    if as_json:
        echo_json({"providers": rows})
        return
    click.echo(f"{'NAME':<14} {'PLATFORMS':<22} {'ISOLATION':<10} {'EXEC':<5} {'BILLING':<11} GEOMETRY")
    for row in rows:
        if not row["available"]:
            click.echo(f"{row['name']:<14} unavailable: {row['error']}")
            continue
        fixed = sorted(row["fixed_sizes"])
        settable = [p for p in row["platforms"] if p not in fixed] if row["settable_geometry"] else []
        native = [p for p in row["platforms"] if p not in fixed and p not in settable]
        geometry = ", ".join(([f"settable on {','.join(settable)}"] if settable else [])
                             + ([f"fixed on {','.join(fixed)}"] if fixed else [])
                             + ([f"native on {','.join(native)}"] if native else []))
        mark = " (default)" if row.get("default") else ""
        click.echo(f"{row['name']:<14} {','.join(row['platforms']):<22} {row['isolation']:<10} "
                   f"{'yes' if row['exec'] else 'no':<5} {row['billing']:<11} {geometry}{mark}")
    if check:
        click.echo("")
        for row in rows:
            verdict = "ready" if row.get("ready") else f"not ready: {row.get('reason')}"
            click.echo(f"{row['name']:<14} {verdict}")
            if not row.get("ready") and row.get("remedy"):
                click.echo(f"{'':<14}   remedy: {row['remedy']}")
    missing = sorted(set(PROVIDERS) - set(known_provider_names()))
    if missing:
        note("not in this version yet: " + ", ".join(missing))


def _check_readiness(rows: list[dict[str, Any]]) -> None:
    """Each available provider's preflight for a default desktop on a platform it serves (ubuntu when it can; its
    own size where its sizes are fixed),
    every check of every provider at once, as `deskctl preflight` runs them (the configuration's
    [providers.NAME] applies); sets ``ready``, ``reason`` (the first failure) and ``remedy`` on each row."""
    from deskctl._redact import redact
    from deskctl.checks.runner import PreflightRequest
    from deskctl.checks.runner import preflight as run_preflight
    from deskctl.cli._app import current_app
    from deskctl.cli._spec import provider_options, spec_from_flags
    from deskctl.errors import DeskctlError

    config = current_app().config
    by_platform: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if not row["available"]:
            row.update(ready=False, reason=row["error"])
            continue
        platform = "ubuntu" if "ubuntu" in row["platforms"] else row["platforms"][0]
        # readiness, not a size: a provider of fixed sizes is asked for its own
        geometry = "native" if platform in row["fixed_sizes"] else "1024x768"
        by_platform.setdefault((platform, geometry), []).append(row)
    for (platform, geometry), group in by_platform.items():
        names = [str(row["name"]) for row in group]
        options: dict[str, dict[str, Any]] = {}
        for row in group:
            try:
                options[row["name"]] = provider_options(row["name"], config)
            except DeskctlError as exc:
                row.update(ready=False, reason=redact(exc.message),
                           remedy=redact(exc.remedy) if exc.remedy else None)
        checked = [n for n in names if n in options]
        if not checked:
            continue
        spec = spec_from_flags(config, provider=checked[0], platform=platform, geometry=geometry)
        report = run_preflight(PreflightRequest(spec, providers=tuple(checked), provider_options=options))
        request_failure = next((r for r in report.results if r.provider is None and r.status == "fail"), None)
        for row in group:
            if row["name"] not in options:
                continue
            failure = request_failure or next(
                (r for r in report.results if r.provider == row["name"] and r.status == "fail"), None)
            row.update(ready=row["name"] in report.ready and failure is None, platform_checked=platform,
                       reason=redact(failure.message) if failure else None,
                       remedy=redact(failure.remedy) if failure and failure.remedy else None)


__all__ = ["down", "exec_cmd", "ls", "providers", "reap", "screenshot", "up"]
