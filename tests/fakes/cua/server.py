"""A loopback fake of cua cloud's Fleet control plane (``run.cua.ai``: OAuth2 token endpoint, the
``OSGymSandboxClaim`` and warm-pool resources behind the Kubernetes API proxy) and of the per-sandbox service
proxy to the OSWorld guest server, written from ``shared/specs/cua.md`` (A2, A4, C, D), backed by one real Xvfb
per bound sandbox.

Strict where the service is strict: the token endpoint wants a form-encoded ``client_credentials`` grant; an
unknown token is a 401 and an expired one a **302 to the login page** (as the service does); claim bodies are
validated as the API server would (apiVersion, kind, DNS-label names, Kubernetes label keys and values,
the pool's template and warm pool, RFC 3339 ``shutdownTime``, ``Retain|Delete``), a taken name is 409
``AlreadyExists``, a renewal must be ``application/merge-patch+json``; errors are Kubernetes ``Status`` objects.
The guest's ``/execute`` wants JSON and caps a command at 120 s (500 ``{"status": "error"}`` past it).

Every request is logged (:attr:`FakeCua.log`, with the time the server spent on it). Injectable failures:
:meth:`FakeCua.inject` (any status and body on a method and path pattern, e.g. 503 ``NO_CAPACITY`` or 429 with
``Retry-After``), :attr:`FakeCua.create_failure` (the claim is made, then the answer fails: ``"status_500"``,
``"bare_502"``, ``"drop"``), :meth:`~fakes._http.LoopbackService.delay_create` (a create slower than the
client: the claim appears only after some lookups (``GET`` of the claims or of one), or at ``finish_create()``,
and is answered only then), a drained pool (``Pool.capacity``: the claim goes ``Failed``; with
``Pool.scale_after_failures`` the pool grows by one after that many failed claims, as KEDA scales it),
:meth:`FakeCua.revoke_client` (401 ``invalid_client``), :meth:`FakeCua.expire_tokens` (302 on the next
request), :attr:`FakeCua.can_write` (403 on create, renew and delete), :meth:`FakeCua.lose_claim` (a claim
that disappears mid-session) and :meth:`FakeCua.reap_expired` (what the pool's reaper does past
``shutdownTime``).

The guest's files are real files: each bound sandbox has its own directory (removed with the sandbox), which
is the guest server's working directory and ``HOME`` for ``/execute``, ``/setup/upload`` and ``/file``, so a
relative or ``~`` path lands there. An absolute path is the same path on this host (the guest runs its commands
here); on a Windows pool a drive path ``C:\\x`` is the sandbox directory's ``C/x``. The file routes are as strict as
the guest's Flask server: a form without ``file_path`` (or an upload without the ``file_data`` file) is 400, a
missing file 404 ``{"error": "File not found"}``, a missing parent folder or a folder where a file is wanted the
server's own 500.

Not modelled (see docs/cua.md): the cursor the real guest composites into screenshots, VNC.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from fakes._desktop import XvfbDesktop
from fakes._http import Drop, FormFile, HttpError, JsonHandler, LoggedRequest, LoopbackService, parse_form

__all__ = ["API_VERSION", "FakeCua", "LoggedRequest", "Pool"]

API_VERSION = "osgym.cua.ai/v1alpha1"
TOKEN_PATH = "/realms/cyclops-cs/protocol/openid-connect/token"
_GUEST_DIR = str(Path(__file__).resolve().parent / "guest")
_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_NAME_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)")
_PREFIX_RE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


@dataclass
class Pool:
    """A warm pool (= namespace): its template, guest OS, screen size and how many sandboxes it holds."""

    name: str
    platform: str  # what the guest's /platform answers: Linux | Windows
    size: tuple[int, int]
    capacity: int = 4
    #: KEDA-style scale-up: after this many claims failed for want of a sandbox, one more sandbox is there
    scale_after_failures: int | None = None
    failures: int = 0
    #: Python modules the guest's programs cannot import, e.g. ``("Xlib",)`` for an image whose programs get
    #: pyautogui (what OSWorld's clients use) but not python-xlib, or ``("pyautogui",)``
    guest_missing: tuple[str, ...] = ()

    @property
    def template(self) -> str:
        return f"{self.name}-template"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> HttpError:
    return HttpError(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": message, "reason": reason, "code": code})


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not _TIME_RE.fullmatch(value):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _end_sandbox(home: Path) -> None:
    """What the VM's reset does to what its commands left running (a detached app, a ``sleep``): the processes
    whose environment carries this sandbox's marker end; then its folder goes."""
    marker = b"\0" + f"CUA_FAKE_SANDBOX={home}".encode() + b"\0"
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if marker in b"\0" + fh.read():
                        os.kill(int(entry), 9)
            except OSError:
                pass  # gone meanwhile, or not ours to read
    shutil.rmtree(home, ignore_errors=True)


