"""deskctl.integrations.harbor:DeskctlEnvironment under real Harbor 0.26 (its own venv, .venv-harbor, made by
scripts/setup.d/50-harbor.sh) on the real docker provider: `harbor run` of tests/harbor/task with the oracle agent
(reward 1.0) and the nop agent (reward 0.0), the exec/file mapping, SIGTERM to Harbor mid-trial, a crash that
`deskctl reap` cleans up, a task image not derived from the desktop image refused, the network by the task's mode,
and option/preflight errors translated for Harbor."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl_process as deskctl

pytestmark = [pytest.mark.docker, pytest.mark.harbor, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-harbor"
TASK = Path(__file__).resolve().parent / "task"
#: stock Harbor tasks, unmodified for deskctl: a plain distribution image without X, and a GUI task that installs
#: its own Xvfb and X clients
STOCK_TASK = Path(__file__).resolve().parent / "task_stock"
GUI_TASK = Path(__file__).resolve().parent / "task_gui"
#: the RUN steps of a task's build reach the package mirror through the host's network (this machine's engine
#: has no default bridge to spare); what a job would pass with --ek build_network=host
BUILD_NETWORK = ("--ek", "build_network=host")
PROBE = Path(__file__).resolve().parent / "_probe.py"
ENVIRONMENT = "deskctl.integrations.harbor:DeskctlEnvironment"


@pytest.fixture
def harbor_env(deskctl_home: Path) -> dict[str, str]:
    if not (VENV / "bin" / "harbor").exists():
        pytest.skip(f"no {VENV.name}: run scripts/setup.d/50-harbor.sh (Harbor needs Python >= 3.12)")
    # LITELLM_LOCAL_MODEL_COST_MAP: litellm (imported by Harbor) would fetch model prices from the network
    return {**os.environ, "DESKCTL_HOME": str(deskctl_home), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HARBOR_TELEMETRY": "0", "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}


def probe(env: dict[str, str], scenario: str, work: Path, *options: str, environment_dir: Path = TASK / "environment",
          timeout: float = 300) -> dict[str, Any]:
    proc = subprocess.run([str(VENV / "bin" / "python"), str(PROBE), scenario, str(environment_dir), str(work),
                           *options], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def containers(docker_sdk: Any, session: str) -> list[Any]:
    return list(docker_sdk.api.containers(all=True, filters={"label": f"deskctl.session={session}"}))


def ledger_rows(env: dict[str, str]) -> list[dict[str, Any]]:
    proc = deskctl("ls", "--all", "--json", env=env, check=True)
    return list(json.loads(proc.stdout)["sessions"])


def harbor_run(env: dict[str, str], jobs: Path, agent: str, task: Path = TASK, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(VENV / "bin" / "harbor"), "run", "-p", str(task), "-a", agent, "-e", ENVIRONMENT,
         "--ek", "provider=docker", "--ek", "geometry=800x600", *BUILD_NETWORK, *extra, "-o", str(jobs),
         "--job-name", agent, "-n", "1", "-y", "-q"],
        capture_output=True, text=True, env=env, timeout=900, cwd=jobs)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = [json.loads(p.read_text()) for p in (jobs / agent).glob("*/result.json")]
    assert len(trials) == 1, list((jobs / agent).iterdir())
    return dict(trials[0])


def leftovers(docker_sdk: Any, home: str) -> list[str]:
    """Containers a run left: its desktops (by their host folder under DESKCTL_HOME), probes, build steps."""
    left = []
    for raw in docker_sdk.api.containers(all=True):
        labels = raw.get("Labels") or {}
        if str(labels.get("deskctl.docker.dir", "")).startswith(home) or "deskctl.probe" in labels:
            left.append(str(raw["Names"]))
    return left


@pytest.mark.parametrize("task", [STOCK_TASK, GUI_TASK], ids=["stock", "gui"])
def test_a_stock_task_runs_unmodified_oracle_1_nop_0(harbor_env: dict[str, str], tmp_path: Path, docker_sdk: Any,
                                                     task: Path) -> None:
    images_before = {i.id for i in docker_sdk.images.list(all=True)}
    oracle = harbor_run(harbor_env, tmp_path, "oracle", task)
    assert oracle["exception_info"] is None, oracle["exception_info"]
    assert oracle["verifier_result"]["rewards"] == {"reward": 1.0}
    nop = harbor_run(harbor_env, tmp_path, "nop", task)
    assert nop["exception_info"] is None, nop["exception_info"]
    assert nop["verifier_result"]["rewards"] == {"reward": 0.0}
    stdout = next((tmp_path / "nop").glob("*/verifier/test-stdout.txt")).read_text()
    if task == STOCK_TASK:  # root with Docker's capabilities in the task's WORKDIR, the display's socket at X1
        assert "cwd: /app; socket: yes; chown: yes; setuid: yes; DISPLAY: unset; zone: CST" in stdout, stdout
    else:  # the task's own Xvfb, the only X server, at the pinned size; no window before the oracle opens one
        assert "live: 800x600; window: none; servers: X1 " in stdout, stdout
    rows = ledger_rows(harbor_env)
    assert len(rows) == 2, rows
    for row in rows:
        assert row["status"] == "ended", row
        assert containers(docker_sdk, row["id"]) == []
    assert leftovers(docker_sdk, harbor_env["DESKCTL_HOME"]) == []
    # what the runs made: the task's image (and for the stock task the desktop layer over it), nothing dangling
    made = [i for i in docker_sdk.images.list(all=True) if i.id not in images_before]
    dangling = [i.id for i in made if not i.tags and not docker_sdk.api.inspect_image(i.id)["RepoTags"]
                and i.id not in {p.attrs.get("Parent") for p in made}]
    assert dangling == [], dangling


def test_harbor_run_oracle_gets_1_and_nop_gets_0(harbor_env: dict[str, str], tmp_path: Path,
                                                 docker_sdk: Any) -> None:
    oracle = harbor_run(harbor_env, tmp_path, "oracle")
    assert oracle["exception_info"] is None, oracle["exception_info"]
    assert oracle["verifier_result"]["rewards"] == {"reward": 1.0}
    nop = harbor_run(harbor_env, tmp_path, "nop")
    assert nop["exception_info"] is None, nop["exception_info"]
    assert nop["verifier_result"]["rewards"] == {"reward": 0.0}
    # the verifier saw deskctl's desktop at the pinned size, without the answer the oracle wrote
    stdout = next((tmp_path / "nop").glob("*/verifier/test-stdout.txt")).read_text()
    assert "live screen: 800x600; interfaces: lo " in stdout

    rows = ledger_rows(harbor_env)
    assert len(rows) == 2, rows
    for row in rows:
        assert row["provider"] == "docker" and row["geometry"] == "800x600"
        assert row["status"] == "ended", row
        assert containers(docker_sdk, row["id"]) == []
    # the desktop ran the task's image, built FROM the deskctl desktop image
    tags = [t for image in docker_sdk.images.list(name="deskctl-harbor") for t in image.tags]
    assert any(t.startswith("deskctl-harbor:task-") for t in tags), tags


def test_exec_and_files_map_onto_deskctl(harbor_env: dict[str, str], tmp_path: Path, docker_sdk: Any) -> None:
    out = probe(harbor_env, "mapping", tmp_path, "geometry=800x600")
    assert out["network"] == "none"  # the task's no-network mode, enforced by the desktop's network
    assert out["streams"] == ["out\n", "err\n", 3]  # stdout and stderr apart, the exit code as it was
    assert out["cwd_env_user"][:3] == ["/tmp", "a b'c", "desk"]  # user None: the desktop's user
    assert out["root"] == out["uid0"] == out["default_user"].replace("root", "0") == "0\n"
    assert out["bash"] == "1\n"  # Harbor's commands run under bash, as on its own environments
    assert out["timeout"] == 124
    # Harbor mode: root holds Docker's default capabilities, as on Harbor's docker environment (hardened=false)
    assert out["hardened"] is False and out["chmod_root_alone"] == 0
    assert out["chmod"] == 0 and out["run"] == "ran as desk\n"  # the image's own user (USER 1000:1000)
    assert out["is_dir"] == [True, True, False]
    assert out["downloaded"] == ["copy.txt", "tests/sub/run.sh", "tests/top.txt"]
    assert (tmp_path / "down" / "copy.txt").read_text() == "top\n"
    assert "777 root /logs/verifier" in out["dirs"] and "777 root /solution" in out["dirs"]
    assert out["display"] == "800x600\n"
    # exec output reaches Harbor's log callback as it comes, stdout and stderr apart
    assert out["streamed"]["before_end"] == [True], out["streamed"]
    assert out["streamed"]["chunks"] == out["streamed"]["result"] == "one\nthree\n"
    assert out["streamed"]["errors"] == "two\n"
    # a call cancelled mid-command (Harbor's timeouts) ends the command: the next call ran, nothing is left
    assert out["cancelled"] and out["after_cancel"].split() == ["none", "1"], out["after_cancel"]
    assert out["stopped"] and containers(docker_sdk, out["session"]) == []
    row = next(r for r in ledger_rows(harbor_env) if r["id"] == out["session"])
    assert row["status"] == "ended"


def test_a_killed_harbor_leaves_a_desktop_that_deskctl_reap_removes(harbor_env: dict[str, str], tmp_path: Path,
                                                                  docker_sdk: Any) -> None:
    # reaper=false: no watcher removes the container when its owner dies, so `deskctl reap` must find it by label
    proc = subprocess.Popen([str(VENV / "bin" / "python"), str(PROBE), "crash", str(STOCK_TASK / "environment"),
                             str(tmp_path), 'provider_options={"reaper": false}', "build_network=host"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=harbor_env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        session = json.loads(line)["session"]
        (found,) = containers(docker_sdk, session)
        assert found["Labels"]["harbor.session"] == "probe__x__env"
        assert found["Labels"]["harbor.task"] == "probe"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert containers(docker_sdk, session) != []  # nothing ran stop(): the desktop is still there
    reaped = deskctl("reap", "--json", env=harbor_env)
    assert reaped.returncode == 0, reaped.stderr
    assert session in reaped.stdout
    assert containers(docker_sdk, session) == []
    row = next(r for r in ledger_rows(harbor_env) if r["id"] == session)
    assert row["status"] in ("ended", "failed"), row


def test_sigterm_to_harbor_mid_trial_destroys_the_desktop(harbor_env: dict[str, str], tmp_path: Path,
                                                          docker_sdk: Any) -> None:
    task = tmp_path / "task"
    shutil.copytree(STOCK_TASK, task)  # a task image: its Xvfb started by exec, the container's command Harbor's
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 100000\n")
    proc = subprocess.Popen(
        [str(VENV / "bin" / "harbor"), "run", "-p", str(task), "-a", "oracle", "-e", ENVIRONMENT,
         "--ek", "provider=docker", *BUILD_NETWORK, "-o", str(tmp_path / "jobs"), "--job-name", "term", "-n", "1",
         "-y", "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=harbor_env, cwd=tmp_path)
    try:
        session = None
        while session is None:  # the oracle's command is running on the desktop (bounded by pytest's timeout)
            assert proc.poll() is None, "harbor ended before the agent ran"
            for raw in docker_sdk.api.containers(filters={"label": "harbor.task=task"}):
                if str(raw["Labels"].get("deskctl.docker.dir", "")).startswith(harbor_env["DESKCTL_HOME"]):
                    top = docker_sdk.api.top(raw["Id"])
                    if any("sleep 100000" in " ".join(map(str, p)) for p in top.get("Processes") or []):
                        session = raw["Labels"]["deskctl.session"]
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert containers(docker_sdk, session) == []
    # the ledger row ended: stop() ran (a process that died without it leaves the row open until `deskctl reap`)
    row = next(r for r in ledger_rows(harbor_env) if r["id"] == session)
    assert row["status"] in ("ended", "failed") and row["reason"], row


def test_an_image_deskctl_cannot_make_a_desktop_of_is_refused_before_any_build(harbor_env: dict[str, str],
                                                                             tmp_path: Path, docker_sdk: Any) -> None:
    environment = tmp_path / "environment"
    environment.mkdir()
    (environment / "Dockerfile").write_text("FROM deskctl-base:bookworm AS files\nFROM scratch\nCOPY --from=files "
                                            "/etc/hostname /x\n")
    before = {i.id for i in docker_sdk.images.list(all=True)}
    out = probe(harbor_env, "start", tmp_path, environment_dir=environment)
    assert out.get("error") == "ValueError", out  # Harbor's refusal of a task definition, raised by __init__
    assert "[usage.bad_image]" in out["message"] and "FROM scratch" in out["message"], out
    assert "ignore_dockerfile=true" in out["message"]  # the remedy
    assert ledger_rows(harbor_env) == []
    assert {i.id for i in docker_sdk.images.list(all=True)} == before  # nothing was built


def test_a_base_image_not_on_the_engine_is_named_with_the_remedy_in_harbors_output_and_not_rebuilt(
        harbor_env: dict[str, str], tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(STOCK_TASK, task)
    (task / "environment" / "Dockerfile").write_text("FROM deskctl-no-such-base:24.04\nRUN true\n")
    outputs = []
    for attempt in ("first", "again"):
        proc = subprocess.run(
            [str(VENV / "bin" / "harbor"), "run", "-p", str(task), "-a", "oracle", "-e", ENVIRONMENT,
             "--ek", "provider=docker", "-o", str(tmp_path / "jobs"), "--job-name", attempt, "-n", "1", "-y"],
            capture_output=True, text=True, env=harbor_env, timeout=300, cwd=tmp_path)
        (trial,) = [json.loads(p.read_text()) for p in (tmp_path / "jobs" / attempt).glob("*/result.json")]
        message = trial["exception_info"]["exception_message"]
        # deskctl's message, code and remedy: in result.json and on Harbor's console (which prints only the class)
        assert "FROM deskctl-no-such-base:24.04, which is not on this Docker engine" in message, message
        assert "[provider.api_error]; `docker pull deskctl-no-such-base:24.04`" in message, message
        assert "[provider.api_error]; `docker pull" in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr  # no log download from a desktop that never started
        outputs.append(message)
    assert "not tried again" not in outputs[0] and "not tried again with the same inputs" in outputs[1]
    assert ledger_rows(harbor_env) == []


def test_hardened_true_is_deskctls_profile_and_ignore_dockerfile_runs_the_desktop_image(
        harbor_env: dict[str, str], tmp_path: Path) -> None:
    stock = probe(harbor_env, "start", tmp_path, "build_network=host", environment_dir=STOCK_TASK / "environment")
    assert stock["started"] and stock["user"] == ["root", "unset", "X1"] and stock["cap_drop"] is None, stock
    assert stock["image"].startswith("deskctl-layer:")  # Xvfb added over the plain image
    hardened = probe(harbor_env, "start", tmp_path, "build_network=host", "hardened=true",
                     environment_dir=STOCK_TASK / "environment")
    assert hardened["user"][0] != "root" and hardened["cap_drop"] == ["ALL"], hardened
    ignored = probe(harbor_env, "start", tmp_path, "ignore_dockerfile=true", environment_dir=STOCK_TASK / "environment")
    assert ignored["image"].startswith("deskctl-desktop:"), ignored  # deskctl's own image, the task's not built


def test_the_task_network_and_memory_reach_the_docker_desktop(harbor_env: dict[str, str], tmp_path: Path) -> None:
    out = probe(harbor_env, "start", tmp_path, "task_network=public", "task_memory_mb=1536")
    assert (out["network"], out["memory"]) == ("bridge", 1536 * 2**20), out
    # the user's provider options win over the task's
    chosen = probe(harbor_env, "start", tmp_path, "task_network=public", "task_memory_mb=1536",
                   'provider_options={"network": "none", "memory": "2g"}')
    assert (chosen["network"], chosen["memory"]) == ("none", 2 * 2**30), chosen


def test_options_and_preflight_errors_reach_harbor_in_its_own_terms(harbor_env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    bad = probe(harbor_env, "preflight", tmp_path, "geometry=80x")
    assert "usage.bad_geometry" in bad["value_error"]
    typo = probe(harbor_env, "preflight", tmp_path, 'provider_options={"imagee": "x"}')
    assert "did you mean 'image'" in typo["value_error"]
    # a Docker engine that does not answer: Harbor's preflight contract is SystemExit, with deskctl's remedy
    down = probe({**harbor_env, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}, "preflight", tmp_path)
    assert "exit" in down and "docker" in down["exit"].lower(), down
    assert probe(harbor_env, "preflight", tmp_path, "geometry=800x600") == {"ok": True}


def test_the_numbers_of_the_options_are_bounded_as_deskctl_up_bounds_them(harbor_env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    # deskctl.limits' bounds, as Harbor's option errors: NaN, inf, 0 and 1e308 never reach a desktop
    for option, code in (("exec_timeout=nan", "usage.bad_limit"), ("exec_timeout=0", "usage.bad_limit"),
                         ("ready_timeout=1e308", "usage.bad_limit"), ("max_minutes=inf", "usage.bad_limit"),
                         ("max_usd=1e308", "usage.bad_limit"), ("ttl=99999999999999h", "usage.bad_duration")):
        out = probe(harbor_env, "preflight", tmp_path, option)
        assert code in out.get("value_error", ""), (option, out)


def test_harbor_run_refuses_a_dockerfile_task_on_a_provider_that_cannot_build(harbor_env: dict[str, str],
                                                                             tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(VENV / "bin" / "harbor"), "run", "-p", str(TASK), "-a", "oracle", "-e", ENVIRONMENT,
         "--ek", "provider=xvfb", "-o", str(tmp_path), "--job-name", "xvfb", "-n", "1", "-y", "-q"],
        capture_output=True, text=True, env=harbor_env, timeout=300, cwd=tmp_path)
    trials = [json.loads(p.read_text()) for p in (tmp_path / "xvfb").glob("*/result.json")]
    text = proc.stdout + proc.stderr + json.dumps(trials)
    assert "does not build images" in text, text[-3000:]
    assert ledger_rows(harbor_env) == []

