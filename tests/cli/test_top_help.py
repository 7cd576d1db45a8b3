"""``deskctl --help`` (``-h``) and ``deskctl --version`` without click (:func:`deskctl.cli._plain_top`): the same
bytes and exit code as click's, on every terminal width and under shell completion, where click still answers."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest

from _cli import fast_or_click as _fast_or_click


def fast_or_click(args: list[str], *, fast: bool, tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    tmp_path.mkdir()
    return _fast_or_click(args, fast=fast, tmp_path=tmp_path, env=env)


def test_the_help_text_is_what_the_generator_writes() -> None:
    from deskctl.cli import _do_gen, _help_text

    assert Path(_help_text.__file__).read_text() == _do_gen.render_help(), "run python -m deskctl.cli._do_gen"


def test_the_version_is_the_installed_one() -> None:
    import deskctl

    assert deskctl.__version__ == importlib.metadata.version("deskctl")


@pytest.mark.parametrize("columns", ["200", "80", "79", "60", "not-a-number"])
@pytest.mark.parametrize("arg", ["--help", "-h", "--version"])
def test_the_same_output_as_click_at_every_width(arg: str, columns: str, tmp_path: Path) -> None:
    env = {"COLUMNS": columns}
    fast = fast_or_click([arg], fast=True, tmp_path=tmp_path / "fast", env=env)
    click = fast_or_click([arg], fast=False, tmp_path=tmp_path / "click", env=env)
    assert (fast["exit"], fast["stdout"], fast["stderr"]) == (click["exit"], click["stdout"], click["stderr"])
    assert fast["exit"] == 0 and fast["stdout"].startswith("Usage: deskctl" if arg != "--version" else "deskctl, ")
    assert "click" in click["modules"]
    # click only where it words the help for a narrower terminal than 80 columns (COLUMNS=not-a-number: shutil
    # asks the terminal, and without one takes 80)
    narrow = arg != "--version" and columns in ("79", "60")
    assert ("click" in fast["modules"]) == narrow


def test_shell_completion_is_still_click_s(tmp_path: Path) -> None:
    env = {"_DESKCTL_COMPLETE": "bash_source", "COLUMNS": "200"}
    fast = fast_or_click(["--help"], fast=True, tmp_path=tmp_path / "fast", env=env)
    click = fast_or_click(["--help"], fast=False, tmp_path=tmp_path / "click", env=env)
    assert fast == click
    assert "complete" in fast["stdout"] and "Usage:" not in fast["stdout"]
