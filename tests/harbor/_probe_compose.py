"""Run by .venv-harbor's Python, not collected by pytest: drives DeskctlEnvironment on a docker-compose task the way
Harbor's trial does (start, exec on main, the per-service operations, stop) and prints one JSON object for
tests/harbor/test_harbor_agents.py. Same command line as _probe.py, whose ``make`` and ``crash`` it reuses:

    python _probe_compose.py SCENARIO ENVIRONMENT_DIR WORK_DIR [key=value ...]
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _probe import crash, make, probe_args
from harbor.environments.base import ServiceOperationsUnsupportedError

from deskctl.integrations.harbor import DeskctlEnvironment


def _labels(session: str) -> list[dict[str, str]]:
    out = subprocess.run(["docker", "ps", "--all", "--filter", f"label=deskctl.session={session}",
                          "--format", "{{json .Labels}}"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        raw = json.loads(line)
        found.append(dict(item.split("=", 1) for item in raw.split(",") if "=" in item) if isinstance(raw, str)
                     else dict(raw))
    return found



def _with_leftovers(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with what the stopped session left: its labelled containers and the compose project's networks."""
    out["left"] = _labels(out["session"]) if "session" in out else None
    networks = subprocess.run(["docker", "network", "ls", "--filter", f"name={out.get('project', '-')}",
                               "--format", "{{.Name}}"], capture_output=True, text=True, check=True).stdout
    out["networks_left"] = networks.split()
    return out


async def sidecar(env: DeskctlEnvironment, work: Path) -> dict[str, Any]:
    """A desktop sidecar (compose_desktop=desktop): main is a compose container beside it."""
    out: dict[str, Any] = {}
    await env.start(force_build=False)
    try:
        assert env._desk is not None and env._compose is not None
        out["session"] = session = env._desk.id
        out["project"] = env._compose.name
        out["containers"] = sorted((c.get("deskctl.compose.service") or "desktop", c.get("deskctl.provider", ""),
                                    c.get("deskctl.owner", "")[:3])
                                   for c in _labels(session))
        # main's calls go to main's container, the desktop's to the deskctl desktop
        out["main_root"] = (await env.exec("test -S /tmp/.X11-unix/X1 && echo x || echo no-x; id -un")).stdout
        out["main_hosts"] = (await env.exec("getent hosts desktop main")).stdout
        banner = "exec 3<>/dev/tcp/desktop/5900 && head -c 12 <&3"
        for _ in range(50):  # the desktop's x11vnc (the service's own command, run on the desktop) takes a moment
            read = await env.exec(banner)
            if read.return_code == 0:
                break
            await asyncio.sleep(0.2)
        out["banner"] = read.stdout
        desk = await env.service_exec("pgrep -c -x Xvfb; test -S /tmp/.X11-unix/X1 && echo x1", service="desktop")
        out["desktop"] = desk.stdout.split()
        same = await env.service_exec("cat /etc/hostname", service="main")
        out["service_main_is_exec"] = same.stdout == (await env.exec("cat /etc/hostname")).stdout
        try:
            await env.service_exec("true", service="nope")
        except ServiceOperationsUnsupportedError as exc:
            out["unknown_service"] = str(exc)
        await env.upload_file(Path(__file__), "/app/probe.py")
        await env.download_file("/app/probe.py", work / "down" / "probe.py")
        out["roundtrip"] = (work / "down" / "probe.py").read_bytes() == Path(__file__).read_bytes()
        await env.service_download_file("/tmp/.deskctl-compose-desktop.log", work / "down" / "vnc.log",
                                        service="desktop")
        out["desktop_file"] = (work / "down" / "vnc.log").exists()
        await env.stop_service("main")
        state = subprocess.run(["docker", "ps", "--all", "--filter", f"label=deskctl.session={session}",
                                "--filter", "label=deskctl.compose.service=main", "--format", "{{.State}}"],
                               capture_output=True, text=True, check=True).stdout.split()
        out["main_after_stop_service"] = state
    finally:
        await env.stop(delete=True)
    return _with_leftovers(out)


async def main_desktop(env: DeskctlEnvironment, work: Path) -> dict[str, Any]:
    """The desktop is main (the default): Harbor's calls go to the desktop, a sidecar runs beside it."""
    out: dict[str, Any] = {}
    await env.start(force_build=False)
    try:
        assert env._desk is not None and env._compose is not None
        out["session"] = session = env._desk.id
        out["project"] = env._compose.name
        out["containers"] = sorted(c.get("deskctl.compose.service") or "desktop" for c in _labels(session))
        out["main"] = (await env.exec("test -S /tmp/.X11-unix/X1 && echo x1; getent hosts helper")).stdout
        helper = await env.service_exec("cat /proc/1/cmdline | tr '\\0' ' '; id -un", service="helper")
        out["helper"] = helper.stdout
        await env.stop_service("helper")
        out["after_stop"] = [c.get("deskctl.compose.service") for c in _labels(session)]
        out["desktop_alive"] = (await env.exec("echo alive")).stdout
    finally:
        await env.stop(delete=True)
    return _with_leftovers(out)


def main() -> None:
    scenario, environment_dir, work, kwargs = probe_args(sys.argv)
    runner = {"sidecar": sidecar, "main": main_desktop, "crash": crash}[scenario]
    result = asyncio.run(runner(make(environment_dir, work, kwargs), work))
    print(json.dumps(result), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
