"""The snapshot, fork and pause routes of the Daytona fake (a mixin of :class:`fakes.daytona.FakeDaytona`), written
from ``shared/specs/daytona.md`` sections 2, 3, 10, 11 and the generated ``daytona-api-client`` 0.231
(``SandboxApi.create_sandbox_snapshot``, ``fork_sandbox``, ``pause_sandbox``, ``start_sandbox``;
``SnapshotsApi.get_snapshot``, ``get_all_snapshots``, ``remove_snapshot``, ``create_snapshot``; the models
``CreateSandboxSnapshot``, ``ForkSandbox``, ``SnapshotDto``, ``SnapshotState``).

- ``POST /api/sandbox/{idOrName}/snapshot`` ``{name, includeMemory}``: the sandbox goes ``snapshotting`` (answered
  as the ``Sandbox``), a snapshot ``pending`` appears and becomes ``active`` after :attr:`snapshot_polls` reads;
  then the sandbox is back in its state. ``includeMemory`` is for VM classes only and needs ``started``; a
  filesystem-only snapshot of a VM needs ``stopped`` (``CreateSandboxSnapshot``'s description). Names are unique
  in the organization (``snapshot.entity.ts``: ``@Unique(['organizationId', 'name'])``). Needs ``write:snapshots``.
- ``GET /api/snapshots/{idOrName}``, ``GET /api/snapshots`` (``PaginatedSnapshots``; ``name`` partial match,
  ``sourceSandboxId``), ``DELETE /api/snapshots/{id}`` (``removing``, then 404 after :attr:`snapshot_delete_polls`
  reads). ``POST /api/snapshots`` refuses a ``windows`` class (spec section 3: Windows snapshots are made only from
  an existing sandbox) and builds nothing else (the fake builds no images).
- A snapshot keeps the sandbox's folder (its work dir and home: what the fake's sandbox has of its own; a Linux
  sandbox's other absolute paths are this host's). ``POST /api/sandbox`` with ``snapshot`` naming an ``active``
  one makes a sandbox of the source's class and resources with a copy of that folder.
- ``POST /api/sandbox/{idOrName}/fork`` ``{name?}``: a new sandbox with a copy of the folder as it is now.
- ``POST /api/sandbox/{idOrName}/pause`` (VM classes only) and ``start`` (also resumes ``paused``).

Injected failures: :attr:`snapshot_failure` (``"error"``: the snapshot ends in ``error`` with an
``errorReason``), :attr:`conflict_snapshots` (409 "Sandbox state change in progress" on that many snapshot
requests), :attr:`snapshot_quota` (snapshots the organization may hold: ``totalSnapshotQuota``; beyond it a 400
whose words are UNVERIFIED). Sizes are in GB, as the service's (``snapshot.manager.ts``: ``sizeGB``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from datetime import UTC, datetime
from typing import Any

__all__ = ["SnapshotRoutes"]

#: sandbox classes that are VMs (pause, memory snapshots)
VM_CLASSES = frozenset({"windows", "linux-vm"})


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _folder_bytes(root: str) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


class SnapshotRoutes:
    """Mixed into :class:`~fakes.daytona.FakeDaytona`; see the module docstring."""

    # provided by FakeDaytona
    sandboxes: dict[str, dict[str, Any]]
    roots: dict[str, str]
    org_id: str
    scopes: frozenset[str]
    _error: Any

    def _init_snapshots(self) -> None:
        #: snapshot id -> the snapshot (SnapshotDto fields, and private ``_`` keys)
        self.snapshots: dict[str, dict[str, Any]] = {}
        #: snapshot id -> its folder (every snapshot ever made: a test checks the removed ones are gone)
        self.snapshot_roots: dict[str, str] = {}
        self.snapshot_polls = 1
        self.snapshot_delete_polls = 1
        self.snapshot_failure: str | None = None
        self.conflict_snapshots = 0
        self.snapshot_quota = 100

    # -- test controls -----------------------------------------------------------------------------------
    def live_snapshots(self) -> list[dict[str, Any]]:
        """Snapshots that exist (not yet removed), whatever their state."""
        with self._lock:  # type: ignore[attr-defined]
            return [dict(s) for s in self.snapshots.values()]

    def _stop_snapshots(self) -> None:
        for root in self.snapshot_roots.values():
            shutil.rmtree(root, ignore_errors=True)

    # -- lookups -----------------------------------------------------------------------------------------
    def _find_snapshot(self, id_or_name: str) -> dict[str, Any] | None:
        found = self.snapshots.get(id_or_name)
        if found is None:
            found = next((s for s in self.snapshots.values() if s["name"] == id_or_name), None)
        return found

    def _advance_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Time passes in reads: a pending snapshot becomes active (or fails), a removed one goes."""
        if snapshot["state"] in ("pending", "snapshotting"):
            snapshot["_polls"] -= 1
            if snapshot["_polls"] < 0:
                if snapshot["_failure"] == "error":
                    snapshot["state"] = "error"
                    snapshot["errorReason"] = "runner failed to snapshot the sandbox"
                else:
                    snapshot["state"] = "active"
                    snapshot["size"] = _folder_bytes(snapshot["_root"]) / 1024 ** 3
                self._snapshot_done(snapshot)
            elif snapshot["state"] == "pending":
                snapshot["state"] = "snapshotting"
        elif snapshot["state"] == "removing":
            snapshot["_delete_polls"] -= 1
            if snapshot["_delete_polls"] < 0:
                self._drop_snapshot(snapshot["id"])

    def _snapshot_done(self, snapshot: dict[str, Any]) -> None:
        source = self.sandboxes.get(snapshot["sourceSandboxId"] or "")
        if source is not None and source["state"] == "snapshotting":
            source["state"] = source.pop("_before_snapshot", "started")
        snapshot["updatedAt"] = _now()

    def _drop_snapshot(self, snapshot_id: str) -> None:
        gone = self.snapshots.pop(snapshot_id, None)
        if gone is not None:
            shutil.rmtree(gone["_root"], ignore_errors=True)

    def _public_snapshot(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in snapshot.items() if not k.startswith("_")}

    def snapshot_for_create(self, name: str, path: str) -> dict[str, Any] | None:
        """The user snapshot a create names (None: not one of them); 400 when it is not ``active``."""
        snapshot = self._find_snapshot(name)
        if snapshot is None:
            return None
        self._advance_snapshot(snapshot)
        if snapshot["state"] != "active":
            raise self._error(400, f"Snapshot {name} is {snapshot['state']}", path)  # words UNVERIFIED
        snapshot["lastUsedAt"] = _now()
        return snapshot

    # -- routes ------------------------------------------------------------------------------------------
    def snapshot_api(self, method: str, rel: str, query: dict[str, list[str]], body: Any,
                     path: str) -> tuple[int, Any]:
        """``/snapshots`` and ``/snapshots/{idOrName}``."""
        from urllib.parse import unquote

        if rel == "/snapshots" and method == "GET":
            wanted = (query.get("name") or [""])[0].lower()
            source = (query.get("sourceSandboxId") or [""])[0]
            for snapshot in list(self.snapshots.values()):
                self._advance_snapshot(snapshot)
            items = [self._public_snapshot(s) for s in self.snapshots.values()
                     if wanted in s["name"].lower() and (not source or s["sourceSandboxId"] == source)]
            return 200, {"items": items, "total": len(items), "page": 1, "totalPages": 1}
        if rel == "/snapshots" and method == "POST":
            if isinstance(body, dict) and body.get("sandboxClass") == "windows":
                raise self._error(400, "Windows snapshots can only be created from an existing sandbox", path)
            raise self._error(400, "the fake does not build images", path)
        key = unquote(rel[len("/snapshots/"):])
        snapshot = self._find_snapshot(key)
        if method == "GET":
            if snapshot is not None:
                self._advance_snapshot(snapshot)
                snapshot = self.snapshots.get(snapshot["id"])
            if snapshot is None:
                raise self._error(404, f"Snapshot {key} not found", path)
            return 200, self._public_snapshot(snapshot)
        if method == "DELETE":
            if "write:snapshots" not in self.scopes:
                raise self._error(403, "Forbidden resource", path)
            snapshot = self.snapshots.get(key)  # by id only (SnapshotsApi.remove_snapshot)
            if snapshot is None:
                raise self._error(404, f"Snapshot {key} not found", path)
            if snapshot["state"] in ("pending", "snapshotting"):
                raise self._error(409, "Snapshot state change in progress", path)  # words UNVERIFIED
            snapshot["state"] = "removing"
            snapshot["_delete_polls"] = self.snapshot_delete_polls
            return 200, None
        raise self._error(404, f"Cannot {method} {path}", path)

    def sandbox_snapshot_route(self, method: str, sub: str, sandbox: dict[str, Any], body: Any,
                               path: str) -> tuple[int, Any] | None:
        """``snapshot``, ``fork`` and ``pause`` of one sandbox; None for any other route."""
        if method == "POST" and sub == "/snapshot":
            return self._snapshot_sandbox(sandbox, body, path)
        if method == "POST" and sub == "/fork":
            return self._fork(sandbox, body, path)
        if method == "POST" and sub == "/pause":
            if sandbox["sandboxClass"] not in VM_CLASSES:
                raise self._error(400, "Sandbox class does not support pause", path)  # words UNVERIFIED
            if sandbox["state"] != "started":
                raise self._error(400, "Sandbox is not started", path)
            sandbox["state"] = "paused"
            return 200, self._public(sandbox)  # type: ignore[attr-defined]
        return None

    def _snapshot_sandbox(self, sandbox: dict[str, Any], body: Any, path: str) -> tuple[int, Any]:
        if "write:snapshots" not in self.scopes:
            raise self._error(403, "Forbidden resource", path)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
            raise self._error(400, ["name must be a string", "name should not be empty"], path)
        memory = body.get("includeMemory", False)
        if not isinstance(memory, bool):
            raise self._error(400, ["includeMemory must be a boolean value"], path)
        if self.conflict_snapshots > 0 or sandbox["state"] in ("snapshotting", "forking", "pausing", "starting"):
            self.conflict_snapshots = max(0, self.conflict_snapshots - 1)
            raise self._error(409, "Sandbox state change in progress", path)
        vm = sandbox["sandboxClass"] in VM_CLASSES
        if memory and not vm:
            raise self._error(400, "Container sandboxes do not support memory snapshots", path)
        if memory and sandbox["state"] != "started":
            raise self._error(400, "Sandbox must be started to create a snapshot with memory", path)
        if vm and not memory and sandbox["state"] != "stopped":
            raise self._error(400, "Sandbox must be stopped to create a filesystem snapshot", path)
        if not vm and sandbox["state"] not in ("started", "stopped"):
            raise self._error(400, f"Sandbox is {sandbox['state']}", path)
        if self._find_snapshot(body["name"]) is not None:
            raise self._error(409, f"Snapshot with name {body['name']} already exists", path)
        if len(self.snapshots) >= self.snapshot_quota:
            raise self._error(400, f"Snapshot quota exceeded. Maximum allowed: {self.snapshot_quota}", path)
        snapshot_id = str(uuid.uuid4())
        root = tempfile.mkdtemp(prefix="fake-daytona-snapshot-")
        shutil.copytree(self.roots[sandbox["id"]], root, symlinks=True, dirs_exist_ok=True)
        self.snapshot_roots[snapshot_id] = root
        now = _now()
        self.snapshots[snapshot_id] = {
            "id": snapshot_id, "organizationId": self.org_id, "general": False, "name": body["name"],
            "imageName": None, "state": "pending", "size": None, "entrypoint": None, "cpu": sandbox["cpu"],
            "gpu": sandbox["gpu"], "mem": sandbox["memory"], "disk": sandbox["disk"], "errorReason": None,
            "createdAt": now, "updatedAt": now, "lastUsedAt": None, "sourceSandboxId": sandbox["id"],
            "sandboxClass": sandbox["sandboxClass"], "regionIds": [sandbox["target"]],
            "_root": root, "_polls": self.snapshot_polls, "_failure": self.snapshot_failure, "_memory": memory,
            "_workdir": sandbox["_workdir"], "_source_root": self.roots[sandbox["id"]], "_delete_polls": 0,
        }
        sandbox["_before_snapshot"] = sandbox["state"]
        sandbox["state"] = "snapshotting"
        return 200, self._public(sandbox)  # type: ignore[attr-defined]

    def _fork(self, sandbox: dict[str, Any], body: Any, path: str) -> tuple[int, Any]:
        if "write:sandboxes" not in self.scopes:
            raise self._error(403, "Forbidden resource", path)
        name = body.get("name") if isinstance(body, dict) else None
        if name is not None and not isinstance(name, str):
            raise self._error(400, ["name must be a string"], path)
        if sandbox["state"] != "started":
            raise self._error(400, f"Sandbox is {sandbox['state']}", path)
        request = {"name": name or str(uuid.uuid4()), "labels": dict(sandbox["labels"]),
                   "snapshot": sandbox["snapshot"], "target": sandbox["target"],
                   "autoStopInterval": sandbox["autoStopInterval"], "autoDeleteInterval": sandbox["autoDeleteInterval"],
                   "ttlMinutes": sandbox.get("ttlMinutes", 0)}
        if sandbox.get("env"):
            request["env"] = dict(sandbox["env"])
        return self._create(request, path, copy_from=self.roots[sandbox["id"]])  # type: ignore[attr-defined,no-any-return]

    def copy_snapshot_into(self, snapshot: dict[str, Any], root: str) -> None:
        """Fill a new sandbox's folder ``root`` from ``snapshot``."""
        shutil.copytree(snapshot["_root"], root, symlinks=True, dirs_exist_ok=True)

