"""Benchmark: Desktop.upload / Desktop.download next to the naive copy of each provider, in one run.

Two workloads, each copied to the desktop and back: one 64 MiB file of random bytes, and a tree of 2000 small
files (1-4 KiB, in 40 folders). Per target, deskctl's way and the naive way copy the same data to and from the
same desktop, alternating round by round; every copy is checked (sizes) once before anything is timed. The file
is also uploaded over an existing copy each round ("up-over": each way to a path of its own), which a fresh path
does not show (a file put in place by a rename over the old one was slower there).

    .venv/bin/python bench/bench_files.py [--rounds N] [--targets docker,docker-cli,xvfb,ssh]

``docker-cli`` times ``deskctl cp`` and ``docker cp`` as whole processes (target: within 1.1x); the others the
library's ``upload``/``download`` (target: within 1.0x the naive tool). Each ``deskctl`` process runs as installed
code does, with ``.pyc`` files (``PYTHONDONTWRITEBYTECODE`` is dropped; the checked copies before the timed ones
write them): without them every call compiles deskctl again, which is not what a user pays.

Prints medians (milliseconds), throughput (MiB/s) and deskctl's time over the naive way's ("deskctl/naive
0.50": deskctl takes half as long) with its target. A target is one entry of :data:`TARGETS`: a function that
opens a desktop and yields a :class:`Ways` (deskctl's and the naive way's upload and download, a scratch folder
on the desktop); adding a provider is one such function and one line in the table. ``ssh`` starts its own
loopback sshd (run as root after scripts/setup.d/40-ssh.sh) and compares with ``scp -r`` over a shared OpenSSH
connection.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import median_ms, timed

BIG_FILE_MIB = 64
TREE_FILES = 2000
TREE_FOLDERS = 40

Copy = Callable[[Path, str], None]  # (local path, remote path) -> None
Fetch = Callable[[str, Path], None]  # (remote path, local path) -> None


@dataclass
class Ways:
    """deskctl's and the naive way's copies for one open desktop."""

    naive_label: str  # what the naive way is called in the table ("docker cp")
    upload: Copy
    download: Fetch
    naive_upload: Copy
    naive_download: Fetch
    scratch: str  # a folder on the desktop both ways may write under
    remove: Callable[[str], None]  # removes a path on the desktop (between rounds, not timed)
    size: Callable[[str], int]  # bytes of the files under a path on the desktop (the check)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed: {done.stderr.strip()}")


@contextlib.contextmanager
def _desk_ways(desk: Any, naive_label: str, naive_upload: Copy, naive_download: Fetch) -> Iterator[Ways]:
    """The ways of ``desk``, with a scratch folder of its own on the desktop, removed afterwards (the xvfb and ssh
    targets share this host's /tmp as different users: a name of this process's alone collided)."""
    made = desk.exec("mktemp -d /tmp/deskctl-bench-files-XXXXXXXX")
    assert made.exit_code == 0, made.stderr
    scratch = made.stdout.strip()

    def remove(path: str) -> None:
        desk.exec(f"rm -rf -- '{path}'", timeout=120)

    def size(path: str) -> int:
        out = desk.exec(f"find '{path}' -type f -printf '%s\\n'", timeout=120).stdout
        return sum(int(n) for n in out.split())

    try:
        yield Ways(naive_label, desk.upload, desk.download, naive_upload, naive_download, scratch, remove, size)
    finally:
        remove(scratch)


@contextlib.contextmanager
def docker_target() -> Iterator[Ways]:
    """The docker provider (the Engine API's archive endpoints) next to the ``docker cp`` CLI."""
    import deskctl

    with deskctl.open_desktop("docker", geometry="640x480") as desk:
        container = str(desk.handle.resource_id)  # type: ignore[union-attr]

        def cp_up(local: Path, remote: str) -> None:
            _run(["docker", "cp", str(local), f"{container}:{remote}"])

        def cp_down(remote: str, local: Path) -> None:
            _run(["docker", "cp", f"{container}:{remote}", str(local)])

        with _desk_ways(desk, "docker cp", cp_up, cp_down) as ways:
            yield ways


@contextlib.contextmanager
def docker_cli_target() -> Iterator[Ways]:
    """``deskctl cp`` as a whole process (a detached docker desktop, ``deskctl up``) next to ``docker cp`` as a
    whole process: what a shell script pays per copy, interpreter start and imports included."""
    import deskctl

    deskctl_bin = [sys.executable, "-m", "deskctl"]
    session_id = subprocess.run([*deskctl_bin, "up", "--provider", "docker", "--geometry", "640x480"],
                                capture_output=True, text=True, check=True).stdout.strip()
    try:
        desk = deskctl.attach(session_id)
        container = str(desk.handle.resource_id)  # type: ignore[union-attr]

        def cp_up(local: Path, remote: str) -> None:
            _run(["docker", "cp", str(local), f"{container}:{remote}"])

        def cp_down(remote: str, local: Path) -> None:
            _run(["docker", "cp", f"{container}:{remote}", str(local)])

        def deskctl_up(local: Path, remote: str) -> None:
            _run([*deskctl_bin, "cp", str(local), f"{session_id}:{remote}"])

        def deskctl_down(remote: str, local: Path) -> None:
            _run([*deskctl_bin, "cp", f"{session_id}:{remote}", str(local)])

        with _desk_ways(desk, "docker cp", cp_up, cp_down) as ways:
            ways.upload, ways.download = deskctl_up, deskctl_down
            yield ways
        desk.release()
    finally:
        subprocess.run([*deskctl_bin, "down", session_id], capture_output=True)


@contextlib.contextmanager
def xvfb_target() -> Iterator[Ways]:
    """The xvfb provider (the desktop's files are this host's) next to ``cp -r``."""
    import deskctl

    with deskctl.open_desktop("xvfb", geometry="640x480") as desk:

        def cp_up(local: Path, remote: str) -> None:
            _run(["cp", "-r", str(local), remote])

        def cp_down(remote: str, local: Path) -> None:
            _run(["cp", "-r", remote, str(local)])

        with _desk_ways(desk, "cp -r", cp_up, cp_down) as ways:
            yield ways


@contextlib.contextmanager
def ssh_target() -> Iterator[Ways]:
    """The ssh provider (SFTP for a file, one tar stream for a folder, on the session's one connection) next to
    ``scp`` with OpenSSH connection sharing (the best a script can do: no handshake per copy), against a real
    loopback sshd (root, after scripts/setup.d/40-ssh.sh)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "ssh"))
    from _sshd import SshServer, unavailable_reason

    import deskctl

    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"ssh: {reason}")
    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-files-ssh-"))
    server = SshServer().start()
    known_hosts = server.write_known_hosts(work / "known_hosts")
    saved = {k: os.environ.get(k) for k in ("DESKCTL_SSH_HOST", "DESKCTL_SSH_KEY_FILE", "DESKCTL_SSH_KNOWN_HOSTS",
                                            "SSH_AUTH_SOCK")}
    os.environ.update({"DESKCTL_SSH_HOST": server.target, "DESKCTL_SSH_KEY_FILE": str(server.client_key),
                       "DESKCTL_SSH_KNOWN_HOSTS": str(known_hosts)})
    os.environ.pop("SSH_AUTH_SOCK", None)
    control = str(work / "ctl-%C")
    options = ["-q", "-i", str(server.client_key), "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known_hosts}",
               "-o", "StrictHostKeyChecking=yes", "-o", "ControlMaster=auto", "-o", f"ControlPath={control}",
               "-o", "ControlPersist=300"]
    where = f"{server.user}@127.0.0.1"
    try:
        _run(["ssh", "-p", str(server.port), *options, where, "true"])  # the shared connection, made once
        with deskctl.open_desktop("ssh", geometry="640x480") as desk:

            def scp_up(local: Path, remote: str) -> None:
                _run(["scp", "-P", str(server.port), *options, "-r", str(local), f"{where}:{remote}"])

            def scp_down(remote: str, local: Path) -> None:
                _run(["scp", "-P", str(server.port), *options, "-r", f"{where}:{remote}", str(local)])

            with _desk_ways(desk, "scp", scp_up, scp_down) as ways:
                yield ways
    finally:
        subprocess.run(["ssh", "-o", f"ControlPath={control}", "-O", "exit", where], capture_output=True)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: name -> a function that opens a desktop and yields its Ways (closing it afterwards)
TARGETS: dict[str, Callable[[], contextlib.AbstractContextManager[Ways]]] = {
    "docker": docker_target,
    "docker-cli": docker_cli_target,
    "xvfb": xvfb_target,
    "ssh": ssh_target,
}


def make_workloads(root: Path) -> dict[str, tuple[Path, int]]:
    """name -> (local path, total bytes)."""
    rng = random.Random(14)
    root.mkdir(parents=True, exist_ok=True)
    big = root / "big.bin"
    with open(big, "wb") as fh:
        for _ in range(BIG_FILE_MIB):
            fh.write(rng.randbytes(2**20))
    tree = root / "tree"
    total = 0
    for i in range(TREE_FILES):
        folder = tree / f"d{i % TREE_FOLDERS:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = rng.randbytes(rng.randint(1024, 4096))
        (folder / f"f{i:04d}.txt").write_bytes(body)
        total += len(body)
    return {f"{BIG_FILE_MIB} MiB file": (big, BIG_FILE_MIB * 2**20), f"{TREE_FILES} files": (tree, total)}


def _local_size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench_target(name: str, ways: Ways, workloads: dict[str, tuple[Path, int]], rounds: int, tmp: Path) -> None:
    counter = iter(range(10**9))

    def fresh_remote() -> str:
        return f"{ways.scratch}/r{next(counter)}"

    def fresh_local() -> Path:
        return tmp / f"back{next(counter)}"

    for label, (local, total) in workloads.items():
        # the remote copy every download reads, made once; each upload goes to a new path that is removed after
        source = fresh_remote()
        ways.upload(local, source)
        for what, check in (("deskctl", ways.upload), (ways.naive_label, ways.naive_upload)):
            target = fresh_remote()
            check(local, target)
            if ways.size(target) != total:
                raise SystemExit(f"{name}: {what} uploaded {ways.size(target)} bytes of {total}")
            ways.remove(target)
        for what, fetch in (("deskctl", ways.download), (ways.naive_label, ways.naive_download)):
            back = fresh_local()
            fetch(source, back)
            if _local_size(back) != total:
                raise SystemExit(f"{name}: {what} downloaded {_local_size(back)} bytes of {total}")
            shutil.rmtree(back) if back.is_dir() else back.unlink()

        # a file is also uploaded over the last round's copy: each way to a path of its own, made here first
        # (a copy that replaces a file may pay what a fresh one does not, as a rename over it on ext4 did)
        over = {"deskctl": fresh_remote(), "naive": fresh_remote()} if local.is_file() else {}
        for what, copy in (("deskctl", ways.upload), ("naive", ways.naive_upload)):
            if what in over:
                copy(local, over[what])
        samples: dict[str, dict[str, list[float]]] = {"upload": {}, "download": {}, "over": {}}
        for turn in range(rounds):  # alternate, so that a busy moment of the machine hits both ways alike
            # and which way goes first turns each round: the first download follows the uploads' writes to disk
            flip = slice(None, None, -1 if turn % 2 else 1)
            for what, copy in (("deskctl", ways.upload), ("naive", ways.naive_upload))[flip]:
                target = fresh_remote()
                samples["upload"].setdefault(what, []).extend(timed(lambda: copy(local, target), 1))  # noqa: B023
                ways.remove(target)
                if over:
                    samples["over"].setdefault(what, []).extend(
                        timed(lambda: copy(local, over[what]), 1))  # noqa: B023
            for what, fetch in (("deskctl", ways.download), ("naive", ways.naive_download))[flip]:
                back = fresh_local()
                samples["download"].setdefault(what, []).extend(timed(lambda: fetch(source, back), 1))  # noqa: B023
                shutil.rmtree(back) if back.is_dir() else back.unlink()
        ways.remove(source)
        for path in over.values():
            ways.remove(path)
        target = 1.1 if name == "docker-cli" else 1.0
        for direction in ("upload", "over", "download") if over else ("upload", "download"):
            ours, naive = median_ms(samples[direction]["deskctl"]), median_ms(samples[direction]["naive"])
            mib, shown = total / 2**20, "up-over" if direction == "over" else direction
            print(f"{name:<11}{shown:<9}{label:<14} deskctl {ours:9.1f} ms {mib / (ours / 1000):8.1f} MiB/s"
                  f"   {ways.naive_label:<10}{naive:9.1f} ms {mib / (naive / 1000):8.1f} MiB/s   "
                  f"deskctl/naive {ours / naive:.2f} (target {target:.1f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each copy")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    args = parser.parse_args()
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    os.environ.setdefault("DESKCTL_HOME", tempfile.mkdtemp(prefix="deskctl-bench-"))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the deskctl processes run as installed: with .pyc files
    with tempfile.TemporaryDirectory(prefix="deskctl-bench-files-") as tmp:
        root = Path(tmp)
        workloads = make_workloads(root / "data")
        print(f"upload and download medians over {args.rounds} rounds; deskctl/naive = deskctl's time over the "
              f"naive way's (under 1: deskctl is faster); load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores")
        for name in names:
            with TARGETS[name]() as ways:
                bench_target(name, ways, workloads, args.rounds, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
