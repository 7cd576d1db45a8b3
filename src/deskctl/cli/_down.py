"""``deskctl down``'s work, without click: the click command (:func:`deskctl.cli.session_cmds.down`) and the
click-free path of ``deskctl down ID...`` (:func:`run`) both call :func:`destroy`, so both print the same bytes.

``deskctl down`` runs once per desktop in a fleet's teardown (16 at once from a CI job's cleanup): click's import
was a fifth of the call. :func:`run` takes the plain form only, session ids and nothing else; anything else
(an option, ``--help``, no id, ``[defaults]`` in a config file, shell completion) it leaves to click, untouched.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from deskctl.cli._output import echo, echo_json
from deskctl.errors import UsageError

__all__ = ["destroy", "run"]


def destroy(session_ids: tuple[str, ...], *, everything: bool, ignore_missing: bool, as_json: bool) -> None:
    """Destroy the sessions (confirmed), record their end and cost; see ``deskctl down --help``."""
    from deskctl import metering
    from deskctl.errors import CleanupIncomplete, DeskctlError, NotFound, SessionClosed
    from deskctl.ledger import open_ledger
    from deskctl.session import attach

    def note(message: str) -> None:
        echo(message, err=True)

    if not session_ids and not everything:
        raise UsageError("name at least one session id, or --all", code="usage.missing_argument",
                         remedy="deskctl ls")
    results: list[dict[str, Any]] = []
    first_error: DeskctlError | None = None
    with open_ledger() as book:
        ids = list(session_ids)
        if everything:
            ids += [r.session_id for r in book.sessions(active=True) if r.session_id not in ids]
        for sid in ids:
            try:
                desk = attach(sid, ledger=book)
                desk.close()
                record = book.get(sid)
                cost = record.cost_usd if record else None
                results.append({"id": sid, "status": "destroyed", "cost_usd": cost})
                note(f"{sid}: destroyed ({metering.format_cost(cost)})")
            except SessionClosed as exc:
                record = book.get(sid)
                if record is None or record.status not in ("ended", "failed"):
                    first_error = first_error or exc
                    results.append({"id": sid, "status": "error", "code": exc.code, "message": exc.message})
                    continue
                results.append({"id": sid, "status": f"already_{record.status}", "cost_usd": record.cost_usd})
                note(f"{sid}: already {record.status}; nothing to destroy")
            except NotFound as exc:
                if not ignore_missing:
                    first_error = first_error or exc
                    results.append({"id": sid, "status": "error", "code": exc.code, "message": exc.message})
                    if len(ids) > 1:
                        note(f"{sid}: {exc.message} ({exc.code})")
                    continue
                results.append({"id": sid, "status": "missing", "cost_usd": None})
                note(f"{sid}: not in the ledger; ignored")
            except DeskctlError as exc:
                if isinstance(exc, CleanupIncomplete) or first_error is None:
                    first_error = exc
                results.append({"id": sid, "status": "error", "code": exc.code, "message": exc.message})
                if len(ids) > 1:  # a single failure is reported once, by the abort path
                    note(f"{sid}: {exc.message} ({exc.code})")
    if as_json:
        doc: dict[str, Any] = {"sessions": results}
        if first_error is not None:
            doc.update(first_error.to_dict())
        echo_json(doc)
    if first_error is not None:
        if as_json:
            sys.exit(first_error.exit_code)
        raise first_error


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
