"""The kubernetes lifecycle policy: a pod and its token Secret made (both deleted when anything after fails),
awaited, reached through the in-desktop agent, and deleted (confirmed, or
:class:`~deskctl.errors.CleanupIncomplete`)."""


from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from deskctl._record import replace
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    DeskctlError,
    InfrastructureError,
    ProviderApiError,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers.base import (
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    RemoteHandle,
    lifetime_seconds,
)
from deskctl.providers.kubernetes.browser import KubernetesBrowser
from deskctl.providers.kubernetes.checks import KubernetesChecks
from deskctl.providers.kubernetes.client import (
    _DNS_SUBDOMAIN,
    _STUCK_REASONS,
    ANNOTATION_LABELS,
    CONTAINER,
    DESKTOP_UID,
    LABEL_PROVIDER,
    TOKEN_KEY,
    _describe,
    _labels_for_kube,
    _running,
    _selector,
    label_value,
)
from deskctl.providers.kubernetes.desktop import KubernetesDesktop, _default_port, _secret_name
from deskctl.providers.kubernetes.handle_data import KubernetesHandleData

if TYPE_CHECKING:
    from deskctl.spec import DesktopSpec


class KubernetesProvider(KubernetesBrowser, KubernetesChecks, KubernetesDesktop):
    """Desktops as pods on a Kubernetes cluster; see the module docstring."""

    name: ClassVar[str] = "kubernetes"
    aliases: ClassVar[tuple[str, ...]] = ("k8s",)
    options_model = "deskctl.providers.kubernetes.options:Options"
    capabilities: ClassVar[Capabilities] = Capabilities(
        platforms=frozenset({Platform.UBUNTU}),
        settable_geometry=True,
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=True,  # activeDeadlineSeconds stops the pod; the reaper removes the object
        isolation="container",
        start_url=True,
        local=False,
        billing="per_second",
        cursor_position=True,
        clipboard=True,
        windows=True,
        window_management=True,
        accessibility=True,
        browser=True,
    )
    # a path, not a secret; none is required: ~/.kube/config serves when it is there (the preflight says when not)
    credentials: ClassVar[CredentialSet] = CredentialSet(
        variables=("KUBECONFIG",), secret=frozenset(), required_any=(),
        source="client-go/kubectl: KUBECONFIG, else ~/.kube/config (kubernetes.io/docs/concepts/configuration/"
               "organize-cluster-access-kubeconfig)",
    )



    # -- create ----------------------------------------------------------------------------------------------------
    def _pod_body(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str], image: str,
                  port: int) -> dict[str, Any]:
        from deskctl.agent import TOKEN_FILE

        geometry = spec.geometry
        width, height, depth = (geometry.width, geometry.height, geometry.depth) if geometry else (1024, 768, 24)
        env = {"DESKCTL_SERVE_AGENT": "1", "DESKCTL_AGENT_PORT": str(port),
               "DESKCTL_GEOMETRY": f"{width}x{height}x{depth}"}
        if spec.window_manager or spec.start_url:
            env["DESKCTL_WM"] = "1"
        if spec.start_url:  # the image's entrypoint starts Chromium on it, DevTools on the pod's loopback
            env["DESKCTL_START_URL"] = spec.start_url
        if spec.window_geometry is not None:  # the start URL's window (the entrypoint reads it as on docker)
            env["DESKCTL_WINDOW"] = str(spec.window_geometry)
        options = self._opts(spec)
        grace = options.expiry_grace
        lifetime = lifetime_seconds(spec, labels)
        memory = options.memory
        resources: dict[str, Any] = {"requests": {"memory": memory}, "limits": {"memory": memory}}
        cpus = options.cpus
        if cpus is not None:
            resources["requests"]["cpu"] = resources["limits"]["cpu"] = str(cpus)
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            # what Pod Security "restricted" asks for
            "securityContext": {"runAsUser": DESKTOP_UID, "runAsGroup": DESKTOP_UID, "fsGroup": DESKTOP_UID,
                                "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": CONTAINER, "image": image,
                "imagePullPolicy": options.image_pull_policy,
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "ports": [{"name": "agent", "containerPort": port, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 2},
                "resources": resources,
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "agent-token", "mountPath": os.path.dirname(TOKEN_FILE),
                                  "readOnly": True}],
            }],
            "volumes": [{"name": "agent-token", "secret": {
                "secretName": _secret_name(session_id), "defaultMode": 0o440,
                "items": [{"key": TOKEN_KEY, "path": os.path.basename(TOKEN_FILE)}]}}],
        }
        if lifetime is not None:
            pod_spec["activeDeadlineSeconds"] = max(1, round(lifetime + grace))
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": session_id, "labels": _labels_for_kube(labels),
                             "annotations": {ANNOTATION_LABELS: json.dumps(dict(labels), sort_keys=True)}},
                "spec": pod_spec}

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        if len(session_id) > 63 or not _DNS_SUBDOMAIN.match(session_id):
            raise UsageError(f"session id {session_id!r} is not a valid pod name (lower-case letters, digits, '-')",
                             provider=self.name)
        image = self._opts(spec).image
        if not image:
            raise UsageError("the kubernetes provider needs provider option image (the cluster pulls it)",
                             code="usage.bad_option", provider=self.name,
                             remedy="deskctl image build, push it to your registry, then -o image=REGISTRY/IMAGE:TAG")
        port = self._opts(spec).agent_port or _default_port()
        all_labels = {str(k): str(v) for k, v in labels.items()}
        all_labels.setdefault(LABEL_SESSION, session_id)
        all_labels[LABEL_PROVIDER] = self.name
        body = self._pod_body(spec, session_id, all_labels, str(image), port)
        core = self._core()
        token = secrets.token_urlsafe(32)
        from deskctl._redact import register_secret

        register_secret(token)
        self._tokens[session_id] = token
        made_pod = False
        try:
            try:
                with self._errors(f"create the pod {session_id}"):
                    pod = self._json(core.create_namespaced_pod, self.namespace, body, field_validation="Strict")
            except ProviderApiError as exc:
                if exc.status == 409:  # the name is taken: that pod is not ours
                    raise UsageError(f"a pod named {session_id} already exists in {self.namespace}",
                                     code="usage.conflict", provider=self.name) from exc
                raise
            made_pod = True
            secret = {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": _secret_name(session_id), "labels": _labels_for_kube(all_labels),
                             "annotations": {ANNOTATION_LABELS: json.dumps(all_labels, sort_keys=True)},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": session_id,
                                                  "uid": pod["metadata"]["uid"]}]},
                "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
            }
            with self._errors(f"create the secret {_secret_name(session_id)}"):
                self._json(core.create_namespaced_secret, self.namespace, secret, field_validation="Strict")
        except BaseException as exc:
            # Partial or ambiguous (a create whose answer was lost may have made the pod): remove whatever of
            # this session exists before raising; never a pod of a taken name (it is not ours).
            if made_pod or not (isinstance(exc, UsageError) and exc.code == "usage.conflict"):
                with contextlib.suppress(Exception):
                    self._delete_all(session_id, confirm=False)
            raise
        return RemoteHandle(
            provider=self.name, session_id=session_id, resource_id=session_id, labels=all_labels,
            data=KubernetesHandleData(
                pod=session_id, namespace=self.namespace, uid=pod["metadata"]["uid"],
                secret_name=_secret_name(session_id), agent_port=port, image=str(image), context=self.opts.context,
                resource_version=pod["metadata"].get("resourceVersion"), platform=Platform.UBUNTU.value).to_data(),
        )

    # -- readiness -------------------------------------------------------------------------------------------------
    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        from deskctl.agent.client import wait_ready

        pod = self._wait_running(handle, deadline)
        ip = str((pod.get("status") or {}).get("podIP") or "")
        data = replace(KubernetesHandleData.of(handle), pod_ip=ip)
        data.store(handle)
        token = self._tokens.get(handle.session_id) or self._token(handle)
        try:
            wait_ready(ip, int(data.agent_port or 0), token, provider=self.name, deadline=deadline)
            self._remember(handle, ip, token)
        except ReadinessTimeout as exc:
            now = self._get("pod", data.pod, "read the pod", self._ns(handle))
            problem = _pod_problem(now) if now is not None else None
            if problem is not None:
                raise problem from exc
            raise ReadinessTimeout(f"{exc.message}; the pod is {_describe(now)}", provider=self.name,
                                   remedy=f"look at `kubectl logs {data.pod} -n {self._ns(handle)}`") from exc

    def _wait_running(self, handle: RemoteHandle, deadline: float) -> dict[str, Any]:
        """Watch the pod until it runs with an IP; raise what keeps it from running."""
        name, namespace = KubernetesHandleData.of(handle).pod, self._ns(handle)
        pod = self._get("pod", name, f"read the pod {name}", namespace)
        while True:
            if pod is None:
                raise SessionLost(f"the pod {name} was deleted before it was ready", provider=self.name)
            problem = _pod_problem(pod)
            if problem is not None:
                raise problem
            if _running(pod):
                return pod
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReadinessTimeout(f"the pod {name} did not run in time; last: {_describe(pod)}",
                                       provider=self.name, remedy=f"kubectl describe pod {name} -n {namespace}")
            pod = self._next_state(name, pod, left, lambda p: p is None or _pod_problem(p) is not None or _running(p))

    def _next_state(self, name: str, pod: dict[str, Any], seconds: float,
                    wanted: Callable[[dict[str, Any] | None], bool]) -> dict[str, Any] | None:
        """Watch the pod from its resourceVersion for up to ``seconds``; the first state ``wanted`` accepts
        (None: deleted), else the pod as it is when the watch ends (410 Expired or a closed stream: read
        again)."""
        from kubernetes import watch

        watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]
        current: dict[str, Any] | None = pod
        namespace = str(pod["metadata"].get("namespace") or self.namespace)
        try:
            with self._errors(f"watch the pod {name}"):
                for event in watcher.stream(self._core().list_namespaced_pod, namespace,
                                            field_selector=f"metadata.name={name}",
                                            resource_version=str(pod["metadata"].get("resourceVersion") or ""),
                                            timeout_seconds=max(1, int(seconds + 0.999)),
                                            _request_timeout=(self._timeout(), seconds + 5)):
                    current = None if event["type"] == "DELETED" else event["raw_object"]
                    if wanted(current):
                        return current
        except ProviderApiError as exc:
            if exc.status != 410:
                raise
        finally:
            watcher.stop()
        return self._get("pod", name, f"read the pod {name}", namespace)

    # -- destroy, list ----------------------------------------------------------------------------------------------
    def destroy(self, handle: RemoteHandle) -> None:
        self.close_browser(handle.session_id)
        self._drop_driver(handle.session_id)
        data = KubernetesHandleData.of(handle)
        name = data.pod
        secret = data.secret_name or (_secret_name(name) if name else "")
        self._delete_all(name, secret=secret, confirm=True, namespace=self._ns(handle))
        self._forget(handle.session_id)

    def _delete_all(self, pod: str, *, secret: str | None = None, confirm: bool, namespace: str | None = None) -> None:
        """Delete the pod and its secret ("not found" is success); with ``confirm``, wait until the pod is gone."""
        from kubernetes.client.exceptions import ApiException

        core = self._core()
        namespace = namespace or self.namespace
        secret = secret if secret is not None else _secret_name(pod)
        grace = int(self.opts.grace_seconds)
        left: list[str] = []
        steps: list[tuple[str, Callable[[], Any]]] = []
        if pod:
            steps.append((f"pod {pod}", lambda: core.delete_namespaced_pod(
                pod, namespace, grace_period_seconds=grace, _request_timeout=self._timeout())))
        if secret:
            steps.append((f"secret {secret}", lambda: core.delete_namespaced_secret(
                secret, namespace, _request_timeout=self._timeout())))
        failures: list[DeskctlError] = []
        for what, step in steps:
            try:
                with self._errors(f"delete the {what}"):
                    try:
                        step()
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
            except DeskctlError as exc:
                left.append(what)
                failures.append(exc)
        if failures:
            raise CleanupIncomplete(f"kubernetes: cannot delete {', '.join(left)}: {failures[0].message}",
                                    provider=self.name, remedy=f"kubectl delete pod,secret -l {LABEL_SESSION}="
                                                               f"{label_value(pod)} -n {namespace}",
                                    details={"left": left})
        if confirm and pod:
            self._confirm_gone(pod, namespace)

    def _confirm_gone(self, name: str, namespace: str) -> None:
        deadline = time.monotonic() + self.opts.destroy_timeout
        while True:
            try:
                pod = self._get("pod", name, f"read the pod {name}", namespace)
                left = deadline - time.monotonic()
                if pod is not None and left > 0:
                    pod = self._next_state(name, pod, min(left, 10), lambda p: p is None)
            except DeskctlError as exc:
                raise CleanupIncomplete(f"cannot confirm that the pod {name} is gone: {exc.message}",
                                        provider=self.name, remedy=exc.remedy,
                                        details={"left": [f"pod {name}"]}) from exc
            if pod is None:
                return
            if time.monotonic() >= deadline:
                raise CleanupIncomplete(f"the pod {name} is still there after its deletion ({_describe(pod)})",
                                        provider=self.name,
                                        remedy=f"kubectl delete pod {name} --force -n {namespace}",
                                        details={"left": [f"pod {name}"]})

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        wanted = {LABEL_PROVIDER: self.name, **dict(selector or {})}
        query = f"{LABEL_SESSION}," + _selector(wanted)
        core = self._core()
        with self._errors("list deskctl pods"):
            pods = self._json(core.list_namespaced_pod, self.namespace, label_selector=query)
        with self._errors("list deskctl secrets"):
            found_secrets = self._json(core.list_namespaced_secret, self.namespace, label_selector=query)
        handles: list[RemoteHandle] = []
        pod_names = set()
        for pod in pods.get("items") or []:
            meta = pod["metadata"]
            pod_names.add(meta["name"])
            labels = _exact_labels(meta)
            handles.append(RemoteHandle(
                provider=self.name, session_id=labels.get(LABEL_SESSION, meta["name"]), resource_id=meta["name"],
                labels=labels, data=KubernetesHandleData(
                    pod=meta["name"], namespace=self.namespace, uid=meta.get("uid"),
                    secret_name=_secret_name(meta["name"]), agent_port=_agent_port(pod),
                    pod_ip=str((pod.get("status") or {}).get("podIP") or ""),
                    phase=(pod.get("status") or {}).get("phase"), platform=Platform.UBUNTU.value).to_data(),
                created_at=_created(meta)))
        for secret in found_secrets.get("items") or []:
            meta = secret["metadata"]
            labels = _exact_labels(meta)
            session = labels.get(LABEL_SESSION, "")
            if session in pod_names or _secret_name(session) != meta["name"]:
                continue
            # a secret whose pod is gone (a crash between the two creates, or a cluster without the collector)
            handles.append(RemoteHandle(provider=self.name, session_id=session, resource_id=f"secret/{meta['name']}",
                                        labels=labels, data=KubernetesHandleData(
                                            secret_name=meta["name"], namespace=self.namespace).to_data(),
                                        created_at=_created(meta)))
        return handles

    def is_alive(self, handle: RemoteHandle) -> bool:
        name = KubernetesHandleData.of(handle).pod
        if not name:
            return False
        pod = self._get("pod", name, f"read the pod {name}", self._ns(handle))
        return pod is not None and (pod.get("status") or {}).get("phase") in ("Pending", "Running") and \
            "deletionTimestamp" not in pod["metadata"]


