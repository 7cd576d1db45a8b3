"""Configuration precedence: flags > environment > ./deskctl.toml > user config > defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "deskctl", *args], cwd=cwd, capture_output=True, text=True,
                          env=full, timeout=120)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    user = tmp_path / "user.toml"
    user.write_text('[defaults]\ngeometry = "640x480"\nttl = "5m"\n')
    monkeypatch.setenv("DESKCTL_CONFIG", str(user))
    monkeypatch.delenv("DESKCTL_GEOMETRY", raising=False)
    proj = tmp_path / "proj" / "sub"
    proj.mkdir(parents=True)
    return proj


def up_geometry(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = run(cwd, "up", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert run(cwd, "down", info["id"]).returncode == 0
    return str(info["geometry"])


def test_precedence(project: Path) -> None:
    assert up_geometry(project) == "640x480"  # user config over the built-in default
    (project.parent / "deskctl.toml").write_text('[defaults]\ngeometry = "800x600"\n')
    assert up_geometry(project) == "800x600"  # project file (found in a parent) over user config
    assert up_geometry(project, env={"DESKCTL_GEOMETRY": "1024x600"}) == "1024x600"  # environment over files
    assert up_geometry(project, "--geometry", "320x240", env={"DESKCTL_GEOMETRY": "1024x600"}) == "320x240"


def test_a_broken_config_file_is_a_config_error(project: Path) -> None:
    (project / "deskctl.toml").write_text("[defaults\n")
    proc = run(project, "ls")
    assert proc.returncode == 2
    assert "(config.invalid)" in proc.stderr and "deskctl.toml: not valid TOML" in proc.stderr
    (project / "deskctl.toml").write_text("[surprise]\n")
    proc = run(project, "ls", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "config.invalid"
