"""Docker snapshots: the container's filesystem committed to an image (``deskctl-snapshot:<id>``), and the command
lines of the applications whose windows were open, which a restore relaunches.

Processes themselves are not kept: ``docker checkpoint`` (CRIU) needs an engine started with experimental
features and CRIU installed, which deskctl cannot assume (docs/episodes.md says what was measured). A restore
therefore starts a fresh container from the image, the image's entrypoint starts the display and the start app
(its environment was committed with it), and deskctl relaunches the other windows' programs.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from deskctl.episodes import LABEL_SNAPSHOT, Taken
from deskctl.errors import DeskctlError

if TYPE_CHECKING:
    import docker

    from deskctl.episodes.store import Snapshot
    from deskctl.providers.base import Provider, RemoteHandle
    from deskctl.spec import DesktopSpec

__all__ = ["REPOSITORY", "DockerSnapshots", "parse_windows"]

REPOSITORY = "deskctl-snapshot"
#: programs the image's entrypoint starts itself: never relaunched
_ENTRYPOINT_PROGRAMS = frozenset({"Xvfb", "openbox", "xclip", "deskctl-agent"})
#: the options that build a layer over the image (fonts, locale, time zone): a snapshot has them already
_LAYER_OPTIONS = ("fonts", "locale", "timezone")

# Each visible window with a name: its WM_COMMAND (X toolkit programs set it: xterm, xmessage), else the command
# line of the process its _NET_WM_PID names (GTK, Qt, Chromium). One block per window.
_WINDOWS_SCRIPT = r"""
for w in $(xdotool search --onlyvisible --name . 2>/dev/null); do
  printf 'W %s\n' "$w"
  xprop -id "$w" WM_NAME WM_COMMAND _NET_WM_PID 2>/dev/null
  pid=$(xprop -id "$w" _NET_WM_PID 2>/dev/null | sed -n 's/.* = \([0-9][0-9]*\)$/\1/p')
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ]; then printf 'P '; tr '\000' '\037' <"/proc/$pid/cmdline"; echo; fi
done
"""
# Browser profiles lock themselves to the host that runs them (Chromium's Singleton* links name the host name and
# pid): committed, they make the restored browser refuse its profile ("in use on another computer"). They are
# taken out for the commit and put back at once.
_HOST_LOCKS_SCRIPT = r"""
find /home /root /tmp -maxdepth 5 -name 'Singleton*' -type l 2>/dev/null | while read -r f; do
  printf '%s\t%s\n' "$f" "$(readlink "$f")"; rm -f "$f"
