"""File transfer of the ``ssh`` provider through deskctl next to the naive way, in one run, on one desktop on a real
OpenSSH server on a loopback port (started here, as in the tests: run as root after scripts/setup.d/40-ssh.sh).

* a 64 MiB file of random bytes: ``desk.upload`` / ``desk.download`` (SFTP on the session's one SSH connection,
  pipelined writes, bounded read-ahead) vs ``scp FILE host:PATH`` / ``scp host:PATH FILE``;
* a tree of 2000 small files (1-4 KiB) in 40 folders: ``desk.upload`` / ``desk.download`` of the folder (one tar
  stream on the same connection) vs ``scp -r``;
* rounds interleave the ways (one copy of each per round), each copy checked;
* scp both as a new connection per copy and with OpenSSH connection sharing (``ControlMaster``), the best a shell
  script can do. Checks: sha256 of the big file, the file count and bytes of the tree.

Prints medians and ratios (naive / deskctl; above 1 means deskctl is faster).

    .venv/bin/python bench/bench_ssh_files.py [--rounds 5] [--size-mib 64] [--files 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "ssh"))

from _common import row, timed


def make_tree(root: Path, files: int) -> int:
    """``files`` files of 1-4 KiB in 40 folders under ``root``; their total size."""
    rng = random.Random(5)
    total = 0
    for i in range(files):
        folder = root / f"dir{i % 40:02d}" / ("deep" if i % 3 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randint(1024, 4096))
        (folder / f"file{i:05d}.txt").write_bytes(data)
        total += len(data)
    return total


def tree_size(root: Path) -> tuple[int, int]:
    paths = [p for p in root.rglob("*") if p.is_file()]
    return len(paths), sum(p.stat().st_size for p in paths)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    from _sshd import SshServer, unavailable_reason

    reason = unavailable_reason()
    if reason:
        sys.exit(reason)
    if shutil.which("scp") is None:
        sys.exit("scp is not installed (openssh-client)")

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-ssh-files-"))
    os.chmod(work, 0o755)
    server = SshServer().start()
    known_hosts = server.write_known_hosts(work / "known_hosts")
    os.environ.update({"DESKCTL_HOME": str(work / "home"), "DESKCTL_SSH_HOST": server.target,
                       "DESKCTL_SSH_KEY_FILE": str(server.client_key), "DESKCTL_SSH_KNOWN_HOSTS": str(known_hosts)})
    os.environ.pop("SSH_AUTH_SOCK", None)
    common = ["-q", "-P", str(server.port), "-i", str(server.client_key), "-o", "BatchMode=yes",
              "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
    control = str(work / "ctl-%C")
    scp_plain = ["scp", *common, "-o", "ControlMaster=no"]
    scp_shared = ["scp", *common, "-o", "ControlMaster=auto", "-o", f"ControlPath={control}",
                  "-o", "ControlPersist=300"]
    where = f"{server.user}@127.0.0.1"
    home = Path("~" + server.user).expanduser()
    remote = home / "bench-files"

    big = work / "big.bin"
    with big.open("wb") as fh:
        for _ in range(args.size_mib):
            fh.write(os.urandom(1 << 20))
    big_sum = sha256(big)
    tree = work / "tree"
    tree_bytes = make_tree(tree, args.files)
    os.system(f"chmod -R a+rX {work}")
    import deskctl

    print(f"deskctl ssh file transfer benchmark over a loopback sshd: {args.size_mib} MiB file, {args.files}-file "
          f"tree ({tree_bytes // 1024} KiB); medians of {args.rounds}; (xN) = naive / deskctl\n")
    try:
        with deskctl.open_desktop("ssh", geometry="640x480") as desk:
            subprocess.run(["ssh", *[c if c != "-P" else "-p" for c in common], "-o", "ControlMaster=auto", "-o",
                            f"ControlPath={control}", "-o", "ControlPersist=300", where, "true"], check=True)
            desk.upload(big, f"{remote}/warm.bin")  # the SFTP session is opened once per desktop

            def fresh(path: Path) -> Callable[[], None]:
                return lambda: shutil.rmtree(path, ignore_errors=True)

            def verify_big(path: Path) -> None:
                if sha256(path) != big_sum:
                    raise SystemExit(f"{path}: wrong content")

            results: dict[str, dict[str, list[float]]] = {}

            def measure(name: str, ways: dict[str, Callable[[], object]], verify: Callable[[], None],
                        setup: Callable[[], None] = lambda: None) -> None:
                """One checked, untimed copy of each way, then ``rounds`` rounds of one timed copy of each way
                (interleaved, so a busy moment of the machine weighs on every way alike; ``setup`` untimed before
                every copy)."""
                for fn in ways.values():
                    setup()
                    fn()
                    verify()
                samples: dict[str, list[float]] = {label: [] for label in ways}
                for _ in range(args.rounds):
                    for label, fn in ways.items():
                        setup()
                        samples[label] += timed(fn, 1)
                        verify()
                results[name] = samples
                row(name, samples["deskctl"], {k: v for k, v in samples.items() if k != "deskctl"}, ratio_width=5)

            def scp(command: list[str], *paths: str) -> Callable[[], object]:
                return lambda: subprocess.run([*command, *paths], check=True)

            big_remote = f"{remote}/big.bin"
            measure("file up", {"deskctl": lambda: desk.upload(big, big_remote),
                                "scp": scp(scp_plain, str(big), f"{where}:{big_remote}"),
                                "shared-scp": scp(scp_shared, str(big), f"{where}:{big_remote}")},
                    lambda: verify_big(remote / "big.bin"))
            back = work / "back.bin"
            measure("file down", {"deskctl": lambda: desk.download(big_remote, back),
                                  "scp": scp(scp_plain, f"{where}:{big_remote}", str(back)),
                                  "shared-scp": scp(scp_shared, f"{where}:{big_remote}", str(back))},
                    lambda: verify_big(back))

            expected = tree_size(tree)

            def verify_tree(path: Path) -> None:
                if tree_size(path) != expected:
                    raise SystemExit(f"{path}: {tree_size(path)} files/bytes, expected {expected}")

            # scp -r into an existing folder copies INTO it: every copy of either way starts from no folder
            tree_remote = f"{remote}/tree"
            measure("tree up", {"deskctl": lambda: desk.upload(tree, tree_remote),
                                "scp -r": scp(scp_plain, "-r", str(tree), f"{where}:{tree_remote}"),
                                "shared-scp -r": scp(scp_shared, "-r", str(tree), f"{where}:{tree_remote}")},
                    lambda: verify_tree(remote / "tree"), setup=fresh(remote / "tree"))
            tree_back = work / "tree-back"
            measure("tree down", {"deskctl": lambda: desk.download(tree_remote, tree_back),
                                  "scp -r": scp(scp_plain, "-r", f"{where}:{tree_remote}", str(tree_back)),
                                  "shared-scp -r": scp(scp_shared, "-r", f"{where}:{tree_remote}", str(tree_back))},
                    lambda: verify_tree(tree_back), setup=fresh(tree_back))
            mib = args.size_mib
            import statistics

            for name in ("file up", "file down"):
                rates = {label: mib / statistics.median(s) for label, s in results[name].items()}
                print(f"{name:<11} " + "  ".join(f"{label} {rate:6.1f} MiB/s" for label, rate in rates.items()))
    finally:
        subprocess.run(["ssh", "-o", f"ControlPath={control}", "-O", "exit", where], capture_output=True)
        shutil.rmtree(remote, ignore_errors=True)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
