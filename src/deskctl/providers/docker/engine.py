"""The docker provider's plumbing (:class:`_DockerBase`): which engine, its clients, the translation of Docker
errors, a container's state, logs and confirmed removal. The other modules of the package build on it."""

from __future__ import annotations

import os
import time

from deskctl import _threads
from deskctl._redact import redact
from deskctl.errors import (
    CleanupIncomplete,
    DeskctlError,
    InfrastructureError,
    NotFound,
    ProviderUnreachable,
    SessionLost,
)
from deskctl.paths import remove_tree
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import (
    LABEL_SESSION,
    RemoteHandle,
)
from deskctl.providers.docker.common import (
    DEFAULT_API_TIMEOUT,
    LABEL_DIR,
    LABEL_FB_DIR,
    DockerHandleData,
    _check_engine,
    _mib,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager
    from pathlib import Path
    from typing import Any

    import docker

    from deskctl.providers.docker.engine_api import EngineApi
    from deskctl.providers.docker.options import Options
    from deskctl.spec import DesktopSpec

__all__ = ["_DockerBase"]


class _DockerBase(X11Provider):
    """The docker provider's plumbing: its engine and clients, Docker errors translated, a container's state
    and logs, removal confirmed."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._client: docker.DockerClient | None = None
        self._client_lock = _threads.Lock()
        self._engine_clients: dict[str, docker.DockerClient] = {}  # engines other than this provider's own
        self._engine_apis: dict[str | None, EngineApi | None] = {}  # the Engine API without the SDK, per engine
        self._tokens: dict[str, str] = {}  # session -> its agent's token (remote desktops), never written out

    # -- plumbing ------------------------------------------------------------------------------------------------
    @property
    def engine(self) -> str:
        """The Docker engine of this provider: the ``host`` option, else ``DOCKER_HOST``; ``""`` is the local
        socket. Raises ``usage.bad_option`` for a URL that names no engine."""
        return _check_engine(self._host() or os.environ.get("DOCKER_HOST") or "", self.name)

    @property
    def client(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                from deskctl.providers.docker.images import connect

                self._client = connect(timeout=self._api_timeout(), engine=self._host())
            return self._client

    def _client_on(self, engine: str) -> docker.DockerClient:
        """The client of ``engine`` (a handle's: a desktop made through another engine than this provider's
        is reached where it runs, for example by the reaper or the owner watcher)."""
        if not engine or engine == self.engine:
            return self.client
        with self._client_lock:
            client = self._engine_clients.get(engine)
            if client is None:
                from deskctl.providers.docker.images import connect

                client = self._engine_clients[engine] = connect(
                    timeout=self._api_timeout(), engine=engine)
            return client

    def _engine_api(self, engine: str | None = None) -> EngineApi | None:
        """The Engine API over the socket (no SDK import: `deskctl down` and `cp` are a process each) of
        ``engine`` (default: this provider's), kept per engine; None for ssh:// (the SDK's transport serves it)."""
        from deskctl.providers.docker.engine_api import engine_api

        # this provider's own engine as the SDK client names it: the host option, else the environment's (so an
        # error's remedy names DOCKER_HOST); another engine by its URL
        url = self._host() if not engine or engine == self.engine else engine
        with self._client_lock:
            if url not in self._engine_apis:
                self._engine_apis[url] = engine_api(url, timeout=self._api_timeout())
            return self._engine_apis[url]

    def _engine_of(self, handle: RemoteHandle) -> str:
        """The engine a desktop runs on: the one its handle names (a remote engine, or one given as ``host``),
        else this provider's, as before engines were recorded."""
        return DockerHandleData.of(handle).engine or self.engine

    def _errors(self, doing: str, engine: str | None = None) -> AbstractContextManager[None]:
        """Docker SDK errors raised in the ``with`` block, translated (:func:`.images.docker_errors`)."""
        from deskctl.providers.docker.images import docker_errors

        return docker_errors(doing, provider=self.name, engine=engine or self._host())

    def _settings(self, spec: DesktopSpec | None = None) -> Options:
        """The typed options (:mod:`.options`), the spec's over the provider's."""
        settings: Options = self.settings(spec)  # type: ignore[assignment]  # options_model names this class
        return settings

    # ``host`` and ``api_timeout`` are read on every path, also by ``deskctl do`` and ``down``, which must not
    # import pydantic: the values as given (checked by :class:`.options.Options` when the spec was made), the
    # defaults those Options declare
    def _host(self) -> str | None:
        return str(self.options["host"]) if self.options.get("host") else None

    def _api_timeout(self) -> float:
        return float(self.options.get("api_timeout") or DEFAULT_API_TIMEOUT)

    def _session_dir(self, session_id: str) -> Path:
        from deskctl.paths import runtime_dir  # pathlib: only making or listing a desktop needs it

        return runtime_dir() / "docker" / session_id

    def _state(self, container: str, engine: str | None = None) -> dict[str, Any] | None:
        """The container's ``State`` from inspect (on ``engine``; default: this provider's), or None when it
        does not exist."""
        api = self._engine_api(engine)
        try:
            if api is not None:
                attrs = api.inspect_container(container)
            else:
                with self._errors(f"inspect the container {container}", engine):
                    attrs = (self.client if engine is None else self._client_on(engine)).api.inspect_container(
                        container)
        except NotFound:
            return None
        state: dict[str, Any] = attrs.get("State") or {}
        return state

    def _logs(self, container: str, lines: int = 15, engine: str | None = None) -> str:
        try:
            client = self.client if engine is None else self._client_on(engine)
            raw = client.api.logs(container, tail=lines)
            return raw.decode(errors="replace").strip() if isinstance(raw, bytes) else str(raw)
        except Exception:
            return ""

    def _gone_error(self, handle: RemoteHandle, state: dict[str, Any] | None, doing: str) -> DeskctlError:
        """The error for a desktop whose container stopped or vanished: OOM is said as such."""
        name = DockerHandleData.of(handle).name
        if state is None:
            return SessionLost(f"the container {name} no longer exists (removed from outside) while we tried to "
                               f"{doing}", provider=self.name, details={"container": name, "state": "gone"})
        details = {"container": name, "state": state.get("Status"), "exit_code": state.get("ExitCode"),
                   "oom_killed": bool(state.get("OOMKilled"))}
        if state.get("OOMKilled"):
            memory = DockerHandleData.of(handle).memory
            limit = _mib(int(memory)) if memory else "the host's memory"
            return SessionLost(f"the desktop {name} ran out of memory (limit {limit}) and was killed",
                               provider=self.name, details=details,
                               remedy="raise provider_options memory, or ask for a smaller geometry")
        logs = redact(self._logs(DockerHandleData.of(handle).container,
                                 engine=self._engine_of(handle)))
        tail = f"; last log lines:\n{logs}" if logs else ""
        return SessionLost(f"the container {name} is {state.get('Status')} (exit code {state.get('ExitCode')}) "
                           f"while we tried to {doing}{tail}", provider=self.name, details=details)

    def _remove(self, container: str, name: str, engine: str | None = None) -> None:
        """Force-remove and confirm: the engine's 204 to the DELETE (it answers once the container is removed) or
        404 (no such container) confirms it, else inspect answers 404; conflicts ("removal in progress") are retried.
        Over the Engine API directly (no SDK import: `deskctl down` is a process per desktop) except on ssh://
        engines (whose SDK call says no status: inspect confirms)."""
        deadline = time.monotonic() + 30
        last = ""
        api = self._engine_api(engine)
        while True:
            try:
                if api is not None:
                    if api.remove_container(container, force=True, volumes=True) == 204:
                        return  # removed: an inspect would only say 404 (one round trip less per down)
                else:
                    with self._errors(f"remove the container {name}", engine):
                        client = self.client if engine is None else self._client_on(engine)
                        client.api.remove_container(container, force=True, v=True)
            except NotFound:
                if api is not None:
                    return  # the engine knows no such container: gone
            except InfrastructureError as exc:
                if isinstance(exc, ProviderUnreachable):
                    raise CleanupIncomplete(f"cannot remove {name}: {exc.message}", provider=self.name,
                                            remedy=exc.remedy, details={"left": [name]}) from exc
                last = exc.message
            try:
                if self._state(container, engine) is None:
                    return
            except DeskctlError as exc:
                raise CleanupIncomplete(f"cannot confirm that {name} is gone: {exc.message}", provider=self.name,
                                        remedy=exc.remedy or f"docker rm -f {name}",
                                        details={"left": [name]}) from exc
            if time.monotonic() >= deadline:
                raise CleanupIncomplete(f"the container {name} is still there after removal ({last})",
                                        provider=self.name, remedy=f"docker rm -f {name}",
                                        details={"left": [name]})
            # removal in progress on the daemon's side: wait for its destroy event instead of polling blindly
            if api is not None:
                try:
                    api.wait_removed(container, until=time.time() + 2)
                except DeskctlError:
                    pass
                continue
            try:
                events = client.api.events(
                    filters={"container": container, "event": "destroy"}, decode=True,
                    until=int(time.time()) + 2,
                )
                for _ in events:
                    break
            except Exception:
                pass

    def _remove_by_name(self, name: str, engine: str | None = None) -> None:
        """Remove the container named ``name`` (and anything labelled with that session), with its directory,
        on ``engine`` (default: this provider's)."""
        client = self.client if engine is None else self._client_on(engine)
        with self._errors("list containers", engine):
            found = client.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={name}"})
        ids = {str(c["Id"]): c for c in found}
        if not ids:
            state = self._state(name, engine)
            if state is not None:
                ids[name] = {}
        for container_id, raw in ids.items():
            self._remove(container_id, name, engine)
            labels = (raw.get("Labels") or {}) if raw else {}
            for label in (LABEL_DIR, LABEL_FB_DIR):
                if labels.get(label):
                    remove_tree(labels[label])

    def _connect(self, engine: str, timeout: float) -> docker.DockerClient:
        """A new client of ``engine`` (a handle's), for a call longer than the kept clients' timeout."""
        from deskctl.providers.docker.images import connect

        return connect(timeout=timeout, engine=engine or self._host())

    def close(self) -> None:
        super().close()
        with self._client_lock:
            clients = [self._client, *self._engine_clients.values()]
            self._client = None
            self._engine_clients.clear()
            apis = [api for api in self._engine_apis.values() if api is not None]
            self._engine_apis.clear()
        for api in apis:
            api.close()
        for client in clients:
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
