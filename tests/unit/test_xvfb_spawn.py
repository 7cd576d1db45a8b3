"""providers/xvfb/spawn.py starts a process as subprocess.Popen(argv, stdin=DEVNULL, stdout=out, stderr=out,
pass_fds=(fd,), start_new_session=True, close_fds=True) does: the same descriptors, session, signal dispositions,
exit codes and errors, checked side by side on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.providers.xvfb.spawn import spawn

#: what the child reports: its open descriptors and where they lead, its session and group, its signal masks
_REPORT = """
import os, sys
fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
print("fds", [(fd, os.readlink(f"/proc/self/fd/{fd}")) for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")])
print("session", os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print("ignored", int(status["SigIgn"], 16) & ~0x180000000, "blocked", int(status["SigBlk"], 16))
print("stdin", sys.stdin.read() == "")
os.write(int(sys.argv[1]), b"passed\\n")
"""


def _popen(argv: list[str], out: int, passed: int) -> int:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, pass_fds=(passed,),
                            start_new_session=True, close_fds=True)
    return proc.wait()


def _spawned(argv: list[str], out: int, passed: int) -> int:
    return spawn(argv, output=out, passed=passed).wait()


def _report(start: object, tmp_path: Path, name: str) -> tuple[str, bytes]:
    stray = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(stray, True)  # inherited by deskctl from its parent, say: Popen's close_fds closes it
    read_end, write_end = os.pipe()
    try:
        with open(tmp_path / name, "wb") as out:
            # python -I -S -c: the child's own imports open nothing
            code = start([sys.executable, "-I", "-S", "-c", _REPORT, str(write_end)],  # type: ignore[operator]
                         out.fileno(), write_end)
        os.close(write_end)
        assert code == 0, (tmp_path / name).read_text()
        text = (tmp_path / name).read_text()
        return text.replace(f"'{tmp_path / name}'", "'OUT'").replace(f"({write_end}, 'pipe:", "(PASSED, 'pipe:"), \
            os.read(read_end, 100)
    finally:
        os.close(read_end)
        os.close(stray)


def test_a_spawned_child_gets_what_popen_gives_it(tmp_path: Path) -> None:
    spawned, spawned_passed = _report(_spawned, tmp_path, "spawned.log")
    popened, popen_passed = _report(_popen, tmp_path, "popen.log")
    assert spawned_passed == popen_passed == b"passed\n"
    # the pipe's inode differs between the runs: compare the descriptors by number and kind
    strip = __import__("re").compile(r"pipe:\[\d+\]")
    assert strip.sub("pipe", spawned) == strip.sub("pipe", popened)
    assert "session True True" in spawned and "stdin True" in spawned


def _dispositions(start: object, tmp_path: Path, name: str) -> tuple[int, int]:
    with open(tmp_path / name, "wb") as out:
        code = start(["/bin/grep", "^Sig", "/proc/self/status"], out.fileno(), 0)  # type: ignore[operator]
    assert code == 0
    status = dict(line.split(":", 1) for line in (tmp_path / name).read_text().splitlines())
    # glibc's posix_spawn leaves its two internal signals (32, 33) ignored; glibc installs them when it needs them
    return int(status["SigIgn"], 16) & ~0x180000000, int(status["SigBlk"], 16)


def test_a_spawned_program_gets_popens_signal_dispositions(tmp_path: Path) -> None:
    # this Python ignores SIGPIPE and SIGXFSZ: the program gets them at their defaults (Popen's restore_signals)
    ignored, blocked = _dispositions(_spawned, tmp_path, "spawned.log")
    assert (ignored, blocked) == _dispositions(_popen, tmp_path, "popen.log")
    assert not ignored & (1 << 12 | 1 << 24)


def test_exit_codes_signals_and_reaping_are_popens(tmp_path: Path) -> None:
    with open(os.devnull, "wb") as out:
        for argv, expected in ((["/bin/sh", "-c", "exit 3"], 3), (["/bin/sh", "-c", "kill -TERM $$"], -15),
                               (["/bin/true"], 0)):
            child = spawn(argv, output=out.fileno())
            assert child.wait() == expected == subprocess.run(argv).returncode
            assert child.poll() == expected
            with pytest.raises(ChildProcessError):
                os.waitpid(child.pid, os.WNOHANG)  # reaped: no zombie left
        running = spawn(["/bin/sleep", "60"], output=out.fileno())
        assert running.poll() is None
        os.kill(running.pid, 9)
        assert running.wait() == -9


def test_a_program_that_cannot_start_is_popens_oserror(tmp_path: Path) -> None:
    missing, not_executable = str(tmp_path / "nosuch"), tmp_path / "plain"
    not_executable.write_text("")
    for path in (missing, str(not_executable)):
        with pytest.raises(OSError) as ours:
            spawn([path], output=1)
        with pytest.raises(OSError) as popen:
            subprocess.Popen([path])
        assert type(ours.value) is type(popen.value)
        assert ours.value.strerror == popen.value.strerror
