"""`deskctl cp` against a real docker desktop, as a script runs it: whole processes through the real entry point.

The plain form (``deskctl cp SRC DEST [--json]``) runs without click (cli/_cp.py): the same output, exit code and
copy as through click for the same argv, and no click import; anything else goes to click as before. The copy's
own paths (a file's tar prepared by hand, a file's download written straight from the response) keep contents,
modes, owners, long and non-ASCII names, empty files and symlinks as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _cli import FAST_RUNNER as _RUNNER

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deskctl-home-files-cli")


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "DESKCTL_HOME": str(home), **extra}


@pytest.fixture(scope="module")
def sid(home: Path) -> Iterator[str]:
    """One detached docker desktop for the module (a copy does not change what the other tests need)."""
    if not Path("/var/run/docker.sock").exists() and not os.environ.get("DOCKER_HOST"):
        pytest.skip("no Docker engine")
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "docker", "--geometry", "320x240"],
                        capture_output=True, text=True, timeout=240, env=_env(home))
    assert up.returncode == 0, up.stderr
    session = up.stdout.strip()
    try:
        yield session
    finally:
        subprocess.run([sys.executable, "-m", "deskctl", "down", session], capture_output=True, timeout=240,
                       env=_env(home))


def _run(args: list[str], *, fast: bool, home: Path, tmp_path: Path, cwd: Path | None = None) -> dict[str, Any]:
    modules = tmp_path / f"modules-{uuid.uuid4().hex[:8]}.json"
    proc = subprocess.run([sys.executable, "-c", _RUNNER, "fast" if fast else "click", *args],
                          capture_output=True, text=True, timeout=240, cwd=cwd,
                          env=_env(home, DESKCTL_TEST_MODULES=str(modules)))
    return {"exit": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
            "modules": json.loads(modules.read_text())}


def _both(args: list[str], home: Path, tmp_path: Path,
          click_args: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The argv without click, then it (or ``click_args``, the same copy to another place) through click; their
    exit, stdout and stderr must be the same (the other place read as the first)."""
    fast = _run(args, fast=True, home=home, tmp_path=tmp_path)
    through_click = _run(click_args or args, fast=False, home=home, tmp_path=tmp_path)
    for key in ("stdout", "stderr"):
        for mine, theirs in zip(args, click_args or args, strict=True):
            through_click[key] = through_click[key].replace(theirs, mine)
    assert {k: fast[k] for k in ("exit", "stdout", "stderr")} == \
        {k: through_click[k] for k in ("exit", "stdout", "stderr")}, (args, fast, through_click)
    assert "click" in through_click["modules"]
    return fast, through_click


def _on_desktop(home: Path, sid: str, line: str) -> str:
    done = subprocess.run([sys.executable, "-m", "deskctl", "exec", sid, "--", line], capture_output=True,
                          text=True, timeout=120, env=_env(home))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_file_up_and_down_is_the_same_without_click(sid: str, home: Path, tmp_path: Path) -> None:
    remote = f"/tmp/files-cli-{uuid.uuid4().hex[:8]}"
    local = tmp_path / "payload ünï.bin"
    body = os.urandom(3 * 2**20 + 17)
    local.write_bytes(body)
    local.chmod(0o750)
    back = tmp_path / "back"
    back.mkdir()
    for args in (["cp", str(local), f"{sid}:{remote}/in/"],  # into a folder (made), under the file's name
                 ["cp", str(local), f"{sid}:{remote}/named.bin", "--json"],
                 ["cp", f"{sid}:{remote}/named.bin", str(back)],  # into an existing folder here
                 ["cp", "--json", f"{sid}:{remote}/in/{local.name}", str(back / "deeper" / "copy.bin")]):
        fast, _ = _both(args, home, tmp_path)
        assert fast["exit"] == 0, fast["stderr"]
        assert "click" not in fast["modules"], args
    assert json.loads(_run(["cp", str(local), f"{sid}:{remote}/named.bin", "--json"], fast=True, home=home,
                           tmp_path=tmp_path)["stdout"]) == {
        "id": sid, "source": str(local), "destination": f"{sid}:{remote}/named.bin", "files": 1, "bytes": len(body)}
    seen = _on_desktop(home, sid, f"cd {remote} && stat -c '%U:%G %a %s' in/'{local.name}' named.bin && "
                                  f"sha256sum named.bin").splitlines()
    assert seen[:2] == [f"desk:desk 750 {len(body)}"] * 2, seen
    assert seen[2].split()[0] == hashlib.sha256(body).hexdigest()
    for copy in (back / "named.bin", back / "deeper" / "copy.bin"):
        assert copy.read_bytes() == body
        assert copy.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in back.iterdir()) == ["deeper", "named.bin"]  # nothing partial left beside


