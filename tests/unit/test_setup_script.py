"""scripts/setup decides what to install from what is there: the ImageMagick line asks dpkg about the package,
because a ``convert`` on PATH may be another program (a shim, GraphicsMagick's compat) that the benchmarks and
tests cannot use as ImageMagick. Run with the real ``dpkg-query`` against a dpkg database made here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query (Debian)")


def _imagemagick_line() -> str:
    lines = [line for line in SETUP.read_text().splitlines() if "imagemagick" in line]
    assert len(lines) == 1, lines
    return lines[0]


def _decides(tmp_path: Path, status: str) -> list[str]:
    """The packages the ImageMagick line adds, with a ``convert`` on PATH and a dpkg database of ``status``."""
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "status").write_text(status)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    convert = bin_dir / "convert"
    convert.write_text("#!/bin/sh\nexit 0\n")  # something called convert that is not ImageMagick
    convert.chmod(0o755)
    script = "need_pkgs=()\nhave() { command -v \"$1\" >/dev/null 2>&1; }\n" \
             "want() { have \"$1\" || need_pkgs+=(\"$2\"); }\n" + _imagemagick_line() + "\necho \"${need_pkgs[@]}\"\n"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "DPKG_ADMINDIR": str(admin)}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30, check=True)
    return out.stdout.split()


def test_a_convert_on_path_without_the_package_still_installs_imagemagick(tmp_path: Path) -> None:
    assert _decides(tmp_path, "") == ["imagemagick"]


def test_an_installed_imagemagick_package_is_not_installed_again(tmp_path: Path) -> None:
    status = ("Package: imagemagick\nStatus: install ok installed\nPriority: optional\nSection: graphics\n"
              "Architecture: amd64\nVersion: 8:6.9.11.60+dfsg-1.6\nDescription: image manipulation programs\n\n")
    assert _decides(tmp_path, status) == []


def test_removed_with_its_config_left_counts_as_missing(tmp_path: Path) -> None:
    status = ("Package: imagemagick\nStatus: deinstall ok config-files\nPriority: optional\nSection: graphics\n"
              "Architecture: amd64\nVersion: 8:6.9.11.60+dfsg-1.6\nDescription: image manipulation programs\n\n")
    assert _decides(tmp_path, status) == ["imagemagick"]
