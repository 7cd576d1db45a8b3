"""Trajectory commands: show (a summary) and html (a static viewer page) of a recording directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from deskctl.cli._common import echo_json, json_option, note

__all__ = ["trajectory"]


@click.group()
def trajectory() -> None:
    """Read trajectories recorded with `deskctl up --record DIR` or open_desktop(record=DIR)."""


def _cell(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@trajectory.command()
@click.argument("directory")
@json_option
def show(directory: str, as_json: bool) -> None:
    """Summarise a recording: steps, actions, errors, screen changes, images checked against their sha256.

    Exits 20 (recording.damaged) when a screenshot is missing or not the one its row's sha256 names (after the
    summary; --json lists them under bad_images). Unreadable JSONL lines are skipped and counted, not an error.
    """
    from deskctl.recording import read_trajectory
    from deskctl.recording_html import action_label

    recorded = read_trajectory(directory)
    summary = recorded.summary()
    rows: list[dict[str, Any]] = []
    for row in recorded.steps:
        before, after = row.get("before") or {}, row.get("after") or {}
        rows.append({
            "step": row["step"], "session": row.get("session"), "action": row.get("action"),
            "latency_ms": row.get("latency_ms"), "error": (row.get("error") or {}).get("code"),
            "changed": None if not (before and after) else before.get("sha256") != after.get("sha256"),
            "before": recorded.image_status(before), "after": recorded.image_status(after),
            "annotations": row.get("annotations") or {},
        })
    if as_json:
        echo_json({**summary, "rows": rows})
    else:
        kinds = ", ".join(f"{k} {n}" for k, n in summary["kinds"].items()) or "none"
        errors = ", ".join(f"{k} {n}" for k, n in summary["errors"].items()) or "none"
        span = "" if summary["seconds"] is None else f", {summary['seconds']:.1f}s"
        click.echo(f"{summary['dir']}: {summary['steps']} steps"
                   + (f" ({summary['first_step']}..{summary['last_step']})" if summary["steps"] else "")
                   + f", sessions {', '.join(summary['sessions']) or '-'}"
                   + f", {', '.join(summary['providers'] + summary['geometries'])}{span}")
        images = summary["images"]
        click.echo(f"actions: {kinds}; errors: {errors}; screen changed: {summary['screen_changed']}/"
                   f"{summary['steps']}; images: {images['ok']} ok, {images['missing']} missing, "
                   f"{images['mismatch']} sha256 mismatch")
        if rows:
            click.echo(f"{'STEP':>5}  {'ACTION':<34} {'LATENCY':>9}  {'CHANGED':<7}  {'ERROR':<24} ANNOTATIONS")
        for r in rows:
            latency = "-" if r["latency_ms"] is None else f"{r['latency_ms']:.1f}ms"
            changed = "-" if r["changed"] is None else ("yes" if r["changed"] else "no")
            notes = " ".join(f"{k}={_cell(v)}" for k, v in r["annotations"].items())
            click.echo(f"{r['step']:>5}  {action_label(r['action'] or {})[:34]:<34} {latency:>9}  {changed:<7}  "
                       f"{r['error'] or '-':<24} {notes}".rstrip())
    skipped = summary["damaged_lines"]
    if skipped:
        note(f"warning: skipped {len(skipped)} unreadable line{'s' if len(skipped) != 1 else ''} of the JSONL "
             f"(line {', '.join(map(str, skipped))})")
    bad = summary["bad_images"]
    if bad:
        for image in bad:
            note(f"step {image['step']}: the {image['image']} screenshot {image['path']} is "
                 + ("missing" if image["status"] == "missing" else "not the one recorded (sha256 mismatch)"))
        # a recording that does not verify is a failed check, as a failed preflight is: the summary, then the exit
        note(f"error: {len(bad)} screenshot{'s' if len(bad) != 1 else ''} missing or not matching the sha256 in "
             "their row (recording.damaged)")
        raise click.exceptions.Exit(20)


@trajectory.command()
@click.argument("directory")
@click.option("--output", "-o",
              help="Page to write (default: DIR/index.html).")
@click.option("--embed", is_flag=True, help="Inline the screenshots, so the page works anywhere on its own.")
@json_option
def html(directory: str, output: str | None, embed: bool, as_json: bool) -> None:
    """Write a static viewer page: the step list, each step's before/after screens with the action drawn."""
    from deskctl.errors import UsageError
    from deskctl.recording import read_trajectory
    from deskctl.recording_html import render_html

    recorded = read_trajectory(directory)
    page = Path(output) if output else recorded.directory / "index.html"
    text = render_html(recorded, page, embed=embed)
    try:
        page.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {page}: {exc.strerror or exc}", code="usage.bad_output") from exc
    skipped = len(recorded.damaged)
    if as_json:
        echo_json({"path": str(page), "steps": len(recorded.steps), "bytes": len(text.encode()),
                   "embedded": embed, "skipped_lines": skipped})
        return
    click.echo(str(page))
    note(f"{page}: {len(recorded.steps)} steps; open it in a browser")
    if skipped:
        note(f"warning: skipped {skipped} unreadable line{'s' if skipped != 1 else ''} of the JSONL (line "
             f"{', '.join(map(str, recorded.damaged))})")
