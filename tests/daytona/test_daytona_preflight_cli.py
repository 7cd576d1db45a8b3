"""``deskctl preflight`` end to end against the loopback Daytona fake (real HTTP, the real provider code):
a key stored with ``deskctl login`` in a real file keyring is found, the run is ready, preflight sends only
read requests, a revoked key is ``credentials.invalid`` (exit 3), and the key never appears in any output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.daytona import FakeDaytona

_VENDOR_VARS = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_TARGET")


@pytest.fixture
def fake() -> Iterator[FakeDaytona]:
    server = FakeDaytona(api_key="dtn_preflight_e2e_5c1d9b7a")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def env(tmp_path: Path, fake: FakeDaytona) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in _VENDOR_VARS and not k.startswith("DESKCTL_")}
    base.update({
        "DESKCTL_HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring",
        "DAYTONA_API_URL": fake.api_url,
        "NO_COLOR": "1",
        "COLUMNS": "80",
    })
    return base


def deskctl(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deskctl", *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=120)


def test_preflight_with_a_keyring_key_is_ready_and_only_reads(env: dict[str, str], fake: FakeDaytona) -> None:
    login = deskctl(env, "login", "daytona", "--var", "DAYTONA_API_KEY", stdin=fake.api_key + "\n")
    assert login.returncode == 0, login.stderr
    text = deskctl(env, "preflight", "--provider", "daytona", "--platform", "windows", "--agent", "oracle")
    as_json = deskctl(env, "preflight", "--provider", "daytona", "--json")
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout.splitlines()[-1] == "ready: daytona"
    document = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and document["ready"] == ["daytona"]
    assert any(r["code"] == "credentials.present" and "from keyring" in r["message"] for r in document["results"])
    for run in (login, text, as_json):
        assert fake.api_key not in run.stdout + run.stderr
    assert fake.log, "the provider's checks reached the fake"
    assert {r.method for r in fake.log} <= {"GET", "HEAD", "OPTIONS"}, [(r.method, r.path) for r in fake.log]
    assert fake.live() == []


def test_a_revoked_key_is_credentials_invalid_with_exit_3(env: dict[str, str], fake: FakeDaytona) -> None:
    env = {**env, "DAYTONA_API_KEY": fake.api_key}
    fake.revoke_key()
    out = deskctl(env, "preflight", "--provider", "daytona", "--json")
    assert out.returncode == 3
    document = json.loads(out.stdout)
    assert document["error"]["code"] == "credentials.invalid" and document["error"]["provider"] == "daytona"
    assert "credentials.missing" not in {r["code"] for r in document["results"]}
    text = deskctl(env, "preflight", "--provider", "daytona")
    assert text.returncode == 3
    assert fake.api_key not in out.stdout + out.stderr + text.stdout + text.stderr
    assert {r.method for r in fake.log} <= {"GET", "HEAD", "OPTIONS"}
