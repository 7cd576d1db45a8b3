"""Daytona snapshots (docs/episodes.md): a snapshot of the sandbox made by the service, and a restore that makes a
new sandbox from it. The wire calls are :class:`~deskctl.providers.daytona.client.DaytonaApi`'s; this is the
policy.

- **Snapshot**: ``POST /sandbox/{id}/snapshot`` ``{name, includeMemory}`` (daytona-api-client 0.231,
  ``CreateSandboxSnapshot``), named ``deskctl-<snapshot id>`` so that it is found by name when its maker died
  before the ledger learnt its id (the API keeps no labels on a snapshot). A VM sandbox (``windows``,
  ``linux-vm``) is snapshotted with its memory (``includeMemory`` needs it ``started``, which a desktop is; a
  filesystem-only snapshot would need it ``stopped``); a container cannot keep memory, so its filesystem is kept.
  Windows snapshots exist only this way: ``POST /snapshots`` cannot make one (spec section 3). The sandbox
  goes ``snapshotting`` and back to its state; the snapshot goes ``pending``/``snapshotting`` to ``active``
  (``error``/``build_failed``: the snapshot is deleted and the error raised). A 409 ("state change in
  progress") is waited out; a lost answer is settled by reading the snapshot by name.
- **Restore**: a sandbox created from the snapshot (``snapshot`` of ``POST /sandbox``) under the same session
  id, after the old one is destroyed (the session id is the sandbox's name). ``fork`` is not a restore: it
  copies the sandbox as it is now, not as it was.
- **Delete**: ``DELETE /snapshots/{id}``, then ``GET`` until 404; found by name, so an id never recorded is no
  leak.
- **Size**: the snapshot's ``size`` is in GB (the runner reports ``sizeGB``: daytonaio/daytona
  ``snapshot.manager.ts``), recorded in bytes (GiB). Daytona's price of snapshot storage is not known.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from deskctl.episodes import Taken
from deskctl.errors import DeskctlError, InfrastructureError, ProviderApiError
from deskctl.providers._http import answer_lost
from deskctl.providers.daytona.handle_data import DaytonaHandleData

if TYPE_CHECKING:
    from deskctl.episodes.store import Snapshot
    from deskctl.providers.base import Provider, RemoteHandle
    from deskctl.providers.daytona.provider import DaytonaProvider
    from deskctl.spec import DesktopSpec

__all__ = ["SNAPSHOT_PREFIX", "DaytonaSnapshots", "snapshot_name"]

SNAPSHOT_PREFIX = "deskctl-"
#: sandbox classes that are VMs: their snapshots keep memory (daytona-api-client ``CreateSandboxSnapshot``)
VM_CLASSES = frozenset({"windows", "linux-vm"})
#: snapshot states (daytona-api-client ``SnapshotState``) that will not become ``active``
FAILED_SNAPSHOT_STATES = frozenset({"error", "build_failed", "removing", "inactive"})


def snapshot_name(snapshot_id: str) -> str:
    """The Daytona name of deskctl's snapshot ``snapshot_id``."""
    return SNAPSHOT_PREFIX + snapshot_id


def _api(provider: Provider) -> DaytonaProvider:
    return cast("DaytonaProvider", provider)


def _timeout(api: DaytonaProvider, handle: RemoteHandle, last: str) -> DeskctlError:
    from deskctl.errors import ReadinessTimeout

    return ReadinessTimeout(f"daytona: the snapshot of {handle.session_id} was not made within "
                            f"{api.opts.snapshot_timeout:g}s (last: {last})", provider=api.name,
                            details={"last": last}, remedy="raise the snapshot_timeout option (-o snapshot_timeout=S)")


