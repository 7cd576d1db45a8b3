"""The kubernetes provider while a desktop is open: the in-desktop agent on ``podIP:agent_port`` (through
X11Provider's driver cache) for display, input, exec and files, and what this home remembers of a desktop (its pod IP
and token) so that another process reaches it again."""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from deskctl._record import replace
from deskctl.errors import (
    DeskctlError,
    ProviderUnreachable,
    SessionLost,
)
from deskctl.providers._files import FileTransfer
from deskctl.providers.base import (
    ExecResult,
    RemoteHandle,
)
from deskctl.providers.kubernetes.client import (
    TOKEN_KEY,
    KubernetesApi,
    _describe,
)
from deskctl.providers.kubernetes.handle_data import KubernetesHandleData

if TYPE_CHECKING:
    from deskctl.agent.client import AgentDriver
    from deskctl.providers._x11provider import DisplayDriver


class KubernetesDesktop(FileTransfer, KubernetesApi):
    """The desktop side of :class:`~deskctl.providers.kubernetes.KubernetesProvider`."""

    def _ns(self, handle: RemoteHandle) -> str:
        """The namespace of a handle's desktop: where it was made, whatever this process's kubeconfig says."""
        return KubernetesHandleData.of(handle).namespace or self.namespace

    def _token(self, handle: RemoteHandle) -> str:
        secret = self._get("secret", KubernetesHandleData.of(handle).secret_name or _secret_name(handle.session_id),
                           "read the session's secret", self._ns(handle))
        raw = ((secret or {}).get("data") or {}).get(TOKEN_KEY)
        if not raw:
            raise SessionLost(f"the secret of {handle.session_id} is gone: the desktop cannot be reached",
                              provider=self.name)
        from deskctl._redact import register_secret

        token = base64.b64decode(raw).decode()
        register_secret(token)
        return token

    # -- while open: the agent, through X11Provider's driver cache -------------------------------------------------
    def _open_driver(self, handle: RemoteHandle) -> DisplayDriver:
        from deskctl.agent.client import AgentDriver

        data = KubernetesHandleData.of(handle)
        port = data.agent_port or _default_port()
        remembered = self._recall(handle)
        if remembered is not None:
            # the address and token this home kept: a `deskctl do` reaches the agent without the API (and
            # without loading the kubernetes client); anything wrong with them falls back to asking the API
            with contextlib.suppress(DeskctlError):
                return AgentDriver.connect(remembered[0], port, remembered[1], provider=self.name,
                                           timeout=self._timeout())
        ip = data.pod_ip
        if not ip:
            pod = self._get("pod", data.pod, "read the pod", self._ns(handle))
            ip = str(((pod or {}).get("status") or {}).get("podIP") or "")
            if not ip:
                raise self._gone(handle, pod, "reach the desktop")
            replace(data, pod_ip=ip).store(handle)
        token = self._token(handle)
        try:
            driver = AgentDriver.connect(ip, port, token, provider=self.name, timeout=self._timeout())
        except (ProviderUnreachable, SessionLost) as exc:
            raise self._lost(handle, "connect to the desktop's agent", exc) from exc
        self._remember(handle, ip, token)
        return driver

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        """After the agent went away: the pod's own reason (evicted, past its deadline, deleted) when it has
        one, else the cause."""
        fallback = cause if isinstance(cause, DeskctlError) else SessionLost(
            f"lost the desktop {handle.session_id}: {cause}", provider=self.name)
        try:
            pod = self._get("pod", KubernetesHandleData.of(handle).pod, "read the pod", self._ns(handle))
        except DeskctlError:
            return fallback
        if pod is None or (pod.get("status") or {}).get("phase") not in ("Pending", "Running") \
                or "deletionTimestamp" in (pod.get("metadata") or {}):
            return self._gone(handle, pod, doing)
        return fallback

    def _gone(self, handle: RemoteHandle, pod: dict[str, Any] | None, doing: str) -> DeskctlError:
        name = KubernetesHandleData.of(handle).pod
        if pod is None:
            return SessionLost(f"the pod {name} no longer exists (deleted from outside) while trying to {doing}",
                               provider=self.name, details={"pod": name, "state": "gone"})
        status = pod.get("status") or {}
        return SessionLost(f"the pod {name} is {_describe(pod)} while trying to {doing}", provider=self.name,
                           details={"pod": name, "phase": status.get("phase"), "reason": status.get("reason")})

    # -- what this home remembers of a desktop: its pod IP and token, in a 0600 file of the 0700 runtime dir ------
    @staticmethod
    def _memory_file(session_id: str) -> Path:
        from deskctl.paths import runtime_dir

        return runtime_dir() / "kubernetes" / f"{session_id}.json"

    def _remember(self, handle: RemoteHandle, ip: str, token: str) -> None:
        path = self._memory_file(handle.session_id)
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, exist_ok=True)
            partial = path.with_suffix(".part")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump({"pod_uid": KubernetesHandleData.of(handle).uid, "pod_ip": ip, "token": token}, out)
            os.replace(partial, path)

    def _recall(self, handle: RemoteHandle) -> tuple[str, str] | None:
        try:
            kept = json.loads(self._memory_file(handle.session_id).read_text())
        except (OSError, ValueError):
            return None
        uid = KubernetesHandleData.of(handle).uid
        if not isinstance(kept, dict) or kept.get("pod_uid") != uid or not kept.get("token"):
            return None
        from deskctl._redact import register_secret

        register_secret(str(kept["token"]))
        return str(kept.get("pod_ip") or ""), str(kept["token"])

    def _forget(self, session_id: str) -> None:
        with contextlib.suppress(OSError):
            self._memory_file(session_id).unlink(missing_ok=True)
        self._tokens.pop(session_id, None)

    # -- exec and files: the agent serves them too -------------------------------------------------------------
    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Through the agent (its shell line from :func:`deskctl.providers._guest.posix_line`): stdout and
        stderr apart, exit code 124 on timeout, the pid for ``background``."""
        from deskctl.providers._guest import check_exec_options

        extra = check_exec_options(env, user, self.name)
        return self._call(handle, "run a command", lambda driver: _agent(driver).exec(
            command, timeout, cwd=cwd, env=extra or None, user=user, background=background))

    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        self._call(handle, "copy a file to the desktop", lambda driver: _agent(driver).put_file(str(local), remote))

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        self._call(handle, "copy a file from the desktop", lambda driver: _agent(driver).get_file(remote, str(local)))

    def close(self) -> None:
        super().close()
        with self._api_lock:
            api, self._api = self._api, None
        if api is not None:
            with contextlib.suppress(Exception):
                api.api_client.close()


def _agent(driver: DisplayDriver) -> AgentDriver:
    """The agent client behind the cache's driver slot (the only kind this provider opens)."""
    return cast("AgentDriver", driver)


def _default_port() -> int:
    from deskctl.agent import DEFAULT_PORT

    return int(DEFAULT_PORT)


def _secret_name(session_id: str) -> str:
    return f"{session_id}-agent"


