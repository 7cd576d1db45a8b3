"""``deskctl image build`` and ``deskctl image ls``: the desktop container images of the docker provider."""

from __future__ import annotations

import click

from deskctl.cli._common import echo_json, json_option, note

__all__ = ["image"]


@click.group()
def image() -> None:
    """Build and list desktop container images (for the docker provider)."""


@image.command("build")
@click.option("--base", envvar="DESKCTL_IMAGE_BASE", show_envvar=True, default=None, metavar="IMAGE",
              help="Debian 12 base image (default debian:bookworm-slim). A machine with no registry passes a local "
                   "one (see docs/docker.md, 'Offline base').")
@click.option("--variant", type=click.Choice(["minimal", "browser"]), default="minimal", show_default=True,
              help="minimal: Xvfb, window manager, fonts; browser: adds Chromium for start URLs.")
@click.option("--network", "network_mode", envvar="DESKCTL_IMAGE_BUILD_NETWORK", show_envvar=True, default=None,
              metavar="MODE", help="Network of the build's RUN steps, e.g. host.")
@click.option("--force", is_flag=True, help="Build even when an image with the same inputs exists.")
@click.option("--quiet", "-q", is_flag=True, help="Do not echo the build log to stderr.")
@json_option
def build(base: str | None, variant: str, network_mode: str | None, force: bool, quiet: bool,
          as_json: bool) -> None:
    """Build the desktop image; nothing is done when an image with the same inputs exists."""
    from deskctl.providers.docker.images import build_image

    result = build_image(variant, base, network_mode=network_mode, force=force,
                         progress=None if quiet or as_json else note)
    if as_json:
        echo_json(result.to_dict())
        return
    click.echo(result.tag)
    note(f"{'built' if result.built else 'up to date'}: {result.tag} ({result.seconds:.1f}s)")


@image.command("ls")
@json_option
def ls(as_json: bool) -> None:
    """List the desktop images; CURRENT marks those built from this version of deskctl."""
    from deskctl.providers.docker.images import list_images

    images = list_images()
    if as_json:
        echo_json({"images": [i.to_dict() for i in images]})
        return
    rows = [("TAG", "VARIANT", "BASE", "CREATED", "SIZE", "CURRENT")]
    rows += [(i.tag, i.variant, i.base, i.created, f"{i.size_mb:.0f}MB", "yes" if i.current else "no")
             for i in images]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@image.command("prune")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--all", "every_installation", is_flag=True,
              help="Also superseded images built by other deskctl installations (other checkouts, venvs).")
@json_option
def prune(dry_run: bool, every_installation: bool, as_json: bool) -> None:
    """Remove desktop images superseded by a newer deskctl (those not CURRENT) that this installation built;
    images in use are kept."""
    from deskctl.providers.docker.images import prune_images

    removed = prune_images(dry_run=dry_run, every_installation=every_installation)
    if as_json:
        echo_json({"removed": [] if dry_run else removed, "would_remove": removed if dry_run else [],
                   "dry_run": dry_run})
        return
    for tag in removed:
        click.echo(tag)
    note(f"{'would remove' if dry_run else 'removed'} {len(removed)} superseded image(s)")
