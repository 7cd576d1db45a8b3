"""The Engine API client of the hot paths (providers/docker/engine_api.py) against the real engines: what it
reads is what the SDK reads, its failures are deskctl's error codes, and `deskctl down` needs no SDK."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from _relay import pump
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
              # nor what `down` does not use: CPU is what 16 downs at once queue for on a small machine
              "print(json.dumps({'code': code, 'loaded': sorted(m for m in ('docker', 'requests', 'urllib3', 'ssl',"
              " 'importlib.resources', 'zipfile', 'tempfile', 'subprocess') if m in sys.modules)}))\n")
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


class _Relay:
    """A unix socket that relays every connection to the engine's socket and keeps what clients sent (the
    requests as the engine receives them), for a DOCKER_HOST of a CLI process."""

    def __init__(self, path: Path) -> None:
        import threading

        self.path = path
        self.sent: list[bytearray] = []
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect("/var/run/docker.sock")
            record = bytearray()
            self.sent.append(record)
            threading.Thread(target=pump, args=(client, engine, functools.partial(_sample, record)),
                             daemon=True).start()
            threading.Thread(target=pump, args=(engine, client), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _sample(record: bytearray, data: bytes) -> None:
    """The start of each chunk a client sent, up to 64 KiB in all: enough to read its requests' lines."""
    if len(record) < 1 << 16:
        record += data[:4096]


def test_deskctl_cp_puts_one_file_as_one_request_of_known_length(deskctl_home: Path, tmp_path: Path) -> None:
    """The tar of one file is prepared (its length said up front, the file sent as it is on disk), not made in a
    thread and re-framed in chunks; a tree still streams. What the engine received is read at a relay."""
    if not Path("/var/run/docker.sock").exists():
        pytest.skip("no local Docker socket")
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "docker", "--geometry", "320x240"],
                        capture_output=True, text=True, timeout=180, env=os.environ.copy())
    assert up.returncode == 0, up.stderr
    sid = up.stdout.strip()
    relay = _Relay(Path(f"/tmp/dk-relay-{uuid.uuid4().hex[:8]}.sock"))
    env = {**os.environ, "DOCKER_HOST": f"unix://{relay.path}"}
    source = tmp_path / "payload.bin"
    source.write_bytes(os.urandom(3_000_001))
    source.chmod(0o640)
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "a.txt").write_text("a")
    try:
        by_copy = []
        for argv in ([str(tmp_path / "tree"), f"{sid}:/tmp/pf/tree"], [str(source), f"{sid}:/tmp/pf/payload.bin"],
                     [f"{sid}:/tmp/pf/payload.bin", str(tmp_path / "back.bin")]):
            before = len(relay.sent)
            done = subprocess.run([sys.executable, "-m", "deskctl", "cp", *argv], capture_output=True, text=True,
                                  timeout=180, env=env)
            assert done.returncode == 0, done.stderr
            by_copy.append(b"".join(relay.sent[before:]))
        # the look at the destination (folder or file? under a mount the PUT cannot write?) starts no process in
        # the container: the archive endpoint's stat and the container's mounts tell
        assert b"/exec" not in by_copy[1] and b"HEAD /containers/" in by_copy[1], by_copy[1][:2000]
        assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()
        assert (tmp_path / "back.bin").stat().st_mode & 0o777 == 0o640
        puts = [bytes(r) for r in relay.sent if r.startswith(b"PUT /") and b"/archive?" in r.split(b"\r\n")[0]]
        heads = [p.split(b"\r\n\r\n")[0].lower() for p in puts]
        # the tree (sent twice: the first PUT finds no /tmp/pf, which is then made), then the file (once)
        *tree_heads, file_head = heads
        assert tree_heads and all(b"transfer-encoding: chunked" in head for head in tree_heads), heads
        assert b"content-length: " in file_head and b"transfer-encoding" not in file_head, file_head
    finally:
        relay.close()
        relay.path.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "deskctl", "down", sid], capture_output=True, timeout=180,
                       env=os.environ.copy())


def test_a_file_that_shrinks_while_it_is_put_is_a_coded_error(sleeper: Any, tmp_path: Path) -> None:
    """A prepared tar whose file lost bytes before they were sent: usage.bad_path, never reported done."""
    from deskctl.errors import UsageError
    from deskctl.providers._tar import FileTar

    source = tmp_path / "shrinks.bin"
    source.write_bytes(os.urandom(2_000_000))
    prepared = FileTar.of(source, "shrinks.bin", 0, 0, provider="docker")
    assert prepared is not None
    os.truncate(source, 1000)
    with engine_api(None) as api:  # type: ignore[union-attr]
        with pytest.raises(UsageError) as changed:
            api.put_archive(sleeper.id, "/tmp", prepared, "copy")
        prepared.close()
        _, out, _ = api.exec_run(sleeper.id, ["sh", "-c", "stat -c %s /tmp/shrinks.bin || true"], "look")
    assert changed.value.code == "usage.bad_path" and "changed while it was copied" in changed.value.message
    assert out.strip() != b"2000000"  # never a whole file from a copy that was not whole
    with pytest.raises(UsageError) as unreadable:
        FileTar.of(tmp_path / "a-folder-not-a-file" / "x", "x", 0, 0, provider="docker")
    assert unreadable.value.code == "usage.bad_path"
