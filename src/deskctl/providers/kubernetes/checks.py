"""The kubernetes preflight: the kubeconfig, the API server, permissions, quotas, the image and leftovers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deskctl.errors import (
    CredentialsForbidden,
    DeskctlError,
)
from deskctl.providers.kubernetes.client import KubernetesApi

if TYPE_CHECKING:
    from deskctl.checks import CheckResult
    from deskctl.spec import DesktopSpec


class KubernetesChecks(KubernetesApi):
    """The preflight of :class:`~deskctl.providers.kubernetes.KubernetesProvider`."""

    # -- preflight -----------------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        """Read-only: the kubeconfig, one authenticated request (the namespace's ResourceQuotas: the quota
        check too), SelfSubjectAccessReviews for what create/destroy need, and the image option."""
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)
        try:
            self._core()
        except DeskctlError as exc:
            checks.add_error(exc)
            return checks.results
        checks.add("pass", "kubernetes.kubeconfig", f"kubeconfig {self._kubeconfig()}, namespace {self.namespace}")
        checks.start()
        try:
            with self._errors("list the ResourceQuotas"):
                quotas = self._json(self._core().list_namespaced_resource_quota, self.namespace)
        except CredentialsForbidden:
            quotas = None  # may not read quotas; the access reviews below say what matters
        except DeskctlError as exc:
            checks.add_error(exc)
            return checks.results
        checks.add("pass", "credentials.valid", "the API server accepts the kubeconfig's credentials")
        checks.start()
        try:
            refused = self._refused_permissions()
        except DeskctlError as exc:
            checks.add_error(exc)
            return checks.results
        if refused:
            checks.add("fail", "credentials.forbidden", f"not allowed in namespace {self.namespace}: "
                       f"{', '.join(refused)}",
                       "ask for a Role that allows pods and secrets (create, get, list, watch, delete)")
        else:
            checks.add("pass", "kubernetes.permissions", "may create, watch and delete pods and secrets")
        checks.start()
        if quotas is None:
            checks.add("warn", "kubernetes.quota", "cannot read the namespace's ResourceQuotas (forbidden)",
                       "allow list on resourcequotas to have the quota checked before a run")
        else:
            self._check_quotas(quotas, checks.add)
        checks.start()
        image = self._opts(spec).image
        if not image:
            checks.add("fail", "usage.bad_option", "provider option image is not set: the cluster needs an image it "
                       "can pull", "deskctl image build, push it to your registry, then "
                       "-o image=REGISTRY/deskctl-desktop:TAG")
        else:
            checks.add("pass", "kubernetes.image", f"image {image} (pulled by the cluster: not checked before create)")
        return checks.results

    def _refused_permissions(self) -> list[str]:
        from kubernetes import client

        api = client.AuthorizationV1Api(self._core().api_client)
        refused = []
        for verb, resource in (("create", "pods"), ("get", "pods"), ("list", "pods"), ("watch", "pods"),
                               ("delete", "pods"), ("create", "secrets"), ("get", "secrets"),
                               ("delete", "secrets")):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {"namespace": self.namespace, "verb": verb, "resource": resource}}}
            with self._errors(f"ask whether it may {verb} {resource}"):
                answer = self._json(api.create_self_subject_access_review, body)
            if not (answer.get("status") or {}).get("allowed"):
                refused.append(f"{verb} {resource}")
        return refused

    def _check_quotas(self, quotas: dict[str, Any], add: Callable[..., object]) -> None:
        for quota in quotas.get("items") or []:
            hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
            used = (quota.get("status") or {}).get("used") or {}
            name = (quota.get("metadata") or {}).get("name")
            if "pods" in hard and "pods" in used and int(used["pods"]) >= int(hard["pods"]):
                add("fail", "quota.exceeded", f"the ResourceQuota {name} allows {hard['pods']} pods and "
                    f"{used['pods']} exist", "end other desktops in the namespace, or raise the quota")
                return
        names = ", ".join(str((q.get("metadata") or {}).get("name")) for q in quotas.get("items") or [])
        add("pass", "kubernetes.quota", f"room under the quota ({names})" if names else "no ResourceQuota")

