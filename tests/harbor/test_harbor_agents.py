"""Harbor's real agents and cookbook-style tasks on deskctl.integrations.harbor:DeskctlEnvironment, through a real
`harbor run` (Harbor 0.26 in .venv-harbor) on the real docker provider:

* Harbor's `computer-1` agent with a scripted model (tests/fakes/scripted_model.py, an OpenAI-compatible server on
  loopback) on tests/harbor/gui_task (a local HTML form in Chromium, FROM the plain Debian base): reward 1.0 on
  deskctl and on Harbor's own docker environment, nop 0.0; computer-1 reuses deskctl's X server (one Xvfb in the
  container) and a deskctl screenshot taken mid-trial shows computer-1's Chromium page;
* the cookbook's simple-task on the plain Debian base: oracle 1.0, nop 0.0;
* a docker-compose task whose desktop is a sidecar (tests/harbor/cookbook/computer-use-compose): oracle 1.0, nop 0.0,
  every container of the project labelled as the trial's session and gone after it; the per-service operations,
  the desktop as `main`, and a killed Harbor whose compose containers `deskctl reap` removes with the desktop.

Images are built once per content and shared by the cases (one trial per case: these are heavy). Harbor's docker
environment runs a copy of the task whose only change is `network_mode = "public"`: it enforces `no-network`
through an egress-control sidecar built from an image on a registry, which is not reachable here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_harbor import ENVIRONMENT, VENV, containers, harbor_env, ledger_rows

from _cli import deskctl_process as deskctl
from _procs import wait_until
from fakes.scripted_model import FORM_ACTIONS, ScriptedModel

pytestmark = [pytest.mark.docker, pytest.mark.harbor, pytest.mark.slow]

__all__ = ["harbor_env"]

HERE = Path(__file__).resolve().parent
GUI_TASK = HERE / "gui_task"
SIMPLE_TASK = HERE / "cookbook" / "simple-task"
COMPOSE_TASK = HERE / "cookbook" / "computer-use-compose"
COMPOSE_MAIN = HERE / "compose_main" / "environment"
PROBE = HERE / "_probe_compose.py"
ROOT = HERE.parents[1]
#: the form page's background (tests/harbor/gui_task/environment/form.html)
FORM_GREEN = (0x17, 0xA3, 0x4A)
# The task images' RUN steps fetch packages from the mirror apt uses: over the host's network, so that the tests do
# not depend on the engine's default bridge reaching it.
BUILD = ("--ek", "build_network=host")


def run(env: dict[str, str], task: Path, jobs: Path, name: str, agent: str, *extra: str,
        environment: str = ENVIRONMENT, timeout: float = 1500) -> dict[str, Any]:
    """`harbor run` of one trial; its result.json."""
    argv = [str(VENV / "bin" / "harbor"), "run", "-p", str(task), "-a", agent, "-o", str(jobs), "--job-name", name,
            "-n", "1", "-y", "-q", "-e", environment, *extra]
    if environment == ENVIRONMENT:
        argv += ["--ek", "provider=docker", *BUILD]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=jobs)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = [json.loads(p.read_text()) for p in (jobs / name).glob("*/result.json")]
    assert len(trials) == 1, list((jobs / name).iterdir())
    assert trials[0]["exception_info"] is None, trials[0]["exception_info"]
    return dict(trials[0])


def computer1(model: ScriptedModel) -> list[str]:
    """computer-1 on the scripted model: the generic (litellm JSON) provider, the model's loopback address."""
    return ["-m", "openai/scripted", "--ak", "provider=litellm", "--ak", f"api_base={model.url}",
            "--ak", "enable_images=true"]


def public_copy(task: Path, tmp: Path) -> Path:
    """The task with `network_mode = "public"`, for Harbor's docker environment (see the module docstring)."""
    copy = tmp / task.name
    shutil.copytree(task, copy)
    toml = copy / "task.toml"
    text = toml.read_text()
    toml.write_text(text.replace('network_mode = "no-network"', 'network_mode = "public"'))
    return copy


