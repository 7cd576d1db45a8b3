"""The kubernetes provider against the loopback fake (real HTTP through the official client; pods are real
containers running the agent): what a pod looks like, the token never leaving its Secret, every injected
failure as its code and exit code, cleanup of a create that failed half-way, reap after a crash, and a pod that
goes away while in use."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import deskctl
from _cli import deskctl as run_deskctl
from deskctl.errors import CapacityUnavailable, DeskctlError, ProviderApiError, SessionLost
from deskctl.providers.base import LABEL_OWNER, LABEL_SESSION
from deskctl.providers.kubernetes import ANNOTATION_LABELS, KubernetesProvider, label_value
from deskctl.spec import DesktopSpec
from fakes.kube import FakeKubernetes

pytestmark = pytest.mark.docker


def _spec(image: str, **options: Any) -> DesktopSpec:
    return DesktopSpec(provider="kubernetes", geometry="800x600", provider_options={"image": image, **options})


def _up(fake: FakeKubernetes, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_deskctl("up", "--provider", "kubernetes", *args, env={"KUBECONFIG": str(fake.kubeconfig),
                                                                      **(env or {})})


def _token_of(fake: FakeKubernetes, pod: str) -> str:
    import base64

    secret = fake.secret(f"{pod}-agent")
    assert secret is not None
    return base64.b64decode(secret["data"]["token"]).decode()


def test_a_desktop_is_one_labelled_pod_with_a_backstop_and_its_token_only_in_a_secret(
        kube_env: FakeKubernetes, image: str, deskctl_home: Path) -> None:
    with deskctl.open_desktop(provider="kubernetes", geometry="800x600", ttl="10m",
                              provider_options={"image": image}) as desk:
        assert desk.handle is not None
        name = desk.handle.data["pod"]
        pod = kube_env.pod(name)
        assert pod is not None
        labels = pod["metadata"]["labels"]
        assert labels[LABEL_SESSION] == desk.id and labels["deskctl.provider"] == "kubernetes"
        assert labels[LABEL_OWNER] == label_value(desk.handle.labels[LABEL_OWNER])  # host:pid is not a label value
        assert json.loads(pod["metadata"]["annotations"][ANNOTATION_LABELS])[LABEL_OWNER] == \
            desk.handle.labels[LABEL_OWNER]
        spec = pod["spec"]
        assert 600 < spec["activeDeadlineSeconds"] <= 600 + 60 + 5  # the ttl plus the grace
        assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
        assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}
        token = _token_of(kube_env, name)
        secret = kube_env.secret(f"{name}-agent")
        assert secret is not None
        assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert kube_env.read_file(name, "/run/deskctl/agent/token").decode() == token
        assert desk.screenshot().width == 800
        assert desk.exec("cat /run/deskctl/agent/token").stdout == token  # the desktop user reads it, nobody else
        everything = json.dumps(pod) + json.dumps(desk.handle.to_dict()) + json.dumps(
            [r.body for r in kube_env.log if r.body is not None])
        assert token not in everything
        assert token not in (deskctl_home / "ledger.sqlite3").read_bytes().decode(errors="replace")
        environment = kube_env._docker.api.inspect_container(kube_env.container_of(name))["Config"]["Env"]
        assert not any(token in item for item in environment)
        container = kube_env.container_of(name)
    assert kube_env.names("pods") == [] and kube_env.names("secrets") == []
    assert container not in kube_env.containers()


def test_cli_up_do_screenshot_exec_down_and_the_token_never_in_the_output(kube_env: FakeKubernetes, image: str,
                                                                          tmp_path: Path) -> None:
    up = _up(kube_env, "-o", f"image={image}", "--geometry", "640x480", "--json")
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    token = _token_of(kube_env, session)
    outputs = [up.stdout + up.stderr]
    shot = tmp_path / "shot.png"
    steps: list[tuple[tuple[str, ...], str | None]] = [
        (("ls", "--json"), session), (("do", session, "click", "5", "6"), None),
        (("screenshot", session, "-o", str(shot)), None), (("exec", session, "--", "echo", "hi"), "hi"),
        (("down", session, "--json"), session)]
    for args, expected in steps:
        done = run_deskctl(*args, env={"KUBECONFIG": str(kube_env.kubeconfig)})
        assert done.returncode == 0, (args, done.stderr)
        if expected is not None:
            assert expected in done.stdout, (args, done.stdout)
        outputs.append(done.stdout + done.stderr)
    from deskctl.providers._png import png_size

    assert png_size(shot.read_bytes(), "test") == (640, 480)
    assert all(token not in out for out in outputs)
    assert kube_env.names("pods") == [] and kube_env.names("secrets") == []


def test_do_reaches_the_agent_without_the_api_and_the_kept_token_goes_with_the_desktop(
        kube_env: FakeKubernetes, image: str, deskctl_home: Path) -> None:
    up = _up(kube_env, "-o", f"image={image}", "--geometry", "640x480", "--json")
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    kept = deskctl_home / "run" / "kubernetes" / f"{session}.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    assert json.loads(kept.read_text())["token"] == _token_of(kube_env, session)
    env = {"KUBECONFIG": str(kube_env.kubeconfig)}
    before = len(kube_env.log)
    done = run_deskctl("do", session, "click", "5", "6", env=env)
    assert done.returncode == 0, done.stderr
    assert kube_env.log[before:] == []  # the address and token this home kept: no API request
    kept.unlink()
    done = run_deskctl("do", session, "click", "7", "8", env=env)  # without them: the Secret is read again
    assert done.returncode == 0, done.stderr
    assert [r.path for r in kube_env.log[before:] if r.path.endswith(f"/secrets/{session}-agent")]
    assert kept.exists()  # kept again for the next one
    assert run_deskctl("down", session, env=env).returncode == 0
    assert not kept.exists()
    assert kube_env.names("pods") == [] and kube_env.names("secrets") == []


@pytest.mark.parametrize("case", ["no_kubeconfig", "wrong_token", "unreachable", "forbidden", "unschedulable",
                                  "quota_on_create", "image_missing", "no_image", "bad_context"])
def test_each_failure_has_its_code_and_exit_code(fake: FakeKubernetes, image: str, tmp_path: Path,
                                                 case: str) -> None:
    env = {"KUBECONFIG": str(fake.kubeconfig)}
    options = ["-o", f"image={image}"]
    if case == "no_kubeconfig":
        env["KUBECONFIG"] = str(tmp_path / "missing")
        expected = ("credentials.missing", 3)
    elif case == "wrong_token":
        env["KUBECONFIG"] = str(fake.write_kubeconfig(tmp_path / "config", token="not-the-token"))
        expected = ("credentials.invalid", 3)
    elif case == "unreachable":
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        (tmp_path / "config").write_text(fake.kubeconfig.read_text().replace(f":{fake.port}", f":{port}"))
        env["KUBECONFIG"] = str(tmp_path / "config")
        expected = ("provider.unreachable", 20)
    elif case == "forbidden":
        fake.deny("delete", "secrets")
        expected = ("credentials.forbidden", 3)
    elif case == "unschedulable":
        fake.unschedulable = "0/3 nodes are available: 3 Insufficient memory."
        expected = ("capacity.unavailable", 20)
    elif case == "quota_on_create":  # a quota the preflight could not see (another client took the last slot)
        fake.inject("POST", "/pods$", 403, {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
            "code": 403, "message": 'pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=4, '
                                    "limited: pods=4"})
        expected = ("capacity.unavailable", 20)
    elif case == "image_missing":
        options = ["-o", "image=deskctl-kube-test:no-such-image"]
        expected = ("provider.api_error", 20)
    elif case == "no_image":
        options = []
        expected = ("usage.bad_option", 2)
    else:
        options += ["-o", "context=nope"]
        expected = ("config.invalid", 2)
    done = _up(fake, *options, "--json", env=env)
    error = json.loads(done.stdout)["error"]
    assert (error["code"], done.returncode) == expected, done.stdout + done.stderr
    if case == "image_missing":
        assert "ErrImagePull" in error["message"]
    if case == "unschedulable":
        assert "Insufficient memory" in error["message"]
    assert fake.token not in done.stdout + done.stderr
    assert fake.names("pods") == [] and fake.names("secrets") == []  # nothing left, whatever failed


def test_a_create_that_fails_half_way_deletes_the_pod(provider: KubernetesProvider, kube_env: FakeKubernetes,
                                                      image: str) -> None:
    kube_env.inject("POST", "/secrets$", 500, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                "status": "Failure", "reason": "InternalError", "code": 500,
                                                "message": "etcdserver: request timed out"})
    with pytest.raises(ProviderApiError) as caught:
        provider.create(_spec(image), "dk-halfway01", {LABEL_SESSION: "dk-halfway01"})
    assert "etcdserver: request timed out" in caught.value.message and caught.value.status == 500
    assert [r.method for r in kube_env.requests("/pods/dk-halfway01$")] == ["DELETE"]
    kube_env.wait_until(lambda: kube_env.names("pods") == [], what="the half-made pod gone")
    assert kube_env.names("secrets") == []


def test_a_create_whose_answer_is_lost_deletes_what_it_made(provider: KubernetesProvider,
                                                            kube_env: FakeKubernetes, image: str) -> None:
    kube_env.drop_after_create.add("pods")
    with pytest.raises(DeskctlError) as caught:
        provider.create(_spec(image), "dk-lostanswer", {LABEL_SESSION: "dk-lostanswer"})
    assert caught.value.code == "provider.unreachable"
    assert [r.method for r in kube_env.requests("/pods/dk-lostanswer$")] == ["DELETE"]
    kube_env.wait_until(lambda: kube_env.names("pods") == [], what="the pod made behind the lost answer gone")
    assert kube_env.names("secrets") == []


def test_a_taken_pod_name_is_a_conflict_and_is_not_touched(provider: KubernetesProvider,
                                                           kube_env: FakeKubernetes, image: str) -> None:
    kube_env.unschedulable = "no nodes"
    provider.create(_spec(image), "dk-taken00001", {})
    with pytest.raises(DeskctlError) as caught:
        provider.create(_spec(image), "dk-taken00001", {})
    assert caught.value.code == "usage.conflict"
    assert kube_env.names("pods") == ["dk-taken00001"]


def test_reap_after_the_owner_was_killed(kube_env: FakeKubernetes, image: str, deskctl_home: Path) -> None:
    script = ("import deskctl, sys\n"
              f"desk = deskctl.open_desktop(provider='kubernetes', geometry='640x480', provider_options={{'image': "
              f"{image!r}}})\n"
              "print(desk.id, flush=True)\n"
              "sys.stdin.read()\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "KUBECONFIG": str(kube_env.kubeconfig)})
    try:
        assert owner.stdout is not None
        session = owner.stdout.readline().strip()
        assert session.startswith("dk-"), session
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
    assert kube_env.names("pods") == [session]  # nothing on the cluster watches the owner: the reaper's job
    done = run_deskctl("reap", "--json", env={"KUBECONFIG": str(kube_env.kubeconfig)})
    assert done.returncode == 0, done.stderr
    reaped = json.loads(done.stdout)
    assert any(r["session_id"] == session and r["action"] == "destroyed" for r in reaped["reaped"]), reaped
    assert kube_env.names("pods") == [] and kube_env.names("secrets") == []


def test_list_owned_finds_pods_and_secrets_left_without_their_pod(provider: KubernetesProvider,
                                                                  kube_env: FakeKubernetes, image: str) -> None:
    kube_env.unschedulable = "no nodes"
    labels = {LABEL_SESSION: "dk-listed0001", LABEL_OWNER: "somehost:4242"}
    provider.create(_spec(image), "dk-listed0001", labels)
    orphan = provider.create(_spec(image), "dk-orphan0001", {LABEL_SESSION: "dk-orphan0001"})
    kube_env.objects["secrets"][("default", "dk-orphan0001-agent")]["metadata"].pop("ownerReferences")
    import httpx

    httpx.delete(f"{kube_env.base_url}/api/v1/namespaces/default/pods/dk-orphan0001",
                 headers={"Authorization": f"Bearer {kube_env.token}"}, params={"gracePeriodSeconds": "0"})
    kube_env.wait_until(lambda: kube_env.names("pods") == ["dk-listed0001"], what="the orphan's pod gone")
    found = {h.session_id: h for h in provider.list_owned()}
    assert set(found) == {"dk-listed0001", "dk-orphan0001"}
    assert found["dk-listed0001"].labels[LABEL_OWNER] == "somehost:4242"  # the exact value, from the annotation
    assert found["dk-orphan0001"].resource_id == "secret/dk-orphan0001-agent"
    assert [h.session_id for h in provider.list_owned({LABEL_OWNER: "somehost:4242"})] == ["dk-listed0001"]
    for handle in found.values():
        provider.destroy(handle)
    assert kube_env.names("pods") == [] and kube_env.names("secrets") == []
    provider.destroy(orphan)  # again: already gone is success


def test_eviction_while_in_use_is_session_lost_naming_it(provider: KubernetesProvider, kube_env: FakeKubernetes,
                                                         image: str) -> None:
    handle = provider.create(_spec(image), "dk-evicted001", {})
    try:
        provider.wait_ready(handle, time.monotonic() + 120)
        assert provider.display_size(handle) == (800, 600)
        kube_env.evict("dk-evicted001")
        kube_env.wait_until(lambda: (kube_env.pod("dk-evicted001") or {})["status"].get("phase") == "Failed",
                            what="evicted")
        with pytest.raises(SessionLost) as caught:
            provider.screenshot(handle)
        assert "Evicted" in caught.value.message
        assert not provider.is_alive(handle)
    finally:
        provider.destroy(handle)


def test_eviction_before_ready_is_capacity(provider: KubernetesProvider, kube_env: FakeKubernetes,
                                           image: str) -> None:
    handle = provider.create(_spec(image), "dk-evicted002", {})
    try:
        kube_env.evict("dk-evicted002")
        with pytest.raises(CapacityUnavailable):
            provider.wait_ready(handle, time.monotonic() + 120)
    finally:
        provider.destroy(handle)


def test_preflight_reads_the_quota(provider: KubernetesProvider, kube_env: FakeKubernetes, image: str) -> None:
    kube_env.set_quota(pods=0)
    codes = {r.code: r.status for r in provider.preflight(_spec(image))}
    assert codes["quota.exceeded"] == "fail"
    kube_env.set_quota(pods=5)
    codes = {r.code: r.status for r in provider.preflight(_spec(image))}
    assert codes == {"kubernetes.kubeconfig": "pass", "credentials.valid": "pass", "kubernetes.permissions": "pass",
                     "kubernetes.quota": "pass", "kubernetes.image": "pass"}
    assert [r.method for r in kube_env.log if "/pods" in r.path] == []  # read-only: no pod touched


def test_usd_per_hour_prices_the_session(kube_env: FakeKubernetes, image: str) -> None:
    from deskctl import metering

    rate = metering.rate_for(_spec(image, usd_per_hour=1.8))
    assert rate is not None and rate.usd_per_hour == 1.8 and rate.source == "provider option usd_per_hour"
    default = metering.rate_for(_spec(image))
    assert default is not None and default.usd_per_hour == 0


@pytest.mark.parametrize(("status", "reason", "code"), [(429, "TooManyRequests", "provider.rate_limited"),
                                                        (503, "ServiceUnavailable", "provider.api_error"),
                                                        (403, "Forbidden", "credentials.forbidden"),
                                                        (401, "Unauthorized", "credentials.invalid")])
def test_api_errors_of_a_listing(provider: KubernetesProvider, kube_env: FakeKubernetes, status: int, reason: str,
                                 code: str) -> None:
    kube_env.inject("GET", "/pods$", status, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                              "status": "Failure", "reason": reason, "code": status,
                                              "message": f"the fake says {reason}"})
    with pytest.raises(DeskctlError) as caught:
        provider.list_owned()
    assert caught.value.code == code
    from kubernetes.client.exceptions import ApiException

    assert isinstance(caught.value.__cause__, ApiException)  # translated at the boundary, chained


def test_label_values_are_made_label_safe() -> None:
    assert label_value("host:1234") == "host_1234"
    assert label_value("dk-0123456789") == "dk-0123456789"
    assert label_value("-x-") == "x"
    assert label_value("1796119490") == "1796119490"
    long = label_value("a" * 62 + ":" + "b" * 10)
    assert len(long) <= 63 and long[-1].isalnum()
    assert label_value("") == ""


def test_down_finds_the_desktop_in_its_own_namespace_whatever_the_kubeconfig_says_now(image: str,
                                                                                     tmp_path: Path) -> None:
    with FakeKubernetes(namespaces=("default", "rollouts")) as fake:
        there = fake.write_kubeconfig(tmp_path / "rollouts", namespace="rollouts")
        up = run_deskctl("up", "--provider", "kubernetes", "-o", f"image={image}", "--json",
                         env={"KUBECONFIG": str(there)})
        assert up.returncode == 0, up.stderr
        session = json.loads(up.stdout)["id"]
        assert fake.pod(session, "rollouts") is not None and fake.pod(session) is None
        down = run_deskctl("down", session, env={"KUBECONFIG": str(fake.kubeconfig)})  # its context: default
        assert down.returncode == 0, down.stderr
        assert fake.pod(session, "rollouts") is None and fake.secret(f"{session}-agent", "rollouts") is None


def test_the_provider_declares_its_facts() -> None:
    from deskctl.providers import load_provider_class, resolve_name

    assert resolve_name("K8s") == "kubernetes" and load_provider_class("k8s") is KubernetesProvider
    assert KubernetesProvider.credentials.variables == ("KUBECONFIG",)
    assert not KubernetesProvider.credentials.is_secret("KUBECONFIG")  # a path