class _Handler(JsonHandler):
    owner: FakeCua

    def route(self, path: str, query: dict[str, list[str]], raw: bytes) -> tuple[int, Any, str]:
        owner = self.owner
        # what was sent is logged even when an injection answers it
        if path != TOKEN_PATH and raw and "json" in (self.headers.get("Content-Type") or ""):
            with contextlib.suppress(ValueError):
                self.logged_body = json.loads(raw)
        form = parse_form(self.headers.get("Content-Type") or "", raw) if path.startswith("/api/svc/") else ({}, {})
        if any(form):  # the fields, and the files by name and size (never their bytes)
            self.logged_body = {"form": form[0], "files": {k: {"filename": f.filename, "size": len(f.data)}
                                                           for k, f in form[1].items()}}
        self.raise_injected(path)
        if path == TOKEN_PATH and self.command == "POST":
            status, answer = owner.handle_token(self.headers, raw)
            self.logged_body = {"form": sorted(parse_qs(raw.decode("utf-8", "replace")))}  # names only: no secrets
            return status, answer, "application/json"
        if raw and "json" in (self.headers.get("Content-Type") or ""):
            try:
                self.logged_body = json.loads(raw)
            except ValueError:
                raise _status(400, "BadRequest", "the body of the request was not valid JSON") from None
        if path.startswith("/api/k8s/"):
            status, answer = owner.handle_k8s(self.command, path, query, self.headers, self.logged_body)
        elif path.startswith("/api/svc/"):
            status, answer = owner.handle_svc(self.command, path, self.headers, self.logged_body, raw, form)
        else:
            raise _status(404, "NotFound", "the server could not find the requested resource")
        return status, answer, "application/json"

    def fake_bug(self, exc: Exception) -> Any:
        return {"kind": "Status", "message": f"fake error: {type(exc).__name__}: {exc}"}

    do_PATCH = JsonHandler.dispatch


