"""Episodes: snapshots of a desktop and restores from them (docs/episodes.md).

``snap = desk.snapshot("start")`` keeps the desktop's state with its provider and records it in the ledger (table
``snapshots``: who made it, from which session, its size, the storage rate where the provider bills it, its
expiry); ``desk.restore(snap)`` puts the desktop back as it was then, in place (same session id); and
``open_desktop(..., from_snapshot=snap)`` opens a new desktop from it. A provider that can is marked by the
capability flag ``snapshots``; any other answers ``usage.unsupported``.

What a snapshot keeps depends on the provider (:data:`BACKENDS`): Docker commits the container's filesystem to an
image and notes the command lines of the applications whose windows are open, which a restore relaunches (the
engine's ``docker checkpoint`` needs an experimental daemon and CRIU; see docs/episodes.md).
"""

from __future__ import annotations

import sys
import time

from deskctl.errors import DeskctlError, NotFound, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Protocol

    from deskctl.episodes.store import Snapshot
    from deskctl.ledger import Ledger
    from deskctl.providers.base import Provider, RemoteHandle
    from deskctl.session import Desktop
    from deskctl.spec import DesktopSpec

    class SnapshotBackend(Protocol):
        def take(self, provider: Provider, handle: RemoteHandle, snapshot_id: str, name: str,
                 labels: Mapping[str, str]) -> Taken: ...

        def restore_spec(self, spec: DesktopSpec, snap: Snapshot) -> DesktopSpec: ...

        def restore_labels(self, snap: Snapshot, labels: Mapping[str, str]) -> dict[str, str]: ...

        def after_ready(self, provider: Provider, handle: RemoteHandle, snap: Snapshot) -> None: ...

        def delete(self, provider: Provider, snap: Snapshot) -> None: ...

        def exists(self, provider: Provider, snap: Snapshot) -> bool: ...


__all__ = [
    "BACKENDS",
    "DEFAULT_SNAPSHOT_TTL",
    "Snapshot",
    "Taken",
    "backend_for",
    "delete_snapshot",
    "open_from_snapshot",
    "reap_snapshots",
    "resolve",
    "restore",
    "restore_spec",
    "take_snapshot",
]

#: how long a snapshot is kept when its maker says nothing (the reaper deletes it after this)
DEFAULT_SNAPSHOT_TTL = 7 * 86400.0
#: label of a provider resource that is a deskctl snapshot (its value: the snapshot id)
LABEL_SNAPSHOT = "deskctl.snapshot"
#: provider -> "module:Class" of its snapshot backend; a provider whose capabilities say ``snapshots`` has one
BACKENDS: dict[str, str] = {
    "daytona": "deskctl.providers.daytona.snapshots:DaytonaSnapshots",
    "docker": "deskctl.episodes._docker:DockerSnapshots",
    "memory": "deskctl.episodes._memory:MemorySnapshots",
}


def __getattr__(name: str) -> Any:
    # the store (dataclasses, json) loads only when a snapshot is used: an agent's action imports this package
    # for its takeover check (deskctl.episodes.takeover), and `deskctl do` must stay light
    if name == "Snapshot":
        from deskctl.episodes.store import Snapshot

        return Snapshot
    raise AttributeError(f"module 'deskctl.episodes' has no attribute {name!r}")


class Taken:
    """What a backend made: the provider's resource, its size, the storage rate, and the data a restore needs."""

    __slots__ = ("data", "resource_id", "size_bytes", "usd_per_gb_month")

    def __init__(self, resource_id: str, *, size_bytes: int | None = None, usd_per_gb_month: float | None = None,
                 data: Mapping[str, Any] | None = None) -> None:
        self.resource_id = resource_id
        self.size_bytes = size_bytes
        self.usd_per_gb_month = usd_per_gb_month
        self.data = dict(data or {})