class DaytonaSnapshots:
    """The snapshot backend of :class:`deskctl.providers.daytona.DaytonaProvider`."""

    def take(self, provider: Provider, handle: RemoteHandle, snapshot_id: str, name: str,
             labels: Mapping[str, str]) -> Taken:
        api = _api(provider)
        deadline = time.monotonic() + api.opts.snapshot_timeout
        data = DaytonaHandleData.of(handle)
        api_url = data.api_url or None
        sandbox = api._get_sandbox(handle, deadline=deadline) or {}
        sandbox_class = str(sandbox.get("sandboxClass") or data.sandbox_class or "container")
        include_memory = sandbox_class in VM_CLASSES
        resource = snapshot_name(snapshot_id)
        last = "not sent"
        try:
            for _ in api._polls(deadline):
                try:
                    api._snapshot_sandbox(handle, resource, include_memory=include_memory, deadline=deadline)
                    break
                except ProviderApiError as err:
                    if err.status == 409:  # a state change in progress (a keepalive's, a start's): wait for it
                        last = err.message
                        continue
                    if answer_lost(err) and api._get_snapshot(resource, api_url=api_url, deadline=deadline):
                        break
                    raise
                except InfrastructureError as err:
                    if answer_lost(err) and api._get_snapshot(resource, api_url=api_url, deadline=deadline):
                        break
                    raise
            else:
                raise _timeout(api, handle, f"the snapshot was refused until then: {last}")
            found = self._wait_active(api, handle, resource, deadline)
        except BaseException:
            try:
                self._delete(api, resource, api_url)  # whatever was made goes; the error is the one raised
            except DeskctlError:
                pass  # not confirmed: take_snapshot finds it there and leaves the row to the reaper
            raise
        size = found.get("size")
        size_bytes = int(float(size) * 1024 ** 3) if isinstance(size, int | float) and size >= 0 else None
        return Taken(str(found.get("id") or resource), size_bytes=size_bytes, usd_per_gb_month=None,
                     data={"daytona_snapshot": resource, "daytona_snapshot_id": found.get("id"),
                           "sandbox_class": sandbox_class, "include_memory": include_memory, "api_url": api_url})

    @staticmethod
    def _wait_active(api: DaytonaProvider, handle: RemoteHandle, resource: str, deadline: float) -> dict[str, Any]:
        """Until the snapshot is ``active`` and the sandbox has left ``snapshotting`` (it is the desktop still in
        use); the snapshot's DTO."""
        api_url = DaytonaHandleData.of(handle).api_url or None
        last = "not polled"
        snapshot: dict[str, Any] | None = None
        for _ in api._polls(deadline):
            if snapshot is None or snapshot.get("state") != "active":
                snapshot = api._get_snapshot(resource, api_url=api_url, deadline=deadline)
                state = str((snapshot or {}).get("state") or "absent")
                if state in FAILED_SNAPSHOT_STATES:
                    raise ProviderApiError(
                        f"daytona: the snapshot of {handle.session_id} failed ({state}: "
                        f"{(snapshot or {}).get('errorReason') or 'no reason given'})", provider=api.name,
                        details={"state": state})
            sandbox = api._get_sandbox(handle, deadline=deadline)
            sandbox_state = str(sandbox.get("state") or "unknown") if sandbox else "gone"
            last = f"snapshot {(snapshot or {}).get('state') or 'absent'}, sandbox {sandbox_state}"
            if sandbox is None:
                from deskctl.errors import SessionLost

                raise SessionLost(f"daytona: sandbox {handle.resource_id} went away while it was snapshotted",
                                  provider=api.name)
            if snapshot is not None and snapshot.get("state") == "active" and sandbox_state != "snapshotting":
                return snapshot
        raise _timeout(api, handle, last)

    @staticmethod
    def _delete(api: DaytonaProvider, resource: str, api_url: str | None) -> None:
        """Delete the snapshot called ``resource`` and wait until it is gone; raises when that is not confirmed."""
        deadline = time.monotonic() + api.destroy_timeout
        last = "not polled"
        for _ in api._polls(deadline):
            found = api._get_snapshot(resource, api_url=api_url, deadline=deadline)
            if found is None:
                return
            last = f"state {found.get('state')}"
            if found.get("state") == "removing":
                continue
            try:
                api._delete_snapshot(str(found.get("id") or resource), api_url=api_url, deadline=deadline)
            except ProviderApiError as err:
                if err.status != 409:
                    raise
                last = err.message
        raise ProviderApiError(f"daytona: snapshot {resource} is still there after {api.destroy_timeout:g}s "
                               f"({last})", provider=api.name, details={"left": [resource]})

    def restore_spec(self, spec: DesktopSpec, snap: Snapshot) -> DesktopSpec:
        options: dict[str, Any] = dict(spec.provider_options)
        options["snapshot"] = snap.data["daytona_snapshot"]
        return spec.model_copy(update={"provider_options": options})

    def restore_labels(self, snap: Snapshot, labels: Mapping[str, str]) -> dict[str, str]:
        return dict(labels)

    def after_ready(self, provider: Provider, handle: RemoteHandle, snap: Snapshot) -> None:
        """Nothing to relaunch: the sandbox starts from the service's snapshot (with its memory, on a VM)."""

    def delete(self, provider: Provider, snap: Snapshot) -> None:
        self._delete(_api(provider), snapshot_name(snap.snapshot_id), snap.data.get("api_url"))

    def exists(self, provider: Provider, snap: Snapshot) -> bool:
        try:
            return _api(provider)._get_snapshot(snapshot_name(snap.snapshot_id),
                                                api_url=snap.data.get("api_url")) is not None
        except DeskctlError:
            return True  # unknown: the row stays for the reaper
