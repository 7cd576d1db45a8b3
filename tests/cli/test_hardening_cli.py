"""Bad input through the real `deskctl` process: exit 2 with a stable code, checked before any ledger row or
resource exists; secrets in URLs never echoed; `exec --json` exit codes; negative numbers as arguments; idempotent
`down`; did-you-mean; the one `--json` shape (an object, ISO-8601 times)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from _cli import deskctl

SECRET = "pw-7c1e9d44f0"


def ledger_rows(home: Path) -> list[tuple[str, str]]:
    path = home / "ledger.sqlite3"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        return [(str(a), str(b)) for a, b in db.execute("SELECT session_id, status FROM sessions")]


def assert_usage(args: list[str], code: str, fragment: str, **kwargs: object) -> None:
    text = deskctl(*args, **kwargs)  # type: ignore[arg-type]
    assert text.returncode == 2, text.stdout + text.stderr
    assert f"({code})" in text.stderr and fragment in text.stderr, text.stderr
    as_json = deskctl(*args, "--json", **kwargs)  # type: ignore[arg-type]
    assert as_json.returncode == 2, as_json.stdout + as_json.stderr
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == code and fragment in error["message"], error


# -- item 4: user errors are usage errors, before any intent row ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["up", "--max-minutes", "inf"], "usage.bad_limit", "--max-minutes 'inf' is not a finite number"),
        (["up", "--max-usd", "nan"], "usage.bad_limit", "--max-usd 'nan' is not a finite number"),
        (["up", "--max-usd", "-1"], "usage.bad_limit", "--max-usd '-1' must be greater than 0"),
        (["up", "--ttl", "0"], "usage.bad_duration", "ttl '0' must be longer than 0"),
        (["up", "-o", "owner_wach=false"], "usage.unknown_option",
         "xvfb has no option 'owner_wach' (did you mean 'owner_watch'?)"),
        (["up", "--provider", "docker", "-o", "memroy=1g"], "usage.unknown_option", "did you mean 'memory'?"),
        (["preflight", "--max-usd", "nan"], "usage.bad_limit", "--max-usd 'nan' is not a finite number"),
        (["preflight", "--max-minutes", "inf"], "usage.bad_limit", "is not a finite number"),
        (["budget", "set", "ci", "--max-usd", "nan"], "usage.bad_limit", "is not a finite number"),
        (["budget", "check", "--max-usd", "inf"], "usage.bad_limit", "is not a finite number"),
        (["exec", "dk-x", "--timeout", "nan", "--", "true"], "usage.bad_limit", "is not a finite number"),
    ],
)
def test_bad_limits_and_options_are_exit_2_and_write_nothing(args: list[str], code: str, fragment: str,
                                                            deskctl_home: Path) -> None:
    assert_usage(args, code, fragment)
    assert ledger_rows(deskctl_home) == []
    assert deskctl("budget", "show", "--json", check=True).stdout.count('"name"') == 0


def test_an_inf_limit_in_the_environment_is_refused_too(deskctl_home: Path) -> None:
    proc = deskctl("up", "--json", env={"DESKCTL_MAX_MINUTES": "inf"})
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "usage.bad_limit"
    assert ledger_rows(deskctl_home) == []


def test_deskctl_home_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a folder\n")
    for args in (["up"], ["ls"], ["cost"]):
        assert_usage(args, "config.invalid", "DESKCTL_HOME", env={"DESKCTL_HOME": str(home)})
    up = deskctl("up", env={"DESKCTL_HOME": str(home)})
    assert "preflight" not in up.stderr  # refused before anything ran
    assert home.read_text() == "not a folder\n"


@pytest.mark.parametrize("url", [
    f"postgresql://deskctl:{SECRET}@127.0.0.1:notaport/db",
    f"postgresql://deskctl:{SECRET}@[::1/db",
    f"mysql://deskctl:{SECRET}@127.0.0.1/db",
    "sqlite:relative.db",
    "sqlite://relative.db",
])
def test_a_malformed_ledger_url_is_exit_2_before_anything_runs(url: str, tmp_path: Path) -> None:
    for args in (["up"], ["ls"]):
        text = deskctl(*args, env={"DESKCTL_LEDGER_URL": url}, cwd=tmp_path)
        assert text.returncode == 2 and "(config.invalid)" in text.stderr, text.stderr
        assert "preflight" not in text.stderr and SECRET not in text.stdout + text.stderr
        as_json = deskctl(*args, "--json", env={"DESKCTL_LEDGER_URL": url}, cwd=tmp_path)
        assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["code"] == "config.invalid"
        assert SECRET not in as_json.stdout + as_json.stderr
    assert list(tmp_path.iterdir()) == []  # no stray SQLite file named after the URL


# -- item 5: no URL password anywhere ---------------------------------------------------------------------------


def _everything_of(home: Path, *procs: subprocess.CompletedProcess[str]) -> str:
    text = "".join(p.stdout + p.stderr for p in procs)
    for path in home.rglob("*"):
        if path.is_file():
            text += path.read_bytes().decode("utf-8", "replace")
    return text


def test_cloud_base_urls_with_a_password_are_redacted_everywhere(deskctl_home: Path) -> None:
    closed = f"http://user:{SECRET}@127.0.0.1:9"
    env = {"DAYTONA_API_URL": f"{closed}/api", "DAYTONA_API_KEY": "dtn-key-1234",
           "CUA_BASE_URL": closed, "CUA_TOKEN_URL": f"{closed}/token", "CUA_API_BASE": closed,
           "CUA_CLIENT_ID": "cid-1234", "CUA_CLIENT_SECRET": "csec-1234",
           "USE_COMPUTER_BASE_URL": f"https://{SECRET}@127.0.0.1:9", "USE_COMPUTER_API_KEY": "uc-key-1234"}
    procs = []
    for provider in ("daytona", "cua-cloud", "use-computer"):
        platform = "ubuntu"
        for extra in ([], ["--json"]):
            procs.append(deskctl("preflight", "--provider", provider, "--platform", platform, "--timeout", "5",
                                 *extra, env=env))
        procs.append(deskctl("up", "--provider", provider, "--json", env=env))
    procs.append(deskctl("credentials", env=env))
    procs.append(deskctl("credentials", "--json", env=env))
    procs.append(deskctl("up", "--provider", "daytona", "-o", f"api_url={closed}/api", env=env))
    assert all(p.returncode != 0 for p in procs[:-3])  # nothing answers on port 9
    assert any("127.0.0.1:9" in p.stdout + p.stderr for p in procs)  # the URL is shown, its password is not
    everything = _everything_of(deskctl_home, *procs)
    assert SECRET not in everything
    assert "user:***@127.0.0.1:9" in everything


def test_ledger_url_docker_host_and_ssh_target_passwords_are_redacted(deskctl_home: Path) -> None:
    procs = [
        deskctl("ls", env={"DESKCTL_LEDGER_URL": f"postgresql://deskctl:{SECRET}@127.0.0.1:1/ledger"}),
        deskctl("ls", "--json", env={"DESKCTL_LEDGER_URL": f"postgresql://deskctl:{SECRET}@127.0.0.1:1/ledger"}),
        deskctl("up", "--provider", "docker", env={"DOCKER_HOST": f"tcp://u:{SECRET}@127.0.0.1:9"}),
        deskctl("up", "--provider", "docker", "--json", env={"DOCKER_HOST": f"tcp://u:{SECRET}@127.0.0.1:9"}),
        deskctl("preflight", "--provider", "docker", "--json", env={"DOCKER_HOST": f"tcp://u:{SECRET}@127.0.0.1:9"}),
        deskctl("image", "ls", "--json", env={"DOCKER_HOST": f"tcp://u:{SECRET}@127.0.0.1:9"}),
        deskctl("up", "--provider", "ssh", "--host", f"me:{SECRET}@127.0.0.1:9"),
        deskctl("up", "--provider", "ssh", "--json", env={"DESKCTL_SSH_HOST": f"me:{SECRET}@127.0.0.1:9"}),
        deskctl("preflight", "--provider", "ssh", "--host", f"me:{SECRET}@127.0.0.1:9", "--json"),
    ]
    assert [p.returncode for p in procs[:2]] == [20, 20]
    assert all(p.returncode != 0 for p in procs[2:6])
    assert all(p.returncode == 2 and "me:***@127.0.0.1:9' carries a password" in p.stdout + p.stderr
               for p in procs[6:9])  # a usage error, before any preflight
    assert json.loads(procs[7].stdout)["error"]["code"] == "usage.bad_host"
    assert SECRET not in _everything_of(deskctl_home, *procs)


# -- a live desktop: items 4 (screenshot paths), 6 (exec --json), 8 (negative numbers, down, did-you-mean) ------


@pytest.fixture
def session() -> Iterator[str]:
    up = deskctl("up", "--geometry", "320x240", "--json", check=True)
    info = json.loads(up.stdout)
    try:
        yield str(info["id"])
    finally:
        deskctl("down", str(info["id"]))


def test_screenshot_to_a_bad_path_is_exit_2_and_writes_nothing(session: str, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for target, fragment in ((tmp_path / "missing" / "shot.png", "is in a folder that does not exist"),
                             (tmp_path, "is a directory"),
                             (a_file / "shot.png", "which is not a folder")):
        assert_usage(["screenshot", session, "-o", str(target)], "usage.bad_path", fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    good = deskctl("screenshot", session, "-o", str(tmp_path / "ok.png"), "--json", check=True)
    assert json.loads(good.stdout)["width"] == 320


def test_exec_json_exits_with_the_command_code(session: str) -> None:
    ran = deskctl("exec", session, "--json", "--", "sh", "-c", "echo out; exit 3")
    assert ran.returncode == 3, ran.stderr
    assert json.loads(ran.stdout) == {"exit_code": 3, "stdout": "out\n", "stderr": "", "merged": False}
    assert deskctl("exec", session, "--json", "--", "true").returncode == 0


def test_negative_numbers_are_arguments(session: str) -> None:
    scrolled = deskctl("do", session, "scroll", "100", "100", "-3", "--json")
    assert scrolled.returncode == 0, scrolled.stderr
    assert json.loads(scrolled.stdout)["dy"] == -3
    assert deskctl("do", session, "drag", "10", "10", "20", "20", check=True).returncode == 0
    assert_usage(["do", session, "click", "-5", "10"], "geometry.out_of_bounds",
                 "point (-5, 10) is outside the 320x240 screen")
    typo = deskctl("do", session, "click", "--buton", "left", "1", "1", "--json")
    assert typo.returncode == 2 and json.loads(typo.stdout)["error"]["code"] == "usage.unknown_option"


def test_unknown_commands_and_actions_suggest_the_close_one(session: str) -> None:
    top = deskctl("sreenshot", session)
    assert top.returncode == 2 and "No such command 'sreenshot'. Did you mean 'screenshot'" in top.stderr
    assert json.loads(deskctl("sreenshot", "--json").stdout)["error"]["code"] == "usage.unknown_command"
    action = deskctl("do", session, "clik", "1", "2")
    assert action.returncode == 2 and "Did you mean 'click'?" in action.stderr


def test_down_of_an_ended_session_is_exit_0(session: str) -> None:
    deskctl("down", session, check=True)
    again = deskctl("down", session)
    assert (again.returncode, again.stderr) == (0, f"{session}: already ended; nothing to destroy\n")
    doc = json.loads(deskctl("down", session, "--json", check=True).stdout)
    assert doc["sessions"] == [{"id": session, "status": "already_ended", "cost_usd": 0.0}]
    assert deskctl("down", "dk-missing00").returncode == 2
    ignored = deskctl("down", "dk-missing00", session, "--ignore-missing", "--json")
    assert ignored.returncode == 0, ignored.stdout
    assert [s["status"] for s in json.loads(ignored.stdout)["sessions"]] == ["missing", "already_ended"]


def test_json_times_are_iso_8601_and_documents_are_objects(session: str) -> None:
    (row,) = [r for r in json.loads(deskctl("ls", "--json", check=True).stdout)["sessions"] if r["id"] == session]
    for key in ("started_at", "expires_at"):
        assert row[key].endswith("Z") and datetime.fromisoformat(row[key].replace("Z", "+00:00"))
    assert row["seconds"] == round(row["seconds"], 3)
    deskctl("budget", "set", "ci", "--max-usd", "5", check=True)
    shown = json.loads(deskctl("budget", "show", "--json", check=True).stdout)
    assert isinstance(shown, dict) and shown["budgets"][0]["created_at"].endswith("Z")
    check = json.loads(deskctl("budget", "check", "ci", "--json", check=True).stdout)
    assert check["checks"][0]["now"].endswith("Z")


# -- item 8: help and completion --------------------------------------------------------------------------------


def test_every_option_with_an_environment_variable_shows_it_in_help() -> None:
    import click

    from deskctl.cli import COMMANDS, cli

    ctx = click.Context(cli)
    seen = 0

    def walk(command: click.Command, path: str) -> None:
        nonlocal seen
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                seen += 1
                assert param.show_envvar, f"{path} {param.opts[0]} reads {param.envvar} but does not show it"
                assert "(env " not in (param.help or ""), f"{path} {param.opts[0]}: help names the variable twice"
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, f"{path} {name}")

    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if command is not None:
            walk(command, name)
    assert seen >= 10
    shown = " ".join(deskctl("up", "--help", check=True).stdout.split())
    assert "env var: DESKCTL_PROVIDER" in shown and "env var: DESKCTL_TTL" in shown


def test_shell_completion_script_is_printed() -> None:
    script = deskctl(env={"_DESKCTL_COMPLETE": "bash_source"})
    assert script.returncode == 0 and "_DESKCTL_COMPLETE=bash_complete" in script.stdout
    words = deskctl(env={"_DESKCTL_COMPLETE": "bash_complete", "COMP_WORDS": "deskctl scr", "COMP_CWORD": "1"})
    assert words.returncode == 0 and "screenshot" in words.stdout
