"""Run by .venv-harbor's Python (Harbor needs >= 3.12), not collected by pytest: drives DeskctlEnvironment the way
Harbor's trial does, on a real docker desktop, and prints one JSON object for tests/harbor/test_harbor.py to check.

    python _probe.py SCENARIO ENVIRONMENT_DIR WORK_DIR [key=value ...]   (extra args: --ek options, JSON values)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from harbor.models.task.config import EnvironmentConfig, NetworkMode, NetworkPolicy
from harbor.models.trial.paths import TrialPaths

from deskctl.integrations.harbor import DeskctlEnvironment


def make(environment_dir: Path, work: Path, kwargs: dict[str, Any]) -> DeskctlEnvironment:
    trial = TrialPaths(trial_dir=work / "trial")
    trial.mkdir()
    network = NetworkMode(kwargs.pop("task_network", NetworkMode.NO_NETWORK.value))
    memory_mb = kwargs.pop("task_memory_mb", None)
    return DeskctlEnvironment(
        environment_dir=environment_dir, environment_name="probe", session_id="probe__x__env", trial_paths=trial,
        task_env_config=EnvironmentConfig(network_mode=network, memory_mb=memory_mb),
        network_policy=NetworkPolicy(network_mode=network),
        logger=logging.getLogger("probe"), **kwargs,
    )


async def mapping(env: DeskctlEnvironment, work: Path) -> dict[str, Any]:
    """exec options and files, as Harbor's agents and verifier use them."""
    out: dict[str, Any] = {}
    await env.start(force_build=False)
    try:
        assert env._desk is not None
        out["session"] = env._desk.id
        out["network"] = env._desk.handle.data.get("network") if env._desk.handle else None
        r = await env.exec("echo out; echo err >&2; exit 3")
        out["streams"] = [r.stdout, r.stderr, r.return_code]
        r = await env.exec("pwd; echo $FOO; id -un", cwd="/tmp", env={"FOO": "a b'c"})
        out["cwd_env_user"] = (r.stdout or "").split("\n")
        out["root"] = (await env.exec("id -u", user="root")).stdout
        out["uid0"] = (await env.exec("id -u", user=0)).stdout
        out["bash"] = (await env.exec("set -o pipefail; false | true; echo $?")).stdout
        out["timeout"] = (await env.exec("sleep 30", timeout_sec=1)).return_code
        with env.with_default_user("root"):
            out["default_user"] = (await env.exec("id -un")).stdout
        src = work / "up"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "run.sh").write_text("#!/bin/bash\necho ran as $(id -un)\n")
        (src / "top.txt").write_text("top\n")
        await env.upload_dir(src, "/tests")  # made by start() as root, like /solution
        assert env._desk is not None  # deskctl itself, without the environment's fallback: root cannot chmod
        out["chmod_root_alone"] = (await env._desk.exec("chmod +x /tests/sub/run.sh", user="root")).exit_code
        out["hardened"] = env.options.hardened
        chmod = await env.exec("chmod +x /tests/sub/run.sh", user="root")
        out["chmod"] = chmod.return_code
        out["run"] = (await env.exec("/tests/sub/run.sh")).stdout
        out["is_dir"] = [await env.is_dir("/tests/sub"), await env.is_file("/tests/top.txt"),
                         await env.is_dir("/tests/top.txt")]
        await env.upload_file(src / "top.txt", "/home/desk/deep/er/copy.txt")
        await env.download_file("/home/desk/deep/er/copy.txt", work / "down" / "copy.txt")
        await env.download_dir("/tests", work / "down" / "tests")
        out["downloaded"] = sorted(str(p.relative_to(work / "down")) for p in (work / "down").rglob("*") if p.is_file())
        out["dirs"] = (await env.exec("stat -c '%a %U %n' /logs/verifier /solution /tests", user="root")).stdout
        out["display"] = (await env.exec("xdpyinfo | awk '/dimensions:/ {print $2}'")).stdout
        # Harbor's log callback gets the output as it comes: the first line before the command ends
        seen: list[tuple[str, str]] = []
        first_seen_before_end: list[bool] = []

        async def on_output(text: str, stream: str) -> None:
            seen.append((text, stream))

        with env.scoped_output_callback(on_output):
            stream_run = asyncio.ensure_future(env.exec("echo one; echo two >&2; "
                                                        "while [ ! -e /tmp/go ]; do sleep 0.1; done; echo three"))
            while not seen:
                await asyncio.sleep(0.05)
            first_seen_before_end.append(not stream_run.done())
            await asyncio.to_thread(env._desk.sync.exec, "touch /tmp/go")
            streamed = await stream_run
        out["streamed"] = {"chunks": "".join(t for t, s in seen if s == "stdout"),
                           "errors": "".join(t for t, s in seen if s == "stderr"),
                           "before_end": first_seen_before_end, "result": streamed.stdout}
        # Harbor's timeout cancels a call mid-command: the command must end, or every later call waits behind it
        running = asyncio.ensure_future(env.exec("touch /tmp/started; sleep 100000"))
        while (await asyncio.to_thread(env._desk.sync.exec, "test -e /tmp/started")).exit_code != 0:
            await asyncio.sleep(0.2)
        running.cancel()
        try:
            await running
        except asyncio.CancelledError:
            out["cancelled"] = True
        left = "pgrep -f 'sleep 10000[0]' || echo none; ls /tmp/.deskctl-harbor-* | wc -l"  # [0]: not pgrep's own line
        out["after_cancel"] = (await env.exec(left)).stdout
    finally:
        await env.stop(delete=True)
    out["stopped"] = env._desk is None
    return out