class FakeCua(LoopbackService):
    """The fake service. Use as a context manager (or :meth:`start` / :meth:`stop` in ``finally``)."""

    handler_class = _Handler
    thread_name = "fake-cua"
    #: every variable of the vendor's (none may leak into a test from the machine)
    vendor_vars = ("CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY", "CUA_BASE_URL", "CUA_TOKEN_URL",
                   "CUA_API_BASE", "CUA_CLOUD_NAMESPACE")

    def __init__(
        self,
        *,
        client_id: str = "ukey-fake-0123456789",
        client_secret: str = "cs-fake-secret-9876543210",
        token_lifetime: int = 300,
        pools: list[Pool] | None = None,
        bind_polls: int = 1,
        destroy_polls: int = 1,
        exec_cap: float = 120.0,
    ) -> None:
        super().__init__()
        self.client_id = client_id
        self.client_secret = client_secret
        self.token_lifetime = token_lifetime
        self.pools = {p.name: p for p in (pools or [Pool("harbor-ubuntu", "Linux", (1920, 1080)),
                                                   Pool("harbor-windows", "Windows", (1024, 768), capacity=2)])}
        self.bind_polls = bind_polls
        self.destroy_polls = destroy_polls
        self.exec_cap = exec_cap
        self.revoked = False
        self.can_write = True
        self.create_failure: str | None = None
        self.tokens: dict[str, float] = {}  # token -> time.monotonic() expiry
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        #: sandbox name -> its own directory (the guest server's working directory and HOME)
        self.homes: dict[str, Path] = {}
        # self._desktops: sandbox name -> desktop

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}{TOKEN_PATH}"

    def env(self) -> dict[str, str]:
        """The vendor's variables that point a client at this fake."""
        return {"CUA_CLIENT_ID": self.client_id, "CUA_CLIENT_SECRET": self.client_secret,
                "CUA_BASE_URL": self.base_url, "CUA_TOKEN_URL": self.token_url}

    # -- test controls ---------------------------------------------------------------------------------
    def revoke_client(self) -> None:
        """The client credentials stop working (tokens already issued keep working until they expire)."""
        self.revoked = True

    def restore_client(self) -> None:
        self.revoked = False

    def expire_tokens(self) -> None:
        """Every issued token expires now: the next request with one is redirected to the login page."""
        with self._lock:
            self.tokens = dict.fromkeys(self.tokens, 0.0)

    def live(self) -> list[dict[str, Any]]:
        """Claims that exist (terminating ones too)."""
        with self._lock:
            return [json.loads(json.dumps(c)) for c in self.claims.values()]

    def claim(self, name: str) -> dict[str, Any]:
        with self._lock:
            return next(json.loads(json.dumps(c)) for (_, n), c in self.claims.items() if n == name)

    def sandbox_of(self, claim_name: str) -> str:
        return str(self.claim(claim_name)["status"]["sandbox"]["name"])

    def _desktop_of(self, resource_id: str) -> XvfbDesktop:
        return self._desktops[self.sandbox_of(resource_id)]  # a handle names the claim; desktops are by sandbox

    def displays(self) -> list[str]:
        with self._lock:
            return [d.display for d in self._desktops.values()]

    def requests(self, prefix: str = "") -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if r.path.startswith(prefix)]

    def lose_claim(self, claim_name: str) -> None:
        """The claim disappears mid-session (released by someone else, or reaped)."""
        with self._lock:
            key = next(k for k in self.claims if k[1] == claim_name)
            self._remove(key)

    def reap_expired(self, now: float | None = None) -> list[str]:
        """What the pool's reaper does: release every claim past its ``shutdownTime``; returns their names."""
        moment = time.time() if now is None else now
        with self._lock:
            gone = [k for k, c in self.claims.items()
                    if (_parse_time(c["spec"]["lifecycle"]["shutdownTime"]) or 0) < moment]
            for key in gone:
                self._remove(key)
        return [k[1] for k in gone]

    # -- internals ---------------------------------------------------------------------------------------
    def _remove(self, key: tuple[str, str]) -> None:
        claim = self.claims.pop(key, None)
        sandbox = ((claim or {}).get("status") or {}).get("sandbox") or {}
        desktop = self._desktops.pop(str(sandbox.get("name")), None)
        if desktop is not None:
            desktop.stop()  # Retain resets the VM and returns it to the pool; Delete destroys it: gone either way
        home = self.homes.pop(str(sandbox.get("name")), None)
        if home is not None:
            _end_sandbox(home)

    def stop(self) -> None:
        super().stop()
        with self._lock:
            homes = list(self.homes.values())
            self.homes.clear()
        for home in homes:
            _end_sandbox(home)

    def _authorize(self, headers: Any) -> None:
        auth = headers.get("Authorization") or ""
        token = auth[7:] if auth.startswith("Bearer ") else None
        if token is None or token not in self.tokens:
            raise _status(401, "Unauthorized", "Unauthorized")
        if self.tokens[token] <= time.monotonic():
            raise HttpError(302, raw=b"", headers={
                "Location": f"{self.base_url}/realms/cyclops-cs/protocol/openid-connect/auth?client_id=run"})

    def handle_token(self, headers: Any, raw: bytes) -> tuple[int, Any]:
        if not (headers.get("Content-Type") or "").startswith("application/x-www-form-urlencoded"):
            raise HttpError(400, {"error": "invalid_request",
                                   "error_description": "Missing form parameter: grant_type"})
        form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
        if form.get("grant_type") != "client_credentials":
            raise HttpError(400, {"error": "unsupported_grant_type", "error_description": "Unsupported grant_type"})
        if self.revoked or form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
            raise HttpError(401, {"error": "invalid_client",
                                   "error_description": "Invalid client or Invalid client credentials"})
        token = "eyJfake." + secrets.token_urlsafe(24)
        with self._lock:
            self.tokens[token] = time.monotonic() + self.token_lifetime
        return 200, {"access_token": token, "expires_in": self.token_lifetime, "refresh_expires_in": 0,
                     "token_type": "Bearer", "not-before-policy": 0, "scope": "profile email"}

    # -- the control plane -------------------------------------------------------------------------------
    def handle_k8s(self, method: str, path: str, query: dict[str, list[str]], headers: Any,
                   body: Any) -> tuple[int, Any]:
        self._authorize(headers)
        match = re.fullmatch(rf"/api/k8s/apis/{re.escape(API_VERSION)}/namespaces/([^/]+)/"
                             r"(osgymsandboxclaims|osgymsandboxwarmpools)(?:/([^/]+))?", path)
        if match is None:
            raise _status(404, "NotFound", "the server could not find the requested resource")
        namespace, kind, name = unquote(match.group(1)), match.group(2), match.group(3)
        pool = self.pools.get(namespace)
        if pool is None:
            raise _status(404, "NotFound", f'namespaces "{namespace}" not found')
        with self._lock:
            if kind == "osgymsandboxclaims" and method == "GET":
                self._lookup()  # time passes in lookups: a delayed create may be made now
            if kind == "osgymsandboxwarmpools":
                if method != "GET" or name is None:
                    raise _status(405, "MethodNotAllowed", "the server does not allow this method")
                if name != pool.name:
                    raise _status(404, "NotFound", f'osgymsandboxwarmpools.osgym.cua.ai "{name}" not found')
                bound = sum(1 for (ns, _), c in self.claims.items() if ns == namespace and c["status"].get("sandbox"))
                return 200, {"apiVersion": API_VERSION, "kind": "OSGymSandboxWarmPool",
                             "metadata": {"name": pool.name, "namespace": namespace},
                             "spec": {"replicas": pool.capacity, "sandboxTemplateRef": {"name": pool.template}},
                             "status": {"replicas": pool.capacity, "readyReplicas": max(0, pool.capacity - bound)}}
            if name is None and method == "GET":
                return 200, self._list(namespace, query)
            if name is None and method == "POST":
                return self._create(pool, body)
            if name is None:
                raise _status(405, "MethodNotAllowed", "the server does not allow this method")
            key = (namespace, unquote(name))
            claim = self.claims.get(key)
            if claim is None:
                raise _status(404, "NotFound", f'osgymsandboxclaims.osgym.cua.ai "{name}" not found')
            if method == "GET":
                return 200, self._advance(key, claim, pool)
            if method in ("PATCH", "DELETE") and not self.can_write:
                raise _status(403, "Forbidden", f'osgymsandboxclaims.osgym.cua.ai "{name}" is forbidden: '
                                                f'User cannot {method.lower()} resource in namespace "{namespace}"')
            if method == "PATCH":
                if (headers.get("Content-Type") or "") != "application/merge-patch+json":
                    raise _status(415, "UnsupportedMediaType",
                                  f"the body of the request was in an unknown format - accepted media types include: "
                                  f"application/json-patch+json, application/merge-patch+json "
                                  f"(got {headers.get('Content-Type')})")
                shutdown = (((body or {}).get("spec") or {}).get("lifecycle") or {}).get("shutdownTime")
                if _parse_time(shutdown) is None:
                    raise _status(422, "Invalid", f"spec.lifecycle.shutdownTime: Invalid value: {shutdown!r}")
                claim["spec"]["lifecycle"]["shutdownTime"] = shutdown
                claim["metadata"]["resourceVersion"] = str(int(claim["metadata"]["resourceVersion"]) + 1)
                return 200, claim
            if method == "DELETE":
                if not claim["metadata"].get("deletionTimestamp"):
                    claim["metadata"]["deletionTimestamp"] = _now()
                    claim["_destroy_polls"] = self.destroy_polls
                return 200, claim
        raise _status(405, "MethodNotAllowed", "the server does not allow this method")

    def _list(self, namespace: str, query: dict[str, list[str]]) -> dict[str, Any]:
        wanted: dict[str, str] = {}
        for term in filter(None, (query.get("labelSelector", [""])[0]).split(",")):
            key, sep, value = term.partition("=")
            if not sep or not key or "!" in key:
                raise _status(400, "BadRequest", f"unable to parse requirement: {term!r}")
            wanted[key.strip()] = value.strip().lstrip("=")
        try:
            limit = int(query.get("limit", ["0"])[0])
            start = int(query.get("continue", ["0"])[0] or 0)
        except ValueError:
            raise _status(400, "BadRequest", "invalid limit or continue") from None
        items = [c for (ns, _), c in self.claims.items()
                 if ns == namespace and all(c["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
        page = items[start:start + limit] if limit > 0 else items[start:]
        following = start + len(page)
        return {"apiVersion": API_VERSION, "kind": "OSGymSandboxClaimList",
                "metadata": {"resourceVersion": "1", "continue": str(following) if following < len(items) else ""},
                "items": [self._public(c) for c in page]}

    @staticmethod
    def _public(claim: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in claim.items() if not k.startswith("_")}

    def _validate(self, pool: Pool, body: Any) -> list[str]:
        if not isinstance(body, dict):
            raise _status(400, "BadRequest", "the body of the request was not a JSON object")
        errors: list[str] = []
        if body.get("apiVersion") != API_VERSION:
            errors.append(f"apiVersion: Invalid value: {body.get('apiVersion')!r}")
        if body.get("kind") != "OSGymSandboxClaim":
            errors.append(f"kind: Invalid value: {body.get('kind')!r}")
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        name, generate = metadata.get("name"), metadata.get("generateName")
        if not name and not generate:
            errors.append("metadata.name: Required value: name or generateName is required")
        if name and (not isinstance(name, str) or not _NAME_RE.fullmatch(name)):
            errors.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 label must consist of "
                          "lower case alphanumeric characters or '-'")
        for key, value in (metadata.get("labels") or {}).items():
            prefix, _, last = str(key).rpartition("/")
            if (prefix and not _PREFIX_RE.fullmatch(prefix)) or not _LABEL_NAME_RE.fullmatch(last):
                errors.append(f"metadata.labels: Invalid value: {key!r}: name part must consist of alphanumeric "
                              "characters, '-', '_' or '.'")
            if not isinstance(value, str) or not _LABEL_VALUE_RE.fullmatch(value) or len(value) > 63:
                errors.append(f"metadata.labels: Invalid value: {value!r}: a valid label must be an empty string "
                              "or consist of alphanumeric characters, '-', '_' or '.'")
        for key, value in (metadata.get("annotations") or {}).items():
            if not isinstance(value, str):
                errors.append(f"metadata.annotations.{key}: Invalid value: must be a string")
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        template = (spec.get("sandboxTemplateRef") or {}).get("name")
        if template != pool.template:
            errors.append(f"spec.sandboxTemplateRef.name: Not found: {template!r}")
        if spec.get("warmpool") != pool.name:
            errors.append(f"spec.warmpool: Not found: {spec.get('warmpool')!r}")
        lifecycle = spec.get("lifecycle") or {}
        if "shutdownTime" in lifecycle and _parse_time(lifecycle["shutdownTime"]) is None:
            errors.append(f"spec.lifecycle.shutdownTime: Invalid value: {lifecycle['shutdownTime']!r}")
        if lifecycle.get("shutdownPolicy", "Retain") not in ("Retain", "Delete"):
            errors.append(f"spec.lifecycle.shutdownPolicy: Unsupported value: {lifecycle.get('shutdownPolicy')!r}")
        return errors

    def _create(self, pool: Pool, body: Any) -> tuple[int, Any]:
        if not self.can_write:
            raise _status(403, "Forbidden", "osgymsandboxclaims.osgym.cua.ai is forbidden: User cannot create "
                                            f'resource "osgymsandboxclaims" in namespace "{pool.name}"')
        errors = self._validate(pool, body)
        if errors:
            raise _status(422, "Invalid", "OSGymSandboxClaim is invalid: " + "; ".join(errors))
        metadata = body["metadata"]
        name = metadata.get("name") or metadata["generateName"] + secrets.token_hex(3)[:5]
        key = (pool.name, name)
        if key in self.claims:
            raise _status(409, "AlreadyExists", f'osgymsandboxclaims.osgym.cua.ai "{name}" already exists')
        lifecycle = dict(body["spec"].get("lifecycle") or {})
        lifecycle.setdefault("shutdownPolicy", "Retain")
        lifecycle.setdefault("shutdownTime", datetime.fromtimestamp(time.time() + 1800, UTC)
                             .strftime("%Y-%m-%dT%H:%M:%SZ"))
        claim = {
            "apiVersion": API_VERSION, "kind": "OSGymSandboxClaim",
            "metadata": {"name": name, "namespace": pool.name, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                         "creationTimestamp": _now(), "labels": dict(metadata.get("labels") or {}),
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": {**body["spec"], "lifecycle": lifecycle},
            "status": {"phase": "Pending"},
            "_polls": self.bind_polls, "_destroy_polls": 0,
        }

        def make() -> dict[str, Any]:
            self.claims[key] = claim
            return claim

        # a delayed create (delay_create) is made only later, and answered only then
        self._hold_create(make)
        failure = self.create_failure
        if failure == "status_500":
            raise _status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        if failure == "bare_502":
            raise HttpError(502, raw=b"")
        if failure == "drop":
            raise Drop()
        return 201, self._public(claim)

    def _advance(self, key: tuple[str, str], claim: dict[str, Any], pool: Pool) -> dict[str, Any]:
        """Time passes in requests: each GET of a pending claim brings its binding closer; each GET of a
        terminating one its removal."""
        if claim["metadata"].get("deletionTimestamp"):
            claim["_destroy_polls"] -= 1
            if claim["_destroy_polls"] < 0:
                self._remove(key)
                raise _status(404, "NotFound", f'osgymsandboxclaims.osgym.cua.ai "{key[1]}" not found')
            return self._public(claim)
        if claim["status"]["phase"] == "Pending":
            claim["_polls"] -= 1
            if claim["_polls"] < 0:
                bound = sum(1 for (ns, _), c in self.claims.items() if ns == pool.name and c["status"].get("sandbox"))
                if bound >= pool.capacity:
                    pool.failures += 1
                    if pool.scale_after_failures is not None and pool.failures >= pool.scale_after_failures:
                        pool.capacity += 1
                        pool.failures = 0
                    claim["status"] = {"phase": "Failed", "conditions": [{
                        "type": "Bound", "status": "False", "reason": "NoCapacity",
                        "lastTransitionTime": _now(),
                        "message": f"no available sandbox in warm pool {pool.name}"}]}
                else:
                    sandbox = f"{pool.name}-{secrets.token_hex(3)}"
                    self._desktops[sandbox] = XvfbDesktop(*pool.size, provider="cua-fake")
                    self.homes[sandbox] = Path(tempfile.mkdtemp(prefix=f"cua-fake-{sandbox}-"))
                    claim["status"] = {"phase": "Bound", "sandbox": {"name": sandbox, "service": f"{sandbox}-server"},
                                       "conditions": [{"type": "Bound", "status": "True", "reason": "Bound",
                                                       "lastTransitionTime": _now(), "message": ""}]}
        return self._public(claim)

    # -- the data plane: the service proxy to the OSWorld guest server ------------------------------------
    def handle_svc(self, method: str, path: str, headers: Any, body: Any, raw: bytes,
                   form: tuple[dict[str, str], dict[str, FormFile]] = ({}, {})) -> tuple[int, Any]:
        self._authorize(headers)
        match = re.fullmatch(r"/api/svc/([^/]+)/([^/]+)-server(/.*)", path)
        if match is None:
            raise _status(404, "NotFound", "the server could not find the requested resource")
        namespace, sandbox, sub = match.group(1), match.group(2), match.group(3)
        with self._lock:
            pool = self.pools.get(namespace)
            desktop = self._desktops.get(sandbox)
            home = self.homes.get(sandbox)
            owned = pool is not None and any(
                ns == namespace and (c["status"].get("sandbox") or {}).get("name") == sandbox
                for (ns, _), c in self.claims.items())
        if pool is None or desktop is None or home is None or not owned:
            raise _status(404, "NotFound", f'services "{sandbox}-server" not found')
        if method == "GET" and sub == "/platform":
            raise HttpError(200, raw=pool.platform.encode(), content_type="text/html; charset=utf-8")
        if method == "POST" and sub == "/screen_size":
            width, height = desktop.driver.size()
            return 200, {"width": width, "height": height}
        if method == "GET" and sub == "/screenshot":
            with desktop.lock:
                shot = desktop.driver.screenshot()
            raise HttpError(200, raw=shot.png, content_type="image/png")
        if method == "POST" and sub in ("/execute", "/setup/execute"):
            if not (headers.get("Content-Type") or "").startswith("application/json"):
                raise HttpError(415, raw=b"<h1>Unsupported Media Type</h1>", content_type="text/html")
            return self._execute(body, desktop, home, pool.guest_missing)
        if method == "GET" and sub == "/cursor_position":
            with desktop.lock:
                x, y = desktop.driver.cursor_position()
            return 200, [x, y]  # OSWorld: jsonify(pos.x, pos.y)
        if method == "POST" and sub in ("/setup/upload", "/file"):
            return self._file_route(sub, form, home, pool.platform == "Windows")
        raise HttpError(404, raw=b"<h1>Not Found</h1>", content_type="text/html")

    # -- the guest's files ---------------------------------------------------------------------------------
    @staticmethod
    def guest_path(home: Path, path: str, windows: bool = False) -> Path:
        """Where the guest keeps ``path``: a drive path of a Windows pool under ``home`` (``C:\\x`` is
        ``home/C/x``); ``~`` is ``home``; a relative path is under ``home`` (the server's working directory)."""
        if windows:
            drive, _, rest = path.partition(":")
            if len(drive) == 1 and drive.isalpha() and rest[:1] in ("\\", "/"):
                return home.joinpath(drive.upper(), *[p for p in re.split(r"[\\/]+", rest) if p])
        if path == "~" or path.startswith("~/"):
            path = str(home) + path[1:]
        return home / path  # an absolute path stays itself

    def _file_route(self, sub: str, form: tuple[dict[str, str], dict[str, FormFile]], home: Path,
                    windows: bool) -> tuple[int, Any]:
        fields, files = form
        if sub == "/setup/upload":
            if "file_path" not in fields or "file_data" not in files:
                return 400, {"error": "file_path and file_data are required"}
            data = files["file_data"].data
            try:
                self.guest_path(home, fields["file_path"], windows).write_bytes(data)  # werkzeug's save()
            except OSError as exc:  # a missing parent, a folder there: Flask's unhandled-exception page
                raise HttpError(500, raw=b"<h1>Internal Server Error</h1>", content_type="text/html") from exc
            raise HttpError(200, raw=f"File Uploaded: {len(data)} bytes".encode(), content_type="text/html")
        if "file_path" not in fields:
            return 400, {"error": "file_path is required"}
        try:
            content = self.guest_path(home, fields["file_path"], windows).read_bytes()
        except FileNotFoundError:
            return 404, {"error": "File not found"}
        except OSError as exc:
            raise HttpError(500, raw=b"<h1>Internal Server Error</h1>", content_type="text/html") from exc
        raise HttpError(200, raw=content, content_type="application/octet-stream")

    def _execute(self, body: Any, desktop: XvfbDesktop, home: Path, missing: tuple[str, ...] = ()
                 ) -> tuple[int, Any]:
        if not isinstance(body, dict):
            return 500, {"status": "error", "message": "'NoneType' object has no attribute 'get'"}
        shell = bool(body.get("shell", False))
        command = body.get("command", "" if shell else [])
        if not command or (shell and not isinstance(command, str)) or (
                not shell and not (isinstance(command, list) and all(isinstance(c, str) for c in command))):
            return 500, {"status": "error", "message": f"invalid command: {command!r}"}
        env = dict(os.environ, DISPLAY=desktop.display, PYTHONPATH=_GUEST_DIR, FAKE_GUEST_MISSING=",".join(missing),
                   PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""), HOME=str(home),
                   CUA_FAKE_SANDBOX=str(home))
        env.pop("XAUTHORITY", None)
        try:
            proc = subprocess.run(command, shell=shell, capture_output=True, text=True, timeout=self.exec_cap,
                                  env=env, start_new_session=True, cwd=home)
        except subprocess.TimeoutExpired:
            return 500, {"status": "error", "message": f"Command '{command}' timed out after {self.exec_cap:g} seconds"}
        except OSError as exc:
            return 500, {"status": "error", "message": str(exc)}
        return 200, {"status": "success", "output": proc.stdout, "error": proc.stderr, "returncode": proc.returncode}
