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


def test_defaults_and_provider_tables_apply_to_preflight(project: Path) -> None:
    (project / "deskctl.toml").write_text('[defaults]\nprovider = "ssh"\nmax-minutes = 5\n\n'
                                          '[providers.ssh]\nhost = "nobody@127.0.0.1:1"\n')
    proc = run(project, "preflight", "--json")
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    # [defaults] provider and max-minutes, the user file's geometry, [providers.ssh] host: all reach preflight
    assert doc["considered"] == ["ssh"] and doc["request"]["max_minutes"] == 5
    assert doc["request"]["geometry"] == "640x480"
    assert doc["error"]["message"] == "cannot reach 127.0.0.1 port 1: Connection refused"
    assert run(project, "preflight", "--provider", "xvfb", "--json").returncode == 0  # a flag still wins


@pytest.mark.parametrize(("text", "args", "fragment"), [
    ('[defaults]\ngeometyr = "640x480"\n', ["ls"],
     "[defaults] has 'geometyr', which is no option of any command (did you mean 'geometry'?)"),
    ('[defaults]\nmax_usdd = 3\n', ["ls"], "(did you mean 'max-usd'?)"),
    ('[providers.xvfbb]\nowner_watch = false\n', ["ls"], "[providers.xvfbb] names no provider (did you mean 'xvfb'?)"),
    ('[providers.xvfb]\nowner_wach = false\n', ["up"],
     "[providers.xvfb]: xvfb has no option 'owner_wach' (did you mean 'owner_watch'?)"),
    ('[providers.xvfb]\nowner_wach = false\n', ["preflight", "--provider", "xvfb"], "(did you mean 'owner_watch'?)"),
])
def test_unknown_config_keys_are_config_errors_with_did_you_mean(project: Path, text: str, args: list[str],
                                                                  fragment: str) -> None:
    (project / "deskctl.toml").write_text(text)
    proc = run(project, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "(config.invalid)" in proc.stderr and fragment in proc.stderr, proc.stderr
    as_json = run(project, *args, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["code"] == "config.invalid"
    assert "bringing up" not in proc.stderr  # refused before the preflight and the intent row


def test_a_provider_table_may_name_the_provider_by_any_spelling(project: Path) -> None:
    from deskctl.config import load_config

    (project / "deskctl.toml").write_text('[providers.cua]\nnamespace = "team"\n\n'
                                          '[providers.Use_Computer]\nephemeral = false\n')
    config = load_config(project)
    assert config.provider_options("cua-cloud") == {"namespace": "team"}
    assert config.provider_options("use-computer") == {"ephemeral": False}


@pytest.mark.parametrize(("line", "args"), [("control = true", ["view", "dk-none"]),
                                            ("allow_exec = true", ["ls"])])
def test_a_config_file_cannot_turn_on_what_only_the_command_line_may(project: Path, line: str,
                                                                     args: list[str]) -> None:
    (project.parent / "deskctl.toml").write_text(f"[defaults]\n{line}\n")
    proc = run(project, *args, "--json")
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    key = line.split(" ")[0].replace("_", "-")
    assert error["code"] == "config.invalid" and f"sets {key!r}, which only the command line may set" in \
        error["message"], error
