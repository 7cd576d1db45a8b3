"""deskctl's data directory without DESKCTL_HOME: worked out as platformdirs does, without importing it (a CLI
call pays for every import), and found the same for every shape of XDG_DATA_HOME and HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.paths import home_dir

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux rule is deskctl's own")


@pytest.mark.parametrize("xdg", [None, "", "relative/data", "/abs/data", "/abs/data/", "~/data"])
@pytest.mark.parametrize("home", [None, "", "relative-home", "/home/somebody", "/home/somebody/"])
def test_the_data_directory_is_platformdirs_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 xdg: str | None, home: str | None) -> None:
    from platformdirs import user_data_dir

    from deskctl.paths import _user_data_dir

    for name, value in (("XDG_DATA_HOME", xdg), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert _user_data_dir() == user_data_dir("deskctl", appauthor=False)


def test_a_cli_call_without_deskctl_home_uses_it_and_imports_no_platformdirs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DESKCTL_HOME"}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))
    code = ("import json, sys; from deskctl.cli import main\n"
            "try:\n    main(['cost', '--json'])\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('platformdirs', 'tempfile'))))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "data" / "deskctl").is_dir()  # the ledger went where platformdirs says


def test_deskctl_home_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "mine"))
    assert home_dir() == tmp_path / "mine"


@pytest.mark.parametrize("given", ["mine", "mine/", "./mine/./deep", "a//b///c/", "~/mine", "../up/mine",
                                   "{tmp}/abs//mine/", "/{tmp}/abs/mine", "//{tmp}/abs/mine"])
def test_home_path_is_home_dirs_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    """The per-call CLI paths take the data directory as a string; it is the very path home_dir() names."""
    from deskctl.paths import home_path, runtime_dir, runtime_path

    given = given.replace("{tmp}", str(tmp_path))
    workdir = tmp_path / "work" / "here"
    workdir.mkdir(parents=True)
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DESKCTL_HOME", given)
    assert home_path() == str(Path(given).expanduser()) == str(home_dir())
    assert os.path.isdir(home_path())
    assert runtime_path() == str(runtime_dir()) == str(Path(given).expanduser() / "run")


def test_the_paths_of_a_cli_call_import_no_pathlib(tmp_path: Path) -> None:
    """pathlib imports urllib.parse and ipaddress (about 9% of the instructions of a `deskctl do` process): the
    data directory, the configuration files (when there are none) and an X cookie are read without it."""
    from deskctl.core.x11auth import write_xauthority

    write_xauthority(tmp_path / "Xauthority", 3, b"\x01" * 16)
    code = ("import sys; from deskctl.paths import home_path, runtime_path; from deskctl.config import load_config\n"
            "from deskctl.core.x11auth import read_cookie\n"
            "home_path(); runtime_path(); config = load_config(); cookie = read_cookie(sys.argv[1], 3)\n"
            "assert config.defaults == {} and config.sources == [] and cookie == b'\\x01' * 16\n"
            "print('pathlib' in sys.modules, 'urllib.parse' in sys.modules)")
    env = {**os.environ, "DESKCTL_HOME": str(tmp_path / "home"), "HOME": str(tmp_path), "XDG_CONFIG_HOME": "",
           "DESKCTL_CONFIG": ""}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "Xauthority")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["x.png", "/x.png", "//x.png", "///x.png", "a/b/c.png", "a//b/./c.png", "a/b/",
                                  "..", "../x.png", ".", "./x.png", "~/x.png", "/", "a/../b.png", " x.png", ""])
def test_pure_path_str_is_pathlibs_own(name: str) -> None:
    from pathlib import PurePosixPath

    from deskctl.paths import pure_path_str

    assert pure_path_str(name) == str(PurePosixPath(name))


def test_remove_tree_removes_what_rmtree_would_and_follows_no_link(tmp_path: Path) -> None:
    """deskctl.paths.remove_tree (a desktop's folders at `down`, without shutil's import) does what
    shutil.rmtree(ignore_errors=True) does: the whole tree goes, links inside it go as links (what they point at
    stays), a link given as the path is left alone, a missing path is no error."""
    from deskctl.paths import remove_tree

    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("kept")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "deep.txt").write_text("x")
    (tree / "top.txt").write_text("y")
    (tree / "a" / "to-dir").symlink_to(outside / "keep")
    (tree / "to-file").symlink_to(outside / "keep" / "file")
    (tree / "dangling").symlink_to(tmp_path / "nowhere")
    remove_tree(tree)
    assert not os.path.lexists(tree)
    assert (outside / "keep" / "file").read_text() == "kept"
    link = tmp_path / "link"
    link.symlink_to(outside)
    remove_tree(link)
    assert link.is_symlink() and (outside / "keep" / "file").exists()
    remove_tree(tmp_path / "missing")
    remove_tree(str(outside))
    assert not outside.exists()
