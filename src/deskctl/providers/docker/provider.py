"""The docker provider's class: its facts, readiness, destroy, the listing for the reaper, and the drivers that
reach a desktop (the X socket of a local one, the agent of a remote one)."""

from __future__ import annotations

import io
import os
import time

from deskctl._redact import redact
from deskctl.errors import (
    CapacityUnavailable,
    DeskctlError,
    NotFound,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
)
from deskctl.paths import pure_path_str, remove_tree
from deskctl.platforms import Platform
from deskctl.providers._later import add_parts
from deskctl.providers.base import (
    LABEL_SESSION,
    Capabilities,
    RemoteHandle,
)
from deskctl.providers.docker.common import (
    _AGENT_TOKEN_FILE,
    LABEL_AGENT,
    LABEL_DIR,
    LABEL_DISPLAY,
    LABEL_FB_DIR,
    LABEL_PROVIDER,
    DockerHandleData,
    _display_number,
    _via_agent,
)
from deskctl.providers.docker.watcher import _Watcher

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, ClassVar

    from deskctl.agent.client import AgentDriver
    from deskctl.core.x11 import X11Driver
    from deskctl.providers._x11provider import DisplayDriver
    from deskctl.providers.docker.files import _DockerFiles as _Mixins  # the whole class, as mypy checks it
    from deskctl.spec import DesktopSpec
else:
    from deskctl.providers.docker.engine import _DockerBase as _Mixins  # the rest later: see _LATER

__all__ = ["DockerProvider"]

#: seconds to wait, after the display is lost, for a still-running container to stop so its reason can be told
LOST_STOP_WAIT = 20

#: the methods of the class's other parts (its preflight, its create, its commands and files), by the
#: ``module:class`` that defines them: :class:`DockerProvider` takes each from there when it is first looked up
#: (providers/_later.py), so that a process that only destroys, drives or captures a desktop (``deskctl down``,
#: ``do``, ``screenshot``) imports none of those modules. tests/unit/test_docker_parts.py holds this list whole.
_LATER = {
    "deskctl.providers.docker.preflight:_DockerPreflight": (
        "preflight", "_variant", "_resolve_image", "_local_base", "_memory", "_needed_memory", "_check_remote"),
    "deskctl.providers.docker.container:_DockerCreate": (
        "_plan", "_desktop_image", "_host_dirs", "_container_config", "_host_config", "_agent_host",
        "_start", "_hand_secrets", "_start_xvfb", "_published_port"),
    "deskctl.providers.docker.files:_DockerFiles": (
        "_engine_api_or_bulk_client", "_with_bulk", "_bulk_client", "exec", "_remote_path", "upload", "_put_archive",
        "_upload_target", "_upload_target_by_exec", "download", "_download"),
}


