"""``deskctl ledger check [--repair]``: the ledger's health, and the repair of a damaged SQLite ledger."""

from __future__ import annotations

from pathlib import Path

import click

from deskctl.cli._app import current_app
from deskctl.cli._common import SuggestingGroup, echo_json, json_option, note


@click.group(cls=SuggestingGroup)
def ledger() -> None:
    """Check (and repair) the ledger: $DESKCTL_LEDGER_URL, else the SQLite file under DESKCTL_HOME."""


@ledger.command()
@click.option("--repair", is_flag=True,
              help="SQLite: move a damaged file aside (kept, with a UTC time stamp) and copy every readable row into "
                   "a fresh ledger at the same path. Refused while another process has the file open.")
@json_option
def check(repair: bool, as_json: bool) -> None:
    """Report the ledger's integrity: for SQLite PRAGMA integrity_check, the journal mode, the -wal file, the
    schema version and the row counts; for PostgreSQL a connection and a read of every table.

    Exits 0 when the ledger is sound (or was repaired), 20 (ledger.unavailable) when it is not.
    """
    from deskctl.cli._spec import check_environment
    from deskctl.errors import InfrastructureError
    from deskctl.ledger import check_ledger_url, move_aside_command
    from deskctl.ledger_check import check_ledger, repair_ledger

    check_environment()
    report = check_ledger()
    repaired = None
    if repair and not report.ok:
        repaired = repair_ledger()
    final = repaired.after if repaired is not None and repaired.after is not None else report
    if as_json:
        echo_json({**report.to_dict(), "repair": repaired.to_dict() if repaired else None})
    else:
        click.echo(f"ledger {report.backend} {report.url}")
        for finding in report.findings:
            click.echo(f"  {finding.status:<4}  {finding.name:<12} {finding.detail}")
        if report.rows:
            click.echo("  rows  " + ", ".join(f"{t} {n}" for t, n in report.rows.items()))
        if repaired is not None:
            click.echo(f"repaired: the damaged file is kept as {', '.join(repaired.moved_aside) or '(nothing)'}")
            click.echo("  copied  " + ", ".join(f"{t} {n}" for t, n in repaired.copied.items()))
            for table, why in repaired.unreadable.items():
                click.echo(f"  lost    {table}: rows after the first unreadable one ({why})")
            if repaired.after is not None:
                click.echo(f"  now     {'ok' if repaired.after.ok else 'still damaged'}")
        elif repair:
            note("nothing to repair")
    if final.ok:
        return
    backend, target = check_ledger_url()
    if backend == "sqlite":
        remedy = f"deskctl ledger check --repair; or move it aside by hand: {move_aside_command(Path(target))}"
    else:
        remedy = "check DESKCTL_LEDGER_URL, the server, and the user's rights"
    failed = ", ".join(f.name for f in final.findings if f.status == "fail")
    err = InfrastructureError(f"the ledger is not sound ({failed})", code="ledger.unavailable", remedy=remedy)
    current_app().abort(err, reported=as_json)


__all__ = ["check", "ledger"]
