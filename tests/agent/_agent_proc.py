"""A real ``deskctl-agent`` process on loopback TCP for the tests (tests/agent and bench/bench_agent.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

TOKEN = "agent-test-token-5f1d9c3e8b"


@dataclass
class RunningAgent:
    """A deskctl-agent process; ``output`` collects everything it wrote to stdout and stderr."""

    proc: subprocess.Popen[str]
    port: int
    token: str
    display: str
    output: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_agent(tmp: Path, display: str, *extra: str, token: str = TOKEN) -> RunningAgent:
    token_file = tmp / "token"
    token_file.write_text(token + "\n")
    env = {k: v for k, v in os.environ.items() if k != "XAUTHORITY"}
    env["DISPLAY"] = display
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("deskctl-agent")), "--port", "0", "--token-file", str(token_file),
         *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )
    output: list[str] = []
    announced = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if "listening on" in line:
                announced.set()
        announced.set()

    threading.Thread(target=read, daemon=True).start()
    if not announced.wait(30) or not any("listening on" in line for line in output):
        proc.kill()
        raise AssertionError(f"deskctl-agent did not start: {''.join(output)}")
    line = next(line for line in output if "listening on" in line)
    port = int(line.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])
    return RunningAgent(proc, port, token, display, output)

