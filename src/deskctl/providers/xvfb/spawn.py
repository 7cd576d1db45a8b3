"""Starting the desktop's Xvfb and its owner watch with :func:`os.posix_spawn`: what ``subprocess.Popen(argv,
stdin=DEVNULL, stdout=log, stderr=log, pass_fds=(fd,), start_new_session=True, close_fds=True)`` does, without
importing :mod:`subprocess` (with :mod:`signal`, :mod:`selectors` and :mod:`locale`: about 12 million
instructions, a sixteenth of a whole ``deskctl up`` process).

The child gets what Popen gives it: stdin from /dev/null, stdout and stderr on the files given, its own session
(``setsid``), SIGPIPE and SIGXFSZ back at their defaults (Python ignores them; Popen's ``restore_signals``), and
no descriptor of this process but the one passed (Python's own are close-on-exec; an inheritable one, e.g. from
deskctl's own parent, is closed by a file action). A program that cannot be started is the same
:class:`OSError` as Popen's (posix_spawn reports the exec's errno). :class:`Child` reaps it as Popen does.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["Child", "spawn"]

#: signals Python ignores that a child must get at their defaults (Popen's restore_signals; SIGPIPE 13, SIGXFSZ 25)
_RESTORED = (13, 25)


class Child:
    """A process :func:`spawn` started: its ``pid`` and, once reaped (:meth:`poll`, :meth:`wait`), its
    ``returncode`` (``-N`` for signal N), as :class:`subprocess.Popen`'s."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code if the process has ended (reaping it), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = 0  # reaped elsewhere: Popen's answer too
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        """Wait for the process to end (reaping it); its exit code."""
        while self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = 0
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def spawn(argv: Sequence[str], *, output: int, passed: int | None = None,
          env: Mapping[str, str] | None = None) -> Child:
    """Start ``argv`` (``argv[0]`` a path) in a new session with stdin from /dev/null, stdout and stderr on the
    descriptor ``output``, and ``passed`` (a descriptor of this process) open in the child under the same
    number; the environment is ``env`` (default: this process's)."""
    keep = {0, 1, 2} if passed is None else {0, 1, 2, passed}
    spare = _spare_number(keep | {output})
    actions: list[tuple[int | str, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                            *_onto(output, 1, spare), *_onto(output, 2, spare)]
    if passed is not None:
        actions += _onto(passed, passed, spare)
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable(keep)]
    pid = os.posix_spawn(argv[0], list(argv), os.environ if env is None else env, file_actions=actions,
                         setsid=True, setsigdef=_RESTORED)
    return Child(pid)


def _onto(source: int, target: int, spare: int) -> list[tuple[int | str, ...]]:
    """File actions that leave ``source`` open in the child as ``target``, not close-on-exec: a dup2 onto another
    number clears the flag; onto itself it may not (glibc before 2.29), so that goes by way of ``spare``."""
    if source != target:
        return [(os.POSIX_SPAWN_DUP2, source, target)]
    return [(os.POSIX_SPAWN_DUP2, source, spare), (os.POSIX_SPAWN_DUP2, spare, target), (os.POSIX_SPAWN_CLOSE, spare)]


def _inheritable(keep: set[int]) -> list[int]:
    """This process's descriptors a child would inherit (not close-on-exec), but those in ``keep``."""
    found: list[int] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep:
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return found


def _spare_number(used: set[int]) -> int:
    """A descriptor number above the standard three that is none of ``used``."""
    number = 3
    while number in used:
        number += 1
    return number
