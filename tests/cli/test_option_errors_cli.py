"""Provider options as a user meets them: ``deskctl up -o KEY=VALUE`` and ``[providers.NAME]`` of deskctl.toml
refused with exit 2, a stable code and a message that names the key and the rule (never the value of a secret);
values converted as the documentation says; ``deskctl providers --json`` rows as declared; and a process that
checks options without loading pydantic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def _error(*args: str) -> dict[str, Any]:
    proc = deskctl(*args, "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error


@pytest.mark.parametrize(("args", "code", "message"), [
    (["-o", "devtools_port=x"], "usage.bad_option",
     "xvfb options: option 'devtools_port': Input should be a valid integer, unable to parse string as an integer"),
    (["-o", "devtools_port=70000"], "usage.bad_option",
     "xvfb options: option 'devtools_port': Input should be less than or equal to 65535"),
    (["-o", "start_timeout=0"], "usage.bad_option",
     "xvfb options: option 'start_timeout': Input should be greater than 0"),
    (["-o", "start_timeout=nan"], "usage.bad_option",
     "xvfb options: option 'start_timeout': Input should be less than or equal to 3600"),
    (["-o", "window_manager=maybe"], "usage.bad_option",
     "xvfb options: option 'window_manager': Input should be a valid boolean, unable to interpret input"),
    (["-o", "browser="], "usage.bad_option",
     "xvfb options: option 'browser': String should have at least 1 character"),
    (["--provider", "docker", "-o", "cpus=0"], "usage.bad_option",
     "docker options: option 'cpus': Input should be greater than 0"),
    (["--provider", "docker", "-o", "display=x"], "usage.bad_option",
     "display 'x' is not an X display number such as 0 or 1"),
    (["--provider", "docker", "-o", "variant=huge"], "usage.bad_option",
     "docker options: option 'variant': Input should be 'minimal' or 'browser'"),
    (["--provider", "docker", "-o", "memory=lots"], "usage.bad_option",
     "memory 'lots' is not a size such as 512m or 2g"),
    (["--provider", "docker", "-o", "locale=bad_one"], "usage.bad_option",
     "locale 'bad_one' is not a locale name such as zh_CN.UTF-8"),
    (["--provider", "docker", "-o", "env=x"], "usage.bad_option",
     "env 'x' is not a mapping of variable names to values"),
    (["--provider", "kubernetes", "-o", "image_pull_policy=Sometimes"], "usage.bad_option",
     "kubernetes options: option 'image_pull_policy': String should match pattern '^(Always|IfNotPresent|Never)$'"),
    (["--provider", "daytona", "-o", "ttl_minutes=-1"], "usage.bad_option",
     "daytona options: option 'ttl_minutes': Input should be greater than or equal to 0"),
    (["--provider", "cua-cloud", "-o", "shutdown_policy=Keep"], "usage.bad_option",
     "cua-cloud options: option 'shutdown_policy': String should match pattern '^(Retain|Delete)$'"),
    (["--provider", "ssh", "-o", "port=0"], "usage.bad_option",
     "ssh options: option 'port': Input should be greater than or equal to 1"),
    (["--provider", "use-computer", "-o", "create_timeout=inf"], "usage.bad_option",
     "use-computer options: option 'create_timeout': Input should be a finite number"),
    (["-o", "owner_wach=false"], "usage.unknown_option",
     "-o: xvfb has no option 'owner_wach' (did you mean 'owner_watch'?); its options: browser, devtools_port, "
     "owner_watch, start_timeout, window_manager, xvfb_args"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_bad_option_on_the_command_line_is_exit_2_with_its_rule(args: list[str], code: str, message: str) -> None:
    named = args if "--provider" in args else ["--provider", "xvfb", *args]  # preflight's -o needs a provider
    for given in (["up", *args], ["preflight", *named]):
        error = _error(*given)
        assert (error["code"], error["message"]) == (code, message), given
    assert "bringing up" not in deskctl("up", *args).stderr  # refused before the preflight and the intent row


@pytest.mark.parametrize("value", ["lots", "-1", "true", "5 cores"])
def test_a_kubernetes_cpus_that_is_neither_cores_nor_a_quantity_is_refused(value: str) -> None:
    error = _error("up", "--provider", "kubernetes", "-o", f"cpus={value}")
    assert error["code"] == "usage.bad_option" and "option 'cpus" in error["message"]


@pytest.mark.parametrize(("table", "code", "message"), [
    ('devtools_port = "x"', "usage.bad_option",
     "xvfb options: option 'devtools_port': Input should be a valid integer, unable to parse string as an integer"),
    ("start_timeout = -1", "usage.bad_option", "xvfb options: option 'start_timeout': Input should be greater than 0"),
    ('xvfb_args = "x"', "usage.bad_option", "xvfb options: option 'xvfb_args': Input should be a valid tuple"),
    ("devtools_port = 1.5", "usage.bad_option",
     "xvfb options: option 'devtools_port': Input should be a valid integer, got a number with a fractional part"),
    ("window_manager = 2", "usage.bad_option",
     "xvfb options: option 'window_manager': Input should be a valid boolean, unable to interpret input"),
])
def test_a_bad_value_in_the_configuration_is_exit_2_with_its_rule(table: str, code: str, message: str) -> None:
    Path("deskctl.toml").write_text(f"[providers.xvfb]\n{table}\n")
    error = _error("up")
    assert (error["code"], error["message"]) == (code, message)


def test_the_configuration_values_are_converted_as_documented() -> None:
    """TOML gives numbers and strings; `-o` gives strings: both are read as the declared type (lax)."""
    Path("deskctl.toml").write_text('[providers.xvfb]\nstart_timeout = "1e400"\n')
    assert _error("up")["message"] == "xvfb options: option 'start_timeout': Input should be less than or equal to 3600"
    Path("deskctl.toml").write_text('[providers.xvfb]\nxvfb_args = ["-nolisten", "tcp"]\nstart_timeout = "7"\n'
                                    'devtools_port = " 9222 "\nwindow_manager = "off"\n')
    proc = deskctl("preflight", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_providers_json_rows_are_as_declared() -> None:
    proc = deskctl("providers", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)["providers"]}
    assert rows["xvfb"]["options"] == [
        {"name": "window_manager", "type": "bool", "required": False, "default": False,
         "doc": "run openbox on the desktop (also the spec's window_manager)", "env": None, "secret": False},
        {"name": "browser", "type": "str | None", "required": False, "default": None,
         "doc": "the browser a start URL opens in: a command name or path (default: the first of chromium, "
                "google-chrome, firefox found)", "env": None, "secret": False, "min_length": 1},
        {"name": "devtools_port", "type": "int", "required": False, "default": 0,
         "doc": "the loopback port of Chromium's DevTools (0: one Chromium picks; 9222 for verifiers that expect "
                "it, one such desktop on a host at a time)", "env": None, "secret": False, "ge": 0, "le": 65535},
        {"name": "owner_watch", "type": "bool", "required": False, "default": True,
         "doc": "a watcher process ends the desktop when its owner dies (or, detached, at its expiry)",
         "env": None, "secret": False},
        {"name": "xvfb_args", "type": "tuple[str, ...]", "required": False, "default": [],
         "doc": "extra arguments for Xvfb", "env": None, "secret": False},
        {"name": "start_timeout", "type": "float", "required": False, "default": 30.0,
         "doc": "seconds Xvfb may take to accept connections", "env": None, "secret": False, "gt": 0, "le": 3600}]
    daytona = {row["name"]: row for row in rows["daytona"]["options"]}
    assert daytona["ttl_minutes"] == {
        "name": "ttl_minutes", "type": "int | None", "required": False, "default": None,
        "doc": "wall-clock minutes before Daytona deletes it (default: the session's lifetime + 5, else 1440; "
               "0 disables)", "env": None, "secret": False, "ge": 0, "bound": "provider_option"}
    assert daytona["retry_initial"]["type"] == "float" and daytona["retry_initial"]["bound"] == "provider_option"
    assert (daytona["api_url"]["env"], daytona["api_url"]["default"]) == ("DAYTONA_API_URL",
                                                                          "https://app.daytona.io/api")
    assert [row["name"] for row in rows["daytona"]["options"]][:3] == ["retry_attempts", "retry_initial",
                                                                       "retry_maximum"]
    docker = {row["name"]: row for row in rows["docker"]["options"]}
    assert (docker["memory"]["type"], docker["memory"]["default"]) == ("str | int | None", "1g")
    assert (docker["fonts"]["type"], docker["env"]["type"]) == ("tuple[str, ...] | str", "dict[str, str]")
    assert docker["variant"]["type"] == "Literal['minimal', 'browser'] | None"
    assert rows["memory"]["options"] == []


#: what a process that checks options runs: every provider's declaration, parsed, described, its errors
_CHECKS = """
import json, sys
from deskctl.errors import UsageError
from deskctl.providers import load_provider_class
out = {}
for name, raw in json.loads(sys.argv[1]).items():
    model = load_provider_class(name).options_class()
    model.describe()
    parsed = model.parse(raw, where="-o")
    try:
        model.parse({**raw, "no_such_option": 1})
    except UsageError as exc:
        assert exc.code == "usage.unknown_option", exc
    out[name] = {key: getattr(parsed, key) for key in raw}
