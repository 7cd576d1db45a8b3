"""deskctl itself needs no pydantic (it is no longer a dependency: only the MCP server, through the ``mcp`` extra,
and the Harbor integration, inside Harbor, use it). Every CLI verb a user meets without those runs in a process
where importing pydantic fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: deskctl's main in a process in which ``import pydantic`` raises ImportError, as on an install without it
_RUNNER = """
import json, sys
class _NoPydantic:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pydantic", "pydantic_core"):
            raise ImportError(f"No module named {name!r} (this test's install has none)")
        return None
sys.meta_path.insert(0, _NoPydantic())
from deskctl.cli import main
main(json.loads(sys.argv[1]), fast=sys.argv[2] == "fast")
"""


def _run(args: list[str], env: dict[str, str], fast: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(args), "fast" if fast else "click"],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("fast", [True, False], ids=["fast-paths", "click"])
def test_every_verb_of_a_session_runs_without_pydantic(tmp_path: Path, fast: bool) -> None:
    env = {**os.environ, "DESKCTL_HOME": str(tmp_path / "h")}
    for args in (["providers", "--json"], ["preflight", "--provider", "memory", "--json"],
                 ["preflight", "--provider", "docker", "-o", "shm_size=64m", "-o", "memory=1g", "--json"]):
        done = _run(args, env, fast)
        assert done.returncode in (0, 3), (args, done.stderr)  # 3: a check failed, not an import
        assert "pydantic" not in done.stderr, (args, done.stderr)
    refused = _run(["up", "--provider", "memory", "-o", "no_such_option=1"], env, fast)
    assert refused.returncode == 2 and "usage.unknown_option" in refused.stderr, refused.stderr
    up = _run(["up", "--provider", "memory", "--geometry", "320x240", "--ttl", "10m", "--label", "a=b", "--json"],
              env, fast)
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    try:
        for args in (["do", session, "click", "5", "5"], ["screenshot", session, "-o", str(tmp_path / "s.png")],
                     ["ls", "--json"], ["cost", "--json"], ["ls", "--since", "1h"]):
            done = _run(args, env, fast)
            assert done.returncode == 0, (args, done.stderr)
        assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        down = _run(["down", session], env, fast)
    assert down.returncode == 0, down.stderr