def backend_for(provider: Provider) -> SnapshotBackend:
    """The snapshot backend of ``provider`` (or of the provider class it derives from: a third party's subclass of
    a provider inherits its snapshots with its capabilities); ``usage.unsupported`` when its capabilities say it
    has none."""
    path = next((BACKENDS[name] for name in (getattr(cls, "name", None) for cls in type(provider).__mro__)
                 if isinstance(name, str) and name in BACKENDS), None)
    if not getattr(provider.capabilities, "snapshots", False) or path is None:
        raise UsageError(f"provider {provider.name!r} cannot snapshot or restore a desktop", code="usage.unsupported",
                         provider=provider.name,
                         remedy="use a provider whose capabilities list snapshots (deskctl providers --json)")
    module, _, attr = path.partition(":")
    __import__(module)  # importlib.import_module's answer, without importlib (which imports warnings)
    backend: SnapshotBackend = getattr(sys.modules[module], attr)()
    return backend


def _check_name(name: str) -> str:
    if (not isinstance(name, str) or not name or len(name) > 128 or name in ("ls", "rm", "create")
            or any(c.isspace() or ord(c) < 32 for c in name)):
        raise UsageError(f"{name!r} is not a snapshot name", code="usage.bad_name",
                         remedy="1 to 128 characters without spaces (not ls, rm or create)")
    return name


def take_snapshot(desk: Desktop, name: str, *, ttl: float | None = None, replace: bool = False) -> Snapshot:
    """Snapshot ``desk`` as ``name`` (a live snapshot of that name is ``usage.conflict`` unless ``replace``, which
    deletes the old one once the new one exists). Recorded in the ledger before anything is made (status
    ``deleting`` until the provider confirms the resource, so a crash in between is found by the reaper)."""
    import secrets

    from deskctl.episodes import store
    from deskctl.owners import owner_id

    _check_name(name)
    desk._check_usable()
    provider = desk.provider
    backend = backend_for(provider)
    ledger = desk.ledger
    old = store.find(ledger, name)
    if old is not None and old.snapshot_id != name and not replace:
        raise UsageError(f"a snapshot named {name!r} exists already ({old.snapshot_id}, of {old.session_id})",
                         code="usage.conflict", remedy=f"deskctl snapshot rm {name}, or pass replace=True")
    now = time.time()
    snap = store.Snapshot(snapshot_id="sn-" + secrets.token_hex(5), name=name, session_id=desk.id,
                    provider=provider.name, owner=owner_id(), status="deleting", created_at=now,
                    expires_at=now + (DEFAULT_SNAPSHOT_TTL if ttl is None else float(ttl)),
                    data={"spec": desk.spec.model_dump(mode="json")})
    store.insert(ledger, snap)
    from deskctl.ledger import ledger_id

    labels = {LABEL_SNAPSHOT: snap.snapshot_id, "deskctl.snapshot.name": name, "deskctl.owner": snap.owner,
              "deskctl.ledger": ledger_id(ledger.url), "deskctl.expires": str(int(snap.expires_at or 0))}
    try:
        with desk._guard("snapshot"):
            taken = backend.take(provider, desk._require_handle(), snap.snapshot_id, name, labels)
    except BaseException:
        # nothing confirmed made: the row goes when the resource is confirmed absent, else stays for the reaper
        try:
            if not backend.exists(provider, snap):
                store.delete_row(ledger, snap.snapshot_id)
            else:
                store.set_status(ledger, snap.snapshot_id, "leaked")
        except DeskctlError:
            pass
        raise
    snap.resource_id = taken.resource_id
    snap.size_bytes = taken.size_bytes
    snap.usd_per_gb_month = taken.usd_per_gb_month
    snap.cost_usd = 0.0 if provider.capabilities.billing == "free" else None
    snap.data.update(taken.data)
    snap.status = "ready"
    with ledger.transaction() as tx:
        import json

        tx.run("UPDATE snapshots SET status = 'ready', resource_id = ?, size_bytes = ?, usd_per_gb_month = ?, "
               "cost_usd = ?, data = ? WHERE snapshot_id = ?",
               (snap.resource_id, snap.size_bytes, snap.usd_per_gb_month, snap.cost_usd,
                json.dumps(snap.data, sort_keys=True), snap.snapshot_id))
    ledger.record_event(desk.id, "snapshot", {"snapshot": snap.snapshot_id, "name": name,
                                               "size_bytes": snap.size_bytes})
    if old is not None and replace and old.snapshot_id != snap.snapshot_id:
        delete_snapshot(ledger, old, provider=provider)
    return snap


