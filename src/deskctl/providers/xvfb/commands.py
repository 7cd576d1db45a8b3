"""The ``xvfb`` provider's commands and files: ``exec`` (``sh -c`` on this host), ``upload`` and ``download``
(copies on this host's filesystem): a part of :class:`~deskctl.providers.xvfb.XvfbProvider` that a ``deskctl do``,
``screenshot`` or ``down`` does not load (see provider.py's ``_LATER``)."""

from __future__ import annotations

from deskctl.errors import SessionLost
from deskctl.providers._guest import background_pid, check_exec_options, posix_line, run_here
from deskctl.providers._procs import SESSION_ENV, other_user
from deskctl.providers.base import ExecResult
from deskctl.providers.xvfb.create import _XvfbCreate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from deskctl.providers.base import RemoteHandle

__all__ = ["_XvfbCommands"]


class _XvfbCommands(_XvfbCreate):
    """Commands and files of the ``xvfb`` provider (:class:`~deskctl.providers.xvfb.XvfbProvider`)."""

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Run ``command`` with ``sh -c`` on this host with DISPLAY and XAUTHORITY of the desktop, in ``cwd``
        with ``env`` added, as ``user`` (through ``sudo``: only when deskctl runs as root). On timeout its
        process group is killed and the exit code is 124 (as timeout(1) reports). ``background``: the command
        is detached from every pipe of this call (its output goes to /dev/null) and its pid comes back."""
        extra = check_exec_options(env, user, self.name)
        other = self._other_user(user)
        if not self._xvfb_alive(handle):
            raise SessionLost(f"the Xvfb of {handle.session_id} is gone", provider=self.name)
        if other is not None:
            # sudo resets the environment: the session tag (destroy ends what carries it) goes in explicitly
            extra = {SESSION_ENV: handle.session_id, **extra}
        line = posix_line(command, cwd=cwd, env=extra, user=other, background=background)
        exit_code, out, err = run_here(line, timeout, env=self._env(handle), provider=self.name)
        result = ExecResult(exit_code, out.decode(errors="replace"), err.decode(errors="replace"))
        if background and result.exit_code == 0:
            return ExecResult(0, result.stdout, result.stderr, pid=background_pid(result))
        return result

    def _other_user(self, user: str | None) -> str | None:
        return other_user(user, self.name)

    # -- files: this host's own filesystem -----------------------------------------------------------------
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        from deskctl.providers._files import copy_here  # here: `deskctl do` imports this module, not tarfile

        copy_here(local, remote, "here", self.name)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        from deskctl.providers._files import copy_here

        copy_here(remote, local, "on the desktop", self.name)

