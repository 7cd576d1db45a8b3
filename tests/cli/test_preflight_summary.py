"""``deskctl preflight`` over several cloud providers, as a user runs it (a real process) with the three
loopback fakes up: a provider whose credentials are missing is not dialled at all (the fakes' request logs stay
empty), the keyring warning is said once, and the summary line names every provider's first blocking reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.cua import FakeCua
from fakes.daytona import FakeDaytona
from fakes.use_computer import FakeUseComputer

_SECRETS = ("DAYTONA_API_KEY", "CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "USE_COMPUTER_API_KEY")


@pytest.fixture
def fakes() -> Iterator[tuple[FakeDaytona, FakeCua, FakeUseComputer]]:
    with FakeDaytona() as daytona, FakeCua() as cua, FakeUseComputer() as use_computer:
        yield daytona, cua, use_computer


def _run(fakes: tuple[FakeDaytona, FakeCua, FakeUseComputer], tmp_path: Path, *args: str,
         keep: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``deskctl preflight ARGS`` whose environment points every cloud provider at its fake, without the
    secrets (except those named in ``keep``) and with no usable keyring."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DESKCTL_")
           and not any(k in f.vendor_vars for f in fakes)}
    for fake in fakes:
        env.update({k: v for k, v in fake.env().items() if k not in _SECRETS or k in keep})
    env.update(DESKCTL_HOME=str(tmp_path / "home"), PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
               DESKCTL_HTTP_RETRY_SCALE="0", NO_COLOR="1", COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "deskctl", "preflight", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_missing_credentials_dial_nothing_and_the_keyring_warning_is_said_once(
        fakes: tuple[FakeDaytona, FakeCua, FakeUseComputer], tmp_path: Path) -> None:
    out = _run(fakes, tmp_path, "--platform", "windows", "--geometry", "native")
    assert out.returncode == 3, out.stderr
    for fake in fakes:
        assert fake.log == [], f"{type(fake).__name__} was dialled: {[(r.method, r.path) for r in fake.log]}"
    lines = out.stdout.splitlines()
    assert sum("credentials.keyring" in line for line in lines) == 1
    keyring = next(line for line in lines if "credentials.keyring" in line)
    assert lines.index(keyring) < lines.index("cua-cloud  (not ready)")  # said for the request, not a provider
    assert "cua-cloud, daytona, use-computer" in keyring
    document = json.loads(_run(fakes, tmp_path, "--platform", "windows", "--geometry", "native", "--json").stdout)
    rows = [r for r in document["results"] if r["code"] == "credentials.keyring"]
    assert len(rows) == 1 and rows[0]["provider"] is None


def test_the_summary_names_every_providers_first_blocking_reason(
        fakes: tuple[FakeDaytona, FakeCua, FakeUseComputer], tmp_path: Path) -> None:
    daytona, _, use_computer = fakes
    use_computer.offered = frozenset({"macos"})  # the account has no Windows: a different reason per provider
    out = _run(fakes, tmp_path, "--platform", "windows", "--geometry", "1024x768", "--provider", "cua-cloud",
               "--provider", "daytona", "--provider", "use-computer", keep=("DAYTONA_API_KEY", "USE_COMPUTER_API_KEY"))
    assert out.returncode == 3, out.stderr
    verdict = out.stdout.splitlines()[-1]
    assert verdict.startswith("not ready: ")
    reasons = verdict[len("not ready: "):].split(" | ")
    assert len(reasons) == 2, verdict  # daytona is ready; the other two each say why they are not
    assert reasons[0].startswith("cua-cloud cannot set the screen size")
    assert reasons[1].startswith("use-computer: the account is not offered windows sandboxes")
    assert "[" not in verdict  # the sources stay in the table rows
    assert daytona.log and {r.method for r in daytona.log} == {"GET"}
