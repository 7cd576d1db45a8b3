"""examples/ci-budget-guard.yml as GitHub Actions runs it: a failed preflight must fail its job (the step runs
under the shell Actions picks, and a pipe into ``tee`` must not hide deskctl's exit code), and deskctl is
installed from the checkout (no package of that name is published)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "ci-budget-guard.yml"

#: how Actions runs a ``run:`` script on Linux (docs: "Workflow syntax", jobs.<job_id>.steps[*].shell)
_SHELLS = {"bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"], None: ["bash", "-e"]}


def _steps() -> list[tuple[str, str, str]]:
    """(job, kind, text) for every step: kind ``run`` (the script) or ``uses`` (the action), in file order."""
    lines = WORKFLOW.read_text().splitlines()
    out: list[tuple[str, str, str]] = []
    job = ""
    in_jobs = False
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith("jobs:"):
            in_jobs = True
            continue
        if in_jobs and re.fullmatch(r"  [A-Za-z0-9_-]+:", line):
            job = line.strip().rstrip(":")
            continue
        match = re.match(r"^(\s*)(?:- )?(run|uses): ?(.*)$", line)
        if not in_jobs or match is None:
            continue
        indent, kind, text = len(match.group(1)), match.group(2), match.group(3).strip()
        if kind == "run" and text in ("|", ">"):
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip() or len(lines[index]) - len(lines[index].lstrip())
                                          > indent + (2 if line.lstrip().startswith("- ") else 0)):
                block.append(lines[index].strip())
                index += 1
            text = "\n".join(block)
        out.append((job, kind, text))
    return out


def _default_shell() -> str | None:
    match = re.search(r"^defaults:\n  run:\n    shell: (\S+)", WORKFLOW.read_text(), re.M)
    return match.group(1) if match else None


def test_a_failed_preflight_fails_the_step(tmp_path: Path) -> None:
    script = next(text for _, kind, text in _steps() if kind == "run" and "deskctl preflight" in text)
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DESKCTL_", "DAYTONA_", "CUA_", "USE_COMPUTER_"))}
    env.update({
        "PATH": f"{bin_dir}:{env.get('PATH', '')}", "DESKCTL_HOME": str(tmp_path / "home"),
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
        # the workflow's own variables, with the secret left unset: preflight answers "credentials missing"
        "DESKCTL_PROVIDER": "daytona", "DESKCTL_PLATFORM": "windows", "DESKCTL_GEOMETRY": "1024x768",
        "DAYTONA_API_URL": "http://127.0.0.1:9/api",
    })
    out = subprocess.run([*_SHELLS[_default_shell()], "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0, out.stdout[-2000:] + out.stderr[-2000:]
    document = json.loads((tmp_path / "preflight.json").read_text())
    assert document["ok"] is False  # the details are still kept for the job's logs


def test_deskctl_is_installed_from_the_checkout() -> None:
    installs = [(job, text) for job, kind, text in _steps() if kind == "run" and "pip install" in text]
    assert installs
    for job, text in installs:
        targets = [t.strip("'\"") for t in text.split("pip install", 1)[1].split() if not t.startswith("-")]
        assert targets and all(t.startswith(".") for t in targets), (job, text)
        steps = [(kind, step) for j, kind, step in _steps() if j == job]
        checkout = next(i for i, (kind, step) in enumerate(steps) if kind == "uses" and "actions/checkout" in step)
        assert checkout < steps.index(("run", text)), f"{job} installs before it checks out"
