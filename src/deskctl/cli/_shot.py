"""``deskctl screenshot``'s work, without click: the click command (:func:`deskctl.cli.session_cmds.screenshot`)
and the click-free path of ``deskctl screenshot ID -o FILE`` (:func:`run`) both call :func:`take`, so both print
the same bytes and raise the same errors.

A screenshot is a whole process per call for an agent that drives a desktop from a shell, and click's import (with
the command modules it loads) was a third of it. :func:`run` takes the plain form only: one session id, ``-o FILE``
/ ``--output FILE`` / ``--output=FILE`` once, and ``--json``. Anything else (``--max-size``, ``--scale``,
``--region``, ``--help``, ``-oFILE``, an option given twice, ``[defaults]`` in a config file, shell completion) it
leaves to click, untouched.
"""

from __future__ import annotations

import os
import sys

from deskctl.cli._output import echo, echo_json
from deskctl.errors import UsageError

__all__ = ["check_output", "run", "take"]


def check_output(output: str) -> None:
    """A file deskctl can create or replace at ``output``, else ``usage.bad_path`` (exit 2)."""
    # as pathlib would see it (Path(output).expanduser(), its parent), without importing pathlib: a screenshot
    # process pays for every import (pathlib brings urllib.parse and ipaddress, ~5% of its instructions)
    from deskctl.paths import pure_path_str

    path = pure_path_str(output)
    if path.startswith("~"):
        path = pure_path_str(os.path.expanduser(path))
    folder = os.path.dirname(path) if "/" in path else "."
    if not output.strip() or os.path.isdir(path):
        problem = "is a directory" if output.strip() else "is empty"
    elif not os.path.exists(folder):
        problem = f"is in a folder that does not exist ({folder})"
    elif not os.path.isdir(folder):
        problem = f"is under {folder}, which is not a folder"
    elif not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        problem = "cannot be written (permission denied)"
    else:
        return
    raise UsageError(f"-o {output!r} {problem}", code="usage.bad_path",
                     remedy="name a PNG file in an existing, writable folder, or '-' for stdout")


def take(session_id: str, output: str, max_size: str | None, scale: float | None, region: str | None,
         as_json: bool) -> None:
    """Save a PNG screenshot of the session to ``output`` ('-': stdout) and say so; see
    ``deskctl screenshot --help``."""
    from deskctl._jsonc import dumps
    from deskctl.cli._do_fast import attached

    def note(message: str) -> None:
        echo(message, err=True)

    if max_size is not None or scale is not None or region is not None:
        from deskctl.observe.transform import parse_region, parse_size

        if max_size is not None:
            parse_size(max_size)  # refused before the desktop is reached
        if region is not None:
            parse_region(region)
    if output != "-":
        check_output(output)  # before the desktop is reached: a bad path costs nothing
    from deskctl.core.x11wire import prefer_wire

    prefer_wire()  # one capture in this process: over the X11 wire, without python-xlib
    try:
        with attached(session_id) as desk:
            shot = desk.screenshot(max_size=max_size, scale=scale, region=region)
    finally:
        prefer_wire(False)  # a process that goes on (a harness calling main()) gets full drivers again
    transform = getattr(shot, "transform", None)
    described = transform.to_dict() if transform is not None else None
    if output == "-":
        sys.stdout.buffer.write(shot.png)
        sys.stdout.flush()
        if described is not None:
            note(f"transform: {dumps(described)}")
        return
    try:
        shot.save(output)
    except OSError as exc:
        raise UsageError(f"cannot write {output!r}: {exc.strerror or exc}", code="usage.bad_path") from None
    if as_json:
        document = {"id": session_id, "path": output, "width": shot.width, "height": shot.height,
                    "bytes": len(shot.png)}
        if described is not None:
            document["transform"] = described
        echo_json(document)
    else:
        note(f"{output}: {shot.width}x{shot.height} PNG, {len(shot.png)} bytes")
        if described is not None:
            note(f"transform: {dumps(described)}")


def parse(args: list[str]) -> tuple[str, str, bool] | None:
    """``(session id, output, --json)`` for the plain forms click would parse into exactly that, else None."""
    if len(args) < 2 or args[0] != "screenshot":
        return None
    session_id: str | None = None
    output: str | None = None
    as_json = False
    rest = args[1:]
    index = 0
    while index < len(rest):
        token = rest[index]
        index += 1
        if token == "--json" and not as_json:
            as_json = True
        elif token in ("-o", "--output") and output is None and index < len(rest):
            value = rest[index]
            index += 1
            if value.startswith("-") and value != "-":  # an option where click may see one: its call
                return None
            output = value
        elif token.startswith("--output=") and output is None:
            output = token.removeprefix("--output=")
        elif not token.startswith("-") and session_id is None:
            session_id = token
        else:
            return None
    if session_id is None or output is None:
        return None
    return session_id, output, as_json


def run(args: list[str]) -> bool:
    """Run ``deskctl screenshot`` for ``args`` without click; False (having done nothing) when click is to run it.
    Errors are raised, for the abort path of :func:`deskctl.cli.main`."""
    from deskctl.cli._do_fast import clickless

    parsed = parse(args)
    if parsed is None or not clickless():  # [defaults] may set --json or --max-size: click applies them
        return False
    session_id, output, as_json = parsed
    take(session_id, output, None, None, None, as_json)
    return True
