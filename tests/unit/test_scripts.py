"""The setup scripts' promises, run for real: apt-get waits (bounded, saying so) for another apt process's lock; the
Harbor step without a Python >= 3.12 is a loud skip, or a failure when DESKCTL_REQUIRE_HARBOR=1; starting the Docker
engine twice at once starts one daemon, and a daemon that is slow to answer is waited for, never doubled."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


# -- apt-get and its lock ------------------------------------------------------------------------------------------
@pytest.fixture
def private_apt(tmp_path: Path) -> dict[str, str]:
    """An apt whose state, cache, sources and dpkg database are folders here (APT_CONFIG): its locks are ours to
    hold, and the machine's apt is never touched. No sources: `apt-get update` only takes its lock."""
    if shutil.which("apt-get") is None:
        pytest.skip("needs apt-get (Debian)")
    for sub in ("state/lists/partial", "cache/archives/partial", "dpkg/updates", "sources.list.d", "log"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "dpkg" / "status").write_text("")
    (tmp_path / "sources.list").write_text("")
    conf = tmp_path / "apt.conf"
    conf.write_text(f'Dir::State "{tmp_path}/state"; Dir::State::status "{tmp_path}/dpkg/status"; '
                    f'Dir::Cache "{tmp_path}/cache"; Dir::Etc::sourcelist "{tmp_path}/sources.list"; '
                    f'Dir::Etc::sourceparts "{tmp_path}/sources.list.d"; Dir::Log "{tmp_path}/log";\n')
    return {**os.environ, "APT_CONFIG": str(conf)}


def _apt_get(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", "-c", '. scripts/lib/common.sh; apt_get "$@"', "apt_get", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_apt_get_waits_for_another_apt_process_to_release_its_lock(private_apt: dict[str, str],
                                                                     tmp_path: Path) -> None:
    with open(tmp_path / "state" / "lists" / "lock", "w") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)  # as apt does (fcntl): another apt-get update holds it
        proc = _apt_get(private_apt, "update", "-qq")
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "another apt process holds the lock" in first and "waiting up to 900s" in first, first
        assert proc.poll() is None  # still waiting while the lock is held
    _, err = proc.communicate(timeout=120)  # the lock is released: it goes on
    assert proc.returncode == 0, err
    assert "the apt lock is free; apt-get update went on" in err


def test_apt_get_gives_up_after_its_bound_and_says_why(private_apt: dict[str, str], tmp_path: Path) -> None:
    with open(tmp_path / "dpkg" / "lock-frontend", "w") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        proc = _apt_get({**private_apt, "DESKCTL_APT_LOCK_TIMEOUT": "1"}, "install", "-y", "-qq", "nothing-here")
        _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "giving up (DESKCTL_APT_LOCK_TIMEOUT)" in err, err


