"""deskctl-agent as a real process on loopback TCP against a real Xvfb, driven by AgentDriver: every op, pixels
compared with a local X11Driver capture, changed regions, exec options, 64 MiB files, the token, TLS, and what
happens when the agent or the display dies."""

from __future__ import annotations

import datetime
import io
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from _procs import wait_until
from agent._agent_proc import TOKEN, RunningAgent, start_agent
from deskctl.actions import Click, KeyPress, Scroll, TypeText
from deskctl.agent.client import AgentDriver, wait_ready
from deskctl.agent.protocol import FrameChanges, changed_boxes
from deskctl.errors import ProviderApiError, ProviderUnreachable, ReadinessTimeout, SessionLost, UsageError
from deskctl.providers._x11 import X11Address
from deskctl.providers.docker.images import AGENT_FILES
from fakes._desktop import XvfbDesktop
from probe import Probe
from probe.keys import KeyRecorder


@pytest.fixture
def client(agent: RunningAgent) -> Iterator[AgentDriver]:
    with AgentDriver.connect("127.0.0.1", agent.port, agent.token, provider="agent-test") as driver:
        yield driver


def _rgb(png: bytes) -> bytes:
    return Image.open(io.BytesIO(png)).convert("RGB").tobytes()


def test_size_pointer_ping_and_window_titles(client: AgentDriver, desktop: XvfbDesktop) -> None:
    client.ping()
    assert client.size() == (1024, 900)
    client.act(Click(101, 202))
    assert client.cursor_position() == (101, 202) == desktop.driver.cursor_position()
    with subprocess.Popen(["xmessage", "-title", "agent-window-é", "hello"],
                          env={**os.environ, "DISPLAY": desktop.display}) as msg:
        try:
            wait_until(lambda: "agent-window-é" in client.window_titles(), "the xmessage title")
        finally:
            msg.kill()


def test_screenshot_and_raw_frame_equal_a_local_capture_pixel_for_pixel(client: AgentDriver,
                                                                       desktop: XvfbDesktop) -> None:
    with Probe.open(X11Address(desktop.display), None) as probe:
        probe.paint(10, 10, 300, 200, (200, 30, 90))
        probe.paint(500, 600, 77, 33, (5, 250, 120))
        shot = client.screenshot()
        local = desktop.driver.raw_frame()
        assert (shot.width, shot.height) == (1024, 900)
        assert shot.png.startswith(b"\x89PNG")
        assert _rgb(shot.png) == local.image().tobytes()
        raw = client.raw_frame()
        assert (raw.width, raw.height, raw.mode) == (1024, 900, local.mode)
        assert raw.data == local.data


def test_changed_regions_keep_a_frame_current(client: AgentDriver, desktop: XvfbDesktop) -> None:
    with Probe.open(X11Address(desktop.display), None) as probe:
        first = client.changes(None)
        assert first.full and len(first.regions) == 1
        frame = first.apply(None)
        assert frame.data == desktop.driver.raw_frame().data
        unchanged = client.changes(first.frame_id)
        assert not unchanged.full and unchanged.regions == ()
        frame = unchanged.apply(frame)
        probe.paint(40, 50, 20, 10, (255, 0, 0))
        probe.paint(900, 800, 5, 7, (0, 0, 255))
        changed = client.changes(unchanged.frame_id)
        assert not changed.full
        assert [(r.x, r.y, r.width, r.height) for r in changed.regions] == [(40, 50, 20, 10), (900, 800, 5, 7)]
        frame = changed.apply(frame)
        assert frame.data == desktop.driver.raw_frame().data
        # text drawn by a real client (xmessage): whatever it changed, applying the regions gives the screen
        with subprocess.Popen(["xmessage", "-geometry", "+300+300", "changed regions"],
                              env={**os.environ, "DISPLAY": desktop.display}) as msg:
            try:
                state = {"frame": frame, "since": changed.frame_id, "regions": 0}

                def caught_up() -> bool:
                    # xmessage maps and paints when it likes: apply changes until it showed and the frame
                    # equals a local capture
                    latest = client.changes(state["since"])
                    assert not latest.full
                    state["frame"], state["since"] = latest.apply(state["frame"]), latest.frame_id
                    state["regions"] += len(latest.regions)
                    return state["regions"] > 0 and state["frame"].data == desktop.driver.raw_frame().data

                wait_until(caught_up, "the xmessage window, and the frame kept by changed regions to equal the screen")
                changed = client.changes(state["since"])
            finally:
                msg.kill()
        # an id that is not the last frame sent gives the whole screen again
        again = client.changes(first.frame_id)
        assert again.full


