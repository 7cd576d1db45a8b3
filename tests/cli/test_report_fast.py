"""`deskctl ls` and `deskctl cost` without click (cli/_report.py): the same output and exit code as through click
for the same argv, and a process that imports neither click nor typing nor signal; anything but the plain forms
goes to click as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from _cli import deskctl_process as deskctl
from _cli import fast_or_click as _run
from _cli import importers
from deskctl.ledger import SessionRecord, open_ledger

#: argv the click-free path takes
FAST = [["ls"], ["ls", "--json"], ["ls", "--all"], ["ls", "--all", "--json"], ["ls", "--json", "--all", "--json"],
        ["cost"], ["cost", "--json"]]

#: argv it leaves to click (another option, help, a parse error)
DECLINED = [["ls", "--since", "1h"], ["ls", "--help"], ["ls", "-h"], ["ls", "--bogus"], ["ls", "extra"],
            ["ls", "--json=1"], ["cost", "--by", "day"], ["cost", "--all"], ["cost", "--help"], ["cost", "x"]]


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DESKCTL_CONFIG", raising=False)


def _ended(sid: str, provider: str, start: float, seconds: float, cost: float | None) -> None:
    """An ended session in the ledger (its times fixed, so that both ways print the same ages and sums)."""
    with open_ledger() as book:
        book.record_intent(SessionRecord(sid, provider, "ubuntu", "1024x768", "host:1", False, "intent", start))
        book.record_create_sent(sid, start)
        book.record_end(sid, status="ended", reason="closed", ended_at=start + seconds, billable_seconds=seconds,
                        cost_usd=cost)


@pytest.fixture
def ended_sessions() -> None:
    _ended("dk-aaaaaaaaa1", "xvfb", 1_700_000_000.0, 90.0, 0.0)
    _ended("dk-aaaaaaaaa2", "docker", 1_700_000_100.0, 4000.0, 0.25)
    _ended("dk-aaaaaaaaa3", "cua_cloud", 1_700_000_200.0, 30.0, None)


def _shown(result: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in result.items() if k != "modules"}


@pytest.mark.parametrize("args", FAST, ids=" ".join)
def test_the_plain_forms_print_what_click_prints(ended_sessions: None, args: list[str], tmp_path: Path) -> None:
    fast = _run(args, fast=True, tmp_path=tmp_path)
    through_click = _run(args, fast=False, tmp_path=tmp_path)
    assert _shown(fast) == _shown(through_click)
    assert fast["exit"] == 0 and fast["stdout"] + fast["stderr"]
    assert "click" not in fast["modules"] and "click" in through_click["modules"]


@pytest.mark.parametrize("args", [["ls"], ["ls", "--json"], ["cost"], ["cost", "--json"]], ids=" ".join)
def test_an_empty_ledger_is_the_same_both_ways(args: list[str], tmp_path: Path) -> None:
    fast = _run(args, fast=True, tmp_path=tmp_path)
    through_click = _run(args, fast=False, tmp_path=tmp_path)
    assert _shown(fast) == _shown(through_click) and fast["exit"] == 0
    assert "click" not in fast["modules"]


@pytest.mark.parametrize("args", DECLINED, ids=" ".join)
def test_what_the_fast_path_declines_click_answers_as_before(ended_sessions: None, args: list[str],
                                                            tmp_path: Path) -> None:
    fast = _run(args, fast=True, tmp_path=tmp_path)
    through_click = _run(args, fast=False, tmp_path=tmp_path)
    assert _shown(fast) == _shown(through_click)
    assert "click" in fast["modules"]


def test_config_defaults_go_through_click(ended_sessions: None, tmp_path: Path) -> None:
    """`[defaults]` may set an option of the command (click's default map): such a call is click's."""
    config = tmp_path / "config.toml"
    config.write_text("[defaults]\nall = true\n")
    env = {"DESKCTL_CONFIG": str(config)}
    fast = _run(["ls"], fast=True, tmp_path=tmp_path, env=env)
    through_click = _run(["ls"], fast=False, tmp_path=tmp_path, env=env)
    assert _shown(fast) == _shown(through_click) and fast["exit"] == 0
    assert "click" in fast["modules"] and "dk-aaaaaaaaa1" in fast["stdout"]


def test_ls_and_cost_of_a_running_desktop_load_no_click_typing_or_signal() -> None:
    """A script's poll (`deskctl ls --json`) and a CI job's `deskctl cost` are a process each: click (a third of
    the call) and typing (which click imports; ~13M instructions) are not on their path, nor signal's enums."""
    sid = deskctl("up", "--geometry", "320x240", check=True).stdout.strip()
    try:
        for args in (["ls"], ["ls", "--json"], ["cost"], ["cost", "--json"]):
            found = importers(args, ["click", "typing", "signal"])
            assert found == {}, (args, found)
        assert sid in deskctl("ls", check=True).stdout
    finally:
        deskctl("down", sid)