def test_a_tree_up_and_down_is_the_same_without_click(sid: str, home: Path, tmp_path: Path) -> None:
    remote = f"/tmp/files-cli-{uuid.uuid4().hex[:8]}"
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("a\n")
    (tree / "empty").write_bytes(b"")
    os.symlink("sub/a.txt", tree / "link")
    for args, click_args in ((["cp", str(tree), f"{sid}:{remote}/"], None),
                             (["cp", f"{sid}:{remote}/tree", str(tmp_path / "back")],  # a path that is not there
                              ["cp", f"{sid}:{remote}/tree", str(tmp_path / "back-click")])):
        fast, _ = _both(args, home, tmp_path, click_args)
        assert fast["exit"] == 0 and "click" not in fast["modules"], fast["stderr"]
    assert fast["stderr"] == f"copied {sid}:{remote}/tree to {tmp_path / 'back'} (2 files, 2 bytes)\n"
    assert (tmp_path / "back" / "sub" / "a.txt").read_text() == "a\n"
    assert os.readlink(tmp_path / "back" / "link") == "sub/a.txt"
    assert (tmp_path / "back" / "empty").read_bytes() == b""


@pytest.mark.parametrize("case", ["missing here", "missing there", "unknown session", "neither", "both",
                                  "file onto a folder", "under /proc", "empty remote path", "down into /proc",
                                  "down under /sys"])
def test_refusals_are_the_same_without_click(case: str, sid: str, home: Path, tmp_path: Path) -> None:
    local = tmp_path / "f.txt"
    local.write_text("x\n")
    remote = f"/tmp/files-cli-{uuid.uuid4().hex[:8]}"
    _on_desktop(home, sid, f"mkdir -p {remote}/folder")
    args = {"missing here": ["cp", str(tmp_path / "nope"), f"{sid}:{remote}/"],
            "missing there": ["cp", f"{sid}:{remote}/nope", str(tmp_path / "out"), "--json"],
            "unknown session": ["cp", str(local), "dk-nosuchone0:/tmp/x"],
            "neither": ["cp", str(local), str(tmp_path / "other")],
            "both": ["cp", f"{sid}:/tmp/a", f"{sid}:/tmp/b"],
            "file onto a folder": ["cp", str(local), f"{sid}:{remote}/folder", "--json"],
            "under /proc": ["cp", str(local), f"{sid}:/proc/x"],
            "empty remote path": ["cp", str(local), f"{sid}:"],
            # this machine's side cannot be written: it was an internal error (exit 1) with a traceback's words
            "down into /proc": ["cp", f"{sid}:/etc/hostname", "/proc/deskctl-test-x", "--json"],
            "down under /sys": ["cp", f"{sid}:/etc/hostname", "/sys/deskctl-test/x"]}[case]
    fast, _ = _both(args, home, tmp_path)
    assert fast["exit"] == 2, fast
    assert "click" not in fast["modules"]
    assert "Traceback" not in fast["stderr"] and "internal" not in fast["stderr"] + fast["stdout"]
    code = {"missing here": "usage.no_such_file", "missing there": "usage.no_such_file",
            "unknown session": "usage.not_found", "neither": "usage.invalid", "both": "usage.invalid",
            "file onto a folder": "usage.bad_path", "under /proc": "usage.bad_path",
            "empty remote path": "usage.invalid", "down into /proc": "usage.bad_path",
            "down under /sys": "usage.bad_path"}[case]
    said = json.loads(fast["stdout"])["error"]["code"] if "--json" in args else fast["stderr"]
    assert code in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tail", [["--help"], ["a"], ["a", "b", "c"], ["-x", "a", "dk-a:/b"],
                                  ["--", "a", "dk-a:/b"], ["--json", "--json", "a", "dk-a:/b"], ["-", "dk-a:/b"]],
                         ids=lambda tail: " ".join(tail))
def test_what_the_fast_path_declines_click_answers_as_before(tail: list[str], home: Path, tmp_path: Path) -> None:
    fast, _ = _both(["cp", *tail], home, tmp_path)
    assert "click" in fast["modules"]
    assert fast["exit"] in (0, 2)


def test_names_sizes_and_modes_survive_both_ways(sid: str, home: Path, tmp_path: Path) -> None:
    """A file's tar is made by hand for an ASCII name of up to 100 bytes (by tarfile otherwise: a PAX header), and
    a file's download is read from the response by hand (the engine's PAX header for a long or non-ASCII name,
    a chunked response for a large file, one of known length for a small one): contents, sizes and modes kept."""
    remote = f"/tmp/files-cli-{uuid.uuid4().hex[:8]}"
    here, back = tmp_path / "here", tmp_path / "back"
    here.mkdir()
    back.mkdir()
    cases = {"empty": (0, 0o600), "x" * 100: (1, 0o755), "y" * 150: (512, 0o640), "ünï ✓.txt": (70_001, 0o644),
             "big.bin": (5 * 2**20 + 3, 0o751)}
    for name, (size, mode) in cases.items():
        (here / name).write_bytes(os.urandom(size))
        (here / name).chmod(mode)
        up = _run(["cp", str(here / name), f"{sid}:{remote}/"], fast=True, home=home, tmp_path=tmp_path)
        assert up["exit"] == 0, up["stderr"]
        down = _run(["cp", f"{sid}:{remote}/{name}", str(back)], fast=True, home=home, tmp_path=tmp_path)
        assert down["exit"] == 0, down["stderr"]
        if name.isascii() and len(name) <= 100:  # neither way needed tarfile
            assert "tarfile" not in up["modules"] and "tarfile" not in down["modules"], name
        assert (back / name).read_bytes() == (here / name).read_bytes(), name
        assert (back / name).stat().st_mode & 0o7777 == mode, name
    seen = _on_desktop(home, sid, f"cd {remote} && stat -c '%U %a %s %n' *").splitlines()
    assert sorted(seen) == sorted(f"desk {mode:o} {size} {name}" for name, (size, mode) in cases.items())
    assert sorted(p.name for p in back.iterdir()) == sorted(cases)  # nothing partial left beside


