"""Issue 24 section 5 on cua cloud, through the loopback fake over real HTTP: a create whose answer is lost is
looked for over a bounded window, what appears is released, and what may still come is recorded ``leaked``
with how ``deskctl reap`` finds it; a platform cua does not serve is answered from the compat facts, without a
request."""

from __future__ import annotations

import json

import pytest

from cua._cua_target import FAST_OPTIONS
from deskctl.errors import ProviderUnreachable
from deskctl.providers.base import LABEL_SESSION
from deskctl.providers.cua_cloud import CuaCloudProvider
from deskctl.spec import DesktopSpec
from fakes._cloud import run_deskctl
from fakes.cua import FakeCua

UBUNTU = DesktopSpec.build(provider="cua-cloud", platform="ubuntu", geometry="1920x1080")
CLAIMS = "/api/k8s/apis/osgym.cua.ai/v1alpha1/namespaces/harbor-ubuntu/osgymsandboxclaims"


def test_a_claim_answered_too_late_is_found_over_the_window_and_released(cua_env: FakeCua) -> None:
    fake = cua_env
    fake.delay_create(after_lookups=3)  # made while the client looks for it: not at once
    prov = CuaCloudProvider({**FAST_OPTIONS, "create_timeout": 0.3, "create_lookup_seconds": 120})
    try:
        with pytest.raises(ProviderUnreachable) as info:
            prov.create(UBUNTU, "dk-late1", {LABEL_SESSION: "dk-late1"})
    finally:
        prov.close()
    error = info.value
    assert "answer to the create of dk-late1 was lost" in error.message and "found and released" in error.message
    assert "network" not in (error.remedy or "")
    assert error.details["released"] == ["dk-late1"]
    assert not fake.create_pending
    assert fake.live() == [] and fake.displays() == []
    assert len([r for r in fake.log if r.method == "POST" and r.path == CLAIMS]) == 1  # never re-sent


def test_a_claim_that_may_still_come_is_leaked_until_reap_finds_it(cua_env: FakeCua) -> None:
    fake = cua_env
    fake.delay_create(after_lookups=None)  # made only at finish_create: after the window
    up = run_deskctl(fake, "up", "--provider", "cua-cloud", "--platform", "ubuntu", "--geometry", "1920x1080",
                     "--json", "-o", "poll_interval=0.005", "-o", "poll_max_interval=0.05",
                     "-o", "create_timeout=0.3", "-o", "create_lookup_seconds=0.2")
    assert up.returncode == 5, up.stdout + up.stderr
    error = json.loads(up.stdout)["error"]
    assert error["code"] == "cleanup.incomplete"
    assert "was lost" in error["message"] and "deskctl.session=" in error["message"]
    assert "deskctl reap --provider cua-cloud" in error["remedy"]
    rows = json.loads(run_deskctl(fake, "ls", "--json").stdout)["sessions"]
    assert [(r["provider"], r["status"]) for r in rows] == [("cua-cloud", "leaked")]
    session_id = rows[0]["id"]

    fake.finish_create()  # the service made it after all
    assert [c["metadata"]["name"] for c in fake.live()] == [session_id]
    reaped = run_deskctl(fake, "reap", "--provider", "cua-cloud", "--json")
    assert reaped.returncode == 0, reaped.stdout + reaped.stderr
    assert fake.live() == []
    after = json.loads(run_deskctl(fake, "ls", "--json", "--all").stdout)["sessions"]
    assert {r["id"]: r["status"] for r in after} == {session_id: "ended"}


def test_preflight_of_a_platform_cua_does_not_serve_sends_no_request(cua_env: FakeCua) -> None:
    fake = cua_env
    pre = run_deskctl(fake, "preflight", "--platform", "macos", "--provider", "cua-cloud", "--json")
    assert pre.returncode == 3, pre.stdout + pre.stderr
    codes = {r["code"] for r in json.loads(pre.stdout)["results"]}
    assert "compat.platform_unsupported" in codes and "compat.pool_unavailable" not in codes
    assert fake.log == []  # not even a token was asked for