print(json.dumps(out))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core")))
"""


def test_checking_options_loads_no_pydantic(tmp_path: Path) -> None:
    raw = {"xvfb": {"devtools_port": "9222", "window_manager": "true", "start_timeout": "1.5"},
           "docker": {"display": ":1", "cpus": "1.5", "memory": "512m", "env": {"LANG": "C"}, "fonts": "a,b",
                      "locale": "zh_CN.UTF-8", "host": "tcp://127.0.0.1:1"},
           "ssh": {"port": "2222", "ssh_config": "false"},
           "kubernetes": {"cpus": "500m", "agent_port": "7390"},
           "daytona": {"ttl_minutes": "30"}, "cua-cloud": {"shutdown_policy": "Delete"},
           "use-computer": {"resources": "cpus=4", "ephemeral": "no"}, "memory": {}}
    proc = subprocess.run([sys.executable, "-c", _CHECKS, json.dumps(raw)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "DESKCTL_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    values, modules = proc.stdout.splitlines()
    assert json.loads(values) == {
        "xvfb": {"devtools_port": 9222, "window_manager": True, "start_timeout": 1.5},
        "docker": {"display": 1, "cpus": 1.5, "memory": "512m", "env": {"LANG": "C"}, "fonts": "a,b",
                   "locale": "zh_CN.UTF-8", "host": "tcp://127.0.0.1:1"},
        "ssh": {"port": 2222, "ssh_config": "false"}, "kubernetes": {"cpus": "500m", "agent_port": 7390},
        "daytona": {"ttl_minutes": 30}, "cua-cloud": {"shutdown_policy": "Delete"},
        "use-computer": {"resources": "cpus=4", "ephemeral": False}, "memory": {}}
    assert modules == "[]"
