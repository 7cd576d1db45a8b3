"""deskctl.providers._local_copy.copy_tree gives what shutil.copytree(symlinks=True, dirs_exist_ok=True) gives:
the same bytes, modes, times and links, merged into a folder that is there; a special file is refused."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from _trees import tree_state
from deskctl.providers import _local_copy
from deskctl.providers._local_copy import copy_tree


def _tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "plain.txt").write_text("plain\n")
    (root / "empty").write_bytes(b"")
    (root / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # more than one copy_file_range chunk
    (root / "tool").write_text("#!/bin/sh\n")
    (root / "tool").chmod(0o755)
    (root / "secret").write_text("s\n")
    (root / "secret").chmod(0o600)
    (root / "group-writable").write_text("g\n")
    (root / "group-writable").chmod(0o664)  # a mode the umask (022) takes bits from: set again after creation
    (root / "setgid").write_text("x\n")
    (root / "setgid").chmod(0o2755)
    (root / "read-only").write_text("r\n")
    (root / "read-only").chmod(0o444)
    (root / "sub" / "deeper" / "ünïcode ✓.txt").write_text("héllo\n", encoding="utf-8")
    (root / "sub" / "link-to-file").symlink_to("../plain.txt")
    (root / "sub" / "link-to-dir").symlink_to("deeper")
    (root / "sub" / "dangling").symlink_to("nowhere")
    (root / "sealed").mkdir()
    (root / "sealed" / "inside.txt").write_text("in\n")
    (root / "sealed").chmod(0o555)  # filled before its mode is set
    for index, path in enumerate(sorted(root.rglob("*"), reverse=True)):
        os.utime(path, ns=(1_600_000_000_000_000_000 + index * 1_234_567, 1_500_000_000_000_000_000 + index * 7),
                 follow_symlinks=False)


def _access_times(root: Path) -> dict[str, int]:
    """Each regular file's access time (lstat reads none)."""
    return {str(p.relative_to(root)): os.lstat(p).st_atime_ns for p in root.rglob("*") if p.is_file()
            and not p.is_symlink()}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    _tree(root)
    yield root
    (root / "sealed").chmod(0o755)


def test_a_new_copy_equals_copytrees(source: Path, tmp_path: Path) -> None:
    accessed = _access_times(source)
    copy_tree(str(source), str(tmp_path / "ours"))
    # the access times the source had (copytree's are the source's after its own read, when the mount updates them)
    assert _access_times(tmp_path / "ours") == accessed
    shutil.copytree(source, tmp_path / "theirs", symlinks=True)
    assert tree_state(tmp_path / "ours", with_root=True) == tree_state(tmp_path / "theirs", with_root=True)
    assert tree_state(tmp_path / "ours", with_root=True)["sub/link-to-dir"][3] == "deeper"
    for root in ("ours", "theirs"):
        (tmp_path / root / "sealed").chmod(0o755)


def test_a_copy_merges_into_a_folder_that_is_there(source: Path, tmp_path: Path) -> None:
    for name in ("ours", "theirs"):
        there = tmp_path / name
        (there / "sub").mkdir(parents=True)
        (there / "keep.txt").write_text("mine\n")
        os.utime(there / "keep.txt", ns=(10**18, 10**18))
        (there / "secret").write_text("an older, longer body than the new one\n")
        (there / "secret").chmod(0o644)  # the source's mode (0600) replaces it
        (there / "sub" / "link-to-file").symlink_to("elsewhere")  # a link there is replaced by the source's
    copy_tree(str(source), str(tmp_path / "ours"))
    (tmp_path / "theirs" / "sub" / "link-to-file").unlink()  # copytree refuses an existing link; ours replaces it
    shutil.copytree(source, tmp_path / "theirs", symlinks=True, dirs_exist_ok=True)
    assert tree_state(tmp_path / "ours", with_root=True) == tree_state(tmp_path / "theirs", with_root=True)
    assert (tmp_path / "ours" / "keep.txt").read_text() == "mine\n"
    assert stat.S_IMODE(os.stat(tmp_path / "ours" / "secret").st_mode) == 0o600
    for root in ("ours", "theirs"):
        (tmp_path / root / "sealed").chmod(0o755)


def test_without_copy_file_range_sendfile_copies_the_same(source: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def refused(*args: Any) -> int:
        calls.append(1)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(_local_copy.os, "copy_file_range", refused)
    copy_tree(str(source), str(tmp_path / "ours"))
    shutil.copytree(source, tmp_path / "theirs", symlinks=True)
    assert tree_state(tmp_path / "ours", with_root=True) == tree_state(tmp_path / "theirs", with_root=True)
    assert len(calls) == 1  # asked once, then sendfile for the rest of the copy
    for root in ("ours", "theirs"):
        (tmp_path / root / "sealed").chmod(0o755)


def test_a_special_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    os.mkfifo(root / "pipe")  # reading it would wait for a writer forever
    with pytest.raises(shutil.SpecialFileError, match="not a regular file"):
        copy_tree(str(root), str(tmp_path / "dst"))


def test_a_folder_cannot_replace_a_file(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "x").mkdir(parents=True)
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "x").write_text("a file where the folder goes\n")
    with pytest.raises(FileExistsError):
        copy_tree(str(root), str(tmp_path / "dst"))
    assert (tmp_path / "dst" / "x").read_text() == "a file where the folder goes\n"
