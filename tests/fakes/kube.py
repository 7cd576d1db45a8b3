"""A strict loopback fake of the part of the Kubernetes API the ``kubernetes`` provider uses, whose pods are REAL
containers on the local Docker engine (the deskctl desktop image, its agent inside).

The API side speaks what kube-apiserver speaks, as the official ``kubernetes`` client reads it:

* core v1 ``pods`` (create, get, list, delete, watch, ``/log``), ``secrets`` (create, get, list, delete) and
  ``resourcequotas`` (list), in namespaces :attr:`FakeKubernetes.namespaces` (another is 404 ``namespaces "x"
  not found``); ``authorization.k8s.io/v1`` ``selfsubjectaccessreviews`` (create); ``/version``;
* bearer-token auth: no token or a wrong one is 401 ``Unauthorized``; :meth:`FakeKubernetes.deny` makes a verb
  on a resource 403 ``Forbidden`` (and a SelfSubjectAccessReview of it ``allowed: false``);
* create validates the body as the apiserver does for the fields it knows (name a DNS-1123 subdomain, label
  keys and values, containers with a DNS-1123 label name and an image, positive ``activeDeadlineSeconds``,
  ``restartPolicy``, volume mounts naming a volume, secret volumes with a ``secretName``, base64 secret data):
  422 ``Invalid`` with ``details.causes``; a taken name is 409 ``AlreadyExists``; an unknown field of a pod spec
  or a container is 400 ``BadRequest`` under ``fieldValidation=Strict``, else a ``Warning`` header;
* every error is a ``Status`` object (``kind``, ``status: Failure``, ``message``, ``reason``, ``details``,
  ``code``);
* ``labelSelector`` with ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key`` and ``!key``; ``fieldSelector``
  ``metadata.name`` / ``metadata.namespace`` (``=``, ``!=``);
* ``?watch=true``: chunked JSON event lines (``ADDED``/``MODIFIED``/``DELETED``), from ``resourceVersion``
  (events after it; one older than :attr:`FakeKubernetes.compacted_before` is an ``ERROR`` event 410 ``Expired``)
  or, without one, the current objects as ``ADDED`` first; ``timeoutSeconds`` ends the stream;
* a ResourceQuota (:meth:`FakeKubernetes.set_quota`) on ``pods`` refuses a create past it with 403 ``Forbidden``
  ``exceeded quota: ...`` and shows ``status.used``;
* DELETE takes ``gracePeriodSeconds`` (query or DeleteOptions body): the container gets SIGTERM and that long
  before SIGKILL; the pod object is gone (``DELETED`` event) once its container is, and the garbage collector
  then deletes the secrets whose ``ownerReferences`` name the pod's uid;
* :attr:`FakeKubernetes.drop_after_create` makes a create whose answer is lost (stored, then the connection
  dropped); :meth:`~fakes._http.LoopbackService.inject` answers any request with any status and body.

The node side (a kubelet with ``restartPolicy: Never`` semantics): a new pod is ``Pending`` with ``PodScheduled``
False/``Unschedulable`` while :attr:`FakeKubernetes.unschedulable` is set (it stays so); else it is scheduled
(``nodeName``, ``startTime``) and waits in ``ContainerCreating`` for every secret its volumes name (a real
kubelet retries the mount too); an image not on the local engine is ``ErrImagePull`` then ``ImagePullBackOff``
(a real check: ``docker image inspect``; nothing is ever pulled, ``imagePullPolicy: Never`` gives
``ErrImageNeverPull``); then the container is created (env, command/args, ``securityContext`` runAsUser/Group,
secret volumes as read-only bind mounts of files with ``defaultMode`` owned by root:``fsGroup``, ``emptyDir`` as
tmpfs, memory/cpu limits) and started on the default bridge: ``Running`` with ``podIP`` the container's bridge
address; ``Ready`` once a ``readinessProbe.tcpSocket`` port accepts (probed every 50 ms, not
``periodSeconds``). ``activeDeadlineSeconds`` is enforced from ``startTime`` (container stopped, ``Failed`` /
``DeadlineExceeded``); :meth:`FakeKubernetes.evict` makes ``Failed`` / ``Evicted``; a container that exits is
``Failed`` (non-zero) or ``Succeeded``.

Fake-only plumbing, for tests to look at a pod from outside: every pod's ``/tmp/.X11-unix`` is a bind mount of a
host directory (:meth:`FakeKubernetes.x11_socket_dir`), and :meth:`FakeKubernetes.read_file` reads a file out of
its container. What the fake does not check is listed in docs/kubernetes.md.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fakes._http import Drop, HttpError, JsonHandler, LoggedRequest, LoopbackService

__all__ = ["FakeKubernetes", "LoggedRequest", "parse_label_selector"]

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_POD_SPEC_FIELDS = frozenset({
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig", "dnsPolicy",
    "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork", "hostPID", "hostUsers",
    "hostname", "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims", "resources",
    "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates", "securityContext",
    "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace", "subdomain",
    "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes"})
_CONTAINER_FIELDS = frozenset({
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name",
    "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy", "securityContext", "startupProbe",
    "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
    "volumeMounts", "workingDir"})
#: label on every container the fake makes: the fake's own id (stop() removes exactly its own)
FAKE_LABEL = "deskctl-fake-kube"
_MEMORY_UNITS = {"": 1, "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "Ki": 2**10, "Mi": 2**20,
                 "Gi": 2**30, "Ti": 2**40}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, *, name: str | None = None, kind: str | None = None,
            causes: list[dict[str, str]] | None = None, headers: dict[str, str] | None = None) -> HttpError:
    """The apiserver's error answer: a ``Status`` object."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if kind is not None:
        details["kind"] = kind
    if causes:
        details["causes"] = causes
    if details:
        body["details"] = details
    return HttpError(code, body, headers)


