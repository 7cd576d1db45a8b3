"""Human takeover through the real surfaces at once: `deskctl view ID --control --takeover` as a process, a real
headless Chromium on its page, and a library client acting on the same desktop from this process. While the
person holds control the agent's actions wait (or fail with session.paused, as the caller chooses) and go on
when released; every recorded step says who acted; a help request shows on the page and blocks until a person
has taken over and released."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _chromium import chromium  # noqa: F401
from cli.test_view_cli import until, viewing
from deskctl.errors import SessionPaused
from deskctl.session import attach

pytestmark = [pytest.mark.skipif(not os.path.exists("/usr/bin/Xvfb"), reason="Xvfb is not installed"),
              pytest.mark.timeout(300)]


def _deskctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    record = tmp_path / "rec"
    up = _deskctl("up", "--geometry", "640x480", "--ttl", "10m", "--record", str(record))
    assert up.returncode == 0, up.stderr
    sid = up.stdout.strip()
    try:
        yield sid, record
    finally:
        _deskctl("down", sid)


class _Agent(threading.Thread):
    """The library client: one call on an attached desktop, in a thread (it may block)."""

    def __init__(self, sid: str, call: Any) -> None:
        super().__init__(daemon=True)
        self.sid, self.call = sid, call
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with attach(self.sid) as desk:
                self.result = self.call(desk)
        except BaseException as exc:
            self.error = exc


def _button(driver: Any) -> Any:
    return driver.find_element("id", "takeover")


def _steps(record: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (record / "trajectory.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("type") == "step"]


def test_agent_waits_while_a_person_holds_control(recorded: tuple[str, Path], chromium: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains

    sid, record = recorded
    with viewing(sid, "--control", "--takeover") as view:
        chromium.get(view.url)
        until(lambda: _button(chromium).is_displayed(), "the Take control button")
        # the agent acts freely while nobody holds the desktop
        first = _Agent(sid, lambda d: d.click(10, 10))
        first.start()
        first.join(60)
        assert not first.is_alive() and first.error is None

        _button(chromium).click()
        until(lambda: _button(chromium).text == "Release", "the page holding control")

        waiting = _Agent(sid, lambda d: d.click(20, 20))  # waits (the default)
        waiting.start()
        failing = _Agent(sid, lambda d: (setattr(d, "on_takeover", "fail"), d.click(30, 30)))
        failing.start()
        failing.join(60)
        assert isinstance(failing.error, SessionPaused) and failing.error.exit_code == 7
        cli = _deskctl("do", sid, "click", "40", "40", "--json", env={"DESKCTL_ON_TAKEOVER": "fail"})
        assert cli.returncode == 7, cli.stderr
        assert json.loads(cli.stdout)["error"]["code"] == "session.paused"

        screen = chromium.find_element("id", "screen")
        ActionChains(chromium).move_to_element_with_offset(screen, 100 - 320, 50 - 240).click().perform()
        # a click on the page is a press and a release
        until(lambda: chromium.execute_script("return window.deskctlInputsDone") == 2, "the person's click")
        assert waiting.is_alive()  # still held: the agent's click has not been sent

        _button(chromium).click()  # release
        waiting.join(60)
        assert not waiting.is_alive() and waiting.error is None
    steps = _steps(record)
    assert [(s["actor"], s["action"]["kind"], s["action"].get("x")) for s in steps] == [
        ("agent", "click", 10), ("human", "mouse_down", 100), ("human", "mouse_up", 100), ("agent", "click", 20)]
    from deskctl.ledger import open_ledger

    with open_ledger() as book:
        kinds = [e.kind for e in book.events(sid)]
    assert "takeover" in kinds and "release" in kinds and "takeover.waited" in kinds


def test_a_help_request_shows_on_the_page_and_blocks_until_released(recorded: tuple[str, Path],
                                                                    chromium: Any) -> None:  # noqa: F811
    sid, _ = recorded
    with viewing(sid, "--control", "--takeover") as view:
        chromium.get(view.url)
        until(lambda: _button(chromium).is_displayed(), "the Take control button")
        asking = _Agent(sid, lambda d: d.request_takeover("solve the captcha"))
        asking.start()
        until(lambda: "solve the captcha" in chromium.find_element("id", "help").text, "the help request shown")
        _button(chromium).click()
        until(lambda: _button(chromium).text == "Release", "the page holding control")
        until(lambda: chromium.find_element("id", "help").text == "", "the request answered")
        assert asking.is_alive()  # the person holds it: the agent still waits
        _button(chromium).click()
        asking.join(60)
        assert not asking.is_alive() and asking.error is None and asking.result >= 0
    timed = _Agent(sid, lambda d: d.request_takeover("nobody comes", timeout=0.5))
    timed.start()
    timed.join(60)
    assert getattr(timed.error, "code", None) == "wait.timeout"


def test_takeover_needs_control_and_input_needs_the_hold(recorded: tuple[str, Path]) -> None:
    from cli.test_view_cli import request

    sid, _ = recorded
    refused = _deskctl("view", sid, "--takeover", "--json")
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "usage.bad_option"
    with viewing(sid, "--control", "--takeover") as view:
        status, body = request(f"{view.base}/input?token={view.token}",
                               b'{"type": "click", "x": 1, "y": 1, "w": 2, "h": 2}')
        assert (status, json.loads(body)["error"]["code"]) == (400, "usage.not_holding")
        status, body = request(f"{view.base}/takeover?token={view.token}", b'{"hold": "yes"}')
        assert (status, json.loads(body)["error"]["code"]) == (400, "usage.bad_input")
        status, body = request(f"{view.base}/takeover?token={view.token}", b'{"hold": true}')
        assert status == 200 and json.loads(body)["held"] is True
        click = b'{"type": "click", "x": 1, "y": 1, "w": 2, "h": 2}'
        status, _ = request(f"{view.base}/input?token={view.token}", click)
        assert status == 204
        # the view process dies holding control: the kernel releases its lock, the agent is not blocked forever
        view.proc.kill()
        view.proc.communicate()
    with attach(sid) as desk:
        desk.click(3, 3)
