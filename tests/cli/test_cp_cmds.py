"""`deskctl cp`'s reading of its arguments: docker cp's ``ID:PATH`` syntax and its "into a directory" rule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deskctl.cli.cp_cmds import Location, into_destination, parse_location
from deskctl.errors import UsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dk-abc123:/tmp/x", Location("/tmp/x", "dk-abc123")),
        ("dk-abc123:relative/x", Location("relative/x", "dk-abc123")),
        ("dk-abc123:C:\\Users\\me\\out.txt", Location("C:\\Users\\me\\out.txt", "dk-abc123")),
        ("dk-abc123:/a:b", Location("/a:b", "dk-abc123")),  # only the first ':' separates
        ("report.txt", Location("report.txt")),
        ("/abs/with:colon", Location("/abs/with:colon")),  # absolute: local, as in docker cp
        ("./a:b", Location("./a:b")),
        ("../up:x", Location("../up:x")),
        ("~/a:b", Location("~/a:b")),
        ("dir/a:b", Location("dir/a:b")),  # a '/' before the ':' is a local path
    ],
)
def test_parse_location(text: str, expected: Location) -> None:
    assert parse_location(text) == expected


@pytest.mark.parametrize("text", ["", ":/tmp/x", "dk-abc:"])
def test_parse_location_refuses_what_names_nothing(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_location(text)
    assert info.value.code == "usage.invalid" and info.value.exit_code == 2


def test_location_prints_as_typed() -> None:
    assert str(parse_location("dk-1:/tmp/x")) == "dk-1:/tmp/x"
    assert str(parse_location("./x")) == "./x"


def _remote(path: str) -> Location:
    return Location(path, "dk-1")


@pytest.mark.parametrize(
    ("source", "dest", "expected"),
    [
        ("data", "/home/u/data2", "/home/u/data2"),  # no trailing '/': DEST is the copy itself
        ("data", "/home/u/", "/home/u/data"),  # trailing '/': into it, under SRC's name
        ("data/", "/home/u/", "/home/u/data"),  # SRC's own trailing '/' does not change its name
        ("sub/report.txt", "/tmp//", "/tmp/report.txt"),
        ("report.txt", "/", "/report.txt"),
        ("report.txt", "C:\\Users\\me\\", "C:\\Users\\me\\report.txt"),  # a Windows desktop
        ("report.txt", "C:/Users/me/", "C:/Users/me/report.txt"),
        ("report.txt", "C:\\Users\\me\\copy.txt", "C:\\Users\\me\\copy.txt"),
    ],
)
def test_upload_destination(source: str, dest: str, expected: str) -> None:
    # on the desktop nothing is looked up: only a trailing separator means "into"
    assert into_destination(Location(source), _remote(dest), dest_is_dir=False) == expected


def test_upload_of_the_current_directory_takes_its_real_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "project"
    here.mkdir()
    monkeypatch.chdir(here)
    assert into_destination(Location("."), _remote("/srv/"), dest_is_dir=False) == "/srv/project"


@pytest.mark.parametrize(
    ("source", "dest_is_dir", "dest", "expected"),
    [
        ("/var/log/app", True, "logs", os.path.join("logs", "app")),  # an existing directory: into it
        ("/var/log/app/", True, "logs", os.path.join("logs", "app")),
        ("/var/log/app", False, "logs", "logs"),  # not a directory here: DEST is the copy
        ("/var/log/app", False, "logs/", os.path.join("logs/", "app")),  # trailing '/': into it
        ("C:\\Users\\me\\out.txt", True, "here", os.path.join("here", "out.txt")),
        ("/", True, "here", "here"),  # a root has no name to copy under
    ],
)
def test_download_destination(source: str, dest_is_dir: bool, dest: str, expected: str) -> None:
    assert into_destination(_remote(source), Location(dest), dest_is_dir=dest_is_dir) == expected


def test_download_destination_expands_the_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert into_destination(_remote("/etc/hosts"), Location("~/"), dest_is_dir=True) == str(tmp_path / "hosts")
    assert into_destination(_remote("/etc/hosts"), Location("~/h"), dest_is_dir=False) == str(tmp_path / "h")