async def crash(env: DeskctlEnvironment, work: Path) -> dict[str, Any]:
    """Start, say which desktop, then wait to be killed (the test sends SIGKILL: no stop() runs)."""
    await env.start(force_build=False)
    assert env._desk is not None
    print(json.dumps({"session": env._desk.id}), flush=True)
    await asyncio.sleep(600)
    return {}


async def start_only(env: DeskctlEnvironment, work: Path) -> dict[str, Any]:
    try:
        await env.start(force_build=False)
    except Exception as exc:
        return {"error": type(exc).__name__, "code": getattr(exc, "code", None), "message": str(exc)}
    assert env._desk is not None and env._desk.handle is not None
    network, memory = env._desk.handle.data.get("network"), env._desk.handle.data.get("memory")
    who = await env.exec("id -un; echo ${DISPLAY:-unset}; ls /tmp/.X11-unix")
    import docker

    client = docker.from_env()
    attrs = client.api.inspect_container(env._desk.handle.resource_id)
    client.close()
    await env.stop(delete=True)
    return {"started": True, "network": network, "memory": memory, "user": who.stdout.split(),
            "cap_drop": attrs["HostConfig"].get("CapDrop"), "image": attrs["Config"]["Image"]}


def preflight(kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        DeskctlEnvironment.preflight(kwargs)
    except SystemExit as exc:
        return {"exit": str(exc.code)}
    except ValueError as exc:
        return {"value_error": str(exc)}
    return {"ok": True}


def probe_args(argv: list[str]) -> tuple[str, Path, Path, dict[str, Any]]:
    """SCENARIO ENVIRONMENT_DIR WORK_DIR [key=value ...]: the scenario, the two folders and the --ek options (each
    value read as JSON when it is JSON, else as the text)."""
    kwargs: dict[str, Any] = {}
    for item in argv[4:]:
        key, _, raw = item.partition("=")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw
    return argv[1], Path(argv[2]), Path(argv[3]), kwargs


def main() -> None:
    scenario, environment_dir, work, kwargs = probe_args(sys.argv)
    if scenario == "preflight":
        result = preflight(kwargs)
    else:
        runner = {"mapping": mapping, "crash": crash, "start": start_only}[scenario]
        try:
            env = make(environment_dir, work, kwargs)
        except ValueError as exc:  # Harbor's refusal of a task definition (_validate_definition)
            print(json.dumps({"error": "ValueError", "message": str(exc)}), flush=True)
            os._exit(0)
        result = asyncio.run(runner(env, work))
    print(json.dumps(result), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