def test_changed_boxes_are_the_bounding_rectangles_of_each_band() -> None:
    width, height, bpp = 64, 48, 4
    old = bytes(width * height * bpp)
    new = bytearray(old)
    for x, y in ((3, 5), (10, 7), (60, 40)):
        new[(y * width + x) * bpp] = 1
    assert changed_boxes(old, bytes(new), width, height, bpp, gap=4) == [(3, 5, 8, 3), (60, 40, 1, 1)]
    assert changed_boxes(old, old, width, height, bpp) == []
    frame_changes = FrameChanges(2, 1, 1, "L", False, ())
    with pytest.raises(ValueError):
        frame_changes.apply(None)


def test_clicks_scrolls_keys_and_non_ascii_text_reach_x_clients(client: AgentDriver, desktop: XvfbDesktop) -> None:
    with Probe.open(X11Address(desktop.display), None) as probe:
        client.act(Click(30, 40, "right"))
        client.act(Scroll(50, 60, dy=-2))
        client.act(KeyPress(("shift", "a")))
        probe.wait_for(lambda p: p.releases(3) and p.releases(4) and p.key_presses(), "a click, a scroll and a key")
        assert probe.presses(3)[0].pos == (30, 40)
        assert probe.text() == "A"
    text = "Grüße, 日本語 ✓ naïve"
    with KeyRecorder.open(X11Address(desktop.display), None) as keys:
        client.act(TypeText(text))
        assert keys.text() == text


def test_exec_runs_with_cwd_env_background_and_timeout(client: AgentDriver, desktop: XvfbDesktop,
                                                       tmp_path: Path) -> None:
    result = client.exec("pwd; echo $GREETING; echo oops >&2; exit 3", cwd=str(tmp_path), env={"GREETING": "hé"})
    assert (result.exit_code, result.stdout, result.stderr) == (3, f"{tmp_path}\nhé\n", "oops\n")
    assert client.exec("true", cwd=str(tmp_path / "missing")).exit_code == 2
    assert client.exec("echo $DISPLAY").stdout == desktop.display + "\n"
    timed_out = client.exec("sleep 30", timeout=0.5)
    assert timed_out.exit_code == 124 and "timed out" in timed_out.stderr
    started = client.exec(f"sleep 30; touch {tmp_path}/never", background=True)
    assert started.exit_code == 0 and started.pid is not None and started.pid > 1
    assert Path(f"/proc/{started.pid}").exists()
    os.kill(started.pid, 9)
    with pytest.raises(UsageError) as bad_env:
        client.exec("true", env={"1BAD": "x"})
    assert bad_env.value.code == "usage.bad_env"
    if os.getuid() != 0:
        with pytest.raises(UsageError) as other:
            client.exec("true", user="nobody")
        assert other.value.code == "usage.unsupported"
    big = client.exec("head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2")
    assert (len(big.stdout), set(big.stdout), big.stderr) == (5_000_000, {"a"}, "done\n")
    # the connection is still in step after errors
    assert client.exec("echo still").stdout == "still\n"


