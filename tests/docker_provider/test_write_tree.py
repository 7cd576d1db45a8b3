"""deskctl.providers._tar.write_tree: the tar a folder is uploaded as (docker's archive endpoint), written without
tarfile, is byte for byte the one ``tarfile.add`` makes in PAX format with the owner set and the time in whole
seconds, for every kind of entry a folder holds; and the engine unpacks it as such (tests/docker_provider)."""

from __future__ import annotations

import io
import os
import socket
import tarfile
from pathlib import Path

import pytest

from deskctl.providers._tar import write_tree


def _tarfiles(source: Path, name: str, uid: int, gid: int) -> bytes:
    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname, info.mtime = uid, gid, "", "", int(info.mtime)
        return info

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.add(source, arcname=name, filter=owned)
    return out.getvalue()


def _ours(source: Path, name: str, uid: int, gid: int) -> bytes:
    out = io.BytesIO()
    write_tree(out, source, name, uid, gid)
    return out.getvalue()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    for size in (0, 1, 511, 512, 513, 70_000):
        (root / "sub" / f"f{size}").write_bytes(os.urandom(size))
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "private").write_bytes(b"x")
    (root / "private").chmod(0o600)
    (root / "sub" / "deeper" / ("long-" * 30)).write_bytes(b"a name past 100 bytes")
    (root / "ünïcödé.txt").write_bytes(b"a name tarfile writes a PAX header for")
    (root / "link").symlink_to("sub/f1")
    (root / "dangling").symlink_to("nowhere")
    (root / "far").symlink_to("x/" * 60 + "target")  # a link past 100 bytes
    os.link(root / "sub" / "f513", root / "hard")  # a second name of a file: a hard link entry
    os.mkfifo(root / "pipe")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "sock"))  # left out, as tarfile leaves it
    (root / "sub").chmod(0o750)
    os.utime(root / "private", (1_700_000_000.75, 1_700_000_000.75))  # a fractional time, in whole seconds
    return root


def test_a_tree_is_tarfiles_tar(tree: Path) -> None:
    ours = _ours(tree, "tree", 1000, 1000)
    assert ours == _tarfiles(tree, "tree", 1000, 1000)
    assert len(ours) % (20 * 512) == 0
    with tarfile.open(fileobj=io.BytesIO(ours)) as tar:
        names = tar.getnames()
    assert "tree/sock" not in names and "tree/pipe" in names and "tree/hard" in names


def test_a_folders_contents_are_what_pack_dir_made_with_tarfile(tree: Path) -> None:
    # ssh's upload: the entries under their own names, the folder itself left out (as pack_dir's tarfile.add of
    # each entry made them; the hard link's first name is the first in sorted order there too)
    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname, info.mtime = 0, 0, "", "", int(info.mtime)
        return info

    theirs = io.BytesIO()
    with tarfile.open(fileobj=theirs, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(tree.iterdir()):
            tar.add(entry, arcname=entry.name, filter=owned)
    ours = io.BytesIO()
    write_tree(ours, tree, "", 0, 0, contents=True)
    assert ours.getvalue() == theirs.getvalue()


def test_one_file_and_a_link_alone(tree: Path) -> None:
    for entry in (tree / "sub" / "f70000", tree / "link", tree / "empty"):
        assert _ours(entry, "it", 0, 0) == _tarfiles(entry, "it", 0, 0)


def test_big_ids_and_a_file_that_shrinks(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ours(tree, "tree", 8**7, 4_000_000_000) == _tarfiles(tree, "tree", 8**7, 4_000_000_000)
    real_lstat = os.lstat

    def bigger(path: os.PathLike[str] | str) -> os.stat_result:
        info = real_lstat(path)
        if str(path).endswith("f511"):
            return os.stat_result((info.st_mode, *info[1:6], 600, *info[7:]))
        return info

    monkeypatch.setattr(os, "lstat", bigger)
    with pytest.raises(OSError, match="got shorter"):
        _ours(tree, "tree", 0, 0)