def resolve(ledger: Ledger, snap: Snapshot | str) -> Snapshot:
    """A snapshot by object, name or id, as the ledger has it now; ``not_found`` when there is no live one."""
    from deskctl.episodes import store

    key = snap.snapshot_id if isinstance(snap, store.Snapshot) else str(snap)
    found = store.get(ledger, key) if isinstance(snap, store.Snapshot) else store.find(ledger, key)
    if found is None or found.status != "ready":
        raise NotFound(f"no snapshot {key!r} in the ledger", remedy="deskctl snapshot ls")
    return found


def restore_spec(spec: DesktopSpec, snap: Snapshot, provider: Provider) -> DesktopSpec:
    if snap.provider != provider.name:
        raise UsageError(f"snapshot {snap.name!r} is of a {snap.provider} desktop, not {provider.name}",
                         code="usage.bad_snapshot", provider=provider.name)
    return backend_for(provider).restore_spec(spec, snap)


def restore(desk: Desktop, snap: Snapshot | str) -> Snapshot:
    """Put ``desk`` back as it was at ``snap``, in place: the desktop keeps its session id, its geometry is
    verified again. Whatever changed since the snapshot is gone. When the new desktop cannot be made, the
    session ends (failed) and nothing is left: the error is raised."""
    from deskctl.episodes import store
    from deskctl.errors import GeometryMismatch

    desk._check_usable()
    if not desk._owned and not desk.detached:
        # its owner process holds a connection to the desktop this would replace, and would take the new one
        # for lost (and end it); a detached desktop (deskctl up) has no such owner
        raise UsageError(f"{desk.id} belongs to another process (it was not brought up with deskctl up): restore "
                         "it there", code="usage.conflict", provider=desk.provider_name,
                         remedy="call desk.restore(...) in the process that opened it")
    provider = desk.provider
    snap = resolve(desk.ledger, snap)
    backend = backend_for(provider)
    spec = restore_spec(desk.spec, snap, provider)
    handle = desk._require_handle()
    with desk._lock:
        retire = getattr(backend, "retire", None)
        removal: _Removal | None = None
        if retire is not None:
            removal = _Removal(retire(provider, handle))  # the old desktop goes while the new one starts
        else:
            provider.destroy(handle)
        desk.handle = None
        try:
            labels = backend.restore_labels(snap, desk.labels())
            new = provider.create(spec, desk.id, labels)
            desk.handle = new
            desk.ledger.record_created(desk.id, new.to_dict())
            provider.wait_ready(new, time.monotonic() + desk.ready_timeout)
            size = provider.display_size(new)
            if size != desk._size:
                raise GeometryMismatch(f"the restored display is {size[0]}x{size[1]}, not {desk._size}",
                                       provider=provider.name)
            backend.after_ready(provider, new, snap)
            if desk.detached:
                provider.detach(new)
            if removal is not None:
                removal.join()
        except BaseException:
            try:
                if removal is not None:
                    removal.join()
            finally:
                desk._teardown(status="failed", reason="restore.failed")
            raise
    store.record_restore(desk.ledger, snap.snapshot_id)
    desk.ledger.record_event(desk.id, "restore", {"snapshot": snap.snapshot_id, "name": snap.name})
    return snap


