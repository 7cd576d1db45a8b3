"""The session verbs through the real `deskctl` entry point: exit codes and exact output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _cli import deskctl


def test_up_screenshot_do_exec_ls_down(tmp_path: Path) -> None:
    up = deskctl("up", "--geometry", "800x600", "--ttl", "10m", check=True)
    sid = up.stdout.strip()
    assert sid.startswith("dk-") and up.stdout == sid + "\n"
    assert f"{sid} is up on xvfb: 800x600, DISPLAY=:" in up.stderr
    try:
        shot = tmp_path / "shot.png"
        deskctl("screenshot", sid, "-o", str(shot), check=True)
        assert shot.read_bytes().startswith(b"\x89PNG")
        from PIL import Image

        with Image.open(shot) as img:
            assert img.size == (800, 600)
        assert deskctl("do", sid, "click", "400", "300", check=True).stdout == ""
        done = deskctl("do", sid, "key", "ctrl+s", "--json", check=True)
        assert json.loads(done.stdout) == {"id": sid, "action": "key", "ok": True, "chord": "ctrl+s"}
        ran = deskctl("exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
        assert (ran.returncode, ran.stdout, ran.stderr) == (3, "out\n", "err\n")
        listing = json.loads(deskctl("ls", "--json", check=True).stdout)["sessions"]
        (row,) = [r for r in listing if r["id"] == sid]
        assert row["status"] == "ready" and row["geometry"] == "800x600" and row["detached"] is True
        assert row["cost_usd"] == 0.0
    finally:
        down = deskctl("down", sid)
    assert down.returncode == 0, down.stderr
    assert down.stderr == f"{sid}: destroyed ($0.0000)\n"
    assert deskctl("ls", "--json", check=True).stdout.count(sid) == 0
    ended = json.loads(deskctl("ls", "--all", "--json", check=True).stdout)["sessions"]
    assert [r["status"] for r in ended if r["id"] == sid] == ["ended"]


def test_out_of_bounds_click_is_exit_2_and_leaves_the_desktop_up() -> None:
    sid = deskctl("up", "--geometry", "320x240", check=True).stdout.strip()
    try:
        bad = deskctl("do", sid, "click", "320", "5")
        assert bad.returncode == 2
        assert bad.stderr == ("error [xvfb]: point (320, 5) is outside the 320x240 screen (geometry.out_of_bounds)\n"
                              "  remedy: x must be in 0..319 and y in 0..239\n")
        assert deskctl("do", sid, "click", "319", "239").returncode == 0
    finally:
        deskctl("down", sid, check=True)


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["up", "--geometry", "abc"], "usage.bad_geometry", "geometry 'abc' is not of the form WxH"),
        (["up", "--geometry", "100000x10"], "usage.bad_geometry", "width 100000 is outside 64..8192"),
        (["up", "--platform", "windws"], "usage.unknown_platform", "did you mean 'windows'"),
        (["up", "--provider", "xvbf"], "usage.unknown_provider", "did you mean 'xvfb'"),
        (["up", "--ttl", "-5m"], "usage.bad_duration", "is negative"),
        (["down"], "usage.missing_argument", "name at least one session id"),
        (["down", "dk-missing"], "usage.not_found", "no session 'dk-missing'"),
        (["screenshot", "dk-missing", "-o", "x.png"], "usage.not_found", "no session 'dk-missing'"),
    ],
)
def test_bad_input_is_exit_2_with_a_stable_code(args: list[str], code: str, fragment: str) -> None:
    proc = deskctl(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error")
    assert f"({code})" in proc.stderr and fragment in proc.stderr
    as_json = deskctl(*args, "--json")
    assert as_json.returncode == 2
    doc = json.loads(as_json.stdout)
    assert doc["error"]["code"] == code and fragment in doc["error"]["message"]
    assert set(doc["error"]) >= {"code", "message", "provider", "remedy"}


def test_unknown_command_and_flag_are_usage_errors() -> None:
    assert deskctl("frobnicate").returncode == 2
    assert deskctl("up", "--no-such-flag").returncode == 2


def test_providers_lists_the_default() -> None:
    proc = deskctl("providers", check=True)
    assert proc.stdout.splitlines()[0].split() == ["NAME", "PLATFORMS", "ISOLATION", "EXEC", "BILLING", "GEOMETRY"]
    assert any(line.startswith("xvfb ") and line.endswith("(default)") for line in proc.stdout.splitlines())
    doc = json.loads(deskctl("providers", "--json", check=True).stdout)
    xvfb = next(p for p in doc["providers"] if p["name"] == "xvfb")
    assert xvfb["platforms"] == ["ubuntu"] and xvfb["settable_geometry"] is True
    cua = next(p for p in doc["providers"] if p["name"] == "cua-cloud")  # the class's declarations
    assert cua["aliases"] == ["cua"] and "CUA_API_KEY" in cua["credential_vars"]
    help_text = " ".join(deskctl("up", "--help", check=True).stdout.split()).replace("- ", "-")  # unwrapped
    assert "(aliases cua for cua-cloud, k8s for kubernetes, use.computer for use-computer)" in help_text


def test_reap_with_nothing_to_do() -> None:
    proc = deskctl("reap", "--provider", "xvfb", check=True)
    assert proc.stdout == "" and proc.stderr == "nothing to reap\n"


def test_up_charges_the_named_budget_and_refuses_what_does_not_fit(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "*", "size": "*", "usd_per_hour": 6,
                                             "source": "test: a priced xvfb", "date": "2026-11-29"}]}))
    monkeypatch.setenv("DESKCTL_PRICES", str(prices))
    missing = deskctl("up", "--budget", "ghost")
    assert missing.returncode == 2 and "no budget 'ghost' in the ledger (usage.not_found)" in missing.stderr
    deskctl("budget", "set", "tiny", "--max-usd", "0.05", "--window", "24h", check=True)
    over = deskctl("up", "--budget", "tiny", "--max-minutes", "1")  # $0.10 projected
    assert over.returncode == 4 and "(budget.exceeded)" in over.stderr
    sid = deskctl("up", "--budget", "tiny", "--max-minutes", "0.25", check=True).stdout.strip()  # $0.025
    deskctl("down", sid, check=True)


def _wait_until_billed(sid: str, seconds: float) -> None:
    """Until the session has run ``seconds`` by its own clock in the ledger (``deskctl ls``), at most a minute."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listing = json.loads(deskctl("ls", "--json", check=True).stdout)["sessions"]
        (row,) = [r for r in listing if r["id"] == sid]
        if row["seconds"] > seconds:
            return
    raise AssertionError(f"{sid} did not run {seconds} s by the ledger's clock within a minute")


