"""``deskctl snapshot ID NAME``, ``deskctl snapshot ls``, ``deskctl snapshot rm NAME...`` and ``deskctl restore ID
NAME``: the command line of :mod:`deskctl.episodes` (docs/episodes.md)."""

from __future__ import annotations

import time
from typing import Any

import click

from deskctl.cli._common import SuggestingGroup, echo_json, iso_time, json_option, note
from deskctl.cli._do_fast import attached

__all__ = ["restore", "snapshot"]


def _row(snap: Any) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in snap.to_dict().items() if k != "data"}
    out["created"] = iso_time(snap.created_at)
    out["expires"] = iso_time(snap.expires_at)
    out["relaunch"] = [w.get("title") for w in snap.data.get("relaunch") or []]
    return out


class _SnapshotGroup(SuggestingGroup):
    """``snapshot ls`` and ``snapshot rm`` are subcommands; anything else is ``snapshot ID NAME``."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            return "create", self.commands["create"], args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("deskctl snapshot", "SESSION_ID NAME [--ttl SECONDS] [--replace] | ls | rm NAME...")


@click.group(cls=_SnapshotGroup)
def snapshot() -> None:
    """Keep a desktop's state under a name (deskctl snapshot ID NAME), list (ls) or delete (rm) snapshots.
    Restore one with deskctl restore ID NAME. See docs/episodes.md."""


@snapshot.command("create")
@click.argument("session_id")
@click.argument("name")
@click.option("--ttl", type=float, default=None, help="Seconds until the reaper deletes it (default 7 days).")
@click.option("--replace", is_flag=True, help="Replace a snapshot of the same name.")
@json_option
def create(session_id: str, name: str, ttl: float | None, replace: bool, as_json: bool) -> None:
    """Snapshot the desktop SESSION_ID as NAME."""
    if ttl is not None:
        from deskctl.limits import check_number

        ttl = float(check_number("ttl", ttl, what="--ttl"))
    with attached(session_id) as desk:
        snap = desk.snapshot(name, ttl=ttl, replace=replace)
    if as_json:
        echo_json(_row(snap))
    else:
        size = "" if snap.size_bytes is None else f", {snap.size_bytes} bytes"
        note(f"{snap.name} ({snap.snapshot_id}) of {session_id}{size}")


@snapshot.command("ls")
@click.option("--all", "show_all", is_flag=True, help="Include deleted snapshots.")
@json_option
def ls(show_all: bool, as_json: bool) -> None:
    """List the snapshots of the ledger."""
    from deskctl.episodes.store import list_snapshots
    from deskctl.ledger import open_ledger

    with open_ledger() as book:
        rows = [_row(s) for s in list_snapshots(book, include_deleted=show_all)]
    if as_json:
        echo_json({"snapshots": rows})
        return
    if not rows:
        note("no snapshots")
        return
    click.echo(f"{'NAME':<20} {'ID':<14} {'SESSION':<14} {'PROVIDER':<9} {'STATUS':<8} {'SIZE':>12} {'RESTORES':>8}"
               "  EXPIRES")
    for r in rows:
        size = "-" if r["size_bytes"] is None else str(r["size_bytes"])
        click.echo(f"{r['name']:<20} {r['snapshot_id']:<14} {r['session_id']:<14} {r['provider']:<9} "
                   f"{r['status']:<8} {size:>12} {r['restores']:>8}  {r['expires'] or '-'}")


@snapshot.command("rm")
@click.argument("names", nargs=-1)
@click.option("--expired", is_flag=True, help="Delete every snapshot whose expiry has passed.")
@json_option
def rm(names: tuple[str, ...], expired: bool, as_json: bool) -> None:
    """Delete snapshots by name or id (their provider resource, confirmed), or every expired one."""
    from deskctl.episodes import delete_snapshot, reap_snapshots
    from deskctl.errors import UsageError
    from deskctl.ledger import open_ledger

    if not names and not expired:
        raise UsageError("name a snapshot to delete, or give --expired", code="usage.missing_argument",
                         remedy="deskctl snapshot ls")
    with open_ledger() as book:
        done = [delete_snapshot(book, name) for name in names]
        if expired:
            done += reap_snapshots(book, now=time.time())
    if as_json:
        echo_json({"deleted": [_row(s) for s in done]})
    else:
        for snap in done:
            note(f"deleted {snap.name} ({snap.snapshot_id})")


@click.command()
@click.argument("session_id")
@click.argument("name")
@json_option
def restore(session_id: str, name: str, as_json: bool) -> None:
    """Put the desktop SESSION_ID back as it was at the snapshot NAME (what changed since is gone)."""
    started = time.monotonic()
    with attached(session_id) as desk:
        snap = desk.restore(name)
    seconds = round(time.monotonic() - started, 3)
    if as_json:
        echo_json({"id": session_id, "snapshot": snap.snapshot_id, "name": snap.name, "seconds": seconds})
    else:
        note(f"{session_id} restored to {snap.name} ({snap.snapshot_id}) in {seconds} s")
