"""The docker provider on a remote engine: the second dockerd on loopback TCP (scripts/setup.d/25-docker-remote.sh),
reached as ``host=tcp://...``. Nothing is shared through host folders; input, capture and readiness go through the
in-desktop agent on a published port; exec and files through the Engine API. The contract itself is the
conformance suite's ``docker-remote`` target; here: what only a remote engine has (the token, the published
port, the engine recorded in the handle for reaping and reconnecting, faults in the middle of create).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import deskctl
from deskctl.errors import CompatError, DeskctlError, ProviderApiError, SessionLost, UsageError
from deskctl.providers.base import LABEL_SESSION, RemoteHandle
from deskctl.providers.docker import LABEL_AGENT, DockerProvider
from deskctl.spec import DesktopSpec
from docker_provider._docker_target import docker2_client, docker2_tls_env, docker2_url, docker_remote_leftovers

pytestmark = pytest.mark.docker

DESKCTL = [sys.executable, "-m", "deskctl"]


@pytest.fixture(scope="module")
def engine() -> str:
    url = docker2_url()
    if url is None:
        pytest.skip("no second Docker engine: run scripts/setup.d/25-docker-remote.sh")
    return url


@pytest.fixture(scope="module")
def sdk2(engine: str) -> Iterator[Any]:
    client = docker2_client()
    try:
        client.ping()
    except Exception as exc:
        pytest.fail(f"the second Docker engine at {engine} does not answer ({exc}): run "
                    "scripts/setup.d/25-docker-remote.sh")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(autouse=True)
def engine_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine lets in only clients with a certificate of its CA: the Docker clients' variables name them, for
    deskctl here and in the CLI processes the tests start."""
    for key, value in docker2_tls_env().items():
        monkeypatch.setenv(key, value)


@pytest.fixture(autouse=True)
def sweep_remote(sdk2: Any) -> Iterator[None]:
    """Remote containers of this test's sessions (its ledger's, or with a token folder in its runtime
    directory) that a failed test left: removed. Nobody else's are touched."""
    yield
    from deskctl.ledger import open_ledger
    from deskctl.paths import runtime_dir

    with open_ledger() as ledger:
        mine = {record.session_id for record in ledger.sessions()}
    for raw in sdk2.api.containers(all=True, filters={"label": [LABEL_SESSION, f"{LABEL_AGENT}=1"]}):
        session_id = (raw.get("Labels") or {}).get(LABEL_SESSION, "")
        if session_id in mine or (runtime_dir() / "docker" / session_id).exists():
            with contextlib.suppress(Exception):
                sdk2.api.remove_container(raw["Id"], force=True)