done
"""
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_windows(output: str) -> list[dict[str, Any]]:
    """The windows the script saw: ``{"title", "argv"}`` for each one whose program is known, one per command."""
    windows: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in output.splitlines():
        if line.startswith("W "):
            current = {"title": "", "argv": None}
            windows.append(current)
        elif current is None:
            continue
        elif line.startswith("WM_NAME("):
            found = _QUOTED.search(line)
            current["title"] = _unquote(found.group(1)) if found else ""
        elif line.startswith("WM_COMMAND(") and "{" in line:
            argv = [_unquote(m) for m in _QUOTED.findall(line.split("=", 1)[1])]
            if argv:
                current["argv"] = argv
        elif line.startswith("P ") and current["argv"] is None:
            argv = [a for a in line[2:].split("\x1f") if a]
            if argv:
                current["argv"] = argv
    seen: set[tuple[str, ...]] = set()
    out = []
    for window in windows:
        argv = window["argv"]
        if not argv or not window["title"] or tuple(argv) in seen:
            continue
        seen.add(tuple(argv))
        out.append({"title": window["title"], "argv": argv})
    return out


class DockerSnapshots:
    """The snapshot backend of :class:`deskctl.providers.docker.DockerProvider`."""

    def _client(self, provider: Provider, engine: str | None) -> docker.DockerClient:
        client: docker.DockerClient = (provider._client_on(engine) if engine  # type: ignore[attr-defined]
                                       else provider.client)  # type: ignore[attr-defined]
        return client

    def take(self, provider: Provider, handle: RemoteHandle, snapshot_id: str, name: str,
             labels: Mapping[str, str]) -> Taken:
        engine = handle.data.get("engine")
        client = self._client(provider, engine)
        container = str(handle.data.get("container") or handle.resource_id)
        windows: list[dict[str, Any]] = []
        listing = provider.exec(handle, _WINDOWS_SCRIPT, 30.0)
        if listing.exit_code == 0:
            windows = parse_windows(listing.stdout)
        env = self._env(provider, client, container)
        skip = set(_ENTRYPOINT_PROGRAMS)
        if env.get("DESKCTL_START_URL"):
            skip |= {"chromium", "chromium-browser", "chrome"}
        relaunch = [w for w in windows if os.path.basename(w["argv"][0]) not in skip]
        changes = [f"LABEL {key}={json.dumps(str(value))}" for key, value in sorted(labels.items())]
        locks = provider.exec(handle, _HOST_LOCKS_SCRIPT, 30.0)
        taken = [line.split("\t", 1) for line in locks.stdout.splitlines() if "\t" in line]
        try:
            with provider._errors(f"commit the container {handle.session_id}", engine):  # type: ignore[attr-defined]
                container_info = client.api.inspect_container(container)
                committed = client.api.commit(container, repository=REPOSITORY, tag=snapshot_id,
                                              changes=changes, pause=True)
                image_id = str(committed["Id"])
                info = client.api.inspect_image(image_id)  # type: ignore[no-untyped-call]
                base = client.api.inspect_image(container_info["Image"])  # type: ignore[no-untyped-call]
        finally:
            if taken:
                import shlex

                provider.exec(handle, "; ".join(f"ln -sfn {shlex.quote(target)} {shlex.quote(path)}"
                                                for path, target in taken), 30.0)
        size = max(0, int(info.get("Size") or 0) - int(base.get("Size") or 0))
        base_labels = (base.get("Config") or {}).get("Labels") or {}
        stale = sorted(k for k in ((container_info.get("Config") or {}).get("Labels") or {})
                       if k.startswith("deskctl.") and k not in base_labels)
        return Taken(image_id, size_bytes=size, usd_per_gb_month=None,
                     data={"image": f"{REPOSITORY}:{snapshot_id}", "engine": engine, "relaunch": relaunch,
                           "stale_labels": stale})

    def _env(self, provider: Provider, client: docker.DockerClient, container: str) -> dict[str, str]:
        with provider._errors("inspect the container"):  # type: ignore[attr-defined]
            raw = (client.api.inspect_container(container).get("Config") or {}).get("Env") or []
        return dict(str(item).partition("=")[::2] for item in raw)

    def restore_spec(self, spec: DesktopSpec, snap: Snapshot) -> DesktopSpec:
        options = {k: v for k, v in spec.provider_options.items() if k not in _LAYER_OPTIONS}
        options["image"] = snap.data["image"]
        if snap.data.get("engine"):
            options["host"] = snap.data["engine"]
        return spec.model_copy(update={"provider_options": options})

    def restore_labels(self, snap: Snapshot, labels: Mapping[str, str]) -> dict[str, str]:
        # The image carries the labels of the container it was committed from (an engine merges image and
        # container labels): the ones the new container does not set itself are blanked.
        out = {key: "" for key in snap.data.get("stale_labels", []) if key not in labels}
        out.update(labels)
        return out

    def after_ready(self, provider: Provider, handle: RemoteHandle, snap: Snapshot) -> None:
        """Relaunch the programs whose windows were open, and wait (up to 30 s) until their windows are back."""
        relaunch = snap.data.get("relaunch") or []
        for window in relaunch:
            argv = [str(a) for a in window["argv"]]
            provider.launch(handle, argv[0], argv[1:])
        wanted = [str(w["title"]) for w in relaunch]
        deadline = time.monotonic() + 30
        while wanted and time.monotonic() < deadline:
            titles = provider.window_titles(handle)
            if all(any(title == t for t in titles) for title in wanted):
                return
            time.sleep(0.2)

    def retire(self, provider: Provider, handle: RemoteHandle) -> Callable[[], None]:
        """Make way for the restored container at once: kill the old one and take its name away (both take
        milliseconds); returns the removal (the engine's slow part), which the restore runs while the new
        container starts. The host folders stay: the new container reuses the same paths."""
        from docker.errors import APIError

        engine = handle.data.get("engine")
        client = self._client(provider, engine)
        container = str(handle.data.get("container") or handle.resource_id)
        retired = f"{handle.session_id}-retired-{container[:12]}"
        provider._drop_driver(handle.session_id)  # type: ignore[attr-defined]
        with provider._errors(f"retire the container {handle.session_id}", engine):  # type: ignore[attr-defined]
            try:
                client.api.kill(container)
            except APIError as exc:
                if exc.status_code != 409:  # 409: not running (it stopped itself): nothing to kill
                    raise
            client.api.rename(container, retired)

        def remove() -> None:
            provider._remove(container, retired, engine)  # type: ignore[attr-defined]

        return remove

    def delete(self, provider: Provider, snap: Snapshot) -> None:
        from docker.errors import APIError, NotFound

        client = self._client(provider, snap.data.get("engine"))
        # by its label: a snapshot whose maker died before the ledger learnt the image's name is found too
        with provider._errors("list snapshot images"):  # type: ignore[attr-defined]
            found = [str(i["Id"]) for i in client.api.images(filters={"label": f"{LABEL_SNAPSHOT}={snap.snapshot_id}"})]
        for image in found:
            try:
                client.api.remove_image(image, force=True)
            except NotFound:
                pass
            except APIError as exc:
                from deskctl.errors import ProviderApiError

                raise ProviderApiError(f"docker: cannot remove the image of snapshot {snap.name}: "
                                       f"{exc.explanation}", provider=provider.name, status=exc.status_code) from exc
        if self.exists(provider, snap):
            from deskctl.errors import ProviderApiError

            raise ProviderApiError(f"docker: the image of snapshot {snap.name} is still there",
                                   provider=provider.name)

    def exists(self, provider: Provider, snap: Snapshot) -> bool:
        client = self._client(provider, snap.data.get("engine"))
        try:
            with provider._errors("list snapshot images"):  # type: ignore[attr-defined]
                found = client.api.images(filters={"label": f"{LABEL_SNAPSHOT}={snap.snapshot_id}"})
        except DeskctlError:
            raise
        return bool(found)
