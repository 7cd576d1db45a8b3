"""The shell scripts the ssh provider runs on the host, kept as data files in ``sh/`` beside this module (POSIX
sh; arguments always passed as quoted positional parameters, see :func:`_sh`), and how they are put together:
the owner (Xvfb and its watcher), destroy, list, state, unpack and the preflight probe."""

from __future__ import annotations

import shlex
from importlib import resources


def _script(name: str) -> str:
    return resources.files(__package__).joinpath("sh", name).read_text(encoding="utf-8")


#: the pids of processes a desktop's exec started (their environment carries the desktop's directory);
#: others_kill signals those started as other users (exec(user=...): listed in $1/users, reached by sudo -n as
#: each of them, since only that user may read their environment)
_MARKED = _script("marked.sh")

#: $1 base dir ("" = default), $2 session id, $3 WxHxD, $4 Xvfb, $5 lifetime seconds (0 = none), $6 mode,
#: $7 window manager command ("" = none).
#: stdin: line 1 the Xauthority bytes as printf octal escapes, line 2 meta.json; then (attached) the control
#: stream: EOF = the connection ended = stop; "detach" = outlive the connection.
_OWNER_SCRIPT = _MARKED + _script("owner.sh")

#: prints the pids whose command line holds "$1/Xauthority" (Xvfb and its timeout(1)); grep's own argv holds
#: the pattern "...Xauthorit[y]", which does not match itself
_OURS = _MARKED + _script("ours.sh")

_DESTROY_BODY = _script("destroy.sh")

#: $1 session dir. Kills the desktop's processes, waits for the last holder of the lock, confirms.
_DESTROY_SCRIPT = _OURS + 'set -u\ndir=$1\n' + _DESTROY_BODY

#: $1 base dir ("" = default), $2 session id: the same, for a create that failed before it knew the directory.
_DESTROY_BY_ID_SCRIPT = _OURS + _script("destroy_by_id.sh") + _DESTROY_BODY

#: $1 base dir ("" = default). One block per desktop directory.
_LIST_SCRIPT = _OURS + _script("list.sh")

#: $1 session dir. What a process needs to reach a desktop again: state, mode, cookie (hex), liveness.
_STATE_SCRIPT = _OURS + _script("state.sh")

_NOT_A_FOLDER = 3
#: $1 the folder to unpack the tar on stdin into (made with its parents); C messages, so errors can be told apart
_UNPACK_SCRIPT = _script("unpack.sh")

#: $1 Xvfb, $2 window manager ("" = none). What preflight needs to know about the host.
_PROBE_SCRIPT = _script("probe.sh")


def _sh(script: str, *args: str, name: str = "deskctl-ssh") -> str:
    """A command line for the login shell that runs ``script`` with ``sh`` and positional ``args``."""
    return " ".join(["exec", "/bin/sh", "-c", shlex.quote(script), shlex.quote(name), *map(shlex.quote, args)])
