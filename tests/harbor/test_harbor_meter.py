"""The agent's token use of a Harbor trial into the ledger (issue 21 section 3), against Harbor 0.26's own
``AgentContext`` and ``ModelUsage`` classes in .venv-harbor (no Docker, no trial run: :func:`meter_trial`, the hook
that calls :func:`record_agent_context` at a trial's end, is not run under a real job here)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from _cli import deskctl_process as deskctl
from deskctl.ledger import SessionRecord, open_ledger

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-harbor"

_SCRIPT = r"""
import json
from harbor.models.agent.context import AgentContext, ModelUsage
from deskctl.integrations.harbor import record_agent_context

per_model = AgentContext(n_input_tokens=1200, n_output_tokens=300, cost_usd=0.05, model_usage={
    "anthropic/claude-x": ModelUsage(n_input_tokens=1000, n_output_tokens=200, cost_usd=0.04),
    "openai/gpt-y": ModelUsage(n_input_tokens=200, n_output_tokens=100)})
totals = AgentContext(n_input_tokens=10, n_output_tokens=5)
rows = record_agent_context("trial-1", per_model) + record_agent_context("trial-1", totals, model="m-z")
nothing = record_agent_context("trial-1", AgentContext()) + record_agent_context("no-such-trial", totals)
print(json.dumps({"rows": [r.to_dict() for r in rows], "nothing": len(nothing)}))
"""


def test_a_trials_agent_context_is_metered_on_its_desktops_row(deskctl_home: Path) -> None:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no {VENV.name}: run scripts/setup.d/50-harbor.sh (Harbor needs Python >= 3.12)")
    book = open_ledger()
    try:
        book.record_intent(SessionRecord("dk-harbor", "docker", "ubuntu", "800x600", "host:1", False, "intent",
                                         time.time(), labels={"harbor.session": "trial-1__env"}))
        book.record_intent(SessionRecord("dk-other", "docker", "ubuntu", "800x600", "host:1", False, "intent",
                                         time.time(), labels={"harbor.session": "trial-2__env"}))
    finally:
        book.close()
    # this checkout's deskctl first (the venv holds the main checkout, editable)
    env = {**os.environ, "DESKCTL_HOME": str(deskctl_home), "PYTHONPATH": str(ROOT / "src"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "0"}
    proc = subprocess.run([str(VENV / "bin" / "python"), "-c", _SCRIPT], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["nothing"] == 0
    assert [(r["session_id"], r["role"], r["model"], r["input_tokens"], r["output_tokens"], r["usd"])
            for r in doc["rows"]] == [
        ("dk-harbor", "agent", "anthropic/claude-x", 1000, 200, 0.04),
        ("dk-harbor", "agent", "openai/gpt-y", 200, 100, None),  # Harbor had no cost: unknown, never 0
        ("dk-harbor", "agent", "m-z", 10, 5, None),
    ]
    done = deskctl("cost", "--by", "role", "--json", env={"DESKCTL_HOME": str(deskctl_home)}, check=True)
    (group,) = json.loads(done.stdout)["groups"]
    assert (group["key"], group["calls"], group["input_tokens"], group["model_usd"], group["unknown_calls"]) == (
        "agent", 3, 1210, 0.04, 2)