# -- Harbor's Python ---------------------------------------------------------------------------------------------
def _harbor_step(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPTS / "setup.d" / "50-harbor.sh")], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("lookup", ["named", "searched"])
def test_without_python_3_12_the_harbor_step_is_a_loud_skip_or_a_failure_when_required(lookup: str,
                                                                                         tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DESKCTL_HARBOR_PYTHON", "DESKCTL_REQUIRE_HARBOR")}
    if lookup == "named":  # an interpreter that is not there
        env["DESKCTL_HARBOR_PYTHON"] = str(tmp_path / "python3.12")
    else:  # a PATH with no python3.12, python3.13 nor pyenv: stock Debian 12
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("bash", "cat", "dirname", "sha256sum", "cut", "rm", "touch", "cmp", "python3"):
            found = shutil.which(tool, path="/usr/bin:/bin")
            if found:
                (bin_dir / tool).symlink_to(found)
        env["PATH"] = str(bin_dir)
    skipped = _harbor_step(env)
    assert skipped.returncode == 3, skipped.stderr
    assert "needs Python >= 3.12" in skipped.stderr and "its tests will be skipped" in skipped.stderr
    assert "DESKCTL_HARBOR_PYTHON" in skipped.stderr
    required = _harbor_step({**env, "DESKCTL_REQUIRE_HARBOR": "1"})
    assert required.returncode == 1, required.stderr
    assert "DESKCTL_REQUIRE_HARBOR=1" in required.stderr


def test_scripts_test_leaves_the_harbor_tests_out_with_one_line_and_ci_requires_them() -> None:
    text = (SCRIPTS / "test").read_text()
    assert "--ignore=tests/harbor" in text and "HARBOR TESTS SKIPPED" in text
    assert "export DESKCTL_REQUIRE_HARBOR=1" in (ROOT / ".ci" / "run").read_text()


# -- starting the Docker engine ----------------------------------------------------------------------------------
@pytest.fixture
def private_engine(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The setup's engine step pointed at an engine of this test's own: socket, data and exec roots, pid, lock and
    log files here, a bridge of its own, no iptables, its own containerd namespace. Whatever it started is stopped
    after. Never ``--bridge=none``: a dockerd started so deletes the host's ``docker0``, which the main engine's
    containers need (seen: every container start on the shared engine failed until docker0 was made again)."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip("needs root and dockerd (scripts/setup.d/20-docker.sh)")
    short = Path("/run") / f"deskctl-t{os.getpid()}"  # a unix socket path must stay short
    short.mkdir()
    bridge = f"dkt{os.getpid() % 10**9}"  # an interface name has at most 15 characters
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, timeout=60)
    subprocess.run(["ip", "addr", "add", "172.30.98.1/24", "dev", bridge], check=True, timeout=60)
    env = {**os.environ,
           "DESKCTL_DOCKERD_SOCKET": str(short / "docker.sock"), "DESKCTL_DOCKERD_DATA_ROOT": str(tmp_path / "data"),
           "DESKCTL_DOCKERD_EXEC_ROOT": str(short / "exec"), "DESKCTL_DOCKERD_PIDFILE": str(short / "docker.pid"),
           "DESKCTL_DOCKERD_LOCK": str(tmp_path / "lock"), "DESKCTL_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
           "DESKCTL_DOCKERD_FLAGS": f"--bridge {bridge} --iptables=false --ip6tables=false --storage-driver=vfs "
                                    f"--containerd-namespace deskctl-t{os.getpid()} "
                                    f"--containerd-plugins-namespace deskctl-t{os.getpid()}-plugins",
           "DESKCTL_DOCKER_ENGINE_ONLY": "1", "DESKCTL_STARTED": str(tmp_path / "started")}
    env.pop("DOCKER_HOST", None)
    try:
        yield env
    finally:
        subprocess.run(["bash", "-c", '. scripts/lib/common.sh; . scripts/lib/engine.sh; stop_started "$1"', "stop",
                        env["DESKCTL_STARTED"]], cwd=ROOT, timeout=180, capture_output=True)
        shutil.rmtree(short, ignore_errors=True)
        subprocess.run(["ip", "link", "delete", bridge, "type", "bridge"], timeout=60, capture_output=True)
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def _engine_step(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", str(SCRIPTS / "setup.d" / "20-docker.sh")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _daemons(data_root: str) -> list[int]:
    out = subprocess.run(["bash", "-c", '. scripts/lib/engine.sh; dockerd_pids_on_data_root "$1"', "pids", data_root],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.docker
@pytest.mark.slow
def test_starting_the_engine_twice_at_once_starts_one_daemon_and_a_slow_one_is_not_doubled(
        private_engine: dict[str, str]) -> None:
    env = private_engine
    first, second = _engine_step(env), _engine_step(env)
    results = [(p.wait(timeout=600), p.communicate()[1]) for p in (first, second)]
    assert [code for code, _ in results] == [0, 0], results
    daemons = _daemons(env["DESKCTL_DOCKERD_DATA_ROOT"])
    assert len(daemons) == 1, daemons
    (pid,) = daemons
    assert Path(env["DESKCTL_STARTED"]).read_text().split() == ["dockerd", str(pid)]  # scripts/test stops it
    assert os.getsid(pid) == pid  # a session of its own: a kill of the starter's process group does not reach it
    assert sum("starting dockerd" in err for _, err in results) == 1, results
    # the daemon is there but does not answer (stopped, as a loaded machine can make it): waited for, not doubled
    os.kill(pid, signal.SIGSTOP)
    try:
        slow = subprocess.run(["bash", str(SCRIPTS / "setup.d" / "20-docker.sh")], cwd=ROOT,
                              env={**env, "DESKCTL_DOCKERD_WAIT": "3"}, capture_output=True, text=True, timeout=300)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert slow.returncode == 1, slow.stderr
    assert f"a dockerd runs (pid {pid}) but does not answer yet" in slow.stderr
    assert "not starting a second daemon" in slow.stderr
    assert _daemons(env["DESKCTL_DOCKERD_DATA_ROOT"]) == [pid]
    # answering again: the step is a no-op
    again = subprocess.run(["bash", str(SCRIPTS / "setup.d" / "20-docker.sh")], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "starting dockerd" not in again.stderr, again.stderr
    assert _daemons(env["DESKCTL_DOCKERD_DATA_ROOT"]) == [pid]
