"""``deskctl cp``: files and directories between this machine and a desktop, with ``docker cp``'s syntax.

The copy itself is the library's (:meth:`deskctl.Desktop.upload` / :meth:`~deskctl.Desktop.download`, which
make the destination a copy of the source); :mod:`deskctl.cli._cp` adds docker cp's reading of the two arguments
(exactly one is ``ID:PATH``, and a destination that is a directory means "into it, under the source's name") and
runs the plain form without click. This module is the click command, for help, parse errors and ``[defaults]``.
"""

from __future__ import annotations

import click

from deskctl.cli._common import json_option
from deskctl.cli._cp import Location, copy, into_destination, parse_location

__all__ = ["Location", "cp", "into_destination", "parse_location"]


@click.command(name="cp")
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DEST")
@json_option
def cp(source: str, destination: str, as_json: bool) -> None:
    """Copy a file or a directory (recursively) between this machine and a desktop, like docker cp.

    \b
    deskctl cp ./data ID:/home/user/data      make /home/user/data a copy of ./data
    deskctl cp report.txt ID:/tmp/            into /tmp (trailing /): /tmp/report.txt
    deskctl cp ID:/var/log/app ./logs/        into ./logs: ./logs/app
    deskctl cp ID:'C:\\Users\\me\\out.txt' .    Windows paths on a Windows desktop

    Exactly one of SRC and DEST is ID:PATH (ID as `deskctl ls` shows it). As with docker cp, a DEST that is a
    directory receives SRC under SRC's name: here that is known by looking (an existing directory), on the
    desktop only by a trailing / (or \\ on Windows); without it, DEST is the copy's own path (its parents are
    made, a file there is replaced). A local path holding ':' is written ./a:b. A missing SRC is
    usage.no_such_file (exit 2).
    """
    copy(source, destination, as_json=as_json)