def _invalid(kind: str, name: str, causes: list[tuple[str, str, str]]) -> HttpError:
    """422 Invalid, as the apiserver words it: ``Pod "x" is invalid: [field: Invalid value: ...]``."""
    texts = [f"{field}: {reason_text}" for field, _, reason_text in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    title = kind[:-1].capitalize() if kind.endswith("s") else kind
    return _status(422, "Invalid", f'{title} "{name}" is invalid: {joined}', name=name, kind=kind,
                   causes=[{"reason": r, "message": t, "field": f} for f, r, t in causes])


# -- selectors -----------------------------------------------------------------------------------------------


Requirement = tuple[str, str, tuple[str, ...]]  # key, operator (= != in notin exists !exists), values

_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<nkey>[^\s=!(),]+)"
    r"|(?P<key>[^\s=!(),]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s=!(),]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|\Z)")


def parse_label_selector(text: str) -> list[Requirement]:
    """The requirements of a ``labelSelector``; a malformed one raises a 400 ``BadRequest``."""
    requirements: list[Requirement] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _REQUIREMENT.match(text, pos)
        if match is None or match.end() == pos:
            raise _status(400, "BadRequest", f"unable to parse requirement: found '{text[pos:]}', "
                                             "expected: one of ['=', '!=', '==', 'in', 'notin', ',']")
        if match.group("nkey"):
            requirements.append((match.group("nkey"), "!exists", ()))
        elif match.group("op"):
            value = match.group("value") or ""
            if not _LABEL_VALUE.match(value) or len(value) > 63:
                raise _status(400, "BadRequest", f"invalid label value: \"{value}\"")
            requirements.append((match.group("key"), "!=" if match.group("op") == "!=" else "=", (value,)))
        elif match.group("set"):
            values = tuple(v.strip() for v in match.group("values").split(",") if v.strip())
            if not values:
                raise _status(400, "BadRequest", "for 'in', 'notin' operators, values set can't be empty")
            requirements.append((match.group("key"), match.group("set"), values))
        else:
            requirements.append((match.group("key"), "exists", ()))
        for key in (requirements[-1][0],):
            if not _label_key_ok(key):
                raise _status(400, "BadRequest", f"invalid label key \"{key}\"")
        pos = match.end()
    return requirements


def _matches(labels: dict[str, str], requirements: list[Requirement]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
        if op in ("=", "in") and labels.get(key) not in values:
            return False
        if op in ("!=", "notin") and present and labels[key] in values:
            return False
    return True


def _parse_field_selector(text: str) -> list[tuple[str, bool, str]]:
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = re.fullmatch(r"([a-zA-Z.]+)\s*(==|=|!=)\s*(.*)", part)
        if match is None or match.group(1) not in ("metadata.name", "metadata.namespace", "status.phase"):
            raise _status(400, "BadRequest", f'"{part}" is not a known field selector: only "metadata.name", '
                                             '"metadata.namespace", "status.phase"')
        out.append((match.group(1), match.group(2) != "!=", match.group(3)))
    return out


def _field_matches(obj: dict[str, Any], fields: list[tuple[str, bool, str]]) -> bool:
    for path, equal, value in fields:
        section, _, key = path.partition(".")
        if (str(obj.get(section, {}).get(key, "")) == value) != equal:
            return False
    return True


def _label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _check_labels(labels: Any, field: str) -> list[tuple[str, str, str]]:
    causes: list[tuple[str, str, str]] = []
    if labels is None:
        return causes
    if not isinstance(labels, dict):
        return [(field, "FieldValueInvalid", "Invalid value: must be a map of strings")]
    for key, value in labels.items():
        if not isinstance(key, str) or not _label_key_ok(key):
            causes.append((field, "FieldValueInvalid",
                           f'Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', '
                           "'_' or '.', and must start and end with an alphanumeric character"))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append((field, "FieldValueInvalid",
                           f'Invalid value: "{value}": a valid label must be an empty string or consist of '
                           "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                           "character"))
    return causes


def _quantity_bytes(value: Any) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kMGT]i?|)", str(value).strip())
    return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2)]) if match else None


def _quantity_cpus(value: Any) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m?)", str(value).strip())
    if match is None:
        return None
    return float(match.group(1)) / (1000 if match.group(2) else 1)


# -- the HTTP side -------------------------------------------------------------------------------------------


