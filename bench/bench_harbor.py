"""Benchmark: Harbor trials on deskctl's environment next to Harbor's own docker environment, same tasks, same agents.

Each case is a real `harbor run` (Harbor 0.26 in .venv-harbor) of one task with one agent, 1 trial and then 4 trials
at once (`-k N -n N`), on `-e deskctl.integrations.harbor:DeskctlEnvironment --ek provider=docker` and on
`-e docker`. The figure is each trial's own wall time (its result.json's `finished_at - started_at`: environment
start, agent setup and run, verifier, teardown), median over the trials of the run; the ratio is docker / deskctl.

Agents: `oracle` (the task's solution script) and Harbor's `computer-1` driven by a scripted model
(tests/fakes/scripted_model.py, an OpenAI-compatible server on loopback) that fills the form of tests/harbor/gui_task.
Tasks: tests/harbor/gui_task (Chromium, FROM the plain Debian base) and the cookbook's simple-task.

    .venv/bin/python bench/bench_harbor.py [--trials 1,4] [--agents oracle,computer-1] [--tasks gui,simple]

Needs Docker with Compose v2 (scripts/setup.d/22-compose.sh) and .venv-harbor (scripts/setup.d/50-harbor.sh). Images
are built once (an untimed warm-up trial on each environment) and shared. Harbor's docker environment runs a copy
of each task with `network_mode = "public"`: it enforces `no-network` with an egress sidecar built from a registry
image, which may not be reachable; deskctl runs the task as written (no network). A trial whose reward is not 1.0
is timed all the same and named (`!`). At the end the bench checks that every deskctl ledger row ended and no
labelled container is left. Targets (issue 19): oracle trials >= 3x
faster on deskctl, computer-1 trials >= 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.scripted_model import ScriptedModel  # noqa: E402

VENV = ROOT / ".venv-harbor"
DESKCTL_ENV = "deskctl.integrations.harbor:DeskctlEnvironment"
TASKS = {"gui": ROOT / "tests" / "harbor" / "gui_task",
         "simple": ROOT / "tests" / "harbor" / "cookbook" / "simple-task"}
TARGETS = {"oracle": 3.0, "computer-1": 1.5}


def public_copy(task: Path, into: Path) -> Path:
    copy = into / f"{task.name}-public"
    if not copy.exists():
        shutil.copytree(task, copy)
        toml = copy / "task.toml"
        toml.write_text(toml.read_text().replace('network_mode = "no-network"', 'network_mode = "public"'))
    return copy


def harbor_run(env: dict[str, str], task: Path, jobs: Path, name: str, agent: str, environment: str, trials: int,
               model: ScriptedModel) -> tuple[list[float], float]:
    """One `harbor run`: each trial's wall seconds, and the run's own wall seconds."""
    argv = [str(VENV / "bin" / "harbor"), "run", "-p", str(task), "-a", agent, "-o", str(jobs), "--job-name", name,
            "-k", str(trials), "-n", str(trials), "-y", "-q"]
    if agent == "computer-1":
        argv += ["-m", "openai/scripted", "--ak", "provider=litellm", "--ak", f"api_base={model.url}",
                 "--ak", "enable_images=true"]
    if environment == "deskctl":
        argv += ["-e", DESKCTL_ENV, "--ek", "provider=docker", "--ek", "geometry=1024x900",
                 "--ek", "build_network=host"]
    else:
        argv += ["-e", "docker"]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=jobs, timeout=3600)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"harbor run failed ({name}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    seconds = []
    for path in (jobs / name).glob("*/result.json"):
        result = json.loads(path.read_text())
        if result.get("exception_info"):
            raise SystemExit(f"{name}: a trial failed: {result['exception_info'].get('exception_message')}")
        reward = ((result.get("verifier_result") or {}).get("rewards") or {}).get("reward")
        if reward != 1.0:  # timed all the same, and said
            print(f"  ! {name}: trial {path.parent.name} got reward {reward}, not 1.0", flush=True)
        begin = datetime.fromisoformat(result["started_at"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(result["finished_at"].replace("Z", "+00:00"))
        seconds.append((end - begin).total_seconds())
    if len(seconds) != trials:
        raise SystemExit(f"{name}: {len(seconds)} results for {trials} trials")
    return seconds, wall


def check_nothing_left(env: dict[str, str]) -> str:
    """deskctl's side: every ledger row ended, no container of this ledger's sessions is left."""
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "deskctl"), "ls", "--all", "--json"], capture_output=True,
                         text=True, env=env, check=True).stdout
    rows = json.loads(out)["sessions"]
    open_rows = [r["id"] for r in rows if r["status"] != "ended"]
    names = subprocess.run(["docker", "ps", "--all", "--format", "{{.Label \"deskctl.session\"}}"],
                           capture_output=True, text=True, check=True).stdout.split()
    left = sorted({r["id"] for r in rows} & set(names))
    if open_rows or left:
        raise SystemExit(f"deskctl left rows open {open_rows} or containers {left}")
    return f"{len(rows)} rows ended, no container left"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="1,4", help="trials at once, comma-separated (default 1,4)")
    parser.add_argument("--agents", default="oracle,computer-1")
    parser.add_argument("--tasks", default="gui,simple", help="gui, simple (computer-1 runs on gui only)")
    args = parser.parse_args()
    if not (VENV / "bin" / "harbor").exists():
        raise SystemExit(f"no {VENV}: run scripts/setup.d/50-harbor.sh")
    work = Path(tempfile.mkdtemp(prefix="bench-harbor-"))
    env = {**os.environ, "DESKCTL_HOME": str(work / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HARBOR_TELEMETRY": "0", "OPENAI_API_KEY": "scripted-model", "DOCKER_BUILDKIT": "0",
           "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}
    cases = [(task, agent) for task in args.tasks.split(",") for agent in args.agents.split(",")
             if not (agent == "computer-1" and task != "gui")]
    counts = [int(n) for n in args.trials.split(",")]
    print(f"Harbor trials, deskctl vs Harbor's docker environment (per-trial wall seconds, median); work: {work}")
    try:
        with ScriptedModel() as model:
            # warm-up, untimed: the task images are built once and shared (deskctl first: its builds fill the classic
            # builder's cache that Harbor's build of the same Dockerfile then hits)
            for task in {t for t, _ in cases}:
                for environment in ("deskctl", "docker"):
                    path = TASKS[task] if environment == "deskctl" else public_copy(TASKS[task], work)
                    harbor_run(env, path, work, f"warm-{task}-{environment}", "oracle", environment, 1, model)
            for task, agent in cases:
                for count in counts:
                    medians = {}
                    for environment in ("deskctl", "docker"):
                        path = TASKS[task] if environment == "deskctl" else public_copy(TASKS[task], work)
                        name = f"{task}-{agent}-{count}-{environment}"
                        seconds, wall = harbor_run(env, path, work, name, agent, environment, count, model)
                        medians[environment] = statistics.median(seconds)
                        print(f"  {task:<6} {agent:<10} x{count}  {environment:<7} trial {medians[environment]:6.1f} s"
                              f"  (trials {', '.join(f'{s:.1f}' for s in sorted(seconds))}; run {wall:.1f} s)",
                              flush=True)
                    ratio = medians["docker"] / medians["deskctl"]
                    target = TARGETS[agent]
                    verdict = "ok" if ratio >= target else "BELOW TARGET"
                    print(f"  {task:<6} {agent:<10} x{count}  docker/deskctl x{ratio:.2f}  [target >= {target}x: "
                          f"{verdict}]", flush=True)
        print(f"deskctl cleanup: {check_nothing_left(env)}")
    except SystemExit:
        print(f"the jobs' folders stay in {work} (trial logs)", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