class _Removal:
    """The removal of a retired desktop, run in a thread; :meth:`join` raises what it raised."""

    def __init__(self, remove: Any) -> None:
        import threading

        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(remove,), name="deskctl-retire", daemon=True)
        self._thread.start()

    def _run(self, remove: Any) -> None:
        try:
            remove()
        except BaseException as exc:
            self._error = exc

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def delete_snapshot(ledger: Ledger, snap: Snapshot | str, *, provider: Provider | None = None) -> Snapshot:
    """Delete the snapshot's resource (idempotent: already gone is success) and mark the row deleted with its
    storage cost; ``cleanup.incomplete`` (row ``leaked``) when the provider cannot confirm it."""
    from deskctl.episodes import store
    from deskctl.errors import CleanupIncomplete
    from deskctl.providers import get_provider

    if not isinstance(snap, store.Snapshot):
        found = store.find(ledger, snap) or store.get(ledger, snap)
        if found is None or not found.live:
            raise NotFound(f"no snapshot {snap!r} in the ledger", remedy="deskctl snapshot ls")
        snap = found
    if provider is None:
        options = (snap.data.get("spec") or {}).get("provider_options") or {}
        provider = get_provider(snap.provider, dict(options))
    backend = backend_for(provider)
    store.set_status(ledger, snap.snapshot_id, "deleting")
    try:
        backend.delete(provider, snap)
    except DeskctlError as exc:
        store.set_status(ledger, snap.snapshot_id, "leaked")
        raise CleanupIncomplete(f"snapshot {snap.name} ({snap.snapshot_id}) could not be deleted: {exc.message}",
                                provider=provider.name, remedy="deskctl snapshot rm " + snap.snapshot_id,
                                details={"left": [snap.snapshot_id]}) from exc
    now = time.time()
    snap.deleted_at = now
    store.set_status(ledger, snap.snapshot_id, "deleted", at=now, cost_usd=snap.storage_cost(now))
    snap.status = "deleted"
    return snap


def reap_snapshots(ledger: Ledger, *, now: float | None = None, owner_alive: Any = None,
                   provider_filter: set[str] | None = None) -> list[Snapshot]:
    """Delete the snapshots whose expiry has passed, and retry the ones left ``leaked`` or ``deleting`` by a
    process that died (only those of ``provider_filter``'s providers when given). Returns what was deleted; a
    snapshot that cannot be deleted stays ``leaked``. ``deskctl reap`` calls it."""
    from deskctl.episodes import store

    if owner_alive is None:
        from deskctl.owners import owner_alive as alive

        def owner_alive(owner: str) -> bool:
            return alive(owner) is not False  # another host's owner is taken as alive
    now = time.time() if now is None else now
    done = []
    for snap in store.list_snapshots(ledger):
        if provider_filter is not None and snap.provider not in provider_filter:
            continue
        due = snap.expires_at is not None and snap.expires_at <= now
        stuck = snap.status == "leaked" or (snap.status == "deleting" and not owner_alive(snap.owner))
        if not (due or stuck):
            continue
        try:
            done.append(delete_snapshot(ledger, snap))
        except DeskctlError:
            continue
    return done


def open_from_snapshot(spec: DesktopSpec, snap: Snapshot | str, *, ledger: Ledger | None, desktop_class: type[Desktop],
                       **desktop: Any) -> Desktop:
    """A new desktop that starts as ``snap`` (what :func:`deskctl.open_desktop` does with ``from_snapshot``).
    ``desktop_class`` is :class:`deskctl.session.Desktop`, passed in by its callers: this package is below the
    session module, which calls it for snapshots and the takeover check."""
    from deskctl.episodes import store
    from deskctl.ledger import open_ledger
    from deskctl.providers import get_provider

    book = ledger if ledger is not None else open_ledger()
    try:
        found = resolve(book, snap)
        provider = get_provider(spec.provider, dict(spec.provider_options))
        try:
            backend = backend_for(provider)
            restored = restore_spec(spec, found, provider)
        finally:
            provider.close()
    except BaseException:
        if ledger is None:
            book.close()
        raise
    desk = desktop_class(restored, ledger=book, **desktop)
    desk._owns_ledger = ledger is None
    desk.open()
    try:
        backend.after_ready(desk.provider, desk._require_handle(), found)
    except BaseException:
        desk._teardown(status="failed", reason="restore.failed")
        raise
    store.record_restore(book, found.snapshot_id)
    book.record_event(desk.id, "restore", {"snapshot": found.snapshot_id, "name": found.name})
    return desk
