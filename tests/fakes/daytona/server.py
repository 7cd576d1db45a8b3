"""A loopback fake of Daytona's classic REST API and toolbox computer-use API, written from
``shared/specs/daytona.md``, backed by one real Xvfb per sandbox.

Strict where the service is strict: Bearer (API key, or JWT plus ``X-Daytona-Organization-ID``), API-key
scopes, create-body validation (no cpu/memory/disk/gpu with a snapshot, no buildInfo with a snapshot, interval
rules), region and class access, total quota, NestJS error shapes, the toolbox's own error shapes, capitalised
``ProcessStatus`` keys, 503 before computer use starts. Every request is logged (:attr:`FakeDaytona.log`) with
the time the server spent on it.

Injectable failures: :meth:`FakeDaytona.inject` (any status, body and headers on a method and path pattern,
e.g. 429 with ``Retry-After-sandbox-create``, a bare 502), :attr:`FakeDaytona.conflict_deletes` (409 "state
change in progress"), :attr:`FakeDaytona.create_failure` (the sandbox is made, then the answer fails:
``"failed_to_start"``, ``"bare_502"``, ``"hang"``, ``"drop"``), :meth:`~fakes._http.LoopbackService.delay_create`
(a create slower than the client: the sandbox appears only after some lookups (``GET /sandbox``, ``GET
/sandbox/{idOrName}``), or at ``finish_create()``, and is answered only then: the spec's create waits up to 30 s
server-side, longer than a short client timeout), :attr:`FakeDaytona.cu_unavailable` (503s after
``computeruse/start`` while the plugin loads), :meth:`FakeDaytona.revoke_key`, and a slow start
(:attr:`FakeDaytona.start_polls`: GETs in ``creating`` before ``started``).

Files and commands (spec sections 5 and 11): every sandbox has a real folder of its own
(:meth:`FakeDaytona.root_of`) holding its work dir (``GET /work-dir``), against which relative paths resolve.
A Linux sandbox's absolute paths are this host's; a Windows sandbox's (``C:\\Users\\...``) are mapped into its
folder (``<root>/C/Users/...``), since its guest is this host's shell. ``files/bulk-upload`` reads multipart
parts ``files[i].path`` and ``files[i].file``; ``files/bulk-download`` answers a multipart body (a ``file`` part
per file, an ``error`` part with error JSON per failure, each part's ``filename`` the requested path);
``files/info`` (404/403/400), ``files/folder`` and ``files/permissions`` as the daemon's; ``process/execute``
runs the daemon's shell (the first of zsh, bash, sh) in ``cwd`` (default: the work dir) with ``envs``, answers
``exitCode: -1`` when it cannot start there, and 408 ``PROCESS_EXECUTION_TIMEOUT``.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
import shutil
import signal
import stat as stat_module
import subprocess
import tempfile
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from fakes._desktop import XvfbDesktop
from fakes._http import Drop, HttpError, Injection, JsonHandler, LoggedRequest, LoopbackService
from fakes.daytona.snapshots import SnapshotRoutes

__all__ = ["SNAPSHOTS", "FakeDaytona", "Injection", "LoggedRequest"]

#: name -> (cpu, memory GiB, disk GiB, sandbox class)
SNAPSHOTS: dict[str, tuple[float, float, float, str]] = {
    "daytona-small": (1, 1, 3, "container"),
    "daytona-medium": (2, 4, 8, "container"),
    "daytona-large": (4, 8, 10, "container"),
    "windows": (2, 8, 30, "windows"),
}
DEFAULT_SNAPSHOT = "daytona-small"
_TOOLBOX_KEYS = {
    "enter", "escape", "tab", "backspace", "delete", "space", "home", "end", "pageup", "pagedown", "insert",
    "up", "down", "left", "right", "capslock", "menu", *(f"f{i}" for i in range(1, 25)),
}
_KEY_ALIASES = {"return": "enter", "esc": "escape", "del": "delete"}
_MODIFIER_ALIASES = {
    "ctrl": "ctrl", "control": "ctrl", "alt": "alt", "option": "alt", "shift": "shift", "cmd": "super",
    "command": "super", "meta": "super", "super": "super", "win": "super", "windows": "super",
}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class _Handler(JsonHandler):
    owner: FakeDaytona

    def route(self, path: str, query: dict[str, list[str]], raw: bytes) -> tuple[int, Any, str]:
        owner = self.owner
        # the upload route reads its body as multipart whatever it is (gin's MultipartReader), never as JSON
        multipart = (self.headers.get("Content-Type") or "").lower().startswith("multipart/") or (
            path.startswith("/toolbox/") and path.endswith("/files/bulk-upload"))
        if raw and not multipart:
            try:
                self.logged_body = json.loads(raw)
            except ValueError:
                raise owner._error(400, "Unexpected token in JSON", path) from None
        self.raise_injected(path)
        if path.startswith("/api/") or path == "/api":
            status, answer = owner.handle_api(self.command, path, query, self.headers, self.logged_body)
        elif path.startswith("/toolbox/"):
            body: Any = raw if multipart else self.logged_body
            status, answer = owner.handle_toolbox(self.command, path, query, self.headers, body)
            if isinstance(answer, _Multipart):
                return status, answer.payload, answer.content_type
            if multipart:
                self.logged_body = owner.last_upload
        else:
            raise owner._error(404, f"Cannot {self.command} {path}", path)
        return status, answer, "application/json"

    def fake_bug(self, exc: Exception) -> Any:
        return {"statusCode": 500, "message": f"fake error: {type(exc).__name__}: {exc}"}

    do_PATCH = JsonHandler.dispatch


class _Multipart:
    """A multipart/form-data answer (bulk-download)."""

    boundary = "DAYTONA-FILE-BOUNDARY"

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def part(self, name: str, filename: str, content_type: str, data: bytes) -> None:
        quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
        self.chunks.append(f'--{self.boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{quoted}"'
                           f"\r\nContent-Type: {content_type}\r\n\r\n".encode() + data + b"\r\n")

    @property
    def payload(self) -> bytes:
        return b"".join(self.chunks) + f"--{self.boundary}--\r\n".encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"


def _split_multipart(raw: bytes, content_type: str) -> list[tuple[dict[str, str], bytes]] | None:
    """The parts of a multipart body as (headers with lower-case names, bytes); None when it is not one (no
    boundary, or no closing boundary: a truncated body)."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not content_type.lower().startswith("multipart/form-data") or match is None:
        return None
    delimiter = b"--" + match.group(1).encode()
    start = raw.find(delimiter)
    if start < 0:
        return None
    parts: list[tuple[dict[str, str], bytes]] = []
    for piece in (b"\r\n" + raw[start:]).split(b"\r\n" + delimiter)[1:]:
        if piece.startswith(b"--"):
            return parts
        line_end = piece.find(b"\r\n")
        if line_end < 0:
            return None
        piece = piece[line_end + 2:]
        if piece.startswith(b"\r\n"):
            head, data = b"", piece[2:]
        else:
            head, sep, data = piece.partition(b"\r\n\r\n")
            if not sep:
                return None
        headers: dict[str, str] = {}
        for line in head.split(b"\r\n"):
            name, colon, value = line.decode("utf-8", "replace").partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        parts.append((headers, data))
    return None


