"""The loopback Kubernetes fake is as strict as the apiserver where the provider leans on it: raw HTTP against it
(auth, Status errors, validation, selectors, watch, delete and the garbage collector, quota), and its kubelet
with real containers (image pull errors, activeDeadlineSeconds, eviction)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fakes.kube import FakeKubernetes, parse_label_selector

pytestmark = pytest.mark.docker

PODS = "/api/v1/namespaces/default/pods"


def _client(fake: FakeKubernetes, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token or fake.token}"}
    return httpx.Client(base_url=fake.base_url, headers=headers, timeout=30)


def _pod(name: str, image: str = "deskctl-kube-test:none", **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {"app": "desk"})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "desktop", "image": image}], **spec}}


def test_no_token_or_a_wrong_one_is_401_status(fake: FakeKubernetes) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {fake.token}"}):
        answer = httpx.get(fake.base_url + PODS, headers=headers)
        assert answer.status_code == 401
        assert answer.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    with _client(fake) as client:
        assert client.get(PODS).status_code == 200


def test_denied_verb_is_403_and_the_access_review_says_so(fake: FakeKubernetes) -> None:
    fake.deny("create", "pods")
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}}}
    with _client(fake) as client:
        answer = client.post(PODS, json=_pod("p1"))
        assert answer.status_code == 403
        assert answer.json()["reason"] == "Forbidden"
        assert 'cannot create resource "pods"' in answer.json()["message"]
        reviewed = client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
        assert reviewed.status_code == 201 and reviewed.json()["status"]["allowed"] is False
        review["spec"]["resourceAttributes"]["verb"] = "delete"
        assert client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                           json=review).json()["status"]["allowed"] is True


def test_invalid_pods_are_422_with_causes(fake: FakeKubernetes) -> None:
    cases = [
        ({"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata.name"),
        (_pod("p", labels={"deskctl.owner": "host:123"}), "metadata.labels"),
        (_pod("p", labels={"bad key!": "v"}), "metadata.labels"),
        ({"metadata": {"name": "p"}, "spec": {"containers": []}}, "spec.containers"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, "spec.containers[0].image"),
        (_pod("p", activeDeadlineSeconds=0), "spec.activeDeadlineSeconds"),
        (_pod("p", restartPolicy="Sometimes"), "spec.restartPolicy"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "volumeMounts": [
            {"name": "nope", "mountPath": "/x"}]}]}}, "spec.containers[0].volumeMounts[0].name"),
        (_pod("p", volumes=[{"name": "v", "secret": {}}]), "spec.volumes[0].secret.secretName"),
        ({"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "metadata.name"),
    ]
    with _client(fake) as client:
        for body, field in cases:
            answer = client.post(PODS, json=body)
            assert answer.status_code == 422, (body, answer.text)
            status = answer.json()
            assert status["kind"] == "Status" and status["reason"] == "Invalid" and status["code"] == 422
            assert field in [c["field"] for c in status["details"]["causes"]], status
        assert fake.names("pods") == []
        bad_secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"token": "not base64!"}}
        assert client.post("/api/v1/namespaces/default/secrets", json=bad_secret).status_code == 422


def test_unknown_fields_warn_or_fail_under_strict_validation(fake: FakeKubernetes) -> None:
    fake.unschedulable = "no nodes"  # no container is made for these pods
    body = _pod("p1", colour="blue")
    with _client(fake) as client:
        strict = client.post(PODS, params={"fieldValidation": "Strict"}, json=body)
        assert strict.status_code == 400 and 'unknown field "spec.colour"' in strict.json()["message"]
        warned = client.post(PODS, json=body)
        assert warned.status_code == 201 and "spec.colour" in warned.headers["Warning"]


def test_a_taken_name_is_409_and_an_unknown_one_404(fake: FakeKubernetes) -> None:
    fake.unschedulable = "no nodes"
    with _client(fake) as client:
        assert client.post(PODS, json=_pod("p1")).status_code == 201
        taken = client.post(PODS, json=_pod("p1"))
        assert taken.status_code == 409 and taken.json()["reason"] == "AlreadyExists"
        assert taken.json()["details"] == {"name": "p1", "kind": "pods"}
        missing = client.get(PODS + "/p2")
        assert missing.status_code == 404 and missing.json()["message"] == 'pods "p2" not found'
        elsewhere = client.get("/api/v1/namespaces/other/pods")
        assert elsewhere.status_code == 404 and elsewhere.json()["message"] == 'namespaces "other" not found'


def test_label_selectors(fake: FakeKubernetes) -> None:
    fake.unschedulable = "no nodes"
    with _client(fake) as client:
        for name, labels in (("a", {"deskctl.session": "s1", "tier": "x"}), ("b", {"deskctl.session": "s2"}),
                             ("c", {"other": "1"})):
            assert client.post(PODS, json=_pod(name, labels=labels)).status_code == 201

        def names(selector: str) -> list[str]:
            answer = client.get(PODS, params={"labelSelector": selector})
            assert answer.status_code == 200, answer.text
            return [p["metadata"]["name"] for p in answer.json()["items"]]

        assert names("deskctl.session=s1") == ["a"]
        assert names("deskctl.session==s2") == ["b"]
        assert names("deskctl.session!=s1") == ["b", "c"]
        assert names("deskctl.session in (s1, s2)") == ["a", "b"]
        assert names("deskctl.session notin (s1)") == ["b", "c"]
        assert names("deskctl.session") == ["a", "b"]
        assert names("!deskctl.session") == ["c"]
        assert names("deskctl.session,tier=x") == ["a"]
        assert names("") == ["a", "b", "c"]
        bad = client.get(PODS, params={"labelSelector": "a in ()"})
        assert bad.status_code == 400 and bad.json()["reason"] == "BadRequest"
        by_name = client.get(PODS, params={"fieldSelector": "metadata.name=b"}).json()["items"]
        assert [p["metadata"]["name"] for p in by_name] == ["b"]
    assert parse_label_selector("k notin (a,b),!j") == [("k", "notin", ("a", "b")), ("j", "!exists", ())]


def _events(fake: FakeKubernetes, **params: str) -> list[dict[str, Any]]:
    with _client(fake) as client, client.stream("GET", PODS, params={"watch": "true", **params}) as answer:
        assert answer.status_code == 200
        assert answer.headers["Transfer-Encoding"] == "chunked"
        return [json.loads(line) for line in answer.iter_lines() if line]


def test_watch_from_a_resource_version_and_from_now(fake: FakeKubernetes) -> None:
    fake.unschedulable = "no nodes"
    with _client(fake) as client:
        created = client.post(PODS, json=_pod("w1")).json()
        since = created["metadata"]["resourceVersion"]
        client.post(PODS, json=_pod("w2", labels={"app": "other"}))
        client.delete(PODS + "/w1", params={"gracePeriodSeconds": "0"})
        fake.wait_until(lambda: fake.pod("w1") is None, what="w1 deleted")
    events = _events(fake, resourceVersion=since, labelSelector="app=desk", timeoutSeconds="1")
    assert [e["type"] for e in events][-1] == "DELETED"
    assert {e["object"]["metadata"]["name"] for e in events} == {"w1"}
    assert all(int(e["object"]["metadata"]["resourceVersion"]) > int(since) for e in events)
    initial = _events(fake, timeoutSeconds="1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in initial] == [("ADDED", "w2")]
    fake.compacted_before = 10**6
    expired = _events(fake, resourceVersion=since, timeoutSeconds="1")
    assert expired == [{"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                    "status": "Failure", "reason": "Expired", "code": 410,
                                                    "message": expired[0]["object"]["message"]}}]


def test_delete_takes_grace_and_collects_owned_secrets(fake: FakeKubernetes) -> None:
    fake.unschedulable = "no nodes"
    with _client(fake) as client:
        pod = client.post(PODS, json=_pod("g1")).json()
        owned = {"kind": "Secret", "metadata": {"name": "g1-agent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "g1", "uid": pod["metadata"]["uid"]}]},
            "data": {"token": "dG9rZW4="}}
        loose = {"kind": "Secret", "metadata": {"name": "loose"}, "stringData": {"token": "x"}}
        assert client.post("/api/v1/namespaces/default/secrets", json=owned).status_code == 201
        assert client.post("/api/v1/namespaces/default/secrets", json=loose).status_code == 201
        deleting = client.request("DELETE", PODS + "/g1", json={"kind": "DeleteOptions", "gracePeriodSeconds": 3})
        assert deleting.status_code == 200
        assert deleting.json()["metadata"]["deletionGracePeriodSeconds"] == 3
        fake.wait_until(lambda: fake.pod("g1") is None, what="g1 gone")
        fake.wait_until(lambda: fake.secret("g1-agent") is None, what="its secret collected")
        assert fake.secret("loose") is not None
        assert client.get(PODS + "/g1").status_code == 404
    logged = [r.body for r in fake.requests("/secrets") if r.method == "POST"]
    assert all("dG9rZW4=" not in json.dumps(body) for body in logged)  # the log keeps sizes, not values


def test_quota_refuses_a_pod_past_it(fake: FakeKubernetes) -> None:
    fake.unschedulable = "no nodes"
    fake.set_quota(pods=1)
    with _client(fake) as client:
        assert client.post(PODS, json=_pod("q1")).status_code == 201
        refused = client.post(PODS, json=_pod("q2"))
        assert refused.status_code == 403
        assert "exceeded quota: deskctl-quota, requested: pods=1, used: pods=1, limited: pods=1" in \
            refused.json()["message"]
        quotas = client.get("/api/v1/namespaces/default/resourcequotas").json()["items"]
        assert quotas[0]["status"] == {"hard": {"pods": "1"}, "used": {"pods": "1"}}


def test_unschedulable_pods_stay_pending_with_the_reason(fake: FakeKubernetes) -> None:
    fake.unschedulable = "0/1 nodes are available: 1 Insufficient memory."
    with _client(fake) as client:
        client.post(PODS, json=_pod("u1"))
    fake.wait_until(lambda: bool((fake.pod("u1") or {}).get("status", {}).get("conditions")), what="a condition")
    status = (fake.pod("u1") or {})["status"]
    assert status["phase"] == "Pending"
    assert status["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": "0/1 nodes are available: 1 Insufficient memory.",
                                     "lastTransitionTime": status["conditions"][0]["lastTransitionTime"]}]
    assert fake.containers() == []


def _waiting_reasons(fake: FakeKubernetes, name: str) -> list[str]:
    statuses = ((fake.pod(name) or {}).get("status") or {}).get("containerStatuses") or []
    return [s["state"]["waiting"]["reason"] for s in statuses if "waiting" in s["state"]]


def test_an_image_not_on_the_engine_cannot_be_pulled(fake: FakeKubernetes) -> None:
    seen: set[str] = set()
    with _client(fake) as client:
        client.post(PODS, json=_pod("i1", image="deskctl-kube-test:no-such-image"))
        never = _pod("i2", image="deskctl-kube-test:no-such-image")
        never["spec"]["containers"][0]["imagePullPolicy"] = "Never"
        client.post(PODS, json=never)

    def backoff() -> bool:
        seen.update(_waiting_reasons(fake, "i1"))
        return "ImagePullBackOff" in seen

    fake.wait_until(backoff, what="ImagePullBackOff")
    assert "ErrImagePull" in seen
    fake.wait_until(lambda: _waiting_reasons(fake, "i2") == ["ErrImageNeverPull"], what="ErrImageNeverPull")
    assert fake.containers() == []


def test_running_pod_has_the_container_ip_then_the_deadline_fails_it(fake: FakeKubernetes, image: str) -> None:
    body = _pod("d1", image=image, activeDeadlineSeconds=3)
    body["spec"]["containers"][0]["env"] = [{"name": "DESKCTL_GEOMETRY", "value": "320x240x24"}]
    with _client(fake) as client:
        assert client.post(PODS, json=body).status_code == 201
    fake.wait_until(lambda: (fake.pod("d1") or {})["status"].get("phase") == "Running", what="Running")
    container = fake.container_of("d1")
    assert container is not None
    ip = fake._docker.api.inspect_container(container)["NetworkSettings"]["IPAddress"]
    assert (fake.pod("d1") or {})["status"]["podIP"] == ip
    fake.wait_until(lambda: (fake.pod("d1") or {})["status"].get("phase") == "Failed", what="Failed")
    status = (fake.pod("d1") or {})["status"]
    assert status["reason"] == "DeadlineExceeded"
    assert not fake._docker.api.inspect_container(container)["State"]["Running"]


def test_eviction_fails_the_pod_and_stops_its_container(fake: FakeKubernetes, image: str) -> None:
    body = _pod("e1", image=image)
    body["spec"]["containers"][0]["env"] = [{"name": "DESKCTL_GEOMETRY", "value": "320x240x24"}]
    with _client(fake) as client:
        client.post(PODS, json=body)
    fake.wait_until(lambda: (fake.pod("e1") or {})["status"].get("phase") == "Running", what="Running")
    fake.evict("e1")
    fake.wait_until(lambda: (fake.pod("e1") or {})["status"].get("phase") == "Failed", what="Failed")
    assert (fake.pod("e1") or {})["status"]["reason"] == "Evicted"
    container = fake.container_of("e1")
    assert container is not None and not fake._docker.api.inspect_container(container)["State"]["Running"]
    with _client(fake) as client:
        client.delete(PODS + "/e1", params={"gracePeriodSeconds": "0"})
    fake.wait_until(lambda: fake.pod("e1") is None, what="gone")
    assert fake.containers() == []
