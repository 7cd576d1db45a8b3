"""The Engine API client of the hot paths (providers/docker/engine_api.py) against the real engines: what it
reads is what the SDK reads, its failures are deskctl's error codes, and `deskctl down` needs no SDK."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from deskctl.errors import NotFound, ProviderApiError, ProviderUnreachable
from deskctl.providers.docker.engine_api import EngineApi, engine_api
from docker_provider._docker_target import docker2_environment, docker2_url

BASE_IMAGE = "deskctl-base:bookworm"


@pytest.fixture
def sleeper(docker_sdk: Any) -> Any:
    """A running container of the base image (``sleep``), removed at the end."""
    if not docker_sdk.images.list(name=BASE_IMAGE):
        pytest.skip(f"no {BASE_IMAGE} image: run scripts/setup.d/20-docker.sh")
    container = docker_sdk.containers.run(BASE_IMAGE, ["sleep", "300"], detach=True, network_mode="none",
                                          name=f"deskctl-test-engine-api-{uuid.uuid4().hex[:8]}")
    try:
        yield container
    finally:
        try:
            container.remove(force=True)
        except Exception:  # the test removed it: that is what it tested
            pass


def test_inspect_reads_what_the_sdk_reads_and_remove_removes(docker_sdk: Any, sleeper: Any) -> None:
    with engine_api(None) as api:  # type: ignore[union-attr]
        attrs = api.inspect_container(sleeper.name)
        assert attrs["Id"] == docker_sdk.api.inspect_container(sleeper.id)["Id"]
        assert attrs["State"]["Running"] is True
        # three requests over one kept connection, then the container is gone for the SDK too
        api.remove_container(sleeper.id, force=True, volumes=True)
        with pytest.raises(NotFound) as gone:
            api.inspect_container(sleeper.id)
    assert gone.value.code == "usage.not_found" and gone.value.exit_code == 2
    assert sleeper.id not in {c["Id"] for c in docker_sdk.api.containers(all=True)}


def test_a_refusal_is_provider_api_error_with_the_engines_status_and_message(sleeper: Any) -> None:
    with engine_api(None) as api:  # type: ignore[union-attr]
        with pytest.raises(ProviderApiError) as running:  # a running container is not removed without force
            api.remove_container(sleeper.id, force=False)
        with pytest.raises(NotFound) as missing:
            api.remove_container(f"deskctl-no-such-{uuid.uuid4().hex}")
        api.inspect_container(sleeper.id)  # the connection still serves after refusals
    assert running.value.code == "provider.api_error" and running.value.status == 409
    assert "cannot remove the container" in running.value.message and "Docker said 409" in running.value.message
    assert missing.value.code == "usage.not_found"


def test_no_engine_is_provider_unreachable_with_a_remedy(tmp_path: Path) -> None:
    cases = [f"unix://{tmp_path / 'no.sock'}"]
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        cases.append(f"tcp://127.0.0.1:{probe.getsockname()[1]}")
    for url in cases:
        api = engine_api(url, timeout=5, environment={})
        assert api is not None
        with pytest.raises(ProviderUnreachable) as info:
            api.ping()
        assert info.value.code == "provider.unreachable" and info.value.exit_code == 20
        assert info.value.remedy and url in info.value.remedy
    assert engine_api("ssh://user@host") is None  # the SDK's transport serves ssh engines


def test_the_tls_engine_is_reached_with_the_docker_cli_variables_and_refused_without() -> None:
    url = docker2_url()
    if url is None:
        pytest.skip("no second Docker engine: run scripts/setup.d/25-docker-remote.sh")
    with docker2_environment() as tls_env:
        if not tls_env:
            pytest.skip("the second engine was started without TLS")
        with EngineApi(url, timeout=10, environment=tls_env) as api:
            api.ping()
            with pytest.raises(NotFound):
                api.inspect_container(f"deskctl-no-such-{uuid.uuid4().hex}")
        plain = EngineApi(url, timeout=10, environment={})  # plain HTTP to an engine that speaks TLS
        with pytest.raises(ProviderUnreachable) as no_tls:
            plain.ping()
        no_cert = EngineApi(url, timeout=10, environment={"DOCKER_TLS_VERIFY": "1",
                                                         "DOCKER_CERT_PATH": "/nonexistent-deskctl"})
        with pytest.raises(ProviderUnreachable) as refused:  # no CA, no client certificate: the handshake fails
            no_cert.ping()
    assert no_tls.value.code == refused.value.code == "provider.unreachable"
    assert "demands TLS" in no_tls.value.message and "TLS handshake" in refused.value.message
    assert refused.value.remedy and "DOCKER_CERT_PATH" in refused.value.remedy


def test_deskctl_down_of_a_docker_desktop_does_not_import_the_sdk(deskctl_home: Path) -> None:
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "docker", "--geometry", "320x240"],
                        capture_output=True, text=True, timeout=180, env=os.environ.copy())
    assert up.returncode == 0, up.stderr
    sid = up.stdout.strip()
    script = ("import json, sys\n"
              "from deskctl.cli import main\n"
              "try:\n"
              "    main(['down', sys.argv[1]])\n"
              "except SystemExit as exc:\n"
              "    code = exc.code\n"
              "else:\n"
              "    code = 0\n"
              "print(json.dumps({'code': code, 'loaded': sorted(m for m in ('docker', 'requests', 'urllib3', 'ssl')"
              " if m in sys.modules)}))\n")
    down = subprocess.run([sys.executable, "-c", script, sid], capture_output=True, text=True, timeout=180,
                          env=os.environ.copy())
    assert down.returncode == 0, down.stderr
    result = json.loads(down.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}, down.stderr
    assert f"{sid}: destroyed" in down.stderr
    listed = subprocess.run([sys.executable, "-m", "deskctl", "ls", "--all", "--json"], capture_output=True,
                            text=True, timeout=60, env=os.environ.copy())
    (row,) = [s for s in json.loads(listed.stdout)["sessions"] if s["id"] == sid]
    assert row["status"] == "ended"


def test_exec_and_archives_round_trip_and_refusals_are_deskctl_errors(sleeper: Any, tmp_path: Path) -> None:
    import io
    import tarfile

    with engine_api(None) as api:  # type: ignore[union-attr]
        code, out, err = api.exec_run(sleeper.id, ["sh", "-c", "printf out; printf err >&2; exit 3"], "run")
        assert (code, out, err) == (3, b"out", b"err")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            data = os.urandom(300_000)
            info = tarfile.TarInfo("blob")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        raw = buffer.getvalue()
        api.put_archive(sleeper.id, "/tmp", iter([raw[:1000], raw[1000:]]), "copy")
        stat, chunks = api.get_archive(sleeper.id, "/tmp/blob", "copy back")
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r") as tar:
            member = tar.extractfile("blob")
            assert member is not None and member.read() == data
        assert stat["name"] == "blob" and stat["size"] == len(data)
        with pytest.raises(NotFound):
            api.put_archive(sleeper.id, "/no/such/folder", iter([raw]), "copy")
        with pytest.raises(NotFound):
            api.get_archive(sleeper.id, "/no/such/file", "copy back")
        with pytest.raises(NotFound):
            api.exec_run(f"deskctl-no-such-{uuid.uuid4().hex}", ["true"], "run")


def test_deskctl_cp_of_a_docker_desktop_does_not_import_the_sdk(deskctl_home: Path, tmp_path: Path) -> None:
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "docker", "--geometry", "320x240"],
                        capture_output=True, text=True, timeout=180, env=os.environ.copy())
    assert up.returncode == 0, up.stderr
    sid = up.stdout.strip()
    source = tmp_path / "payload.bin"
    source.write_bytes(os.urandom(100_000))
    script = ("import json, sys\n"
              "from deskctl.cli import main\n"
              "try:\n"
              "    main(['cp', *sys.argv[1:]])\n"
              "except SystemExit as exc:\n"
              "    code = exc.code\n"
              "else:\n"
              "    code = 0\n"
              "print(json.dumps({'code': code, 'loaded': sorted(m for m in ('docker', 'requests', 'urllib3')"
              " if m in sys.modules)}))\n")
    try:
        for argv in ([str(source), f"{sid}:/tmp/new/folder/payload.bin"],
                     [f"{sid}:/tmp/new/folder/payload.bin", str(tmp_path / "back.bin")]):
            done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True,
                                  timeout=180, env=os.environ.copy())
            assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "loaded": []}, done.stderr
        assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()
    finally:
        subprocess.run([sys.executable, "-m", "deskctl", "down", sid], capture_output=True, timeout=180,
                       env=os.environ.copy())
