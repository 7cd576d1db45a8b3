"""The snapshot contract (docs/episodes.md), run against every target: a provider whose capabilities say
``snapshots`` puts a desktop back as it was (a file written before the snapshot is there, one written after is
gone, the geometry is the pinned one, the session keeps its id, nothing of the replaced desktop is left); any other
answers ``usage.unsupported`` (the conformance conftest's strict xfail, :data:`deskctl.testing.CAPABILITY_TESTS`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import deskctl
from conformance.conftest import Target
from deskctl.episodes import delete_snapshot
from deskctl.episodes.store import list_snapshots
from deskctl.errors import UsageError
from deskctl.ledger import open_ledger
from deskctl.spec import Geometry


@pytest.mark.slow
def test_restore_brings_back_a_file_and_drops_a_later_one(target: Target, tmp_path: Path) -> None:
    from deskctl.providers import provider_class
    from deskctl.providers.memory import MemoryProvider

    made_by = provider_class(str(target.open_kwargs.get("provider", "")))
    # memory (or a third party's kind of it): the desktop's files are this host's, which no snapshot of the desktop
    # keeps; there the contract is the rest (the session, its geometry, the ledger) and
    # tests/episodes/test_memory_snapshots.py checks the desktop's own state
    host_files = made_by is not None and issubclass(made_by, MemoryProvider)
    kept, later = tmp_path / "kept.txt", tmp_path / "later.txt"
    kept.write_text("kept\n")
    later.write_text("later\n")
    with deskctl.open_desktop(**{**target.open_kwargs, "geometry": target.geometry}) as desk:
        if not desk.provider.capabilities.snapshots:
            # first, before anything is written (a host provider's relative path is this process's folder)
            desk.snapshot("contract")
        session_id = desk.id
        if not host_files:
            desk.upload(kept, "deskctl-contract-kept.txt")
        snap = desk.snapshot("contract")
        if not host_files:
            desk.upload(later, "deskctl-contract-later.txt")
            desk.upload(later, "deskctl-contract-kept.txt")
        desk.restore(snap)
        assert desk.handle is not None and desk.id == session_id
        if not host_files:
            desk.download("deskctl-contract-kept.txt", tmp_path / "back.txt")
            assert (tmp_path / "back.txt").read_text() == "kept\n"
            with pytest.raises(UsageError) as missing:
                desk.download("deskctl-contract-later.txt", tmp_path / "none.txt")
            assert missing.value.code == "usage.no_such_file"
        geometry = Geometry.parse(target.geometry)
        assert desk.size == (geometry.width, geometry.height)
        assert desk.screenshot().width == geometry.width
        last = desk.handle
    assert target.leftovers(last) == []
    with open_ledger() as book:
        [row] = list_snapshots(book)
        assert row.restores == 1
        delete_snapshot(book, snap)
        assert list_snapshots(book) == []