def probe(env: dict[str, str], scenario: str, environment_dir: Path, work: Path, *options: str) -> dict[str, Any]:
    proc = subprocess.run([str(VENV / "bin" / "python"), str(PROBE), scenario, str(environment_dir), str(work),
                           "build_network=host", *options], capture_output=True, text=True, env=env, timeout=900,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture
def agent_env(harbor_env: dict[str, str]) -> dict[str, str]:
    # OPENAI_API_KEY: litellm's OpenAI client wants one; the scripted model on loopback ignores it.
    # DOCKER_BUILDKIT=0: Harbor's docker environment builds with the classic builder, whose layer cache deskctl's
    # builds of the same Dockerfile fill (BuildKit keeps a cache of its own)
    return {**harbor_env, "OPENAI_API_KEY": "scripted-model", "DOCKER_BUILDKIT": "0"}


@pytest.fixture
def compose_v2() -> None:
    """Harbor's docker environment and deskctl's compose tasks run `docker compose` (v2)."""
    from deskctl.integrations.harbor_compose import compose_version

    if compose_version() is None:
        pytest.skip("no `docker compose` v2: run scripts/setup.d/22-compose.sh")


def green_share(png: Path) -> float:
    """The share of the screenshot's pixels that are the form page's green."""
    from PIL import Image

    with Image.open(png) as image:
        raw = image.convert("RGB").tobytes()
    pixels = [raw[i:i + 3] for i in range(0, len(raw), 3)]
    near = sum(1 for p in pixels if all(abs(a - b) <= 6 for a, b in zip(p, FORM_GREEN, strict=True)))
    return near / len(pixels)


def test_computer1_reuses_deskctls_display_and_a_scripted_run_gets_1(agent_env: dict[str, str], tmp_path: Path,
                                                                     docker_sdk: Any) -> None:
    held = FORM_ACTIONS.index({"type": "done", "result": "submitted"})  # after the form is submitted
    with ScriptedModel(hold_at=held) as model:
        outcome: dict[str, Any] = {}

        def trial() -> None:
            try:
                outcome["result"] = run(agent_env, GUI_TASK, tmp_path, "c1", "computer-1", *computer1(model),
                                        "--ek", "geometry=1024x900")
            except BaseException as exc:  # reported by the main thread
                outcome["error"] = exc

        worker = threading.Thread(target=trial)
        worker.start()
        try:
            assert model.wait_held(1200), f"computer-1 never reached turn {held}: {model.turns} {outcome}"
            rows = [r for r in ledger_rows(agent_env) if r["status"] == "ready"]
            assert len(rows) == 1, rows
            session = rows[0]["id"]
            (desktop,) = containers(docker_sdk, session)
            # computer-1 found deskctl's X server on :1 and started none of its own: one Xvfb in the container
            ps = docker_sdk.api.exec_start(docker_sdk.api.exec_create(
                desktop["Id"], ["sh", "-c", "cat /proc/[0-9]*/comm"])["Id"]).decode().split()
            assert ps.count("Xvfb") == 1, ps
            assert "chromium" in ps and "openbox" in ps, ps
            # deskctl's own screenshot of the desktop shows computer-1's Chromium page (the form's green)
            shot = tmp_path / "mid-trial.png"
            deskctl("screenshot", session, "-o", str(shot), env=agent_env, check=True)
            assert green_share(shot) > 0.3, green_share(shot)
        finally:
            model.release()
            worker.join(1500)
        assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    stdout = next(tmp_path.glob("c1/*/verifier/test-stdout.txt")).read_text()
    assert "submitted:deskctl-on-harbor - Chromium" in stdout
    # every turn of the script was asked for once, each with a screenshot of the desktop
    assert [t.index for t in model.turns] == list(range(len(FORM_ACTIONS)))
    assert all(t.images == 1 for t in model.turns), model.turns
    (row,) = ledger_rows(agent_env)
    assert row["status"] == "ended" and row["geometry"] == "1024x900", row
    assert containers(docker_sdk, row["id"]) == []


def test_nop_gets_0_on_the_gui_task(agent_env: dict[str, str], tmp_path: Path, docker_sdk: Any) -> None:
    result = run(agent_env, GUI_TASK, tmp_path, "nop", "nop")
    assert result["verifier_result"]["rewards"] == {"reward": 0.0}
    (row,) = ledger_rows(agent_env)
    assert row["status"] == "ended" and containers(docker_sdk, row["id"]) == []


@pytest.mark.usefixtures("compose_v2")
def test_the_scripted_computer1_run_gets_1_on_harbors_docker_environment_too(agent_env: dict[str, str],
                                                                             tmp_path: Path) -> None:
    # the same task and script on Harbor's own environment: the scripted actions are not tuned to deskctl
    task = public_copy(GUI_TASK, tmp_path)
    with ScriptedModel() as model:
        result = run(agent_env, task, tmp_path, "docker-c1", "computer-1", *computer1(model), environment="docker")
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    assert [t.index for t in model.turns] == list(range(len(FORM_ACTIONS)))


def test_the_cookbook_simple_task_on_the_plain_debian_base(agent_env: dict[str, str], tmp_path: Path,
                                                           docker_sdk: Any) -> None:
    oracle = run(agent_env, SIMPLE_TASK, tmp_path, "oracle", "oracle")
    assert oracle["verifier_result"]["rewards"] == {"reward": 1.0}
    nop = run(agent_env, SIMPLE_TASK, tmp_path, "nop", "nop")
    assert nop["verifier_result"]["rewards"] == {"reward": 0.0}
    rows = ledger_rows(agent_env)
    assert len(rows) == 2 and all(r["status"] == "ended" for r in rows), rows
    assert all(containers(docker_sdk, r["id"]) == [] for r in rows)


@pytest.mark.usefixtures("compose_v2")
def test_a_compose_task_with_a_desktop_sidecar_gets_1_and_leaves_nothing(agent_env: dict[str, str], tmp_path: Path,
                                                                         docker_sdk: Any) -> None:
    # the task's network mode is public: its desktop joins a user network (the test's own, removed after)
    network = docker_sdk.networks.create(f"deskctl-test-{tmp_path.name[-12:]}", driver="bridge")
    try:
        ek = ["--ek", "compose_desktop=desktop", "--ek", f"provider_options={json.dumps({'network': network.name})}"]
        oracle = run(agent_env, COMPOSE_TASK, tmp_path, "oracle", "oracle", *ek)
        assert oracle["verifier_result"]["rewards"] == {"reward": 1.0}
        nop = run(agent_env, COMPOSE_TASK, tmp_path, "nop", "nop", *ek)
        assert nop["verifier_result"]["rewards"] == {"reward": 0.0}
    finally:
        network.remove()
    rows = ledger_rows(agent_env)
    assert len(rows) == 2 and all(r["status"] == "ended" for r in rows), rows
    sessions = {r["id"] for r in rows}
    # nothing of either trial is left: the desktops, main's containers (labelled as their sessions)
    for raw in docker_sdk.api.containers(all=True, filters={"label": "deskctl.session"}):
        assert raw["Labels"]["deskctl.session"] not in sessions, raw["Names"]


@pytest.mark.usefixtures("compose_v2")
def test_compose_per_service_operations_with_a_desktop_sidecar(agent_env: dict[str, str], tmp_path: Path) -> None:
    out = probe(agent_env, "sidecar", COMPOSE_TASK / "environment", tmp_path, "compose_desktop=desktop")
    # both containers are the trial's session: deskctl's labels, the owner, the compose service
    assert [c[:2] for c in out["containers"]] == [["desktop", "docker"], ["main", "docker"]]
    assert out["main_root"] == "no-x\nroot\n"  # main is the task's own container (root, no display)
    assert out["main_hosts"].split()[:3] == ["127.0.0.1", "desktop", "main"]
    assert out["banner"] == "RFB 003.008\n"  # the sidecar's command (x11vnc) serves deskctl's display
    assert out["desktop"] == ["1", "x1"]  # service_exec on the desktop: deskctl's one Xvfb, on :1
    assert out["service_main_is_exec"] and out["roundtrip"] and out["desktop_file"]
    assert "no service 'nope'" in out["unknown_service"]
    assert out["main_after_stop_service"] == ["exited"]
    assert out["left"] == [] and out["networks_left"] == []
    (row,) = ledger_rows(agent_env)
    assert row["status"] == "ended"


@pytest.mark.usefixtures("compose_v2")
def test_compose_with_the_desktop_as_main(agent_env: dict[str, str], tmp_path: Path) -> None:
    out = probe(agent_env, "main", COMPOSE_MAIN, tmp_path)
    assert out["containers"] == ["desktop", "helper"]
    # Harbor's calls reach the desktop; the sidecar (its networks and ports dropped) shares its network namespace
    assert out["main"].split() == ["x1", "127.0.0.1", "helper", "main"]
    assert out["helper"] == "sleep infinity root\n"
    assert out["after_stop"] == ["helper", None] or sorted(map(str, out["after_stop"])) == ["None", "helper"]
    assert out["desktop_alive"] == "alive\n"
    assert out["left"] == [] and out["networks_left"] == []


@pytest.mark.usefixtures("compose_v2")
def test_a_killed_harbor_leaves_compose_containers_that_deskctl_reap_removes(agent_env: dict[str, str],
                                                                             tmp_path: Path, docker_sdk: Any) -> None:
    proc = subprocess.Popen([str(VENV / "bin" / "python"), str(PROBE), "crash", str(COMPOSE_TASK / "environment"),
                             str(tmp_path), "build_network=host", "compose_desktop=desktop",
                             'provider_options={"reaper": false}'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=agent_env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        session = json.loads(line)["session"]
        assert len(containers(docker_sdk, session)) == 2
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    # no watcher (reaper=false): the desktop and main's container stay until `deskctl reap` removes both
    assert len(containers(docker_sdk, session)) == 2
    reaped = deskctl("reap", "--json", env=agent_env, check=True)
    assert session in reaped.stdout
    wait_until(lambda: containers(docker_sdk, session) == [], "the compose containers to be reaped", 60)
    row = next(r for r in ledger_rows(agent_env) if r["id"] == session)
    assert row["status"] == "ended", row


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
