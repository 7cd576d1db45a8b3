"""deskctl's tar unpacking (extract_tar, untar_stream: plain entries by _untar.FastUntar, the rest by tarfile) gives
what tarfile's extractall(filter="data") gives, for archives written by GNU tar in each of its formats, by
tarfile and by deskctl, and refuses what the data filter refuses, writing nothing outside the destination."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from _trees import tree_state
from deskctl.errors import ProviderApiError
from deskctl.providers import _untar
from deskctl.providers._tar import extract_tar, untar_stream, write_tree


def _tree(root: Path, *, links: bool = True) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "plain.txt").write_text("plain\n")
    (root / "empty").write_bytes(b"")
    (root / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024 + 100))  # past one chunk, not a block multiple
    (root / "block.bin").write_bytes(os.urandom(1024))  # a multiple of the block: no padding
    for name, mode in (("tool", 0o755), ("secret", 0o600), ("open", 0o777), ("user-x", 0o744), ("setuid", 0o4755),
                       ("no-owner-x", 0o611), ("read-only", 0o444)):
        (root / name).write_text(name)
        (root / name).chmod(mode)
    (root / "sub" / "deeper" / "ünïcode ✓.txt").write_text("héllo\n", encoding="utf-8")
    long_dir = root / ("d" * 60) / ("e" * 60)
    long_dir.mkdir(parents=True)
    (long_dir / ("f" * 30)).write_text("a path over 100 bytes, a name under\n")
    (root / "sub" / ("n" * 120)).write_text("a name over 100 bytes\n")
    (root / "sealed").mkdir()
    (root / "sealed" / "in.txt").write_text("in\n")
    (root / "sealed").chmod(0o555)
    if links:
        (root / "sub" / "link").symlink_to("../plain.txt")
        os.link(root / "plain.txt", root / "sub" / "hard")
    for index, path in enumerate(sorted(root.rglob("*"), reverse=True)):
        os.utime(path, (1_500_000_000 + index, 1_500_000_000 + index * 3), follow_symlinks=False)


def _by_tarfile(archive: Path, dest: Path) -> None:
    dest.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def _unseal(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("sealed"):
            path.chmod(0o755)


@pytest.fixture
def source(tmp_path: Path) -> Any:
    root = tmp_path / "src"
    root.mkdir()
    _tree(root)
    yield root
    _unseal(tmp_path)


@pytest.mark.parametrize("fmt", ["gnu", "ustar", "pax", "posix-dot"])
def test_gnu_tars_unpack_as_tarfile_unpacks_them(source: Path, tmp_path: Path, fmt: str) -> None:
    archive = tmp_path / "a.tar"
    if fmt == "ustar":
        (source / "sub" / ("n" * 120)).unlink()  # a name ustar cannot hold
    if fmt == "posix-dot":  # what ssh's download runs on the host: tar -cf - -C DIR . (names "./...")
        subprocess.run(["tar", "-cf", str(archive), "-C", str(source), "."], check=True)
    else:
        subprocess.run(["tar", f"--format={fmt}", "-cf", str(archive), "-C", str(source.parent), source.name],
                       check=True, capture_output=True)
    with archive.open("rb") as stream:
        extract_tar(stream, tmp_path / "ours")
    _by_tarfile(archive, tmp_path / "theirs")
    ours, theirs = tree_state(tmp_path / "ours", link_times=False), tree_state(tmp_path / "theirs", link_times=False)
    assert ours == theirs
    if fmt != "posix-dot":
        assert ours["src/setuid"][1] == 0o755 and ours["src/no-owner-x"][1] == 0o600  # the data filter's modes
        assert ours["src/open"][1] == 0o755 and ours["src/read-only"][1] == 0o644


def test_deskctls_own_tars_unpack_fast_and_as_tarfile_unpacks_them(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    _tree(root, links=False)
    (root / "sealed").chmod(0o755)
    out = io.BytesIO()
    write_tree(out, root, "src", 1000, 1000)
    archive = tmp_path / "a.tar"
    archive.write_bytes(out.getvalue())
    extract_tar(archive, tmp_path / "ours")
    _by_tarfile(archive, tmp_path / "theirs")
    assert tree_state(tmp_path / "ours", link_times=False) == tree_state(tmp_path / "theirs", link_times=False)
    # plain files and folders only (ASCII names of ustar size): all of it unpacked without tarfile
    for path in [*root.rglob("*ü*"), root / "sub" / ("n" * 120)]:
        path.unlink()
    for path in sorted(root.rglob("*"), reverse=True):
        if len(str(path.relative_to(root))) > 90:
            path.unlink() if path.is_file() else path.rmdir()
    out = io.BytesIO()
    write_tree(out, root, "src", 1000, 1000)
    out.seek(0)
    fast = _untar.FastUntar(str(tmp_path / "plain"))
    os.mkdir(tmp_path / "plain")
    assert fast.run(out) and fast.ended and fast.rest is None  # type: ignore[arg-type]
    fast.finish()
    assert tree_state(tmp_path / "plain", link_times=False)["src/plain.txt"][3] == b"plain\n"


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for info, body in members:
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    return out.getvalue()


def _file(name: str, body: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(body)
    return info, body


def _entry(name: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info, None


@pytest.mark.parametrize(("members", "error"), [
    ([_file("ok.txt"), _file("/abs/evil.txt")], None),  # tarfile strips the leading slash: inside
    ([_file("ok.txt"), _file("../evil.txt")], tarfile.OutsideDestinationError),
    ([_file("ok.txt"), _file("a/../../evil.txt")], tarfile.OutsideDestinationError),
    ([_entry("up", tarfile.SYMTYPE, ".."), _file("up/evil.txt")], tarfile.LinkOutsideDestinationError),
    ([_entry("in", tarfile.SYMTYPE, "."), _file("ok.txt"), _file("../evil.txt")], tarfile.OutsideDestinationError),
    ([_entry("abs", tarfile.SYMTYPE, "/tmp")], tarfile.AbsoluteLinkError),
    ([_file("ok.txt"), _entry("dev", tarfile.CHRTYPE)], tarfile.SpecialFileError),
    ([_file("ok.txt"), _entry("escape", tarfile.LNKTYPE, "../outside.txt")], tarfile.LinkOutsideDestinationError),
])
def test_what_the_data_filter_refuses_is_refused_and_nothing_lands_outside(tmp_path: Path, members: list[Any],
                                                                           error: type[Exception] | None) -> None:
    dest = tmp_path / "deep" / "dest"
    dest.parent.mkdir()
    (tmp_path / "deep" / "outside.txt").write_text("outside\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    data = _archive(*members)
    if error is None:
        extract_tar(io.BytesIO(data), dest)
        assert (dest / "abs" / "evil.txt").read_bytes() == b"x"
        return
    with pytest.raises(error):
        extract_tar(io.BytesIO(data), dest)
    assert sorted(p.name for p in tmp_path.rglob("*")) == [n for n in before if n != "dest"]  # dest made: removed


def test_a_link_already_in_the_destination_is_not_followed_out(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "real").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (dest / "out").symlink_to(tmp_path / "elsewhere")  # a folder link leading out
    (dest / "file-link").symlink_to(tmp_path / "elsewhere" / "victim.txt")  # a file link leading out
    (tmp_path / "elsewhere" / "victim.txt").write_text("keep\n")
    for name in ("out/evil.txt", "out/new/evil.txt", "file-link"):
        with pytest.raises(tarfile.OutsideDestinationError):
            extract_tar(io.BytesIO(_archive(_file("real/ok.txt"), _file(name, b"evil"))), dest)
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["victim.txt"]
    assert (tmp_path / "elsewhere" / "victim.txt").read_text() == "keep\n"
    assert (dest / "real" / "ok.txt").read_bytes() == b"x"  # dest was there: what came before the refusal stays


def test_a_stream_cut_in_a_file_is_an_error_and_leaves_no_new_folder(tmp_path: Path, source: Path) -> None:
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "-cf", str(archive), "-C", str(source.parent), source.name], check=True)
    data = archive.read_bytes()
    cut = data.index(b"big.bin") + 4096  # inside big.bin's bytes
    with pytest.raises(tarfile.ReadError):
        extract_tar(io.BytesIO(data[:cut]), tmp_path / "new" / "dest")
    assert not (tmp_path / "new" / "dest").exists()


def test_untar_stream_takes_the_top_folder_as_the_target_and_wants_the_end_block(source: Path, tmp_path: Path
                                                                                 ) -> None:
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "--format=pax", "-cf", str(archive), "-C", str(source.parent), source.name], check=True)
    data = archive.read_bytes()

    def chunks(body: bytes) -> Any:
        return (body[i:i + 7000] for i in range(0, len(body), 7000))

    untar_stream(chunks(data), tmp_path / "ours", is_dir=True, provider="docker")
    _by_tarfile(archive, tmp_path / "theirs")
    theirs = tree_state(tmp_path / "theirs", link_times=False)
    assert tree_state(tmp_path / "ours", link_times=False) == {k[len("src/"):]: v for k, v in theirs.items()
                                                               if k.startswith("src/")}
    # the bytes end between two entries, before the end block: a dropped connection, not a whole folder
    with tarfile.open(archive) as tar:
        offsets = [member.offset for member in tar.getmembers()]
    end = offsets[len(offsets) // 2]  # a header's start
    with pytest.raises(ProviderApiError, match="ended before its end"):
        untar_stream(chunks(data[:end]), tmp_path / "cut", is_dir=True, provider="docker")
    assert not (tmp_path / "cut").exists()


def test_an_empty_stream_is_not_a_tar(tmp_path: Path) -> None:
    with pytest.raises(tarfile.ReadError, match="empty file"):  # as tarfile says it
        extract_tar(io.BytesIO(b""), tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    with pytest.raises(tarfile.ReadError):
        extract_tar(io.BytesIO(b"not a tar" * 100), tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
