"""``deskctl up --provider ssh --host ...`` end to end, each command in its own process, against a real loopback sshd:
up gives a pinned, verified desktop that outlives the command; do, screenshot, exec and down reach it again from
the ledger; a refused host key is exit 3 with the code in the JSON error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from ssh._ssh_target import wait_until_released
from ssh._sshd import SshServer, keygen, processes_with

pytestmark = pytest.mark.ssh


def deskctl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_up_do_screenshot_exec_down(sshd: SshServer, ssh_env: dict[str, str], tmp_path: Path) -> None:
    env = {k: v for k, v in ssh_env.items() if k != "DESKCTL_SSH_HOST"}
    up = deskctl("up", "--provider", "ssh", "--host", sshd.target, "--geometry", "800x600", "--json",
                 env={**env, "DESKCTL_SSH_HOST": ""})
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    session_id = info["id"]
    assert (info["provider"], info["geometry"]) == ("ssh", "800x600")
    remote_dir = info["resource_id"].split(str(sshd.port), 1)[1]
    try:
        assert processes_with(remote_dir + "/Xauthority"), "the desktop must outlive `deskctl up`"
        assert deskctl("do", session_id, "click", "10", "20", env=env).returncode == 0
        shot = tmp_path / "shot.png"
        taken = deskctl("screenshot", session_id, "-o", str(shot), env=env)
        assert taken.returncode == 0, taken.stderr
        assert Image.open(shot).size == (800, 600)
        ran = deskctl("exec", session_id, "--", "xdpyinfo | grep dimensions", env=env)
        assert ran.returncode == 0 and "800x600 pixels" in ran.stdout
    finally:
        down = deskctl("down", session_id, env=env)
    assert down.returncode == 0, down.stderr
    wait_until_released(remote_dir)
    assert processes_with(remote_dir + "/Xauthority") == []
    assert not os.path.exists(remote_dir)


def test_up_refuses_a_changed_host_key_with_exit_3(sshd: SshServer, ssh_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "impostor")
    kind, blob = impostor.with_suffix(".pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts_changed"
    known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    up = deskctl("up", "--provider", "ssh", "--accept-new-host-key", "--json",
                 env={**ssh_env, "DESKCTL_SSH_KNOWN_HOSTS": str(known_hosts)})
    assert up.returncode == 3
    error = json.loads(up.stdout)["error"]
    assert error["code"] == "credentials.host_key_changed"
    assert error["provider"] == "ssh" and "ssh-keygen -R" in error["remedy"]


def test_up_takes_the_host_and_key_from_a_project_deskctl_toml(sshd: SshServer, ssh_env: dict[str, str],
                                                               tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "deskctl.toml").write_text(
        f'[providers.ssh]\nhost = "{sshd.target}"\nkey_file = "{ssh_env["DESKCTL_SSH_KEY_FILE"]}"\n'
        f'known_hosts = "{ssh_env["DESKCTL_SSH_KNOWN_HOSTS"]}"\n'
    )
    env = {"DESKCTL_SSH_HOST": "", "DESKCTL_SSH_KEY_FILE": "", "DESKCTL_SSH_KNOWN_HOSTS": "",
           "DESKCTL_SSH_REMOTE_DIR": ssh_env["DESKCTL_SSH_REMOTE_DIR"]}
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "ssh", "--geometry", "640x480",
                         "--json"], capture_output=True, text=True, timeout=120, cwd=project,
                        env={**os.environ, **env})
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    remote_dir = info["resource_id"].split(str(sshd.port), 1)[1]
    down = subprocess.run([sys.executable, "-m", "deskctl", "down", info["id"]], capture_output=True, text=True,
                          timeout=120, cwd=project, env={**os.environ, **env})
    assert down.returncode == 0, down.stderr
    wait_until_released(remote_dir)
    assert processes_with(remote_dir + "/Xauthority") == []