def test_a_symlink_is_followed_down_and_copied_as_a_link_up(sid: str, home: Path, tmp_path: Path) -> None:
    remote = f"/tmp/files-cli-{uuid.uuid4().hex[:8]}"
    _on_desktop(home, sid, f"mkdir -p {remote} && printf target > {remote}/real && ln -s real {remote}/alias")
    down = _run(["cp", f"{sid}:{remote}/alias", str(tmp_path / "got")], fast=True, home=home, tmp_path=tmp_path)
    assert down["exit"] == 0, down["stderr"]
    assert (tmp_path / "got").read_text() == "target" and not (tmp_path / "got").is_symlink()
    os.symlink("elsewhere", tmp_path / "link")
    up = _run(["cp", str(tmp_path / "link"), f"{sid}:{remote}/link"], fast=True, home=home, tmp_path=tmp_path)
    assert up["exit"] == 0, up["stderr"]
    assert _on_desktop(home, sid, f"readlink {remote}/link").strip() == "elsewhere"


def test_copies_into_a_new_folder_and_back_on_a_remote_engine_over_tls(home: Path, tmp_path: Path) -> None:
    """On the second engine (TLS, with its client certificate): a copy into a folder that is not there yet (the
    engine refuses the first PUT and closes the TLS session while the body is sent; its answer is read, the folder
    made, the PUT sent again: it was a "cannot read" usage.bad_path for a file and a failed "TLS handshake" for a
    tree), and back, the response read into one buffer on the TLS socket: a large file (a chunked response), a
    small one (a response of known length), a tree."""
    from docker_provider._docker_target import docker2_tls_env, docker2_url

    engine = docker2_url()
    if engine is None:
        pytest.skip("no second Docker engine: run scripts/setup.d/25-docker-remote.sh")
    env = _env(home, **docker2_tls_env())
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "docker", "-o", f"host={engine}",
                         "--geometry", "320x240"], capture_output=True, text=True, timeout=240, env=env)
    assert up.returncode == 0, up.stderr
    remote_sid = up.stdout.strip()
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.bin").write_bytes(os.urandom(2 * 2**20))
    try:
        for name, size in (("large.bin", 3 * 2**20 + 1), ("small.bin", 700), ("tree", 0)):
            if size:
                (tmp_path / name).write_bytes(os.urandom(size))
            for args in (["cp", str(tmp_path / name), f"{remote_sid}:/tmp/tls-{name}/deeper/"],
                         ["cp", f"{remote_sid}:/tmp/tls-{name}/deeper/{name}", str(tmp_path / f"back-{name}")]):
                done = subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True,
                                      timeout=240, env=env)
                assert done.returncode == 0, (args, done.stderr)
            if size:
                assert (tmp_path / f"back-{name}").read_bytes() == (tmp_path / name).read_bytes()
        assert (tmp_path / "back-tree" / "sub" / "a.bin").read_bytes() == (tree / "sub" / "a.bin").read_bytes()
    finally:
        subprocess.run([sys.executable, "-m", "deskctl", "down", remote_sid], capture_output=True, timeout=240,
                       env=env)


def test_a_download_that_cannot_be_written_here_is_a_usage_error_and_leaves_nothing(sid: str, home: Path,
                                                                                  tmp_path: Path) -> None:
    # the file's bytes go from the engine's socket to the file by splice: a write that fails here (a file size
    # limit, as a full disk would) is this machine's side, usage.bad_path (exit 2), as a failed write always was,
    # never the engine's (provider.unreachable)
    import resource
    import signal

    _on_desktop(home, sid, "head -c 8388608 /dev/urandom > /tmp/limit.bin")

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, resource.RLIM_INFINITY))

    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([sys.executable, "-m", "deskctl", "cp", "--json", f"{sid}:/tmp/limit.bin",
                           str(out / "limit.bin")], capture_output=True, text=True, timeout=240, env=_env(home),
                          preexec_fn=limited)
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout or done.stderr)["error"]
    assert error["code"] == "usage.bad_path" and "File too large" in error["message"], error
    assert list(out.iterdir()) == []
