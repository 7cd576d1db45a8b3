"""The snapshot and restore actions as MCP tools (made from the action table), driven by the MCP SDK's own client
over stdio against `deskctl mcp --provider memory`: offered where the provider has `snapshots`, a snapshot's record
comes back, a restore undoes what was typed, and xvfb (no snapshots) does not list them."""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import pytest

from deskctl.episodes.store import list_snapshots
from deskctl.ledger import open_ledger

mcp = pytest.importorskip("mcp")


def _client(*args: str) -> Any:
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "deskctl", "mcp", *args],
                                       env=dict(os.environ))
    return mcp.Client(params, read_timeout_seconds=120)


def _typed() -> str:
    with open_ledger() as book:
        (record,) = book.sessions(active=True)
    assert record.handle is not None
    path = os.path.join(record.handle["data"]["dir"], "typed.txt")
    return open(path).read() if os.path.exists(path) else ""


def test_mcp_snapshot_and_restore_tools_on_memory() -> None:
    async def main() -> None:
        async with _client("--provider", "memory", "--geometry", "320x240") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"snapshot", "restore"} <= names
            await client.call_tool("type", {"text": "kept"})
            made = await client.call_tool("snapshot", {"name": "m"})
            assert not made.is_error, made
            assert "m" in made.content[0].text and "sn-" in made.content[0].text
            await client.call_tool("type", {"text": " later"})
            assert _typed() == "kept later"
            back = await client.call_tool("restore", {"name": "m"})
            assert not back.is_error, back
            assert _typed() == "kept"
            missing = await client.call_tool("restore", {"name": "nope"})
            assert missing.is_error and "usage.not_found" in missing.content[0].text

    anyio.run(main)
    with open_ledger() as book:
        assert [(s.name, s.restores) for s in list_snapshots(book)] == [("m", 1)]


def test_xvfb_offers_no_snapshot_tools() -> None:
    async def main() -> None:
        async with _client("--geometry", "320x240") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert not {"snapshot", "restore"} & names

    anyio.run(main)