class _Handler(JsonHandler):
    owner: FakeKubernetes
    server_seconds_header = False

    def route(self, path: str, query: dict[str, list[str]], raw: bytes) -> tuple[int, Any, str]:
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                raise _status(400, "BadRequest", "the body of the request was in an unknown format") from None
        self.logged_body = _without_secret_data(body)
        self.owner.authorize(self.headers)
        self.raise_injected(path)
        status, answer, headers = self.owner.handle(self.command, path, query, body)
        if headers:
            raise HttpError(status, answer, headers)
        return status, answer, "text/plain" if isinstance(answer, bytes) else "application/json"

    def fake_bug(self, exc: Exception) -> Any:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f"fake error: {type(exc).__name__}: {exc}", "reason": "InternalError", "code": 500}

    def dispatch(self) -> None:
        query = _query(self.path)
        if self.command == "GET" and query.get("watch", [""])[0] in ("true", "1"):
            self._watch(query)
            return
        super().dispatch()

    do_GET = do_POST = do_PUT = do_DELETE = dispatch

    def _watch(self, query: dict[str, list[str]]) -> None:
        from urllib.parse import urlsplit

        started = time.perf_counter()
        path = urlsplit(self.path).path
        self.logged_body = None
        try:
            self.owner.authorize(self.headers)
            self.raise_injected(path)
            stream = self.owner.watch(path, query)
        except HttpError as err:
            self._record(path, query, err.status, started)
            payload = json.dumps(err.body).encode()
            self.send_response(err.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self._record(path, query, 200, started)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            for event in stream:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


def _query(raw_path: str) -> dict[str, list[str]]:
    from urllib.parse import parse_qs, urlsplit

    return parse_qs(urlsplit(raw_path).query)


def _without_secret_data(body: Any) -> Any:
    """What the request log keeps of a body: a Secret's values as their sizes."""
    if isinstance(body, dict) and body.get("kind") == "Secret":
        body = dict(body)
        for key in ("data", "stringData"):
            if isinstance(body.get(key), dict):
                body[key] = {k: f"<{len(str(v))} chars>" for k, v in body[key].items()}
    return body


# -- the fake ------------------------------------------------------------------------------------------------


class FakeKubernetes(LoopbackService):
    """The fake cluster. Use as a context manager (or :meth:`start` / :meth:`stop` in ``finally``)."""

    handler_class = _Handler
    thread_name = "fake-kube"
    vendor_vars = ("KUBECONFIG",)

    def __init__(self, *, token: str | None = None, namespaces: tuple[str, ...] = ("default",),
                 user: str = "deskctl-tester") -> None:
        super().__init__()
        self.token = token or "fake-kube-" + uuid.uuid4().hex
        self.user = user
        self.namespaces = set(namespaces)
        self.fake_id = uuid.uuid4().hex[:12]
        #: (verb, resource) pairs refused with 403 Forbidden (and in SelfSubjectAccessReviews)
        self.denied: set[tuple[str, str]] = set()
        #: while set, new pods stay Pending with PodScheduled False, this message and reason Unschedulable
        self.unschedulable: str | None = None
        #: watch resource versions at or below this are "too old" (410 Expired)
        self.compacted_before = 0
        #: kinds ("pods", "secrets") whose next create is stored, then answered by a dropped connection (the answer
        #: lost on the way: the client cannot tell whether anything was made)
        self.drop_after_create: set[str] = set()
        self.revoked = False
        #: kind -> (namespace, name) -> object
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            "pods": {}, "secrets": {}, "resourcequotas": {}}
        self._rv = 0
        self._events: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, type, kind, object
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._containers: dict[str, str] = {}  # pod uid -> container id
        self._dirs: dict[str, Path] = {}  # pod uid -> host directory of its volumes
        self._evictions: dict[str, str] = {}  # pod uid -> message
        self._root = Path(tempfile.mkdtemp(prefix="fake-kube-"))
        os.chmod(self._root, 0o755)
        self._docker: Any = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeKubernetes:
        import docker

        self._docker = docker.from_env(timeout=120)
        super().start()
        self._write_kubeconfig()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        super().stop()
        if self._docker is not None:
            for raw in self._docker.api.containers(all=True, filters={"label": f"{FAKE_LABEL}={self.fake_id}"}):
                with contextlib.suppress(Exception):
                    self._docker.api.remove_container(raw["Id"], force=True)
            self._docker.close()
            self._docker = None
        shutil.rmtree(self._root, ignore_errors=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self._root / "kubeconfig"

    def _write_kubeconfig(self, path: Path | None = None, *, token: str | None = None,
                          namespace: str = "default") -> Path:
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.base_url}}],
            "users": [{"name": self.user, "user": {"token": token or self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": self.user,
                                                      "namespace": namespace}}],
        }
        target = path or self.kubeconfig
        target.write_text(json.dumps(doc))
        os.chmod(target, 0o600)
        return target

    def write_kubeconfig(self, path: Path, *, token: str | None = None, namespace: str = "default") -> Path:
        """A kubeconfig for this fake at ``path`` (another token, another default namespace)."""
        return self._write_kubeconfig(path, token=token, namespace=namespace)

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig)}

    # -- test controls -----------------------------------------------------------------------------------
    def deny(self, verb: str, resource: str) -> None:
        self.denied.add((verb, resource))

    def set_quota(self, pods: int, namespace: str = "default", name: str = "deskctl-quota") -> None:
        with self._lock:
            self._put("resourcequotas", {
                "apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                             "creationTimestamp": _now()},
                "spec": {"hard": {"pods": str(pods)}}}, "ADDED")

    def evict(self, name: str, namespace: str = "default",
              message: str = "The node was low on resource: memory. ") -> None:
        """The kubelet evicts the pod: its container is stopped, the pod ``Failed`` / ``Evicted``."""
        with self._lock:
            pod = self.objects["pods"][(namespace, name)]
            self._evictions[pod["metadata"]["uid"]] = message
            self._changed.notify_all()

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        with self._lock:
            found = self.objects["pods"].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def secret(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        with self._lock:
            found = self.objects["secrets"].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def names(self, kind: str) -> list[str]:
        with self._lock:
            return sorted(name for _, name in self.objects[kind])

    def container_of(self, name: str, namespace: str = "default") -> str | None:
        """The id of the Docker container behind a pod (None before it is made)."""
        with self._lock:
            pod = self.objects["pods"].get((namespace, name))
            return self._containers.get(pod["metadata"]["uid"]) if pod else None

    def containers(self) -> list[str]:
        """Ids of every container of this fake that still exists on the engine."""
        return [str(c["Id"]) for c in
                self._docker.api.containers(all=True, filters={"label": f"{FAKE_LABEL}={self.fake_id}"})]

    def x11_socket_dir(self, name: str, namespace: str = "default") -> Path:
        with self._lock:
            pod = self.objects["pods"][(namespace, name)]
            return self._dirs[pod["metadata"]["uid"]] / "x11"

    def read_file(self, name: str, path: str, namespace: str = "default") -> bytes:
        """A file out of the pod's container (a test looking inside, as ``kubectl cp`` would)."""
        import io
        import tarfile

        container = self.container_of(name, namespace)
        assert container is not None, f"pod {name} has no container"
        stream, _ = self._docker.api.get_archive(container, path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            assert member is not None
            handle = tar.extractfile(member)
            assert handle is not None
            return handle.read()

    def requests(self, pattern: str = "", method: str | None = None) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if re.search(pattern, r.path) and (method is None or r.method == method)]

    def wait_until(self, condition: Callable[[], bool], timeout: float = 60.0, what: str = "a condition") -> None:
        with self._changed:
            if not self._changed.wait_for(condition, timeout):
                raise AssertionError(f"the fake never reached {what} within {timeout:g}s")

    # -- auth --------------------------------------------------------------------------------------------
    def authorize(self, headers: Any) -> None:
        auth = str(headers.get("Authorization") or "")
        if self.revoked or not auth.startswith("Bearer ") or auth[7:] != self.token:
            raise _status(401, "Unauthorized", "Unauthorized")

    def _allowed(self, verb: str, resource: str) -> bool:
        return (verb, resource) not in self.denied and ("*", resource) not in self.denied

    def _forbid(self, verb: str, resource: str, namespace: str, name: str | None = None) -> None:
        if not self._allowed(verb, resource):
            target = f'{resource} "{name}"' if name else resource
            raise _status(403, "Forbidden", f'{target} is forbidden: User "{self.user}" cannot {verb} resource '
                                            f'"{resource}" in API group "" in the namespace "{namespace}"',
                          name=name, kind=resource)

    # -- storage -----------------------------------------------------------------------------------------
    def _put(self, kind: str, obj: dict[str, Any], event: str) -> None:
        """Store ``obj`` (lock held) under a new resourceVersion and tell the watchers."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        meta = obj["metadata"]
        self.objects[kind][(meta["namespace"], meta["name"])] = obj
        self._events.append((self._rv, event, kind, copy.deepcopy(obj)))
        self._changed.notify_all()

    def _drop(self, kind: str, obj: dict[str, Any]) -> None:
        self._rv += 1
        meta = obj["metadata"]
        self.objects[kind].pop((meta["namespace"], meta["name"]), None)
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._events.append((self._rv, "DELETED", kind, gone))
        self._changed.notify_all()

    # -- the API -------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, list[str]],
               body: Any) -> tuple[int, Any, dict[str, str] | None]:
        if path == "/version" and method == "GET":
            return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake", "platform": "linux/amd64"}, None
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            return self._access_review(body)
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(pods|secrets|resourcequotas)(?:/([^/]+))?(/log)?",
                             path)
        if match is None:
            raise _status(404, "NotFound", "the server could not find the requested resource")
        namespace, kind, name, log = match.groups()
        if namespace not in self.namespaces:
            raise _status(404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces")
        allowed = {"pods": ("GET", "POST", "DELETE"), "secrets": ("GET", "POST", "DELETE"),
                   "resourcequotas": ("GET",)}[kind]
        if method not in allowed or (name is None and method == "DELETE") or (name and method == "POST") \
                or (log and (kind != "pods" or method != "GET")):
            raise _status(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                   "resource")
        if log:
            self._forbid("get", "pods/log", namespace, name)
            return 200, self._log(namespace, name, query), None
        if name is None and method == "GET":
            self._forbid("list", kind, namespace)
            return 200, self._list(kind, namespace, query), None
        if name is None:
            self._forbid("create", kind, namespace)
            return self._create(kind, namespace, body, query)
        verb = {"GET": "get", "DELETE": "delete"}[method]
        self._forbid(verb, kind, namespace, name)
        with self._lock:
            obj = self.objects[kind].get((namespace, name))
            if obj is None:
                raise _status(404, "NotFound", f'{kind} "{name}" not found', name=name, kind=kind)
            if method == "GET":
                return 200, self._public(kind, obj), None
            return self._delete(kind, obj, query, body)

    def _public(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        if kind == "resourcequotas":
            namespace = obj["metadata"]["namespace"]
            used = sum(1 for (ns, _), pod in self.objects["pods"].items()
                       if ns == namespace and pod["status"].get("phase") not in ("Failed", "Succeeded"))
            out["status"] = {"hard": dict(obj["spec"]["hard"]), "used": {"pods": str(used)}}
        return out

    def _list(self, kind: str, namespace: str, query: dict[str, list[str]]) -> dict[str, Any]:
        labels = parse_label_selector(query.get("labelSelector", [""])[0])
        fields = _parse_field_selector(query.get("fieldSelector", [""])[0])
        with self._lock:
            items = [self._public(kind, o) for (ns, _), o in sorted(self.objects[kind].items())
                     if ns == namespace and _matches(o["metadata"].get("labels") or {}, labels)
                     and _field_matches(o, fields)]
            rv = str(self._rv)
        title = {"pods": "PodList", "secrets": "SecretList", "resourcequotas": "ResourceQuotaList"}[kind]
        return {"kind": title, "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}

    def watch(self, path: str, query: dict[str, list[str]]) -> Iterator[dict[str, Any]]:
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(pods|secrets)", path)
        if match is None:
            raise _status(405, "MethodNotAllowed", "watch is supported on pods and secrets lists only")
        namespace, kind = match.groups()
        if namespace not in self.namespaces:
            raise _status(404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces")
        self._forbid("watch", kind, namespace)
        labels = parse_label_selector(query.get("labelSelector", [""])[0])
        fields = _parse_field_selector(query.get("fieldSelector", [""])[0])
        raw_rv = query.get("resourceVersion", [""])[0]
        timeout = float(query.get("timeoutSeconds", ["1800"])[0])
        with self._lock:
            if raw_rv not in ("", "0") and int(raw_rv) < self.compacted_before:
                gone: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                        "message": f"too old resource version: {raw_rv} ({self.compacted_before})",
                                        "reason": "Expired", "code": 410}
                initial: list[dict[str, Any]] = [{"type": "ERROR", "object": gone}]
                since = -1
            elif raw_rv in ("", "0"):
                initial = [{"type": "ADDED", "object": self._public(kind, o)}
                           for (ns, _), o in sorted(self.objects[kind].items())
                           if ns == namespace and _matches(o["metadata"].get("labels") or {}, labels)
                           and _field_matches(o, fields)]
                since = self._rv
            else:
                initial, since = [], int(raw_rv)
        return self._stream(kind, namespace, labels, fields, initial, since, time.monotonic() + timeout)

    def _stream(self, kind: str, namespace: str, labels: list[Requirement], fields: list[tuple[str, bool, str]],
                initial: list[dict[str, Any]], since: int, deadline: float) -> Iterator[dict[str, Any]]:
        yield from initial
        if since < 0:
            return
        while not self._stopping.is_set():
            with self._changed:
                fresh = [e for e in self._events if e[0] > since]
                if not fresh:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._changed.wait(min(left, 0.5))
                    continue
            for rv, event, event_kind, obj in fresh:
                since = rv
                meta = obj["metadata"]
                if event_kind == kind and meta["namespace"] == namespace and \
                        _matches(meta.get("labels") or {}, labels) and _field_matches(obj, fields):
                    yield {"type": event, "object": self._public(kind, obj)}

    def _access_review(self, body: Any) -> tuple[int, Any, None]:
        if not isinstance(body, dict) or body.get("kind") != "SelfSubjectAccessReview":
            raise _status(400, "BadRequest", "the body is not a SelfSubjectAccessReview")
        attributes = (body.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attributes, dict):
            raise _status(422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                                          "spec.resourceAttributes: Invalid value: null: exactly one of "
                                          "nonResourceAttributes or resourceAttributes must be specified")
        verb, resource = str(attributes.get("verb", "")), str(attributes.get("resource", ""))
        sub = attributes.get("subresource")
        full = f"{resource}/{sub}" if sub else resource
        allowed = self._allowed(verb, full)
        answer = dict(body)
        answer["metadata"] = {"creationTimestamp": None}
        answer["status"] = {"allowed": allowed}
        if not allowed:
            answer["status"]["reason"] = "denied by the fake's RBAC"
        return 201, answer, None

    # -- create ------------------------------------------------------------------------------------------
    def _create(self, kind: str, namespace: str, body: Any,
                query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str] | None]:
        if kind == "resourcequotas":
            raise _status(405, "MethodNotAllowed", "the fake makes quotas through set_quota()")
        expected = {"pods": "Pod", "secrets": "Secret"}[kind]
        if not isinstance(body, dict):
            raise _status(400, "BadRequest", "the body of the request was in an unknown format")
        if body.get("kind") not in (None, expected) or body.get("apiVersion") not in (None, "v1"):
            raise _status(400, "BadRequest", f"the API version in the data ({body.get('apiVersion')}) does not "
                                             f"match the expected API version (v1) or kind ({expected})")
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        name = meta.get("name")
        causes: list[tuple[str, str, str]] = []
        if not name and meta.get("generateName"):
            name = str(meta["generateName"]) + uuid.uuid4().hex[:5]
        if not name:
            causes.append(("metadata.name", "FieldValueRequired", "Required value: name or generateName is "
                                                                  "required"))
        elif not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            causes.append(("metadata.name", "FieldValueInvalid",
                           f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                           "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                           "character"))
        if meta.get("namespace") not in (None, namespace):
            causes.append(("metadata.namespace", "FieldValueInvalid",
                           "Invalid value: the namespace of the provided object does not match the namespace "
                           "sent on the request"))
        causes += _check_labels(meta.get("labels"), "metadata.labels")
        annotations = meta.get("annotations")
        if annotations is not None and (not isinstance(annotations, dict)
                                        or not all(isinstance(v, str) for v in annotations.values())):
            causes.append(("metadata.annotations", "FieldValueInvalid", "Invalid value: must be a map of strings"))
        warnings: list[str] = []
        if kind == "pods":
            causes += self._check_pod(body, warnings)
        else:
            causes += self._check_secret(body)
        strict = query.get("fieldValidation", [""])[0] == "Strict"
        if strict and warnings:
            raise _status(400, "BadRequest", "strict decoding error: " + ", ".join(warnings))
        if causes:
            raise _invalid(kind, str(name or ""), causes)
        assert isinstance(name, str)
        with self._lock:
            if (namespace, name) in self.objects[kind]:
                raise _status(409, "AlreadyExists", f'{kind} "{name}" already exists', name=name, kind=kind)
            if kind == "pods":
                self._check_quota(namespace, name)
            obj = copy.deepcopy(body)
            obj["apiVersion"], obj["kind"] = "v1", expected
            obj_meta = obj.setdefault("metadata", {})
            obj_meta.update(name=name, namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
            obj_meta.pop("generateName", None)
            if kind == "pods":
                spec = obj["spec"]
                spec.setdefault("restartPolicy", "Always")
                spec.setdefault("terminationGracePeriodSeconds", 30)
                for container in spec["containers"]:
                    container.setdefault("imagePullPolicy", "Always" if str(container["image"]).endswith(
                        ":latest") or ":" not in str(container["image"]) else "IfNotPresent")
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            else:
                obj.setdefault("type", "Opaque")
                data = dict(obj.pop("data", None) or {})
                for key, value in (obj.pop("stringData", None) or {}).items():
                    data[key] = base64.b64encode(str(value).encode()).decode()
                obj["data"] = data
            self._put(kind, obj, "ADDED")
            answer = copy.deepcopy(obj)
            dropped = kind in self.drop_after_create
            self.drop_after_create.discard(kind)
        if kind == "pods":
            self._spawn(lambda: self._kubelet(namespace, name), f"fake-kubelet-{name}")
        if dropped:
            raise Drop()
        headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
        return 201, answer, headers

    def _check_quota(self, namespace: str, name: str) -> None:
        for (ns, quota_name), quota in self.objects["resourcequotas"].items():
            if ns != namespace or "pods" not in quota["spec"]["hard"]:
                continue
            limit = int(quota["spec"]["hard"]["pods"])
            used = sum(1 for (pod_ns, _), pod in self.objects["pods"].items()
                       if pod_ns == namespace and pod["status"].get("phase") not in ("Failed", "Succeeded"))
            if used + 1 > limit:
                raise _status(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: {quota_name}, '
                                                f"requested: pods=1, used: pods={used}, limited: pods={limit}",
                              name=name, kind="pods")

    @staticmethod
    def _check_secret(body: dict[str, Any]) -> list[tuple[str, str, str]]:
        causes: list[tuple[str, str, str]] = []
        for field in ("data", "stringData"):
            values = body.get(field)
            if values is None:
                continue
            if not isinstance(values, dict):
                causes.append((field, "FieldValueInvalid", "Invalid value: must be a map"))
                continue
            for key, value in values.items():
                if not re.fullmatch(r"[-._a-zA-Z0-9]+", str(key)) or len(str(key)) > 253:
                    causes.append((f"{field}[{key}]", "FieldValueInvalid",
                                   f'Invalid value: "{key}": a valid config key must consist of alphanumeric '
                                   "characters, '-', '_' or '.'"))
                if field == "data":
                    try:
                        base64.b64decode(str(value), validate=True)
                    except ValueError:
                        causes.append((f"data[{key}]", "FieldValueInvalid", "Invalid value: illegal base64 data"))
        return causes

    @staticmethod
    def _check_pod(body: dict[str, Any], warnings: list[str]) -> list[tuple[str, str, str]]:
        causes: list[tuple[str, str, str]] = []
        spec = body.get("spec")
        if not isinstance(spec, dict):
            return [("spec.containers", "FieldValueRequired", "Required value")]
        warnings += [f'unknown field "spec.{k}"' for k in sorted(set(spec) - _POD_SPEC_FIELDS)]
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            causes.append(("spec.containers", "FieldValueRequired", "Required value"))
            containers = []
        volumes = spec.get("volumes") or []
        volume_names: set[str] = set()
        for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
            vname = volume.get("name") if isinstance(volume, dict) else None
            if not isinstance(vname, str) or not _DNS_LABEL.match(vname):
                causes.append((f"spec.volumes[{i}].name", "FieldValueInvalid", f'Invalid value: "{vname}"'))
                continue
            if vname in volume_names:
                causes.append((f"spec.volumes[{i}].name", "FieldValueDuplicate", f'Duplicate value: "{vname}"'))
            volume_names.add(vname)
            sources = [k for k in volume if k != "name"]
            if len(sources) != 1:
                causes.append((f"spec.volumes[{i}]", "FieldValueRequired",
                               "Required value: must specify exactly one volume type"))
            elif sources[0] == "secret" and not (volume["secret"] or {}).get("secretName"):
                causes.append((f"spec.volumes[{i}].secret.secretName", "FieldValueRequired", "Required value"))
            elif sources[0] not in ("secret", "emptyDir"):
                causes.append((f"spec.volumes[{i}]", "FieldValueNotSupported",
                               f'Unsupported value: "{sources[0]}": the fake knows secret and emptyDir volumes'))
        names: set[str] = set()
        for i, container in enumerate(containers):
            where = f"spec.containers[{i}]"
            if not isinstance(container, dict):
                causes.append((where, "FieldValueInvalid", "Invalid value: must be an object"))
                continue
            warnings += [f'unknown field "{where}.{k}"' for k in sorted(set(container) - _CONTAINER_FIELDS)]
            cname = container.get("name")
            if not cname:
                causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
            elif not isinstance(cname, str) or len(cname) > 63 or not _DNS_LABEL.match(cname):
                causes.append((f"{where}.name", "FieldValueInvalid", f'Invalid value: "{cname}": a lowercase RFC '
                                                                    "1123 label must consist of lower case "
                                                                    "alphanumeric characters or '-'"))
            elif cname in names:
                causes.append((f"{where}.name", "FieldValueDuplicate", f'Duplicate value: "{cname}"'))
            names.add(str(cname))
            if not container.get("image"):
                causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
            for j, env in enumerate(container.get("env") or []):
                if not isinstance(env, dict) or not re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", str(env.get("name"))):
                    causes.append((f"{where}.env[{j}].name", "FieldValueInvalid", "Invalid value"))
                elif "valueFrom" in env:
                    causes.append((f"{where}.env[{j}].valueFrom", "FieldValueNotSupported",
                                   "Unsupported value: the fake takes plain values only"))
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if not isinstance(mount, dict) or mount.get("name") not in volume_names:
                    causes.append((f"{where}.volumeMounts[{j}].name", "FieldValueNotFound",
                                   f'Not found: "{(mount or {}).get("name")}"'))
                elif not str(mount.get("mountPath", "")).startswith("/"):
                    causes.append((f"{where}.volumeMounts[{j}].mountPath", "FieldValueRequired",
                                   "Required value"))
            policy = container.get("imagePullPolicy")
            if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
                causes.append((f"{where}.imagePullPolicy", "FieldValueNotSupported", f'Unsupported value: "{policy}"'))
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0):
            causes.append(("spec.activeDeadlineSeconds", "FieldValueInvalid",
                           f"Invalid value: {deadline}: must be between 1 and 2147483647, inclusive"))
        policy = spec.get("restartPolicy")
        if policy is not None and policy not in ("Always", "OnFailure", "Never"):
            causes.append(("spec.restartPolicy", "FieldValueNotSupported", f'Unsupported value: "{policy}"'))
        return causes

    # -- delete ------------------------------------------------------------------------------------------
    def _delete(self, kind: str, obj: dict[str, Any], query: dict[str, list[str]],
                body: Any) -> tuple[int, Any, None]:
        """(lock held) Delete; a pod with a container goes through its grace period in the kubelet thread."""
        grace_raw = query.get("gracePeriodSeconds", [None])[0]
        if grace_raw is None and isinstance(body, dict):
            grace_raw = body.get("gracePeriodSeconds")
        if kind != "pods":
            answer = self._public(kind, obj)
            self._drop(kind, obj)
            return 200, answer, None
        grace = int(grace_raw) if grace_raw is not None else int(obj["spec"].get("terminationGracePeriodSeconds", 30))
        if grace < 0:
            raise _status(422, "Invalid", "gracePeriodSeconds: Invalid value: must be >= 0")
        meta = obj["metadata"]
        if "deletionTimestamp" not in meta:
            meta["deletionTimestamp"] = _now()
            meta["deletionGracePeriodSeconds"] = grace
            self._put(kind, obj, "MODIFIED")
        else:
            meta["deletionGracePeriodSeconds"] = min(grace, int(meta.get("deletionGracePeriodSeconds", grace)))
            self._changed.notify_all()
        return 200, self._public(kind, obj), None

    def _finish_pod(self, pod: dict[str, Any]) -> None:
        """(lock held) The pod's container is gone: the object goes, then what it owns (the garbage collector)."""
        uid = pod["metadata"]["uid"]
        self._drop("pods", pod)
        for secret in list(self.objects["secrets"].values()):
            if any(ref.get("uid") == uid for ref in secret["metadata"].get("ownerReferences") or []):
                self._drop("secrets", secret)

    def _log(self, namespace: str, name: str, query: dict[str, list[str]]) -> bytes:
        with self._lock:
            pod = self.objects["pods"].get((namespace, name))
            if pod is None:
                raise _status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            container = self._containers.get(pod["metadata"]["uid"])
        if container is None:
            raise _status(400, "BadRequest", f'container "{pod["spec"]["containers"][0]["name"]}" in pod "{name}" '
                                             "is waiting to start: ContainerCreating")
        tail = query.get("tailLines", ["all"])[0]
        raw = self._docker.api.logs(container, tail=int(tail) if tail.isdigit() else "all")
        return bytes(raw)

    # -- the kubelet ---------------------------------------------------------------------------------------
    def _update(self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
        with self._lock:
            pod = self.objects["pods"].get((namespace, name))
            if pod is None:
                return None
            change(pod)
            self._put("pods", pod, "MODIFIED")
            return pod

    def _wait(self, namespace: str, name: str, until: Callable[[dict[str, Any]], bool], seconds: float) -> \
            dict[str, Any] | None:
        """Wait (up to ``seconds``) until the pod is deleted/being deleted or ``until(pod)``; the pod or None."""
        deadline = time.monotonic() + seconds
        with self._changed:
            while not self._stopping.is_set():
                pod = self.objects["pods"].get((namespace, name))
                if pod is None or "deletionTimestamp" in pod["metadata"] or until(pod):
                    return pod
                left = deadline - time.monotonic()
                if left <= 0:
                    return pod
                self._changed.wait(min(left, 0.5))
        return None

    def _kubelet(self, namespace: str, name: str) -> None:
        uid = ""
        try:
            with self._lock:
                pod = self.objects["pods"].get((namespace, name))
                if pod is None:
                    return
                uid = pod["metadata"]["uid"]
            self._run_pod(namespace, name, uid)
        finally:
            container = self._containers.pop(uid, None) if uid else None
            if container is not None and self._docker is not None:
                with contextlib.suppress(Exception):
                    self._docker.api.remove_container(container, force=True)
            directory = self._dirs.pop(uid, None) if uid else None
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
            with self._lock:
                pod = self.objects["pods"].get((namespace, name))
                if pod is not None and pod["metadata"]["uid"] == uid and "deletionTimestamp" in pod["metadata"]:
                    self._finish_pod(pod)

    def _run_pod(self, namespace: str, name: str, uid: str) -> None:
        # scheduling: an unschedulable pod stays Pending (the scheduler retries; so does the fake, every 0.5 s)
        if self.unschedulable is not None:
            message = self.unschedulable

            def unschedulable(p: dict[str, Any]) -> None:
                p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                              "message": message, "lastTransitionTime": _now()}]

            self._update(namespace, name, unschedulable)
        pod = self._wait(namespace, name, lambda p: self.unschedulable is None, 3600)
        if pod is None or "deletionTimestamp" in pod["metadata"] or self.unschedulable is not None:
            return
        container_spec = pod["spec"]["containers"][0]

        def scheduled(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = "fake-node"
            p["status"].update(
                phase="Pending", hostIP="127.0.0.1", startTime=_now(),
                conditions=[{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
                            {"type": "Initialized", "status": "True", "lastTransitionTime": _now()},
                            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                             "lastTransitionTime": _now()}],
                containerStatuses=[_waiting(container_spec, "ContainerCreating")])

        self._update(namespace, name, scheduled)
        started = time.monotonic()
        deadline = pod["spec"].get("activeDeadlineSeconds")
        ends_at = started + float(deadline) if deadline else float("inf")
        # the image, as the kubelet's puller (no registry here: an image not on the engine cannot be pulled)
        image = str(container_spec["image"])
        if not self._image_here(image):
            never = container_spec.get("imagePullPolicy") == "Never"
            reasons = ["ErrImageNeverPull"] if never else ["ErrImagePull", "ImagePullBackOff"]
            step = 0
            while True:
                reason = reasons[min(step, len(reasons) - 1)]
                message = (f'Container image "{image}" is not present with pull policy of Never' if never else
                           f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
                           "pull access denied, repository does not exist or may require authorization"
                           if reason == "ErrImagePull" else f'Back-off pulling image "{image}"')
                self._update(namespace, name, lambda p, r=reason, m=message: p["status"].update(
                    containerStatuses=[_waiting(container_spec, r, m)]))
                step += 1
                pod = self._wait(namespace, name, lambda p: time.monotonic() >= ends_at, 0.3)
                if pod is None or "deletionTimestamp" in pod["metadata"]:
                    return
                if time.monotonic() >= ends_at:
                    self._deadline_exceeded(namespace, name, deadline)
                    return
                if self._image_here(image):
                    break
        # volumes: every secret must exist (FailedMount until then)
        secrets = [v["secret"]["secretName"] for v in pod["spec"].get("volumes") or [] if "secret" in v]
        pod = self._wait(namespace, name, lambda p: all((namespace, s) in self.objects["secrets"] for s in secrets)
                         or time.monotonic() >= ends_at, max(0.0, min(3600.0, ends_at - time.monotonic())))
        if pod is None or "deletionTimestamp" in pod["metadata"]:
            return
        if time.monotonic() >= ends_at:
            self._deadline_exceeded(namespace, name, deadline)
            return
        try:
            container = self._start_container(pod, uid)
        except Exception as exc:
            failure = str(exc)[:400]
            self._update(namespace, name, lambda p: p["status"].update(
                containerStatuses=[_waiting(container_spec, "CreateContainerError", failure)]))
            self._wait(namespace, name, lambda p: False, 3600)
            return
        with self._lock:
            evicted = self._evictions.get(uid)
        if evicted is not None:
            # evicted while its container started: the kubelet reports the eviction, never a Running pod (so a
            # client cannot reach the agent of a pod that is already being evicted)
            self._stop_with(namespace, name, container, "Evicted", evicted)
            return
        inspect = self._docker.api.inspect_container(container)
        ip = str(inspect["NetworkSettings"].get("IPAddress") or "")

        def running(p: dict[str, Any]) -> None:
            p["status"].update(phase="Running", podIP=ip, podIPs=[{"ip": ip}], containerStatuses=[{
                "name": container_spec["name"], "image": image, "imageID": str(inspect.get("Image", "")),
                "containerID": f"docker://{container}", "ready": False, "restartCount": 0, "started": True,
                "state": {"running": {"startedAt": _now()}}}])

        self._update(namespace, name, running)
        probe = (container_spec.get("readinessProbe") or {}).get("tcpSocket")
        ready = False
        while not self._stopping.is_set():
            pod = self._wait(namespace, name, lambda p: uid in self._evictions or time.monotonic() >= ends_at, 0.05)
            if pod is None:
                return
            if "deletionTimestamp" in pod["metadata"]:
                grace = int(pod["metadata"].get("deletionGracePeriodSeconds", 30))
                with contextlib.suppress(Exception):
                    self._docker.api.stop(container, timeout=grace)
                return
            if uid in self._evictions:
                self._stop_with(namespace, name, container, "Evicted", self._evictions[uid])
                return
            if time.monotonic() >= ends_at:
                self._deadline_exceeded(namespace, name, deadline, container)
                return
            state = self._docker.api.inspect_container(container)["State"]
            if not state.get("Running"):
                code = int(state.get("ExitCode") or 0)
                self._update(namespace, name, lambda p, c=code: _terminated(p, container_spec, c, container))
                self._wait(namespace, name, lambda p: False, 3600)
                return
            if not ready and (probe is None or _tcp_open(ip, int(probe.get("port", 0)))):
                ready = True
                self._update(namespace, name, _mark_ready)

    def _deadline_exceeded(self, namespace: str, name: str, deadline: Any, container: str | None = None) -> None:
        self._stop_with(namespace, name, container, "DeadlineExceeded",
                        f"Pod was active on the node longer than the specified deadline ({deadline}s)")

    def _stop_with(self, namespace: str, name: str, container: str | None, reason: str, message: str) -> None:
        if container is not None:
            with contextlib.suppress(Exception):
                self._docker.api.stop(container, timeout=1)

        def failed(p: dict[str, Any]) -> None:
            p["status"].update(phase="Failed", reason=reason, message=message)
            for cond in p["status"].get("conditions") or []:
                if cond["type"] == "Ready":
                    cond.update(status="False", reason="PodFailed")
            for status in p["status"].get("containerStatuses") or []:
                status["ready"] = False
                status["state"] = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": _now()}}

        self._update(namespace, name, failed)
        self._wait(namespace, name, lambda p: False, 3600)

    def _image_here(self, image: str) -> bool:
        import docker.errors

        try:
            self._docker.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            if getattr(exc, "status_code", None) in (400, 404):
                return False
            raise
        return True

    def _start_container(self, pod: dict[str, Any], uid: str) -> str:
        spec = pod["spec"]
        container_spec = spec["containers"][0]
        directory = self._root / uid
        directory.mkdir(mode=0o755)
        self._dirs[uid] = directory
        x11 = directory / "x11"
        x11.mkdir()
        os.chmod(x11, 0o1777)
        security = {**(spec.get("securityContext") or {}), **(container_spec.get("securityContext") or {})}
        fs_group = security.get("fsGroup")
        binds: dict[str, dict[str, str]] = {str(x11): {"bind": "/tmp/.X11-unix", "mode": "rw"}}
        tmpfs: dict[str, str] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container_spec.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:
                tmpfs[mount["mountPath"]] = "mode=1777"
                continue
            source = volume["secret"]
            with self._lock:
                secret = copy.deepcopy(self.objects["secrets"][(pod["metadata"]["namespace"], source["secretName"])])
            target = directory / f"volume-{mount['name']}"
            target.mkdir(mode=0o755)
            mode = int(source.get("defaultMode", 0o644))
            items = source.get("items") or [{"key": k, "path": k} for k in secret.get("data") or {}]
            for item in items:
                path = target / item["path"]
                path.write_bytes(base64.b64decode(secret["data"][item["key"]]))
                os.chown(path, 0, int(fs_group) if fs_group is not None else 0)
                os.chmod(path, int(item.get("mode", mode)))
            binds[str(target)] = {"bind": mount["mountPath"], "mode": "ro"}
        resources = (container_spec.get("resources") or {}).get("limits") or {}
        host_config: dict[str, Any] = {"binds": binds, "tmpfs": tmpfs or None, "init": True,
                                       "network_mode": "bridge",
                                       "group_add": [str(fs_group)] if fs_group is not None else None}
        memory = _quantity_bytes(resources.get("memory")) if resources.get("memory") else None
        if memory:
            host_config["mem_limit"] = memory
        cpus = _quantity_cpus(resources.get("cpu")) if resources.get("cpu") else None
        if cpus:
            host_config["nano_cpus"] = int(cpus * 1e9)
        user = None
        if security.get("runAsUser") is not None:
            user = str(security["runAsUser"])
            if security.get("runAsGroup") is not None:
                user += f":{security['runAsGroup']}"
        api = self._docker.api
        created = api.create_container(
            str(container_spec["image"]), name=f"fake-kube-{self.fake_id}-{pod['metadata']['name']}",
            command=container_spec.get("args"), entrypoint=container_spec.get("command"),
            environment={e["name"]: str(e.get("value", "")) for e in container_spec.get("env") or []},
            labels={FAKE_LABEL: self.fake_id, f"{FAKE_LABEL}.pod": pod["metadata"]["name"],
                    f"{FAKE_LABEL}.uid": uid},
            user=user, working_dir=container_spec.get("workingDir"),
            host_config=api.create_host_config(**{k: v for k, v in host_config.items() if v is not None}),
            detach=True)
        container = str(created["Id"])
        self._containers[uid] = container
        api.start(container)
        return container


def _waiting(container: dict[str, Any], reason: str, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
            "restartCount": 0, "started": False, "state": {"waiting": state}}


def _terminated(pod: dict[str, Any], container: dict[str, Any], code: int, container_id: str) -> None:
    pod["status"]["phase"] = "Failed" if code else "Succeeded"
    for cond in pod["status"].get("conditions") or []:
        if cond["type"] == "Ready":
            cond.update(status="False", reason="PodCompleted" if not code else "PodFailed")
    pod["status"]["containerStatuses"] = [{
        "name": container["name"], "image": container["image"], "imageID": "", "ready": False, "restartCount": 0,
        "started": False, "containerID": f"docker://{container_id}",
        "state": {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed",
                                 "finishedAt": _now()}}}]


def _mark_ready(pod: dict[str, Any]) -> None:
    for cond in pod["status"].get("conditions") or []:
        if cond["type"] == "Ready":
            cond.update(status="True", reason=None, lastTransitionTime=_now())
            cond.pop("reason", None)
    pod["status"]["conditions"].append({"type": "ContainersReady", "status": "True", "lastTransitionTime": _now()})
    for status in pod["status"].get("containerStatuses") or []:
        status["ready"] = True


def _tcp_open(host: str, port: int) -> bool:
    if not host or not port:
        return False
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
        return True
    return False
