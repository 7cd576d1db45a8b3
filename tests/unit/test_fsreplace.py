"""deskctl._fsreplace.replace_file: the last step of a download puts the finished file in place without renaming
over an existing file (ext4 writes the whole new file out inside such a rename), and replaces what os.replace
replaces."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deskctl import _fsreplace
from deskctl._fsreplace import replace_file


def _partial(folder: Path, data: bytes) -> Path:
    partial = folder / ".target.deskctl-part"
    partial.write_bytes(data)
    return partial


def test_a_file_there_is_unlinked_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"old")
    keeper = tmp_path / "keeper"
    os.link(target, keeper)  # a hard link: the old file's data outlives its name
    seen: list[bool] = []
    real_replace = os.replace

    def watching(src: object, dst: object) -> None:
        seen.append(os.path.lexists(dst))  # type: ignore[arg-type]
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(_fsreplace.os, "replace", watching)
    partial = _partial(tmp_path, b"new")
    replace_file(partial, target)
    assert seen == [False]  # nothing was there to rename over
    assert target.read_bytes() == b"new" and not partial.exists()
    assert keeper.read_bytes() == b"old"


def test_no_file_there(tmp_path: Path) -> None:
    partial = _partial(tmp_path, b"new")
    replace_file(str(partial), str(tmp_path / "target"))
    assert (tmp_path / "target").read_bytes() == b"new" and not partial.exists()


def test_a_symlink_there_is_replaced_and_what_it_points_to_is_left(tmp_path: Path) -> None:
    pointed = tmp_path / "pointed"
    pointed.write_bytes(b"elsewhere")
    target = tmp_path / "target"
    target.symlink_to(pointed)
    replace_file(_partial(tmp_path, b"new"), target)
    assert not target.is_symlink() and target.read_bytes() == b"new"
    assert pointed.read_bytes() == b"elsewhere"


def test_a_directory_there_is_refused_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    partial = _partial(tmp_path, b"new")
    with pytest.raises(OSError):
        replace_file(partial, target)
    assert (target / "inside").read_bytes() == b"kept" and partial.read_bytes() == b"new"


def test_a_missing_partial_leaves_the_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"old")
    with pytest.raises(FileNotFoundError):
        replace_file(tmp_path / "absent", target)
    assert target.read_bytes() == b"old"