def _form_field(disposition: str, key: str) -> str | None:
    match = re.search(rf'(?:^|;)\s*{key}="((?:[^"\\]|\\.)*)"', disposition)
    return match.group(1) if match else None


class FakeDaytona(SnapshotRoutes, LoopbackService):
    """The fake service. Use as a context manager (or :meth:`start` / :meth:`stop` in ``finally``)."""

    handler_class = _Handler
    thread_name = "fake-daytona"
    #: every variable of the vendor's (none may leak into a test from the machine)
    vendor_vars = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_API_URL",
                   "DAYTONA_TARGET")

    def __init__(
        self,
        *,
        api_key: str = "dtn_fake_key_0123456789",
        jwt: str | None = None,
        org_id: str = "org-fake-1",
        scopes: frozenset[str] = frozenset({"write:sandboxes", "delete:sandboxes", "write:snapshots"}),
        list_shape: str = "items",
        quota: tuple[float, float, float] = (10, 10, 30),
        windows_size: tuple[int, int] = (1024, 768),
        windows_regions: frozenset[str] = frozenset({"us"}),
        default_region: str = "us",
        start_polls: int = 0,
        destroy_polls: int = 1,
        page_size: int = 100,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.jwt = jwt
        self.org_id = org_id
        self.scopes = scopes
        self.list_shape = list_shape
        self.quota = quota
        self.windows_size = windows_size
        self.windows_regions = windows_regions
        self.default_region = default_region
        self.start_polls = start_polls
        self.destroy_polls = destroy_polls
        self.page_size = page_size
        #: eventual consistency (#5138): a deleted sandbox still shows in this many list answers, as started
        self.ghost_lists = 0
        self._ghosts: list[tuple[dict[str, Any], int]] = []
        self.maintenance = False
        self.revoked = False
        self.conflict_deletes = 0
        self.cu_unavailable = 0
        self.create_failure: str | None = None
        self.sandboxes: dict[str, dict[str, Any]] = {}
        #: sandbox id -> its folder (every sandbox ever made: a test checks the removed ones are gone)
        self.roots: dict[str, str] = {}
        #: what the last bulk-upload carried (part name -> path, or the file's name and size): the request log
        self.last_upload: dict[str, Any] = {}
        self._release = threading.Event()
        self._init_snapshots()  # snapshot, fork and pause: fakes.daytona.snapshots

    # -- lifecycle ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        self._release.set()  # a create held by create_failure="hang" answers now
        super().stop()
        for root in self.roots.values():
            shutil.rmtree(root, ignore_errors=True)
        self._stop_snapshots()

    def root_of(self, sandbox_id: str) -> str:
        """The folder of a sandbox on this host (where a Windows sandbox's drives are)."""
        return self.roots[sandbox_id]

    def host_path(self, sandbox_id: str, path: str) -> str:
        """Where a path the client names lies on this host (see the module docstring)."""
        with self._lock:
            return self._host_path(self.sandboxes[sandbox_id], path)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def toolbox_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/toolbox"

    def env(self) -> dict[str, str]:
        """The vendor's variables that point a client at this fake."""
        return {"DAYTONA_API_KEY": self.api_key, "DAYTONA_API_URL": self.api_url}

    # -- test controls ---------------------------------------------------------------------------------
    def revoke_key(self) -> None:
        self.revoked = True

    def restore_key(self) -> None:
        self.revoked = False

    def live(self) -> list[dict[str, Any]]:
        """Sandboxes that exist (not yet deleted), whatever their state."""
        with self._lock:
            return [dict(s) for s in self.sandboxes.values()]

    def requests(self, prefix: str = "") -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if r.path.startswith(prefix)]

    def archive(self, sandbox_id: str) -> None:
        """What the service does when a stopped sandbox is archived: the toolbox then answers 404 "sandbox
        container not found" (spec section 8, #4632) while ``GET /sandbox/{id}`` says ``archived``."""
        with self._lock:
            self.sandboxes[sandbox_id]["state"] = "archived"

    def auto_stop(self, sandbox_id: str) -> None:
        """What the service does when the idle timer fires: stop, and delete at once with autoDelete 0."""
        with self._lock:
            sandbox = self.sandboxes[sandbox_id]
            sandbox["state"] = "stopped"
            if sandbox.get("autoDeleteInterval") == 0:
                self._remove(sandbox_id)

    # -- internals ---------------------------------------------------------------------------------------
    def _error(self, status: int, message: str | list[str], path: str) -> HttpError:
        text = ", ".join(message) if isinstance(message, list) else message
        return HttpError(status, {"path": path, "timestamp": _now(), "statusCode": status,
                                   "error": HTTPStatus(status).phrase, "message": text})

    def _authorize(self, headers: Any, path: str, *, toolbox: bool) -> None:
        auth = headers.get("Authorization") or ""
        token = auth[7:] if auth.startswith("Bearer ") else None
        ok = False
        if token is not None and not self.revoked:
            if token == self.api_key:
                ok = True
            elif self.jwt is not None and token == self.jwt:
                if headers.get("X-Daytona-Organization-ID") != self.org_id:
                    raise self._error(403, "Organization ID header is missing or not a member", path)
                ok = True
        if ok:
            return
        if toolbox:
            message = "missing authentication: no token" if token is None else "authentication failed: invalid token"
            raise HttpError(401, {"statusCode": 401, "message": message, "code": "UNAUTHORIZED",
                                   "timestamp": _now(), "path": path, "method": "GET"})
        raise self._error(401, "Invalid credentials" if token else "Unauthorized", path)

    def _usage(self) -> tuple[float, float, float]:
        cpu = mem = disk = 0.0
        for sandbox in self.sandboxes.values():
            cpu += sandbox["cpu"]
            mem += sandbox["memory"]
            disk += sandbox["disk"]
        return cpu, mem, disk

    def _find(self, id_or_name: str, path: str) -> dict[str, Any]:
        sandbox = self.sandboxes.get(id_or_name)
        if sandbox is None:
            sandbox = next((s for s in self.sandboxes.values() if s["name"] == id_or_name), None)
        if sandbox is None:
            raise self._error(404, f"Sandbox with ID or name {id_or_name} not found", path)
        return sandbox

    def _remove(self, sandbox_id: str) -> None:
        gone = self.sandboxes.pop(sandbox_id, None)
        if gone is not None and self.ghost_lists > 0:
            self._ghosts.append(({**gone, "state": "started", "desiredState": "started"}, self.ghost_lists))
        desktop = self._desktops.pop(sandbox_id, None)
        if desktop is not None:
            desktop.stop()  # synchronously: a 404 means nothing of the sandbox is left
        root = self.roots.get(sandbox_id)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def _current_key(self, headers: Any, path: str) -> dict[str, Any]:
        """``GET /api-keys/current`` (daytona-api-client 0.231: ``ApiKeyList``). A JWT is no API key: the
        answer to one is UNVERIFIED, the fake says 404."""
        if (headers.get("Authorization") or "")[7:] != self.api_key:
            raise self._error(404, "API key not found", path)
        return {"name": "deskctl-fake", "value": f"{self.api_key[:4]}********************{self.api_key[-3:]}",
                "createdAt": "2026-01-01T00:00:00Z", "permissions": sorted(self.scopes), "lastUsedAt": _now(),
                "expiresAt": None, "userId": "user-fake-1", "organizationId": self.org_id}

    def _public(self, sandbox: dict[str, Any], *, list_item: bool = False) -> dict[str, Any]:
        out = {k: v for k, v in sandbox.items() if not k.startswith("_")}
        out["labels"] = dict(sandbox["labels"])
        ttl = sandbox.get("ttlMinutes") or 0
        if ttl > 0:  # the wall-clock backstop (daytona-api-client: Sandbox.autoDestroyAt)
            created = datetime.fromisoformat(sandbox["createdAt"].replace("Z", "+00:00"))
            out["autoDestroyAt"] = (created + timedelta(minutes=ttl)).isoformat().replace("+00:00", "Z")
        if list_item:
            for key in ("env", "volumes", "buildInfo", "kvm"):
                out.pop(key, None)
        return out

    # -- the API -----------------------------------------------------------------------------------------
    def handle_api(self, method: str, path: str, query: dict[str, list[str]], headers: Any,
                   body: Any) -> tuple[int, Any]:
        rel = path[len("/api"):] or "/"
        if method == "GET" and rel == "/config":
            return 200, {"version": "0.190.0-fake", "proxyToolboxUrl": self.toolbox_url,
                         "proxyTemplateUrl": "", "defaultSnapshot": DEFAULT_SNAPSHOT,
                         "maintananceMode": self.maintenance, "sshGatewayCommand": "ssh -p 2222 {{TOKEN}}@localhost",
                         "billingApiUrl": "", "maxAutoArchiveInterval": 43200}
        self._authorize(headers, path, toolbox=False)
        with self._lock:
            if method == "GET" and re.fullmatch(r"/sandbox(/[^/]+)?", rel):
                self._lookup()  # time passes in lookups: a delayed create may be made now
            if rel == "/api-keys/current" and method == "GET":
                return 200, self._current_key(headers, path)
            if rel == "/sandbox" and method == "GET":
                return 200, self._list(query, path)
            if rel == "/snapshots" or rel.startswith("/snapshots/"):
                return self.snapshot_api(method, rel, query, body, path)
            if rel == "/sandbox" and method == "POST":
                if "write:sandboxes" not in self.scopes:
                    raise self._error(403, "Forbidden resource", path)
                return self._create(body, path)
            match = re.fullmatch(r"/organizations/([^/]+)/usage", rel)
            if match and method == "GET":
                if match.group(1) != self.org_id:
                    raise self._error(403, "Forbidden resource", path)
                cpu, mem, disk = self._usage()
                return 200, {"regionUsage": [{
                    "regionId": self.default_region, "sandboxClass": "container",
                    "totalCpuQuota": self.quota[0], "currentCpuUsage": cpu,
                    "totalMemoryQuota": self.quota[1], "currentMemoryUsage": mem,
                    "totalDiskQuota": self.quota[2], "currentDiskUsage": disk,
                    "totalGpuQuota": 0, "currentGpuUsage": 0, "maxCpuPerSandbox": 4,
                }, {
                    "regionId": self.default_region, "sandboxClass": "windows",
                    "totalCpuQuota": self.quota[0], "currentCpuUsage": cpu,
                    "totalMemoryQuota": self.quota[1], "currentMemoryUsage": mem,
                    "totalDiskQuota": self.quota[2], "currentDiskUsage": disk,
                    "totalGpuQuota": 0, "currentGpuUsage": 0, "maxCpuPerSandbox": 4,
                }], "totalSnapshotQuota": self.snapshot_quota, "currentSnapshotUsage": len(self.snapshots),
                    "totalVolumeQuota": 100,
                    "currentVolumeUsage": 0}
            match = re.fullmatch(r"/sandbox/([^/]+)(/.*)?", rel)
            if match is None:
                raise self._error(404, f"Cannot {method} {path}", path)
            sandbox = self._find(unquote(match.group(1)), path)
            sub = match.group(2) or ""
            return self._sandbox_route(method, sub, sandbox, body, path)

    def _list(self, query: dict[str, list[str]], path: str) -> Any:
        try:
            limit = int(query.get("limit", ["100"])[0])
        except ValueError:
            raise self._error(400, ["limit must be an integer number"], path) from None
        if not 1 <= limit <= 200:
            bound = "not be greater than 200" if limit > 200 else "not be less than 1"
            raise self._error(400, [f"limit must {bound}"], path)
        wanted: dict[str, str] = {}
        if "labels" in query:
            try:
                wanted = json.loads(query["labels"][0])
            except ValueError:
                raise self._error(400, "Invalid labels JSON", path) from None
            if not isinstance(wanted, dict):
                raise self._error(400, "labels must be a JSON object", path)
        states = set(query.get("states", []))
        ghosts = [g for g, _ in self._ghosts]
        self._ghosts = [(g, n - 1) for g, n in self._ghosts if n > 1]
        items = [s for s in [*self.sandboxes.values(), *ghosts]
                 if all(s["labels"].get(k) == v for k, v in wanted.items())
                 and (not states or s["state"] in states)
                 and not (s["state"] == "error" and s.get("desiredState") == "destroyed")]
        items.sort(key=lambda s: s["createdAt"])
        start = int(query.get("cursor", ["0"])[0] or 0)
        page = items[start:start + min(limit, self.page_size)]
        next_index = start + len(page)
        public = [self._public(s, list_item=True) for s in page]
        if self.list_shape == "array":
            return [self._public(s, list_item=True) for s in items]
        return {"items": public, "nextCursor": str(next_index) if next_index < len(items) else None}

    def _validate_create(self, body: Any, path: str) -> list[str]:
        if not isinstance(body, dict):
            raise self._error(400, "Request body must be a JSON object", path)
        errors: list[str] = []
        for key in ("name", "snapshot", "target", "user"):
            if key in body and not isinstance(body[key], str):
                errors.append(f"{key} must be a string")
        for key in ("labels", "env"):
            if key in body:
                value = body[key]
                if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                    errors.append(f"{key} must be an object of strings")
        for key in ("autoStopInterval", "autoArchiveInterval", "autoDeleteInterval", "autoPauseInterval",
                    "ttlMinutes", "cpu", "gpu", "memory", "disk"):
            value = body.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                errors.append(f"{key} must be an integer number")
        for key in ("autoStopInterval", "ttlMinutes", "autoPauseInterval"):
            if isinstance(body.get(key), int) and body[key] < 0:
                errors.append(f"{key} must not be less than 0")
        return errors

    def _create(self, body: Any, path: str, *, copy_from: str | None = None) -> tuple[int, Any]:
        """A new sandbox (``copy_from``: a fork's source folder, copied into the new one's)."""
        errors = self._validate_create(body, path)
        if errors:
            raise self._error(400, errors, path)
        assert isinstance(body, dict)
        snapshot = body.get("snapshot")
        if body.get("buildInfo") is not None and snapshot:
            raise self._error(400, "Cannot specify a snapshot when using a build info entry", path)
        if body.get("buildInfo") is None and any(body.get(k) is not None for k in ("cpu", "gpu", "memory", "disk")):
            raise self._error(400, "Cannot specify Sandbox resources when using a snapshot", path)
        if body.get("gpuType"):
            raise self._error(400, "Cannot specify Sandbox resources when using a snapshot", path)
        if body.get("buildInfo") is not None:
            raise self._error(400, "the fake does not build images", path)
        snapshot = snapshot or DEFAULT_SNAPSHOT
        made_from = self.snapshot_for_create(snapshot, path) if snapshot not in SNAPSHOTS else None
        if snapshot not in SNAPSHOTS and made_from is None:
            raise self._error(400, f"Snapshot {snapshot} not found. Did you add it through the Dashboard?", path)
        if made_from is not None:
            cpu, memory, disk = made_from["cpu"], made_from["mem"], made_from["disk"]
            sandbox_class = made_from["sandboxClass"]
        else:
            cpu, memory, disk, sandbox_class = SNAPSHOTS[snapshot]
        target = body.get("target") or self.default_region
        if sandbox_class == "windows" and target not in self.windows_regions:
            raise self._error(403, f"Region {target} is not available to the organization for class windows", path)
        auto_stop = body.get("autoStopInterval", 15 if sandbox_class != "windows" else 0)
        auto_pause = body.get("autoPauseInterval", 0)
        auto_delete = body.get("autoDeleteInterval", -1)
        if auto_pause and auto_stop:
            raise self._error(400, "Cannot set both autoStopInterval and autoPauseInterval", path)
        if auto_pause and auto_delete == 0:
            raise self._error(400, "Auto-pause cannot be used with ephemeral sandboxes", path)
        used = self._usage()
        for (label, unit), have, add, total in zip(
            (("CPU", ""), ("memory", "GiB"), ("disk", "GiB")), used, (cpu, memory, disk), self.quota, strict=True
        ):
            if have + add > total:
                raise self._error(400, f"Total {label} limit exceeded. Maximum allowed: {total:g}{unit}.", path)
        name = body.get("name") or str(uuid.uuid4())
        if any(s["name"] == name for s in self.sandboxes.values()):
            raise self._error(409, f"Sandbox with name {name} already exists", path)
        failure = self.create_failure

        def make() -> dict[str, Any]:
            sandbox_id = str(uuid.uuid4())
            env = dict(body.get("env") or {})
            now = _now()
            sandbox: dict[str, Any] = {
                "id": sandbox_id, "organizationId": self.org_id, "name": name, "user": "daytona", "env": env,
                "labels": dict(body.get("labels") or {}), "public": False, "networkBlockAll": False, "target": target,
                "cpu": cpu, "gpu": 0, "memory": memory, "disk": disk, "snapshot": snapshot,
                "state": "creating" if self.start_polls else "started", "desiredState": "started",
                "errorReason": None, "recoverable": False, "backupState": "None",
                "autoStopInterval": auto_stop, "autoArchiveInterval": 10080, "autoDeleteInterval": auto_delete,
                "autoPauseInterval": auto_pause, "ttlMinutes": body.get("ttlMinutes", 0),
                "toolboxProxyUrl": self.toolbox_url, "sandboxClass": sandbox_class, "kvm": False,
                "createdAt": now, "updatedAt": now, "lastActivityAt": now, "daemonVersion": "0.190.0-fake",
                "_polls": self.start_polls, "_destroy_polls": 0, "_cu": sandbox_class == "windows",
                "_cu_unavailable": 0,
            }
            if failure == "failed_to_start":
                sandbox["state"] = "error"
                sandbox["errorReason"] = "runner failed to start the sandbox"
            root = tempfile.mkdtemp(prefix="fake-daytona-")
            self.roots[sandbox_id] = root
            if made_from is not None:
                self.copy_snapshot_into(made_from, root)
            elif copy_from is not None:
                shutil.copytree(copy_from, root, symlinks=True, dirs_exist_ok=True)
            if sandbox_class == "windows":
                sandbox["_workdir"] = "C:\\Users\\daytona"  # UNVERIFIED: the live Windows work dir
            else:
                sandbox["_workdir"] = os.path.join(root, "home", "daytona")
            os.makedirs(self._host_path(sandbox, sandbox["_workdir"]), exist_ok=True)
            self.sandboxes[sandbox_id] = sandbox
            if failure != "failed_to_start":
                if sandbox_class == "windows":
                    width, height = self.windows_size
                else:
                    match = re.fullmatch(r"(\d+)x(\d+)", env.get("VNC_RESOLUTION", "1024x768"))
                    width, height = (int(match.group(1)), int(match.group(2))) if match else (1024, 768)
                self._desktops[sandbox_id] = XvfbDesktop(width, height, provider="daytona-fake")
            return sandbox

        # a delayed create (delay_create) is made only later, and answered only then
        sandbox = self._hold_create(make)
        if failure == "failed_to_start":
            raise self._error(400, f"Sandbox failed to start: {sandbox['errorReason']}", path)
        if failure == "bare_502":
            raise HttpError(502, raw=b"")
        if failure == "drop":
            raise Drop()
        if failure == "hang":
            self._lock.release()
            try:
                self._release.wait(60)
            finally:
                self._lock.acquire()
        return 200, self._public(sandbox)

    def _sandbox_route(self, method: str, sub: str, sandbox: dict[str, Any], body: Any,
                       path: str) -> tuple[int, Any]:
        sandbox_id = sandbox["id"]
        if sandbox["state"] == "creating":
            # time passes in requests: every request about a creating sandbox brings it closer to started
            sandbox["_polls"] -= 1
            if sandbox["_polls"] < 0:
                sandbox["state"] = "started"
        if method == "GET" and sub == "":
            if sandbox["state"] == "snapshotting":  # time passes in reads: its snapshot comes along
                for made in list(self.snapshots.values()):
                    if made["sourceSandboxId"] == sandbox_id:
                        self._advance_snapshot(made)
            if sandbox["state"] == "destroying":
                sandbox["_destroy_polls"] -= 1
                if sandbox["_destroy_polls"] < 0:
                    self._remove(sandbox_id)
                    raise self._error(404, f"Sandbox with ID or name {sandbox_id} not found", path)
            if sandbox["state"] == "error" and sandbox.get("desiredState") == "destroyed":
                self._remove(sandbox_id)
                raise self._error(404, f"Sandbox with ID or name {sandbox_id} not found", path)
            return 200, self._public(sandbox)
        if method == "DELETE" and sub == "":
            if "delete:sandboxes" not in self.scopes:
                raise self._error(403, "Forbidden resource", path)
            if self.conflict_deletes > 0 or sandbox["state"] in ("creating", "starting", "stopping", "snapshotting",
                                                                 "forking", "pausing"):
                self.conflict_deletes = max(0, self.conflict_deletes - 1)
                raise self._error(409, "Sandbox state change in progress", path)
            sandbox["desiredState"] = "destroyed"
            if sandbox["state"] == "error":
                answer = self._public(sandbox)
                self._remove(sandbox_id)
                return 200, answer
            if sandbox["state"] != "destroying":
                sandbox["state"] = "destroying"
                sandbox["_destroy_polls"] = self.destroy_polls
            return 200, self._public(sandbox)
        if sandbox["state"] == "destroying":
            raise self._error(400, "Sandbox is being destroyed", path)
        if method == "POST" and sub == "/last-activity":
            sandbox["lastActivityAt"] = _now()
            return 201, None
        if method == "POST" and sub == "/stop":
            sandbox["state"] = "stopped"
            if sandbox.get("autoDeleteInterval") == 0:
                self._remove(sandbox_id)
            return 200, None
        if method == "POST" and sub == "/start":
            if sandbox["state"] in ("stopped", "paused"):  # start also resumes a paused sandbox
                sandbox["state"] = "started"
            return 200, self._public(sandbox)
        if method == "PUT" and sub == "/labels":
            if not isinstance(body, dict) or not isinstance(body.get("labels"), dict):
                raise self._error(400, ["labels must be an object"], path)
            sandbox["labels"] = dict(body["labels"])
            return 200, {"labels": dict(sandbox["labels"])}
        if method == "GET" and sub == "/toolbox-proxy-url":
            return 200, {"url": self.toolbox_url}
        match = re.fullmatch(r"/(autostop|autodelete|ttl)/(-?\d+)", sub)
        if method == "POST" and match:
            key = {"autostop": "autoStopInterval", "autodelete": "autoDeleteInterval", "ttl": "ttlMinutes"}
            sandbox[key[match.group(1)]] = int(match.group(2))
            return 200, None
        answered = self.sandbox_snapshot_route(method, sub, sandbox, body, path)
        if answered is not None:
            return answered
        raise self._error(404, f"Cannot {method} {path}", path)

    # -- the toolbox ---------------------------------------------------------------------------------------
    def handle_toolbox(self, method: str, path: str, query: dict[str, list[str]], headers: Any,
                       body: Any) -> tuple[int, Any]:
        match = re.fullmatch(r"/toolbox/([^/]+)(/.*)", path)
        if match is None:
            raise HttpError(404, {"statusCode": 404, "message": "not found", "code": "NOT_FOUND"})
        self._authorize(headers, path, toolbox=True)
        sandbox_id, sub = match.group(1), match.group(2)
        with self._lock:
            sandbox = self.sandboxes.get(sandbox_id)
            if sandbox is None:
                raise HttpError(404, {"statusCode": 404, "message": "sandbox container not found",
                                       "code": "NOT_FOUND", "timestamp": _now(), "path": path, "method": method})
            if sandbox["state"] == "archived":  # its container is gone to cold storage (#4632)
                raise HttpError(404, {"statusCode": 404, "message": "sandbox container not found",
                                       "code": "NOT_FOUND", "timestamp": _now(), "path": path, "method": method})
            if sandbox["state"] != "started":
                raise HttpError(400, {"error": "failed to resolve container IP: no IP address found. "
                                                "Is the Sandbox started?"})
            if headers.get("X-Daytona-Skip-Last-Activity-Update") != "true":
                sandbox["lastActivityAt"] = _now()
            desktop = self._desktops.get(sandbox_id)
            windows = sandbox["sandboxClass"] == "windows"
            if sub.startswith("/computeruse/"):
                if sub == "/computeruse/start" and method == "POST":
                    if not sandbox["_cu"]:
                        sandbox["_cu"] = True
                        sandbox["_cu_unavailable"] = self.cu_unavailable
                    return 200, {"message": "Computer use processes started successfully",
                                 "status": self._process_status(windows)}
                if not sandbox["_cu"] or sandbox["_cu_unavailable"] > 0:
                    sandbox["_cu_unavailable"] = max(0, sandbox["_cu_unavailable"] - 1)
                    raise HttpError(503, {"message": "Computer-use functionality is not available",
                                           "details": "computer-use plugin is not loaded",
                                           "solution": "call POST /computeruse/start"})
        if desktop is None:
            raise HttpError(502, raw=b"")
        if sub.startswith("/computeruse/"):
            return self._computer_use(method, sub[len("/computeruse"):], query, body, desktop, windows)
        if sub == "/process/execute" and method == "POST":
            return self._execute(sandbox, body, desktop, path)
        if method == "GET" and sub in ("/work-dir", "/user-home-dir"):
            return 200, {"dir": sandbox["_workdir"]}
        if sub.startswith("/files"):
            return self._files(method, sub, query, headers, body, sandbox, path)
        raise HttpError(404, {"statusCode": 404, "message": f"Cannot {method} {sub}", "code": "NOT_FOUND"})

    # -- files ---------------------------------------------------------------------------------------------
    def _host_path(self, sandbox: dict[str, Any], path: str) -> str:
        root = self.roots[sandbox["id"]]
        if sandbox["sandboxClass"] != "windows":
            return path if path.startswith("/") else os.path.join(self._host_path(sandbox, sandbox["_workdir"]),
                                                                  path)
        text = path.replace("/", "\\")
        drive = re.match(r"([A-Za-z]):\\?", text)
        if drive is None and not text.startswith("\\"):  # relative: against the work dir
            text = sandbox["_workdir"] + "\\" + text
            drive = re.match(r"([A-Za-z]):\\?", text)
        letter, rest = (drive.group(1).upper(), text[drive.end():]) if drive else ("C", text)
        inside = posixpath.normpath("/" + rest.replace("\\", "/")).lstrip("/")
        return os.path.join(root, letter, inside) if inside not in ("", ".") else os.path.join(root, letter)

    def _daemon_error(self, status: int, code: str, message: str, path: str, method: str) -> HttpError:
        return HttpError(status, {"statusCode": status, "message": message, "code": code, "source": "DAYTONA_DAEMON",
                                   "timestamp": _now(), "path": path, "method": method})

    def _files(self, method: str, sub: str, query: dict[str, list[str]], headers: Any, body: Any,
               sandbox: dict[str, Any], path: str) -> tuple[int, Any]:
        wanted = (query.get("path") or [""])[0]
        if method == "GET" and sub == "/files/info":
            if not wanted:
                raise self._daemon_error(400, "BAD_REQUEST", "path is required", path, method)
            host = self._host_path(sandbox, wanted)
            try:
                info = os.stat(host)
            except FileNotFoundError:
                raise self._daemon_error(404, "FILE_NOT_FOUND", f"stat {wanted}: no such file or directory", path,
                                         method) from None
            except PermissionError:
                raise self._daemon_error(403, "FILE_ACCESS_DENIED", f"stat {wanted}: permission denied", path,
                                         method) from None
            except OSError as exc:
                raise self._daemon_error(400, "BAD_REQUEST", f"stat {wanted}: {exc.strerror}", path, method) from None
            return 200, {"name": posixpath.basename(host), "size": info.st_size,
                         "mode": stat_module.filemode(info.st_mode), "isDir": stat_module.S_ISDIR(info.st_mode),
                         "modTime": datetime.fromtimestamp(info.st_mtime, UTC).isoformat(),
                         "owner": str(info.st_uid), "group": str(info.st_gid),
                         "permissions": f"{info.st_mode & 0o7777:04o}"}
        if method == "POST" and sub == "/files/folder":
            mode = (query.get("mode") or ["755"])[0]
            if not wanted:
                raise self._daemon_error(400, "BAD_REQUEST", "path is required", path, method)
            if not re.fullmatch(r"[0-7]{1,4}", mode):
                raise self._daemon_error(400, "BAD_REQUEST", "invalid mode format", path, method)
            try:
                os.makedirs(self._host_path(sandbox, wanted), int(mode, 8), exist_ok=True)
            except OSError as exc:
                raise self._daemon_error(400, "BAD_REQUEST", f"mkdir {wanted}: {exc.strerror}", path,
                                         method) from None
            return 201, None
        if method == "POST" and sub == "/files/permissions":
            mode = (query.get("mode") or [""])[0]
            if not wanted:
                raise self._daemon_error(400, "BAD_REQUEST", "path is required", path, method)
            host = self._host_path(sandbox, wanted)
            if not os.path.exists(host):
                raise self._daemon_error(404, "FILE_NOT_FOUND", f"stat {wanted}: no such file or directory", path,
                                         method)
            if mode:
                if not re.fullmatch(r"[0-7]{1,4}", mode):
                    raise self._daemon_error(400, "BAD_REQUEST", "invalid mode format", path, method)
                os.chmod(host, int(mode, 8))
            return 200, None
        if method == "POST" and sub == "/files/bulk-upload":
            return self._bulk_upload(sandbox, headers, body)
        if method == "POST" and sub == "/files/bulk-download":
            return self._bulk_download(sandbox, body, path, method)
        raise HttpError(404, {"statusCode": 404, "message": f"Cannot {method} {sub}", "code": "NOT_FOUND"})

    def _bulk_upload(self, sandbox: dict[str, Any], headers: Any, raw: Any) -> tuple[int, Any]:
        parts = _split_multipart(raw if isinstance(raw, bytes) else b"", headers.get("Content-Type") or "")
        self.last_upload = {}
        if parts is None:
            raise HttpError(400, {"errors": ["invalid multipart form"]})
        destinations: dict[str, str] = {}
        errors: list[str] = []
        files: list[dict[str, Any]] = []
        for part_headers, data in parts:
            name = _form_field(part_headers.get("content-disposition", ""), "name") or ""
            index = name.removeprefix("files[").removesuffix("].path").removesuffix("].file")
            if name.endswith(".path"):
                destination = data.decode("utf-8", "replace").strip()
                self.last_upload[name] = destination
                if not destination:
                    errors.append(f"path[{index}]: empty path")
                else:
                    destinations[index] = destination
            elif name.endswith(".file"):
                self.last_upload[name] = {"bytes": len(data)}
                destination = destinations.get(index, "")
                if not destination:
                    errors.append(f"file[{index}]: missing .path metadata")
                    continue
                host = self._host_path(sandbox, destination)
                try:
                    os.makedirs(os.path.dirname(host), 0o755, exist_ok=True)
                except OSError as exc:  # the daemon's words (Go's MkdirAll)
                    why = "not a directory" if isinstance(exc, FileExistsError) else str(exc.strerror).lower()
                    errors.append(f"{destination}: mkdir {posixpath.dirname(destination)}: {why}")
                    continue
                try:
                    handle, temp = tempfile.mkstemp(dir=os.path.dirname(host), prefix=".daytona-upload-")
                    with os.fdopen(handle, "wb") as out:
                        out.write(data)
                    os.chmod(temp, 0o644)
                    try:
                        os.replace(temp, host)
                    except OSError:
                        os.unlink(temp)
                        raise
                except OSError as exc:
                    errors.append(f"{destination}: {exc.strerror}")
                    continue
                files.append({"path": destination, "bytes": len(data)})
        if errors:
            raise HttpError(400, {"errors": errors, "files": files})
        return 200, {"files": files}

    def _bulk_download(self, sandbox: dict[str, Any], body: Any, path: str, method: str) -> tuple[int, Any]:
        paths = body.get("paths") if isinstance(body, dict) else None
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise HttpError(400, {"error": 'request body must be {"paths": [ ... ]} and non-empty'})
        answer = _Multipart()
        for wanted in paths:
            host = self._host_path(sandbox, wanted)
            try:
                if os.path.isdir(host):
                    raise IsADirectoryError
                with open(host, "rb") as fh:
                    data = fh.read()
            except (FileNotFoundError, IsADirectoryError):
                error = {"message": f"file not found or invalid: {wanted}", "statusCode": 404,
                         "code": "FILE_NOT_FOUND", "source": "DAYTONA_DAEMON"}
                answer.part("error", wanted, "application/json", json.dumps(error).encode())
                continue
            except PermissionError:
                error = {"message": f"error opening file: permission denied: {wanted}", "statusCode": 403,
                         "code": "FILE_ACCESS_DENIED", "source": "DAYTONA_DAEMON"}
                answer.part("error", wanted, "application/json", json.dumps(error).encode())
                continue
            answer.part("file", wanted, "application/octet-stream", data)
        return 200, answer

    @staticmethod
    def _process_status(windows: bool) -> dict[str, Any]:
        names = ["computer-use-plugin"] if windows else ["xvfb", "xfce4", "x11vnc", "novnc"]
        return {n: {"Running": True, "Priority": 100 * (i + 1), "AutoRestart": True, "Pid": 1000 + i}
                for i, n in enumerate(names)}

    def _computer_use(self, method: str, sub: str, query: dict[str, list[str]], body: Any, desktop: XvfbDesktop,
                      windows: bool) -> tuple[int, Any]:
        driver = desktop.driver

        def need(*keys: str) -> dict[str, Any]:
            if not isinstance(body, dict):
                raise HttpError(400, {"error": "invalid request body"})
            for key in keys:
                if not isinstance(body.get(key), int) or isinstance(body.get(key), bool):
                    raise HttpError(400, {"error": f"invalid {key}"})
            return body

        def button() -> str:
            raw = str((body or {}).get("button") or "left").lower()
            if raw not in ("left", "right", "middle"):
                raise HttpError(400, {"error": f"unsupported mouse button: {raw}"})
            return raw

        with desktop.lock:
            if method == "GET" and sub in ("/status", "/process-status"):
                return 200, {"status": "active"}
            if method == "POST" and sub == "/stop":
                return 200, {"message": "Computer use processes stopped successfully",
                             "status": self._process_status(windows)}
            if method == "GET" and sub == "/display/info":
                width, height = driver.size()
                return 200, {"displays": [{"id": 0, "x": 0, "y": 0, "width": width, "height": height,
                                           "isActive": True}]}
            if method == "GET" and sub == "/screenshot":
                shot = driver.screenshot()
                return 200, {"screenshot": base64.b64encode(shot.png).decode("ascii"),
                             "cursorPosition": {"x": 0, "y": 0}}
            if method == "GET" and sub == "/mouse/position":
                x, y = driver.cursor_position()
                return 200, {"x": x, "y": y}
            if method == "POST" and sub == "/mouse/move":
                b = need("x", "y")
                driver.move(b["x"], b["y"])
                return 200, {"x": b["x"], "y": b["y"]}
            if method == "POST" and sub == "/mouse/click":
                b = need("x", "y")
                clicks = b.get("clicks")
                if clicks is not None and (not isinstance(clicks, int) or not 1 <= clicks <= 10):
                    raise HttpError(400, {"error": "clicks must be between 1 and 10"})
                count = clicks if clicks is not None else (2 if b.get("double") else 1)
                driver.click(b["x"], b["y"], button(), count)
                return 200, {"x": b["x"], "y": b["y"]}
            if method == "POST" and sub in ("/mouse/down", "/mouse/up"):
                b = need("x", "y")
                (driver.mouse_down if sub == "/mouse/down" else driver.mouse_up)(b["x"], b["y"], button())
                return 200, {"x": b["x"], "y": b["y"]}
            if method == "POST" and sub == "/mouse/drag":
                b = need("startX", "startY", "endX", "endY")
                driver.drag(b["startX"], b["startY"], b["endX"], b["endY"], button())
                return 200, {"x": b["endX"], "y": b["endY"]}
            if method == "POST" and sub == "/mouse/scroll":
                b = need("x", "y")
                direction = b.get("direction")
                amount = max(1, int(b.get("amount") or 1))
                deltas = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
                if direction not in deltas:
                    raise HttpError(400, {"error": f"invalid scroll direction: {direction}"})
                dx, dy = deltas[direction]
                driver.scroll(b["x"], b["y"], dx * amount, dy * amount)
                return 200, {"success": True}
            if method == "POST" and sub == "/keyboard/type":
                text = (body or {}).get("text")
                if not isinstance(text, str) or any(ord(c) < 32 or ord(c) == 127 for c in text):
                    raise HttpError(400, {"error": "invalid text: control characters are not allowed"})
                driver.type_text(text)
                return 200, {}
            if method == "POST" and sub == "/keyboard/key":
                key = _key_name((body or {}).get("key"))
                modifiers = (body or {}).get("modifiers") or []
                if not isinstance(modifiers, list):
                    raise HttpError(400, {"error": "modifiers must be a list"})
                mods = [_modifier(m) for m in modifiers]
                driver.key(*mods, key)
                return 200, {}
            if method == "POST" and sub == "/keyboard/hotkey":
                keys = str((body or {}).get("keys") or "")
                parts = [p.strip() for p in keys.split("+") if p.strip()]
                if not parts:
                    raise HttpError(400, {"error": "invalid hotkey"})
                driver.key(*[_modifier(p) for p in parts[:-1]], _key_name(parts[-1]))
                return 200, {}
            if method == "POST" and sub in ("/keyboard/down", "/keyboard/up"):
                raw = (body or {}).get("key")
                key = _modifier(raw) if str(raw).lower() in _MODIFIER_ALIASES else _key_name(raw)
                (driver.key_down if sub == "/keyboard/down" else driver.key_up)(key)
                return 200, {}
        raise HttpError(404, {"statusCode": 404, "message": f"Cannot {method} /computeruse{sub}",
                               "code": "NOT_FOUND"})

    def _execute(self, sandbox: dict[str, Any], body: Any, desktop: XvfbDesktop, path: str) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("command"), str) or not body["command"].strip():
            raise HttpError(400, {"statusCode": 400, "message": "command is required", "code": "BAD_REQUEST"})
        envs = body.get("envs") or {}
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise HttpError(400, {"statusCode": 400, "message": "envs must be an object of strings",
                                  "code": "BAD_REQUEST"})
        timeout = body.get("timeout")
        env = dict(os.environ, DISPLAY=desktop.display, **{str(k): str(v) for k, v in envs.items()})
        cwd = self._host_path(sandbox, body.get("cwd") or sandbox["_workdir"])
        if not os.path.isdir(cwd):  # the daemon's cmd.Start fails: 200 with exit code -1 and Go's message
            return 200, {"exitCode": -1, "result": f"chdir {body.get('cwd')}: no such file or directory"}
        # the daemon's common.GetShell(): the first of zsh, bash or sh (zsh in Daytona's default snapshots)
        shell = shutil.which("zsh") or shutil.which("bash") or "sh"
        proc = subprocess.Popen([shell], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True)
        try:
            out, _ = proc.communicate(body["command"].encode(), timeout=timeout if timeout and timeout > 0 else None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise HttpError(408, {"statusCode": 408, "message": "request timeout: command execution timeout",
                                   "code": "PROCESS_EXECUTION_TIMEOUT", "source": "DAYTONA_DAEMON",
                                   "timestamp": _now(), "path": path, "method": "POST"}) from None
        return 200, {"exitCode": proc.returncode, "result": out.decode("utf-8", "replace")}


def _key_name(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise HttpError(400, {"error": "invalid key"})
    if len(raw) == 1:
        return raw
    low = _KEY_ALIASES.get(raw.lower(), raw.lower())
    if low in _TOOLBOX_KEYS:
        return low
    if low in _MODIFIER_ALIASES:
        return _MODIFIER_ALIASES[low]
    raise HttpError(400, {"error": f"invalid key: {raw}"})


def _modifier(raw: Any) -> str:
    low = str(raw).strip().lower()
    if low not in _MODIFIER_ALIASES:
        raise HttpError(400, {"error": f"invalid modifier: {raw}"})
    return _MODIFIER_ALIASES[low]