def test_a_detached_session_past_its_max_minutes_is_ended_with_exit_4_when_next_used() -> None:
    sid = deskctl("up", "--geometry", "320x240", "--max-minutes", "0.05", check=True).stdout.strip()  # 3 s
    _wait_until_billed(sid, 3.3)
    over = deskctl("do", sid, "click", "1", "1")
    assert over.returncode == 4, over.stderr
    assert f"session {sid} reached its max minutes and was ended (budget.exceeded)" in over.stderr
    ended = json.loads(deskctl("ls", "--all", "--json", check=True).stdout)["sessions"]
    assert [(r["status"], r["reason"]) for r in ended if r["id"] == sid] == [("ended", "budget.exceeded")]


def test_do_acts_counts_and_checks_bounds_without_loading_pydantic() -> None:
    """`deskctl do` is a whole process per action: it reads the stored spec as plain data instead of validating
    it again with pydantic (whose import alone cost about as much as the rest of the call)."""
    from deskctl.ledger import open_ledger

    sid = deskctl("up", "--geometry", "320x240", check=True).stdout.strip()
    code = (
        "import sys; from deskctl.cli import main\n"
        f"for args in (['do', {sid!r}, 'click', '5', '5'], ['do', {sid!r}, 'click', '320', '5']):\n"
        "    try:\n        main(args)\n    except SystemExit as exc:\n        print(exc.code)\n"
        "print(sorted(m for m in ('pydantic', 'pydantic_core') if m in sys.modules))"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env=os.environ.copy())
        assert proc.stdout.splitlines() == ["0", "2", "[]"], proc.stderr
        assert "(geometry.out_of_bounds)" in proc.stderr
        with open_ledger() as book:
            record = book.get(sid)
        assert record is not None and record.action_counts == {"click": 1}
    finally:
        deskctl("down", sid, check=True)


def test_a_detached_session_past_its_max_usd_is_ended_with_exit_4_when_next_used(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "*", "size": "*", "usd_per_hour": 36.0,
                                             "source": "a test's price", "date": "2026-12-01"}]}))
    monkeypatch.setenv("DESKCTL_PRICES", str(prices))
    sid = deskctl("up", "--geometry", "320x240", "--max-usd", "0.012", check=True).stdout.strip()  # 1.2 s at $36/h
    _wait_until_billed(sid, 1.5)
    over = deskctl("do", sid, "click", "1", "1")
    assert over.returncode == 4, over.stderr
    assert f"session {sid} reached its max cost and was ended (budget.exceeded)" in over.stderr
    ended = json.loads(deskctl("ls", "--all", "--json", check=True).stdout)["sessions"]
    assert [(r["status"], r["reason"]) for r in ended if r["id"] == sid] == [("ended", "budget.exceeded")]


def test_ls_cost_and_down_price_a_session_without_loading_pydantic(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`ls`, `cost` and `down` read stored sessions: the rate comes from the stored spec as plain data (pydantic's
    import was most of each call), and `down` still bills at the catalog's steps: here a minimum of 60 s."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "ubuntu", "size": "*",
                                             "usd_per_hour": 36.0, "minimum_seconds": 60, "source": "a test's price",
                                             "date": "2026-12-01"}]}))
    monkeypatch.setenv("DESKCTL_PRICES", str(prices))
    sid = deskctl("up", "--geometry", "320x240", check=True).stdout.strip()
    code = (
        "import sys; from deskctl.cli import main\n"
        f"for args in (['ls'], ['cost'], ['down', {sid!r}]):\n"
        "    try:\n        main(args)\n    except SystemExit as exc:\n        print('exit', exc.code)\n"
        "print(sorted(m for m in ('pydantic', 'pydantic_core', 'deskctl.spec') if m in sys.modules))"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env=os.environ.copy())
        assert proc.stdout.splitlines()[-1] == "[]", proc.stdout + proc.stderr
        assert f"{sid}: destroyed ($0.6000)" in proc.stderr  # 60 s at $36/h, the minimum
    finally:
        deskctl("down", sid)
    ended = json.loads(deskctl("ls", "--all", "--json", check=True).stdout)["sessions"]
    assert [(r["status"], r["cost_usd"]) for r in ended if r["id"] == sid] == [("ended", 0.6)]


@pytest.mark.parametrize(("name", "hint"), [("nope", None), ("dockr", "--provider docker")])
def test_reap_of_an_unknown_provider_is_a_usage_error_with_a_suggestion(name: str, hint: str | None) -> None:
    # once: it swept nothing and exited 0, as if all were clean
    proc = deskctl("reap", "--provider", name, "--json")
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "usage.unknown_provider" and error["remedy"] == hint, error
    assert f"unknown provider {name!r}" in error["message"]