def _session_containers(sdk: Any, session_id: str) -> list[str]:
    return [str(c["Id"]) for c in sdk.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={session_id}"})]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DESKCTL, *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def _labels(session_id: str) -> dict[str, str]:
    from deskctl.providers.base import LABEL_EXPIRES

    return {LABEL_SESSION: session_id, LABEL_EXPIRES: str(int(time.time()) + 3600)}


def test_a_remote_desktop_shares_nothing_with_this_machine_and_publishes_only_its_agent(
        engine: str, sdk2: Any, docker_sdk: Any) -> None:
    with deskctl.open_desktop("docker", geometry="640x480", provider_options={"host": engine}) as desk:
        handle = desk.handle
        assert handle is not None
        data = handle.data
        attrs = sdk2.api.inspect_container(data["container"])
        assert not attrs["HostConfig"].get("Binds") and not attrs["Mounts"]
        assert "DESKCTL_SERVE_AGENT=1" in attrs["Config"]["Env"]
        assert not [e for e in attrs["Config"]["Env"] if e.startswith("DESKCTL_FBDIR")]
        published = attrs["NetworkSettings"]["Ports"]
        assert list(published) == ["7390/tcp"]  # the agent's port and nothing else
        assert published["7390/tcp"][0]["HostIp"] == "127.0.0.1"  # a loopback engine: its loopback only
        assert int(published["7390/tcp"][0]["HostPort"]) == data["agent_port"]
        assert (data["engine"], data["agent_host"]) == (engine, "127.0.0.1")
        assert _session_containers(docker_sdk, desk.id) == []  # not on the local engine
        assert (desk.screenshot().width, desk.screenshot().height) == (640, 480)
        desk.click(123, 45)
        assert desk.cursor_position() == (123, 45)
        ran = desk.exec("echo $DISPLAY; id -u; ls /tmp/.X11-unix")
        assert (ran.exit_code, ran.stdout) == (0, ":0\n1000\nX0\n")
        token_file = Path(data["agent_token_file"])
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert (token_file.parent.stat().st_mode & 0o777) == 0o700
    assert docker_remote_leftovers(handle) == []


def test_the_token_is_never_in_labels_environment_logs_ledger_json_or_errors(engine: str, sdk2: Any,
                                                                               deskctl_home: Path) -> None:
    desk = deskctl.open_desktop("docker", geometry="640x480", provider_options={"host": engine})
    try:
        assert desk.handle is not None
        token = Path(desk.handle.data["agent_token_file"]).read_text().strip()
        assert len(token) >= 32
        attrs = sdk2.api.inspect_container(desk.handle.resource_id)
        assert token not in json.dumps(attrs)  # labels, environment, command, everything the engine keeps
        desk.screenshot()
        logs = sdk2.api.logs(desk.handle.resource_id).decode(errors="replace")
        assert token not in logs
        assert token not in json.dumps(desk.handle.to_dict())
        listed = _run("ls", "--json")
        assert listed.returncode == 0 and desk.id in listed.stdout and token not in listed.stdout
        # the container removed behind deskctl's back: the error says so, without the token
        sdk2.api.remove_container(desk.handle.resource_id, force=True)
        with pytest.raises(DeskctlError) as failed:
            desk.screenshot()
        assert isinstance(failed.value, SessionLost)
        assert token not in str(failed.value) and token not in json.dumps(failed.value.to_dict())
    finally:
        desk.close()
    # nothing deskctl wrote on this machine holds it any more (the ledger, the markers; the token file is gone)
    for path in deskctl_home.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


class _FailAt(DockerProvider):
    """A provider whose step ``step`` fails after doing its work (an injected fault in the middle of create)."""

    def __init__(self, step: str, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.step = step

    def _hand_secrets(self, spec: DesktopSpec, session_id: str, container: str) -> dict[str, Any]:
        data = super()._hand_secrets(spec, session_id, container)
        if self.step == "secrets":
            raise ProviderApiError("injected: the engine failed after the secrets were written", provider="docker")
        return data

    def _published_port(self, container: str) -> int:
        port = super()._published_port(container)
        if self.step == "port":
            raise ProviderApiError("injected: the engine failed after the container started", provider="docker")
        return port


@pytest.mark.parametrize("step", ["secrets", "port"])
def test_a_failure_in_the_middle_of_create_removes_what_was_made(engine: str, sdk2: Any, step: str) -> None:
    from deskctl.paths import runtime_dir

    provider = _FailAt(step, {"host": engine, "reaper": False})
    session_id = f"dk-fault{step[:4]}01"
    try:
        with pytest.raises(ProviderApiError, match="injected"):
            provider.create(DesktopSpec.build(provider="docker", geometry="640x480"), session_id,
                            _labels(session_id))
        assert _session_containers(sdk2, session_id) == []
        assert not (runtime_dir() / "docker" / session_id).exists()
        assert provider._tokens == {}
    finally:
        provider.close()


def test_up_with_the_host_option_through_the_cli_end_to_end(engine: str, sdk2: Any, tmp_path: Path) -> None:
    up = _run("up", "--provider", "docker", "-o", f"host={engine}", "--geometry", "640x480", "--json")
    assert up.returncode == 0, up.stderr
    session_id = json.loads(up.stdout)["id"]
    try:
        assert len(_session_containers(sdk2, session_id)) == 1
        clicked = _run("do", session_id, "click", "17", "29")
        assert clicked.returncode == 0, clicked.stderr
        shot = tmp_path / "shot.png"
        taken = _run("screenshot", session_id, "-o", str(shot))
        assert taken.returncode == 0, taken.stderr
        from PIL import Image

        assert Image.open(shot).size == (640, 480)
        ran = _run("exec", session_id, "--", "xdotool getmouselocation --shell | head -2")
        assert (ran.returncode, ran.stdout) == (0, "X=17\nY=29\n")
    finally:
        down = _run("down", session_id)
    assert down.returncode == 0, down.stderr
    assert _session_containers(sdk2, session_id) == []


def test_the_engine_lets_in_only_a_client_with_its_certificate(engine: str, sdk2: Any, tmp_path: Path) -> None:
    """The second engine is root on this machine: over TCP it demands a client certificate of its CA (the Docker
    clients' DOCKER_TLS_VERIFY + DOCKER_CERT_PATH, which deskctl reads as they do). Without them `deskctl up` on it
    is refused with a translated error, nothing made; with them it serves (every other test here)."""
    if not docker2_tls_env():
        pytest.skip(f"the engine at {engine} was started without TLS (by an older setup): restart it with "
                    "scripts/setup.d/25-docker-remote.sh")
    # a ledger of its own: what the refused `up` could have made carries that ledger's label
    ledger = tmp_path / "refused.sqlite3"
    plain = {k: v for k, v in os.environ.items() if k not in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
    plain["DESKCTL_LEDGER_URL"] = f"sqlite://{ledger}"
    refused = subprocess.run([*DESKCTL, "up", "--provider", "docker", "-o", f"host={engine}", "--json"],
                             capture_output=True, text=True, timeout=180, env=plain)
    assert refused.returncode == 20, refused.stderr
    error = json.loads(refused.stdout or refused.stderr)["error"]
    assert error["code"] == "provider.unreachable", error
    assert "demands TLS" in error["message"] and "DOCKER_CERT_PATH" in error["remedy"], error
    assert "Traceback" not in refused.stderr
    # nothing made (another xdist worker's desktops on this engine come and go meanwhile: they are not counted)
    from deskctl.ledger import ledger_id
    from deskctl.providers.base import LABEL_LEDGER

    made = sdk2.api.containers(all=True, filters={"label": f"{LABEL_LEDGER}={ledger_id(f'sqlite://{ledger}')}"})
    assert made == []
    import docker

    with pytest.raises(docker.errors.DockerException, match="HTTPS"):  # the plain SDK neither
        docker.DockerClient(base_url=engine, timeout=30).version()
    # with them, the engine is checked against its own CA even where REQUESTS_CA_BUNDLE names the public ones
    import certifi

    public = {**os.environ, **docker2_tls_env(), "DOCKER_HOST": engine, "REQUESTS_CA_BUNDLE": certifi.where(),
              "CURL_CA_BUNDLE": certifi.where()}
    listed = subprocess.run([*DESKCTL, "image", "ls", "--json"], capture_output=True, text=True, timeout=180,
                            env=public)
    assert listed.returncode == 0, listed.stderr
    assert any(i["variant"] == "minimal" for i in json.loads(listed.stdout)["images"]), listed.stdout
    # and the certificates are root's alone
    cert_path = Path(docker2_tls_env()["DOCKER_CERT_PATH"])
    assert cert_path.stat().st_mode & 0o077 == 0 and (cert_path / "key.pem").stat().st_mode & 0o077 == 0


def test_a_bad_engine_url_and_an_ssh_engine_are_refused_before_anything_is_made(engine: str, sdk2: Any) -> None:
    bad = _run("up", "--provider", "docker", "-o", "host=http://127.0.0.1:1", "--json")
    assert bad.returncode == 2 and json.loads(bad.stdout or bad.stderr)["error"]["code"] == "usage.bad_option"
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    ssh = DockerProvider({"host": "ssh://nobody@127.0.0.1:1", "reaper": False})
    with pytest.raises(CompatError) as refused:
        ssh.create(spec, "dk-sshengine1", _labels("dk-sshengine1"))
    assert refused.value.code == "compat.docker_ssh"
    checks = {c.code: c for c in ssh.preflight(spec)}
    assert checks["docker.engine"].status == "fail" and "ssh://" in checks["docker.engine"].message
    no_ports = DockerProvider({"host": engine, "network": "none", "reaper": False})
    with pytest.raises(UsageError) as refused_network:
        no_ports.create(spec, "dk-noports001", _labels("dk-noports001"))
    assert refused_network.value.code == "usage.bad_option"
    assert _session_containers(sdk2, "dk-noports001") == []


def test_another_machine_reads_the_token_back_through_the_engine(engine: str, sdk2: Any) -> None:
    """A process that has no token file (another machine, or its runtime directory cleaned) still reaches the
    desktop: the Engine API gives it the token from the container."""
    spec = DesktopSpec.build(provider="docker", geometry="640x480")
    maker = DockerProvider({"host": engine, "reaper": False})
    handle = maker.create(spec, "dk-elsewhere1", _labels("dk-elsewhere1"))
    try:
        maker.wait_ready(handle, time.monotonic() + 60)
        Path(handle.data["agent_token_file"]).unlink()
        elsewhere = DockerProvider()  # this process's own engine: the handle says where the desktop is
        try:
            again = RemoteHandle.from_dict(json.loads(json.dumps(handle.to_dict())))
            assert elsewhere.display_size(again) == (640, 480)
            assert elsewhere.screenshot(again).width == 640
        finally:
            elsewhere.close()
    finally:
        maker.destroy(handle)
        maker.close()
    assert _session_containers(sdk2, "dk-elsewhere1") == []


def _child(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_gone(sdk: Any, session_id: str, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    for _ in sdk.api.events(filters={"label": f"{LABEL_SESSION}={session_id}", "event": "destroy"}, decode=True,
                            since=int(time.time()) - 60, until=int(time.time() + timeout)):
        break
    while time.monotonic() < deadline:
        if not _session_containers(sdk, session_id):
            return True
        time.sleep(0.2)
    return False


def _owner_killed(options: dict[str, Any], sdk2: Any) -> str:
    """A child process opens a remote desktop with ``options`` and is killed with SIGKILL once it runs; its
    session id."""
    child = _child(
        "import deskctl, sys\n"
        f"desk = deskctl.open_desktop('docker', geometry='640x480', provider_options={options!r})\n"
        "print(desk.id, flush=True)\n"
        "sys.stdin.read()\n"
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line, child.stderr.read() if child.stderr else ""
        session_id = line.strip()
        assert len(_session_containers(sdk2, session_id)) == 1
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return session_id


def test_owner_killed_by_sigkill_has_its_remote_container_removed_by_the_watcher(engine: str, sdk2: Any) -> None:
    session_id = _owner_killed({"host": engine}, sdk2)
    assert _wait_gone(sdk2, session_id), "the owner's watcher did not remove the container on the remote engine"


def test_reap_finds_a_crashed_sessions_container_on_the_remote_engine(engine: str, sdk2: Any) -> None:
    """The owner died with its watcher (reaper=false stands for both): `deskctl reap`, with no DOCKER_HOST
    and no option, finds the container on the remote engine from the ledger's handle and removes it."""
    session_id = _owner_killed({"host": engine, "reaper": False}, sdk2)
    assert len(_session_containers(sdk2, session_id)) == 1  # the crash left it
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    reaped = subprocess.run([*DESKCTL, "reap", "--provider", "docker", "--json"], capture_output=True, text=True,
                            timeout=180, env=env)
    assert reaped.returncode == 0, reaped.stderr
    actions = {r["session_id"]: r["action"] for r in json.loads(reaped.stdout)["reaped"]}
    assert actions.get(session_id) == "destroyed", reaped.stdout
    assert _session_containers(sdk2, session_id) == []
    # and `deskctl reap` run against that engine lists nothing of it any more
    listed = DockerProvider({"host": engine}).list_owned({LABEL_SESSION: session_id})
    assert listed == []


def test_a_missing_image_on_the_remote_engine_names_the_build_there(engine: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from deskctl.providers.docker import images

    # a version of deskctl no image on that engine was built from (whatever earlier runs left there)
    monkeypatch.setattr(images, "files_hash", lambda: "0" * 16)
    provider = DockerProvider({"host": engine, "variant": "browser"})
    try:
        checks = {c.code: c for c in provider.preflight(DesktopSpec.build(provider="docker", geometry="640x480"))}
    finally:
        provider.close()
    assert checks["docker.image"].status == "fail"
    assert checks["docker.image"].remedy is not None
    assert checks["docker.image"].remedy.startswith(f"DOCKER_HOST={engine} deskctl image build --variant browser")


@pytest.mark.slow
def test_devtools_through_the_tls_engine_carry_a_busy_websocket_both_ways_at_once(engine: str) -> None:
    """The forwarder reads the engine's TLS socket in one thread and writes it in another; one OpenSSL object must
    not be used by two threads at once (a websocket's frames were cut: code 1006). Many CDP calls in flight with
    big answers, sent while the answers stream back, all arrive whole and in order."""
    import threading

    from websockets.sync.client import connect

    start = "data:text/html,<title>busy</title>"
    with deskctl.open_desktop("docker", geometry="640x480", start_url=start, ready_timeout=120,
                              provider_options={"host": engine, "variant": "browser"}) as desk:
        from unit.test_browser import PATIENCE, _until

        _until("the start page", lambda: "busy" in [t for _, t in desk.browser_pages()])
        endpoint = desk.browser()
        with connect(endpoint.ws_url, max_size=None, open_timeout=PATIENCE, proxy=None) as ws:
            targets: Any = None
            ws.send(json.dumps({"id": 0, "method": "Target.getTargets"}))
            while targets is None:
                reply = json.loads(ws.recv(timeout=PATIENCE))
                if reply.get("id") == 0:
                    targets = reply["result"]["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            ws.send(json.dumps({"id": 1, "method": "Target.attachToTarget",
                                "params": {"targetId": page["targetId"], "flatten": True}}))
            session = None
            while session is None:
                reply = json.loads(ws.recv(timeout=PATIENCE))
                if reply.get("id") == 1:
                    session = reply["result"]["sessionId"]
            calls = 500
            answers: dict[int, str] = {}

            def read() -> None:
                while len(answers) < calls:
                    reply = json.loads(ws.recv(timeout=PATIENCE))
                    if isinstance(reply.get("id"), int) and reply["id"] >= 100:
                        answers[reply["id"]] = reply["result"]["result"]["value"]

            reader = threading.Thread(target=read)
            reader.start()
            for n in range(calls):  # sent while the answers of the first ones come back
                expression = f"'{n}:' + 'x'.repeat(20000 + {n})"
                ws.send(json.dumps({"id": 100 + n, "method": "Runtime.evaluate", "sessionId": session,
                                    "params": {"expression": expression, "returnByValue": True}}))
            reader.join(timeout=PATIENCE * 2)
            assert not reader.is_alive(), f"{len(answers)} of {calls} answers came back"
        assert answers == {100 + n: f"{n}:" + "x" * (20000 + n) for n in range(calls)}
