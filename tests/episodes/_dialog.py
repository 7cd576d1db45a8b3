"""The small GUI task of the gym tests: a dialog (xmessage) that asks a question; answering Yes solves it.

The dialog sits at the top-left corner, its Yes button is the default (Return answers it while the pointer is
over the dialog), and its exit status lands in a file the evaluation reads through ``desk.exec``."""

from __future__ import annotations

import shlex
from typing import Any

from deskctl.gym import DesktopEnv, Task


def dialog_task(answer_file: str) -> Task:
    def setup(desk: Any) -> None:
        desk.exec(f"rm -f {shlex.quote(answer_file)}")
        line = (f"xmessage -geometry +0+0 -title question -buttons Yes:0,No:1 -default Yes 'Save the file?'; "
                f"echo $? > {shlex.quote(answer_file)}")
        desk.exec(f"sh -c {shlex.quote(line)}", background=True)
        desk.wait_for("question", 30)

    def evaluate(desk: Any) -> tuple[float, bool]:
        out = desk.exec(f"cat {shlex.quote(answer_file)} 2>/dev/null").stdout.strip()
        if not out:
            return 0.0, False
        return (1.0 if out == "0" else 0.0), True

    return Task(evaluate=evaluate, setup=setup, name="answer-the-dialog")


def scripted_policy(env: DesktopEnv) -> list[dict[str, Any]]:
    """Point at the dialog, press Return (its default button is Yes)."""
    move = env.action_space.sample()
    move.update(action=env.action_names.index("move"), x=10, y=10)
    key = env.action_space.sample()
    key.update(action=env.action_names.index("key"), chord="Return")
    return [move, key]
