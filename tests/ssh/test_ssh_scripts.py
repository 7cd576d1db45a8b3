"""The shell scripts the ssh provider runs on the host: shipped as package data, read back whole, and each one
as put together (the shared functions first) is valid POSIX sh. No sshd needed."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest

from deskctl.providers.ssh import scripts

ROOT = Path(__file__).resolve().parents[2]
COMPOSED = ["_OWNER_SCRIPT", "_DESTROY_SCRIPT", "_DESTROY_BY_ID_SCRIPT", "_LIST_SCRIPT", "_STATE_SCRIPT",
            "_UNPACK_SCRIPT", "_PROBE_SCRIPT"]


def test_every_script_file_is_package_data_and_used() -> None:
    folder = resources.files("deskctl.providers.ssh").joinpath("sh")
    names = sorted(entry.name for entry in folder.iterdir())
    assert names, "no scripts found beside deskctl.providers.ssh"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["deskctl"]
    for name in names:
        assert any(fnmatch(f"providers/ssh/sh/{name}", pattern) for pattern in patterns), name
        assert f'_script("{name}")' in Path(scripts.__file__).read_text(), f"{name} is not read by scripts.py"


@pytest.mark.parametrize("name", COMPOSED)
def test_each_script_is_valid_posix_sh(name: str) -> None:
    shell = shutil.which("dash") or shutil.which("sh")
    assert shell is not None
    script: str = getattr(scripts, name)
    checked = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True, timeout=10)
    assert checked.returncode == 0, checked.stderr
    assert script.endswith("\n")


def test_a_broken_script_is_caught_by_the_syntax_check() -> None:
    # the check above can fail: the owner script with one ``esac`` missing is refused by the same shell call
    shell = shutil.which("dash") or shutil.which("sh")
    assert shell is not None
    broken = scripts._OWNER_SCRIPT.replace("esac", "", 1)
    assert broken != scripts._OWNER_SCRIPT
    assert subprocess.run([shell, "-n", "-c", broken], capture_output=True, timeout=10).returncode != 0