def test_files_of_64_mib_both_ways_keep_their_mode(client: AgentDriver, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    block = os.urandom(1 << 20)
    with source.open("wb") as fh:
        for i in range(64):
            fh.write(block[i:] + block[:i])
    source.chmod(0o751)
    remote = tmp_path / "remote" / "copy.bin"
    remote.parent.mkdir()
    client.put_file(source, str(remote))
    assert remote.read_bytes() == source.read_bytes()
    assert remote.stat().st_mode & 0o777 == 0o751
    remote.chmod(0o640)
    back = tmp_path / "back.bin"
    client.get_file(str(remote), back)
    assert back.read_bytes() == source.read_bytes()
    assert back.stat().st_mode & 0o777 == 0o640
    with pytest.raises(UsageError) as missing:
        client.get_file(str(tmp_path / "nope"), tmp_path / "x")
    assert missing.value.code == "usage.no_such_file"
    with pytest.raises(UsageError) as onto_dir:
        client.put_file(source, str(remote.parent))
    assert onto_dir.value.code == "usage.bad_path"
    with pytest.raises(UsageError) as no_parent:
        client.put_file(source, str(tmp_path / "no" / "such" / "dir"))
    assert no_parent.value.code == "usage.no_such_file"
    with pytest.raises(UsageError) as no_local:
        client.put_file(tmp_path / "not-here", str(tmp_path / "x"))
    assert no_local.value.code == "usage.no_such_file"
    assert client.size() == (1024, 900)  # still in step after refused transfers of 64 MiB bodies


def test_a_wrong_token_is_refused_and_never_shown(agent: RunningAgent) -> None:
    wrong = "wrong-token-0d9e7a"
    with pytest.raises(ProviderApiError) as refused:
        AgentDriver.connect("127.0.0.1", agent.port, wrong, provider="agent-test")
    assert "refused the session token" in refused.value.message
    with pytest.raises(ProviderApiError):
        wait_ready("127.0.0.1", agent.port, wrong, provider="agent-test", deadline=time.monotonic() + 5)
    # the agent still serves the right token, and neither token is in its output or our error
    with AgentDriver.connect("127.0.0.1", agent.port, agent.token, provider="agent-test") as good:
        good.ping()
    text = "".join(agent.output) + str(refused.value) + repr(refused.value.to_dict())
    assert wrong not in text and agent.token not in text
    assert agent.token not in " ".join(agent.proc.args)  # type: ignore[arg-type]


def test_nothing_listening_is_unreachable_and_wait_ready_times_out() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ProviderUnreachable):
        AgentDriver.connect("127.0.0.1", port, TOKEN, provider="agent-test", timeout=2)
    with pytest.raises(ReadinessTimeout):
        wait_ready("127.0.0.1", port, TOKEN, provider="agent-test", deadline=time.monotonic() + 0.5)


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "deskctl-agent-test")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_with_a_self_signed_certificate(desktop: XvfbDesktop, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    running = start_agent(tmp_path, desktop.display, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        context = ssl.create_default_context(cafile=str(cert))
        wait_ready("127.0.0.1", running.port, running.token, provider="agent-test",
                   deadline=time.monotonic() + 10, tls=context)
        with AgentDriver.connect("127.0.0.1", running.port, running.token, provider="agent-test",
                                 tls=context) as secure:
            assert secure.size() == (1024, 900)
            assert _rgb(secure.screenshot().png) == desktop.driver.raw_frame().image().tobytes()
        # no byte pipe over TLS (it would read and write one OpenSSL connection from two threads): refused, coded
        with socket.create_server(("127.0.0.1", 0)) as target, AgentDriver.connect(
                "127.0.0.1", running.port, running.token, provider="agent-test", tls=context) as secure:
            with pytest.raises(UsageError) as refused:
                secure.stream(target.getsockname()[1])
            assert refused.value.code == "usage.unsupported" and "TLS" in refused.value.message
            assert secure.closed
        # a client that does not trust the certificate, and a plain client, do not get in
        with pytest.raises(ProviderUnreachable):
            AgentDriver.connect("127.0.0.1", running.port, running.token, provider="agent-test",
                                tls=ssl.create_default_context())
        with pytest.raises(ProviderUnreachable):
            AgentDriver.connect("127.0.0.1", running.port, running.token, provider="agent-test", timeout=5)
        assert "TLS" in "".join(running.output)
    finally:
        running.stop()


def test_the_agent_killed_mid_session_is_session_lost(desktop: XvfbDesktop, tmp_path: Path) -> None:
    running = start_agent(tmp_path, desktop.display)
    try:
        driver = AgentDriver.connect("127.0.0.1", running.port, running.token, provider="agent-test")
        driver.ping()
        running.proc.kill()
        running.proc.wait()
        with pytest.raises(SessionLost):
            driver.screenshot()
        assert driver.closed
        with pytest.raises(SessionLost):
            driver.ping()
    finally:
        running.stop()


def test_the_display_dying_is_a_coded_error(tmp_path: Path) -> None:
    own = XvfbDesktop(320, 200, provider="agent-test")
    running = start_agent(tmp_path, own.display)
    try:
        with AgentDriver.connect("127.0.0.1", running.port, running.token, provider="agent-test") as driver:
            assert driver.size() == (320, 200)
            own.stop()
            with pytest.raises(SessionLost) as lost:
                driver.screenshot()
            assert lost.value.code == "provider.session_lost"
            assert lost.value.provider == "agent-test"
            assert not driver.closed  # the agent answered: the connection is fine, the display is not
            with pytest.raises(SessionLost):
                driver.act(Click(1, 1))
    finally:
        running.stop()
        own.stop()


def test_the_server_imports_only_the_files_the_image_copies() -> None:
    """The image has python3 and python3-xlib only: the agent may import no other deskctl module and no
    third-party package but Xlib, and encode_png must work without Pillow."""
    code = (
        "import sys; sys.modules['PIL'] = None\n"
        "import deskctl.agent.server, deskctl.agent.__main__\n"
        "from deskctl.core.png import encode_png\n"
        "png = encode_png(bytes(range(256)) * 64, 64, 64, 'BGRX')\n"
        "assert png.startswith(b'\\x89PNG')\n"
        "import os\n"
        "root = os.path.dirname(os.path.dirname(deskctl.__file__))\n"
        "print('\\n'.join(sorted(os.path.relpath(m.__file__, root) for n, m in sys.modules.items()\n"
        "                           if n.split('.')[0] == 'deskctl' and getattr(m, '__file__', None))))\n"
        "loaded = {n.split('.')[0] for n, m in sys.modules.items() if m}\n"
        "print('THIRD', sorted(loaded & {'click', 'pydantic', 'httpx', 'docker', 'PIL', 'paramiko', 'numpy',\n"
        "                                'tenacity', 'keyring'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[-1] == "THIRD []"
    assert set(lines[:-1]) <= set(AGENT_FILES), set(lines[:-1]) - set(AGENT_FILES)


def test_the_agent_waits_for_its_token_file_and_listens_only_once_it_has_it(desktop: XvfbDesktop,
                                                                           tmp_path: Path) -> None:
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    token_file = tmp_path / "agent" / "token"
    env = {**os.environ, "DISPLAY": desktop.display}
    agent = str(Path(sys.executable).with_name("deskctl-agent"))
    proc = subprocess.Popen([agent, "--port", str(port), "--token-file", str(token_file), "--token-wait", "60"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with pytest.raises(ProviderUnreachable):
            AgentDriver.connect("127.0.0.1", port, TOKEN, provider="agent-test", timeout=2)
        assert proc.poll() is None
        token_file.parent.mkdir()
        token_file.write_text(TOKEN)
        wait_ready("127.0.0.1", port, TOKEN, provider="agent-test", deadline=time.monotonic() + 30)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert TOKEN not in out
    # no token at all: it gives up after --token-wait, saying where it looked
    gone = subprocess.run([agent, "--port", "0", "--token-file", str(tmp_path / "none"), "--token-wait", "0.2"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert gone.returncode == 1
    assert "no token in" in gone.stderr and "listening" not in gone.stderr


def test_one_driver_is_safe_to_share_between_threads(client: AgentDriver) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(i: int) -> tuple[int, int]:
        if i % 3 == 0:
            return client.screenshot().width, client.raw_frame().height
        if i % 3 == 1:
            client.act(Click(i, i))
            return client.size()
        return len(client.exec(f"echo {i}").stdout), client.cursor_position()[0] * 0

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(work, range(30)))
    assert all(r == (1024, 900) for r in results[0::3])
    assert all(r == (1024, 900) for r in results[1::3])
    assert results[2::3] == [(len(f"{i}\n"), 0) for i in range(2, 30, 3)]


def test_a_stream_ends_both_ways_whichever_side_ends_it(agent: RunningAgent) -> None:
    """The stream op's pipe to a port on the agent's loopback: bytes both ways, and whichever side ends (the
    caller closing, the target closing, the caller only half-closing) the other side is told (its read ends)
    even when it keeps its own side open: nothing is left open in the desktop. Every read is bounded (30 s)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        for ending in ("caller closes", "target closes", "caller half-closes"):
            driver = AgentDriver.connect("127.0.0.1", agent.port, agent.token, provider="agent-test")
            pipe = driver.stream(server.getsockname()[1])
            assert driver.closed
            far, _ = server.accept()
            with pipe, far:
                pipe.settimeout(30)
                far.settimeout(30)
                pipe.sendall(b"ping")
                assert far.recv(4) == b"ping"
                far.sendall(b"pong")
                assert pipe.recv(4) == b"pong"
                if ending == "caller closes":
                    pipe.close()
                    assert far.recv(1) == b"", ending
                elif ending == "target closes":
                    far.close()
                    assert pipe.recv(1) == b"", ending
                else:
                    pipe.shutdown(socket.SHUT_WR)
                    assert far.recv(1) == b"", ending
                    assert pipe.recv(1) == b"", ending  # the target kept its side open: the agent ended it


def test_every_connection_has_tcp_keepalive(agent: RunningAgent) -> None:
    """A client gone without a FIN (its host vanished) must not hold the agent's side open for good: the agent's
    end of every connection, a stream's too, runs TCP keepalive, its first probe within a minute (as `ss` shows
    the kernel's timer)."""
    import re

    def timers() -> list[tuple[str, str, str, str]]:
        out = subprocess.run(["ss", "-tno", "state", "established", f"( sport = :{agent.port} )"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return re.findall(r"timer:\((\w+),(?:(\d+)min)?(\d+(?:\.\d+)?)(m?s)", out)

    with socket.create_server(("127.0.0.1", 0)) as server, AgentDriver.connect(
            "127.0.0.1", agent.port, agent.token, provider="agent-test") as driver:
        driver.ping()
        pipe = AgentDriver.connect("127.0.0.1", agent.port, agent.token, provider="agent-test").stream(
            server.getsockname()[1])
        with pipe:
            deadline = time.monotonic() + 30  # another timer (a retransmit's) is shown while it runs: wait it out
            while (found := timers()) and any(kind != "keepalive" for kind, *_ in found) and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(found) == 2 and all(kind == "keepalive" for kind, *_ in found), found
            assert all(not minutes and (float(value) <= 60 or unit == "ms") for _, minutes, value, unit in found)
