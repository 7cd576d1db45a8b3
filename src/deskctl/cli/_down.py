"""``deskctl down``'s work, without click: the click command (:func:`deskctl.cli.session_cmds.down`) and the
click-free path of ``deskctl down ID...`` (:func:`run`) both call :func:`destroy`, so both print the same bytes.

``deskctl down`` runs once per desktop in a fleet's teardown (16 at once from a CI job's cleanup): click's import
was a fifth of the call. :func:`run` takes the plain form only, session ids and nothing else; anything else
(an option, ``--help``, no id, ``[defaults]`` in a config file, shell completion) it leaves to click, untouched.
"""

from __future__ import annotations

import os

from deskctl.cli._output import Reported, echo, echo_json
from deskctl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["destroy", "run"]


def destroy(session_ids: tuple[str, ...], *, everything: bool, ignore_missing: bool, as_json: bool) -> None:
    """Destroy the sessions (confirmed), record their end and cost (:mod:`deskctl.down`), and say what became of
    each; see ``deskctl down --help``."""
    from deskctl import metering
    from deskctl.down import destroy_session, first_error, sessions_to_destroy
    from deskctl.errors import SessionClosed
    from deskctl.ledger import open_ledger

    def note(message: str) -> None:
        echo(message, err=True)

    if not session_ids and not everything:
        raise UsageError("name at least one session id, or --all", code="usage.missing_argument",
                         remedy="deskctl ls")
    results = []
    with open_ledger() as book:
        ids = sessions_to_destroy(book, session_ids, everything=everything)
        for sid in ids:
            result = destroy_session(book, sid, ignore_missing=ignore_missing)
            results.append(result)
            if result.error is not None:
                if len(ids) > 1 and not isinstance(result.error, SessionClosed):  # one is reported by the abort path
                    note(f"{sid}: {result.error.message} ({result.error.code})")
            elif result.status == "destroyed":
                note(f"{sid}: destroyed ({metering.format_cost(result.cost_usd)})")
            elif result.status == "missing":
                note(f"{sid}: not in the ledger; ignored")
            else:
                note(f"{sid}: already {result.status.removeprefix('already_')}; nothing to destroy")
    error = first_error(results)
    if as_json:
        doc: dict[str, Any] = {"sessions": [r.to_dict() for r in results]}
        if error is not None:
            doc.update(error.to_dict())
        echo_json(doc)
    if error is not None:
        raise Reported(error.exit_code) if as_json else error


def run(args: list[str]) -> bool:
    """Run ``deskctl down ID...`` without click; False (having done nothing) when click is to run it. Errors
    are raised, for the abort path of :func:`deskctl.cli.main`."""
    if "_DESKCTL_COMPLETE" in os.environ or len(args) < 2 or args[0] != "down":
        return False
    if any(not arg or arg.startswith("-") for arg in args[1:]):
        return False
    from deskctl.config import load_config

    try:
        config = load_config()
    except Exception:  # click's path reports it, the same way as for any other command
        return False
    if config.defaults:  # [defaults] may set --ignore-missing or --json: click applies them
        return False
    destroy(tuple(args[1:]), everything=False, ignore_missing=False, as_json=False)
    return True
