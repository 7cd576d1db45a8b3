"""``deskctl down``'s work as a library (deskctl.down): the CLI only prints what it returns."""

from __future__ import annotations

import deskctl
from deskctl.down import destroy_session, first_error, sessions_to_destroy
from deskctl.errors import CleanupIncomplete, NotFound
from deskctl.ledger import open_ledger


def test_destroy_by_id_is_idempotent_and_says_what_became_of_each() -> None:
    kept = deskctl.open_desktop("memory", geometry="320x200", preflight=False, detached=True)
    other = deskctl.open_desktop("memory", geometry="320x200", preflight=False, detached=True)
    kept.release()
    other.release()
    with open_ledger() as book:
        ids = sessions_to_destroy(book, [kept.id, "dk-nothere"], everything=True)
        assert ids[:2] == [kept.id, "dk-nothere"] and other.id in ids and ids.count(kept.id) == 1
        first = destroy_session(book, kept.id, ignore_missing=False)
        assert (first.status, first.error) == ("destroyed", None)
        assert first.to_dict() == {"id": kept.id, "status": "destroyed", "cost_usd": first.cost_usd}
        again = destroy_session(book, kept.id, ignore_missing=False)
        assert again.to_dict() == {"id": kept.id, "status": "already_ended", "cost_usd": first.cost_usd}
        missing = destroy_session(book, "dk-nothere", ignore_missing=False)
        assert isinstance(missing.error, NotFound) and missing.to_dict()["code"] == "usage.not_found"
        assert destroy_session(book, "dk-nothere", ignore_missing=True).status == "missing"
        assert destroy_session(book, other.id, ignore_missing=False).status == "destroyed"
        record = book.get(other.id)
        assert record is not None and record.status == "ended"
    left = CleanupIncomplete("left", details={"left": ["dk-x"]})
    from deskctl.down import Destroyed

    results = [first, missing, Destroyed("dk-x", "error", error=left), Destroyed("dk-y", "error", error=NotFound("y"))]
    assert first_error(results) is left  # what is left behind outranks what came first
    assert first_error(results[:2]) is missing.error and first_error([first]) is None
