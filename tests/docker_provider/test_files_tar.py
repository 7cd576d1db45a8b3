"""The tar of a docker copy made and read by hand (providers/_tar.py): a file's header is the one tarfile writes,
and the one file of an archive is read back from any way the bytes are cut, whatever headers precede it (PAX,
GNU long names, a PAX size), with a coded error for an archive that is not whole. Checked against tarfile itself;
the copies through the real CLI and engine are in test_files_cli.py. A tree read without framing must end with
the tar's end block."""

from __future__ import annotations

import io
import os
import random
import tarfile
from pathlib import Path

import pytest

from deskctl.errors import ProviderApiError
from deskctl.providers._tar import OnlyFile, file_header


@pytest.mark.parametrize(("name", "size", "mode", "mtime", "uid", "gid"), [
    ("a", 0, 0o644, 0, 0, 0),
    ("payload.bin", 3_000_001, 0o750, 1_764_633_600, 1000, 1000),
    ("n" * 100, 5, 0o4755, 8**11 - 1, 8**7 - 1, 7),  # every field at its widest
    ("a b'c", 9, 0o600, 12345, 65534, 65534),
    ("n" * 101, 5, 0o644, 1, 1, 1),  # from here on, tarfile's (a PAX header first)
    ("ünï.bin", 5, 0o644, 1, 1, 1),
    ("x", 8**11, 0o644, 1, 1, 1),
    ("x", 1, 0o644, 1, 8**7, 1),
])
def test_a_files_header_is_tarfiles(name: str, size: int, mode: int, mtime: int, uid: int, gid: int) -> None:
    entry = tarfile.TarInfo(name)
    entry.size, entry.mode, entry.mtime, entry.uid, entry.gid, entry.uname, entry.gname = \
        size, mode, mtime, uid, gid, "", ""
    made = file_header(name, size, mode, mtime, uid, gid)
    body = bytes(min(size, 4096))
    with tarfile.open(fileobj=io.BytesIO(made + body), mode="r|") as tar:
        (read,) = [tar.next()]
        assert read is not None
        assert (read.name, read.size, read.mode, read.mtime, read.uid, read.gid, read.type) == \
            (name, size, mode, mtime, uid, gid, tarfile.REGTYPE)
    if len(made) == 512:  # one made by hand: the bytes tarfile writes (its devmajor/minor fields empty as here)
        ours, theirs = bytearray(made), bytearray(entry.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        for at in (329, 337):
            ours[at:at + 8] = theirs[at:at + 8] = bytes(8)
        ours[148:156] = theirs[148:156] = bytes(8)
        assert ours == theirs


def _archive(name: str, data: bytes, fmt: int, *, pax: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        entry = tarfile.TarInfo(name)
        entry.size, entry.mode = len(data), 0o751
        if pax:
            entry.pax_headers = pax
        tar.addfile(entry, io.BytesIO(data))
    return out.getvalue()


def _feed(raw: bytes, out: Path, rng: random.Random) -> int:
    """``raw`` fed in steps of 1 to 4 views of random sizes; the mode read."""
    with open(out, "wb", buffering=0) as sink:
        only = OnlyFile(sink.fileno(), "docker")
        pos, view = 0, memoryview(raw)
        while pos < len(raw):
            step = []
            for _ in range(rng.randint(1, 4)):
                size = rng.randint(1, 3000)
                step.append(view[pos:pos + size])
                pos += size
            only.feed([part for part in step if part])
        return only.finish()


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT],
                         ids=["pax", "gnu", "ustar"])
def test_the_one_file_is_read_from_any_cut_of_the_archive(fmt: int, tmp_path: Path) -> None:
    rng = random.Random(fmt)
    names = ["f", "m" * 99] + ([] if fmt == tarfile.USTAR_FORMAT else ["n" * 150, "ünï ✓"])
    for name in names:
        for size in (0, 1, 511, 512, 513, 100_000):
            data = os.urandom(size)
            assert _feed(_archive(name, data, fmt), tmp_path / "out", rng) == 0o751
            assert (tmp_path / "out").read_bytes() == data, (name, size)


def test_a_pax_size_is_the_files_size(tmp_path: Path) -> None:
    # an 8 GiB file's size is said by a PAX record (the ustar field cannot hold it); here a small one says so too
    data = os.urandom(3000)
    raw = _archive("f", data, tarfile.PAX_FORMAT, pax={"size": str(len(data)), "comment": "x=y z"})
    assert b"size=3000" in raw
    assert _feed(raw, tmp_path / "out", random.Random(1)) == 0o751
    assert (tmp_path / "out").read_bytes() == data


@pytest.mark.parametrize("damage", ["cut in the data", "cut in the header", "nothing", "end blocks only",
                                    "bad checksum", "a folder"])
def test_an_archive_that_is_not_a_whole_file_is_a_coded_error(damage: str, tmp_path: Path) -> None:
    raw = _archive("f", os.urandom(5000), tarfile.PAX_FORMAT)
    if damage == "cut in the data":
        raw = raw[:512 + 1000]
    elif damage == "cut in the header":
        raw = raw[:300]
    elif damage == "nothing":
        raw = b""
    elif damage == "end blocks only":
        raw = bytes(1024)
    elif damage == "bad checksum":
        raw = raw[:10] + b"X" + raw[11:]
    else:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            folder = tarfile.TarInfo("d")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
        raw = out.getvalue()
    with pytest.raises(ProviderApiError) as failed:
        _feed(raw, tmp_path / "out", random.Random(2))
    assert failed.value.code == "provider.api_error"
    assert "the archive from the container is not readable" in failed.value.message


def _tree_archive(sizes: list[int]) -> tuple[bytes, int]:
    """A tar of the folder ``t`` with a file per size (as the archive endpoint sends a folder, the folder first),
    and where its last entry ends (its end blocks start)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo("t")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for index, size in enumerate(sizes):
            entry = tarfile.TarInfo(f"t/f{index}")
            entry.size = size
            tar.addfile(entry, io.BytesIO(os.urandom(size)))
        entries_end = out.tell()
    return out.getvalue(), entries_end


@pytest.mark.parametrize("sizes", [[5000, 0, 700], [0], [512, 1024]])
def test_a_tree_that_ends_between_two_entries_is_a_coded_error_not_a_partial_tree(sizes: list[int],
                                                                                 tmp_path: Path) -> None:
    # an answer without framing (HTTP/1.0, up to the close) ends the same way when the connection drops between
    # two entries: only the tar's own end block tells a whole tree from a part of one
    from deskctl.providers._tar import untar_stream

    raw, entries_end = _tree_archive(sizes)
    untar_stream(iter([raw[:700], raw[700:]]), tmp_path / "whole", is_dir=True, provider="docker")
    assert sorted(p.name for p in (tmp_path / "whole").iterdir()) == [f"f{i}" for i in range(len(sizes))]
    for cut in (entries_end, entries_end - 512 - (-(-sizes[-1] // 512)) * 512):  # after the last entry, before it
        with pytest.raises(ProviderApiError) as failed:
            untar_stream(iter([raw[:cut]]), tmp_path / f"cut{cut}", is_dir=True, provider="docker")
        assert failed.value.code == "provider.api_error"
        assert "ended before its end" in failed.value.message
    untar_stream(iter([raw[:entries_end + 512]]), tmp_path / "one end block", is_dir=True, provider="docker")
