"""Fixtures of the kubernetes tests: a fresh loopback fake per test (its pods are real containers of the current
desktop image), the environment pointing deskctl at it, and a provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deskctl.providers.kubernetes import KubernetesProvider
from fakes.kube import FakeKubernetes
from kubernetes_provider._kube_target import desktop_image


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    with FakeKubernetes() as server:
        yield server


@pytest.fixture
def image() -> str:
    found = desktop_image()
    if found.endswith(":not-built"):
        pytest.fail("no current desktop image: run scripts/setup.d/20-docker.sh")
    return found


@pytest.fixture
def kube_env(fake: FakeKubernetes, monkeypatch: pytest.MonkeyPatch) -> FakeKubernetes:
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig))
    return fake


@pytest.fixture
def provider(kube_env: FakeKubernetes, image: str) -> Iterator[KubernetesProvider]:
    prov = KubernetesProvider({"image": image})
    try:
        yield prov
    finally:
        prov.close()