class DockerProvider(_Mixins):
    """Desktops in containers on the local Docker engine; see the package docstring."""

    name: ClassVar[str] = "docker"
    #: :meth:`exec` (files.py) hands output to ``on_output`` as it comes (see Desktop.exec)
    exec_streams_output: ClassVar[bool] = True

    options_model: ClassVar[str | None] = "deskctl.providers.docker.options:Options"
    capabilities: ClassVar[Capabilities] = Capabilities(
        platforms=frozenset({Platform.UBUNTU}),
        settable_geometry=True,
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=False,  # the container stops itself after its TTL, but removal is the reaper's job
        isolation="container",
        start_url=True,
        local=True,
        billing="free",
        cursor_position=True,
        clipboard=True,
        windows=True,
        browser=True,
        snapshots=True,
        window_management=True,
        accessibility=True,
    )

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        """container.py's (named here: the base class declares it abstract, and a method found later is not seen
        by the class's check of what is implemented)."""
        from deskctl.providers.docker.container import _DockerCreate

        return _DockerCreate.create(self, spec, session_id, labels)

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        if _via_agent(handle):
            self._wait_agent(handle, deadline)
            return
        from deskctl.core.x11 import X11Address, connect_display, read_cookie

        data = DockerHandleData.of(handle)
        socket_path, xauthority = data.x11_files()
        address = X11Address(display=data.display, socket_path=socket_path)
        cookie = read_cookie(xauthority, _display_number(data.display[1:], self.name))
        container = data.container
        last = "the X socket does not exist yet"
        delay = 0.005
        while True:
            if os.path.exists(address.socket_path or ""):
                try:
                    display = connect_display(address, cookie, timeout=max(0.2, deadline - time.monotonic()))
                except ProviderUnreachable as err:
                    last = err.message
                else:
                    display.close()
                    return
            state = self._state(container, self._engine_of(handle))
            self._raise_if_stopped(handle, state)
            if time.monotonic() >= deadline:
                logs = self._logs(container)
                raise ReadinessTimeout(
                    f"the display of {handle.session_id} did not answer in time; last: {last}"
                    + (f"; last log lines:\n{logs}" if logs else ""),
                    provider=self.name, remedy="look at `docker logs " + handle.session_id + "`")
            # Xvfb gives the host no event to wait on: back off between attempts, bounded by the deadline.
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.1)

    def _raise_if_stopped(self, handle: RemoteHandle, state: dict[str, Any] | None) -> None:
        """While waiting for readiness: a container that is gone or stopped ends the wait at once (out of memory
        is capacity.unavailable)."""
        if state is not None and state.get("Running"):
            return
        gone = self._gone_error(handle, state, "wait for the display")
        if state is not None and state.get("OOMKilled"):
            raise CapacityUnavailable(gone.message, provider=self.name, remedy=gone.remedy, details=gone.details)
        raise gone

    def _wait_agent(self, handle: RemoteHandle, deadline: float) -> None:
        """Until the desktop's agent answers an authenticated ping; the container's state is looked at between
        attempts, so a desktop that died is told at once, not at the deadline."""
        from deskctl.agent.client import wait_ready

        data = DockerHandleData.of(handle)
        host, port = data.agent_endpoint()
        container = data.container
        engine = self._engine_of(handle)
        token = self._token(handle)
        last = "the agent did not answer yet"
        while True:
            try:
                wait_ready(host, port, token,
                           provider=self.name, deadline=min(deadline, time.monotonic() + 3.0))
                return
            except (ReadinessTimeout, ProviderUnreachable, SessionLost) as err:
                last = err.message
            state = self._state(container, engine)
            self._raise_if_stopped(handle, state)
            if time.monotonic() >= deadline:
                logs = redact(self._logs(container, engine=engine))
                raise ReadinessTimeout(
                    f"the agent of {handle.session_id} did not answer in time; last: {last}"
                    + (f"; last log lines:\n{logs}" if logs else ""),
                    provider=self.name, remedy="look at `docker logs " + handle.session_id + "` on its engine")

    def _token(self, handle: RemoteHandle) -> str:
        """A remote desktop's agent token: this process's, else the 0600 file its creator wrote on this
        machine, else read from the container through the Engine API (a process on another machine)."""
        token = self._tokens.get(handle.session_id)
        if token:
            return token
        path = DockerHandleData.of(handle).agent_token_file
        try:
            if path:
                with open(path) as file:  # no pathlib on the per-call CLI paths (urllib.parse, ipaddress)
                    token = file.read().strip()
        except OSError:
            pass
        if not token:
            token = self._read_container_token(handle)
        from deskctl._redact import register_secret

        register_secret(token)
        self._tokens[handle.session_id] = token
        return token

    def _read_container_token(self, handle: RemoteHandle) -> str:
        import tarfile

        from deskctl.agent import TOKEN_FILE

        container = DockerHandleData.of(handle).container
        client = self._client_on(self._engine_of(handle))
        try:
            with self._errors("read the agent's token", self._engine_of(handle)):
                stream, _ = client.api.get_archive(container, TOKEN_FILE)
                raw = b"".join(stream)
        except NotFound as exc:
            raise self._lost(handle, "read the agent's token", exc) from exc
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = next((m for m in tar.getmembers() if m.isreg()), None)
            extracted = tar.extractfile(member) if member is not None else None
            token = extracted.read().decode().strip() if extracted is not None else ""
        if not token:
            raise SessionLost(f"the agent token of {handle.session_id} is empty", provider=self.name)
        return token

    # -- the browser's DevTools (devtools.py) ----------------------------------------------------------------------
    def browser_endpoint(self, handle: RemoteHandle) -> Any:
        """The container's DevTools (127.0.0.1:9222 inside) through a loopback forwarder here (devtools.py)."""
        from deskctl.providers.docker import devtools

        return devtools.browser_endpoint(self, handle)

    def open_url(self, handle: RemoteHandle, url: str, browser: str | None = None) -> None:
        """``browser="chromium"``, or none in a container that has Chromium (the browser image; its ``xdg-open``
        knows no browser): Chromium with DevTools on the container's 127.0.0.1:9222 (a running one takes the URL);
        anything else: the guest's opener."""
        from deskctl.browser import container_chromium_args, is_chromium

        if browser is None:
            said = self.exec(handle, "command -v chromium", 30)
            browser = "chromium" if said.exit_code == 0 and said.stdout.strip() else None
        if browser is None or not is_chromium(browser):
            super().open_url(handle, url, browser)
            return
        self._require_program(handle, browser)
        self._launch_detached(handle, browser, container_chromium_args(url))

    def _close_devtools(self, session_id: str | None = None) -> None:
        if "_devtools" in self.__dict__:  # where devtools.py keeps its forwarders: without it, none was opened
            from deskctl.providers.docker import devtools

            devtools.close(self, session_id)

    def close(self) -> None:
        self._close_devtools()
        super().close()

    def destroy(self, handle: RemoteHandle) -> None:
        self._drop_driver(handle.session_id)
        self._close_devtools(handle.session_id)
        self._tokens.pop(handle.session_id, None)
        data = DockerHandleData.of(handle)
        name = data.name
        container = data.container or name
        self._remove(container, name, self._engine_of(handle))
        _Watcher.forget_if_running(name)
        for path in (data.session_dir or handle.labels.get(LABEL_DIR), data.fb_dir or handle.labels.get(LABEL_FB_DIR)):
            if path:
                remove_tree(str(path))

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        filters = [LABEL_SESSION, f"{LABEL_PROVIDER}={self.name}"]
        filters += [f"{k}={v}" for k, v in (selector or {}).items()]
        with self._errors("list deskctl containers"):
            found = self.client.api.containers(all=True, filters={"label": filters})
        handles = []
        for raw in found:
            labels = dict(raw.get("Labels") or {})
            session_id = labels.get(LABEL_SESSION, "")
            session_dir = labels.get(LABEL_DIR, "")
            names = [n.lstrip("/") for n in raw.get("Names") or []]
            number = labels.get(LABEL_DISPLAY, "0")
            display = f":{number}"
            if labels.get(LABEL_AGENT) == "1":
                handles.append(RemoteHandle(
                    provider=self.name, session_id=session_id, resource_id=str(raw["Id"]), labels=labels,
                    data={"container": str(raw["Id"]), "name": names[0] if names else session_id,
                          "image": raw.get("Image"), "display": display, "engine": self.engine,
                          "state": raw.get("State"), **self._agent_address(raw, session_id)},
                    created_at=float(raw.get("Created") or time.time()),
                ))
                continue
            handles.append(RemoteHandle(
                provider=self.name, session_id=session_id, resource_id=str(raw["Id"]), labels=labels,
                data={
                    "container": str(raw["Id"]),
                    "name": names[0] if names else session_id,
                    "image": raw.get("Image"),
                    "display": display,
                    "socket_path": pure_path_str(os.path.join(session_dir, "x11", f"X{number}")) if session_dir
                    else "",
                    "xauthority": pure_path_str(os.path.join(session_dir, "xauth", "Xauthority")) if session_dir
                    else "",
                    "session_dir": session_dir,
                    "fb_dir": labels.get(LABEL_FB_DIR, ""),
                    "framebuffer": pure_path_str(os.path.join(labels[LABEL_FB_DIR], "Xvfb_screen0"))
                    if labels.get(LABEL_FB_DIR)
                    else "",
                    "state": raw.get("State"),
                },
                created_at=float(raw.get("Created") or time.time()),
            ))
        return handles

    def _agent_address(self, raw: Mapping[str, Any], session_id: str) -> dict[str, Any]:
        """Where the agent of a listed remote desktop answers (a stopped one publishes no port)."""
        from deskctl.agent import DEFAULT_PORT

        data: dict[str, Any] = {"agent_host": self._agent_host(None)}
        for port in raw.get("Ports") or []:
            if port.get("PrivatePort") == DEFAULT_PORT and port.get("PublicPort"):
                data["agent_port"] = int(port["PublicPort"])
        token_file = self._session_dir(session_id) / _AGENT_TOKEN_FILE
        if token_file.exists():
            data.update(session_dir=str(token_file.parent), agent_token_file=str(token_file))
        return data

    def is_alive(self, handle: RemoteHandle) -> bool:
        state = self._state(DockerHandleData.of(handle).container, self._engine_of(handle))
        return bool(state and state.get("Running"))

    def detach(self, handle: RemoteHandle) -> None:
        _Watcher.forget_if_running(DockerHandleData.of(handle).name)

    # -- while open ----------------------------------------------------------------------------------------------
    def _open_driver(self, handle: RemoteHandle) -> DisplayDriver:
        return self._agent_driver(handle) if _via_agent(handle) else self._x11_driver(handle)

    def _x11_driver(self, handle: RemoteHandle) -> X11Driver:
        from deskctl.core.x11auth import read_cookie
        from deskctl.core.x11open import open_x11  # X11Driver.open, without core/x11.py in a `deskctl do` process

        data = DockerHandleData.of(handle)
        try:
            socket_path, xauthority = data.x11_files()
            cookie = read_cookie(xauthority, _display_number(data.display[1:], self.name))
            # MIT-SHM crosses the container's IPC namespace as a file descriptor (see _x11._Shm)
            return open_x11(data.display, socket_path=socket_path, cookie=cookie, provider=self.name)
        except ProviderUnreachable as exc:
            raise self._lost(handle, "connect to the display", exc) from exc

    def _agent_driver(self, handle: RemoteHandle) -> AgentDriver:
        """One authenticated connection to the desktop's agent (a remote engine's desktop)."""
        from deskctl.agent.client import AgentDriver

        try:
            host, port = DockerHandleData.of(handle).agent_endpoint()
            return AgentDriver.connect(host, port, self._token(handle), provider=self.name)
        except (ProviderUnreachable, SessionLost) as exc:
            raise self._lost(handle, "connect to the desktop's agent", exc) from exc

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        """After a failed X call: a precise error when the container is gone or stopped, else the cause."""
        self._drop_driver(handle.session_id)
        container = DockerHandleData.of(handle).container
        engine = self._engine_of(handle)
        try:
            state = self._state(container, engine)
            if state is not None and state.get("Running"):
                # The display went away a moment before the container stops (its init still reaps): wait for
                # the stop, boundedly, so that the reason (out of memory, exit code) can be told. 5 s was too short
                # on a loaded machine (the OOM was then reported as a plain lost display).
                try:
                    self._client_on(engine).api.wait(container, timeout=LOST_STOP_WAIT)
                except Exception:
                    pass
                state = self._state(container, engine)
        except DeskctlError:
            state = {"Running": True}
        if state is None or not state.get("Running"):
            return self._gone_error(handle, state, doing)
        if isinstance(cause, DeskctlError):
            return cause
        return SessionLost(f"lost the display of {handle.session_id}: {cause}", provider=self.name)

    def _framebuffer_path(self, handle: RemoteHandle) -> str:
        """The framebuffer file Xvfb keeps in a host tmpfs (a local engine's desktop; a remote one's is not here)."""
        return DockerHandleData.of(handle).framebuffer


add_parts(DockerProvider, _LATER)
