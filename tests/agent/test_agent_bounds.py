"""The agent checks what a request carries against deskctl's bounds (src/deskctl/limits.py), as the client's side
does, so a peer that skips the client cannot make it run a billion wheel clicks or a NaN timeout: a real
deskctl-agent process on a real Xvfb, spoken to over its wire protocol."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent._agent_proc import RunningAgent
from deskctl.agent.client import AgentDriver
from deskctl.errors import UsageError


@pytest.fixture
def client(agent: RunningAgent) -> Iterator[AgentDriver]:
    driver = AgentDriver.connect("127.0.0.1", agent.port, agent.token, provider="docker")
    try:
        yield driver
    finally:
        driver.close()


@pytest.mark.parametrize(("header", "code"), [
    # the first ran 400000 X requests on the old agent; 10**9 held it for hours
    ({"op": "act", "kind": "Scroll", "values": {"x": 1, "y": 1, "dx": 0, "dy": 200_000}}, "usage.out_of_range"),
    ({"op": "act", "kind": "Click", "values": {"x": 1, "y": 1, "button": "left", "count": 1e300}},
     "usage.out_of_range"),
    ({"op": "act", "kind": "Move", "values": {"x": float("nan"), "y": 1}}, "usage.not_a_number"),
    ({"op": "act", "kind": "Move", "values": {"x": "1", "y": 1}}, "usage.not_a_number"),
    ({"op": "act", "kind": "TypeText", "values": {"text": "x" * 200_000}}, "usage.too_long"),
    ({"op": "act", "kind": "KeyPress", "values": {"keys": []}}, "usage.invalid"),
    ({"op": "exec", "command": "true", "timeout": float("nan")}, "usage.bad_limit"),
    ({"op": "exec", "command": "true", "timeout": -1}, "usage.bad_limit"),
    ({"op": "exec", "command": "true", "timeout": "soon"}, "usage.bad_limit"),
    ({"op": "screenshot", "compress_level": "best"}, "usage.not_a_number"),
    ({"op": "screenshot", "compress_level": 99}, "usage.out_of_range"),
], ids=["scroll-200000", "click-count-1e300", "x-nan", "x-string", "text-200000", "no-keys", "timeout-nan",
        "timeout-negative", "timeout-text", "level-text", "level-99"])
def test_bad_values_in_a_request_are_usage_errors_and_the_connection_goes_on(client: AgentDriver,
                                                                            header: dict[str, Any],
                                                                            code: str) -> None:
    with pytest.raises(UsageError) as caught:
        client._call("a bad request", header)
    assert caught.value.code == code, caught.value
    client.ping()  # the connection is still in step


def test_a_bad_file_mode_is_refused_after_the_body_so_the_connection_stays_in_step(client: AgentDriver) -> None:
    with pytest.raises(UsageError) as caught:
        client._call("put a file", {"op": "put_file", "path": "/tmp/deskctl-bounds-never", "mode": "rwx"},
                     b"x" * 5000)
    assert caught.value.code == "usage.not_a_number"
    client.ping()