def _exact_labels(meta: Mapping[str, Any]) -> dict[str, str]:
    """The deskctl labels as they were given (from the annotation), else the label-safe ones."""
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    raw = (meta.get("annotations") or {}).get(ANNOTATION_LABELS)
    if raw:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            exact = json.loads(raw)
            # the annotation is believed only where it agrees with the labels the selector matched
            if all(label_value(str(v)) == labels.get(str(k)) for k, v in exact.items()):
                labels.update({str(k): str(v) for k, v in exact.items()})
    return labels


def _agent_port(pod: Mapping[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "agent":
                return int(port["containerPort"])
    return None


def _created(meta: Mapping[str, Any]) -> float:
    import datetime

    raw = str(meta.get("creationTimestamp") or "")
    try:
        return datetime.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def _pod_problem(pod: Mapping[str, Any]) -> InfrastructureError | None:
    """What keeps a pod from ever running as asked (None while it may still come up)."""
    name = (pod.get("metadata") or {}).get("name")
    status = pod.get("status") or {}
    details = {"pod": name, "phase": status.get("phase")}
    if "deletionTimestamp" in (pod.get("metadata") or {}):
        return SessionLost(f"the pod {name} is being deleted", provider="kubernetes", details=details)
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and \
                cond.get("reason") == "Unschedulable":
            return CapacityUnavailable(f"kubernetes: the pod {name} cannot be scheduled: {cond.get('message')}",
                                       provider="kubernetes", details={**details, "reason": "Unschedulable"},
                                       remedy="free or add nodes, or ask for less memory/cpus")
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        reason = str(status.get("reason") or "")
        message = f"kubernetes: the pod {name} is {phase}" + (f" ({reason}: {status.get('message')})"
                                                               if reason else "")
        if reason == "Evicted":
            return CapacityUnavailable(message, provider="kubernetes", details={**details, "reason": reason})
        return ProviderApiError(message, provider="kubernetes", details={**details, "reason": reason})
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in _STUCK_REASONS:
            return ProviderApiError(f"kubernetes: the pod {name} cannot start its container: {reason}: "
                                    f"{waiting.get('message', '')}".rstrip(": "), provider="kubernetes",
                                    details={**details, "reason": reason},
                                    remedy="check provider option image (the cluster must be able to pull it)"
                                    if "Image" in reason else None)
    return None
