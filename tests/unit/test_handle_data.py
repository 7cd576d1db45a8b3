"""Each provider's ``handle.data`` is typed (``providers/NAME/handle_data.py``): a ledger row written before that
(the dicts below are exactly what the code before it wrote) loads with the same meaning, keys a version does not
know are ignored, what a provider stores reads back the same, and the processes that only drive or end a desktop
(``deskctl do``, ``down``) read it without loading pydantic."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from typing import Any

import pytest

from deskctl.providers._handle_data import HandleData
from deskctl.providers.base import RemoteHandle
from deskctl.providers.cua_cloud.handle_data import CuaHandleData
from deskctl.providers.daytona.handle_data import DaytonaHandleData
from deskctl.providers.kubernetes.handle_data import KubernetesHandleData
from deskctl.providers.memory.handle_data import MemoryHandleData
from deskctl.providers.ssh.handle_data import SshHandleData
from deskctl.providers.use_computer.handle_data import UseComputerHandleData
from deskctl.providers.xvfb.handle_data import XvfbHandleData, XvfbProcess

#: provider -> (its typed data, a row as the code before typed data wrote it, the fields that row must give)
OLD_ROWS: dict[str, tuple[type[HandleData], dict[str, Any], dict[str, Any]]] = {
    "xvfb": (XvfbHandleData, {
        "dir": "/run/d/xvfb/s1", "marker": "/run/d/xvfb/s1/desktop.json", "cookie_file": "/run/d/xvfb/s1/Xauthority",
        "xauthority": "/run/d/xvfb/s1/Xauthority", "geometry": "1024x768x24",
        "procs": [{"role": "xvfb", "pid": 4100, "ticks": 99}, {"role": "watcher", "pid": 4102, "ticks": None}],
        "display": ":7", "display_number": 7, "socket_id": "123:456", "devtools_port": 0,
    }, {"display": ":7", "display_number": 7, "xvfb_pid": 4100, "devtools_port": 0,
        "procs": (XvfbProcess("xvfb", 4100, 99), XvfbProcess("watcher", 4102, None))}),
    "memory": (MemoryHandleData, {"dir": "/run/d/memory/s1", "geometry": "800x600", "platform": "ubuntu"},
               {"dir": "/run/d/memory/s1", "geometry": "800x600", "platform": "ubuntu"}),
    "ssh": (SshHandleData, {
        "host": "10.0.0.9", "port": 2222, "user": "ci", "key_file": "/k/id", "known_hosts": None, "agent": "false",
        "xvfb_path": "Xvfb", "remote_dir": "", "compression": False, "identity_files": ["/k/a", "/k/b"],
        "jump": "j@bastion:22", "dir": "/tmp/deskctl-s1", "display": 3, "xvfb_pid": 77, "watcher_pid": 78,
        "detached": False, "geometry": "1024x768", "window_manager": True,
    }, {"host": "10.0.0.9", "port": 2222, "agent": False, "identity_files": ("/k/a", "/k/b"), "display": 3,
        "window_manager": True, "known_hosts": None, "connect_timeout": None}),
    "kubernetes": (KubernetesHandleData, {
        "pod": "k8-s1", "namespace": "desktops", "uid": "u-1", "secret_name": "k8-s1-token", "agent_port": 8765,
        "image": "deskctl-desktop:minimal", "context": None, "resource_version": "42", "platform": "ubuntu",
        "pod_ip": "10.1.2.3",
    }, {"pod": "k8-s1", "namespace": "desktops", "agent_port": 8765, "pod_ip": "10.1.2.3", "context": None}),
    "use_computer": (UseComputerHandleData, {
        "base_url": "http://127.0.0.1:9/api", "platform": "windows", "ephemeral": True, "host": "h1",
        "vm_ip": "1.2.3.4",
    }, {"base_url": "http://127.0.0.1:9/api", "platform": "windows", "host": "h1", "version": ""}),
    "cua_cloud": (CuaHandleData, {
        "base_url": "http://127.0.0.1:9", "namespace": "osgym-linux", "warmpool": "pool-a", "svc_suffix": "",
        "sandbox": "sb-1", "platform": "linux", "claim_ttl": 600.0, "expires_at": 1900000000.5,
    }, {"namespace": "osgym-linux", "sandbox": "sb-1", "claim_ttl": 600.0, "expires_at": 1900000000.5}),
    "daytona": (DaytonaHandleData, {
        "api_url": "http://127.0.0.1:9/api", "toolbox_url": "http://127.0.0.1:9/toolbox", "name": "s1",
        "platform": "ubuntu", "target": "us", "snapshot": None, "sandbox_class": "small", "cpu": 2, "memory": 4,
        "ttl_minutes": 30, "auto_destroy_at": "2026-12-01T22:00:00Z",
    }, {"toolbox_url": "http://127.0.0.1:9/toolbox", "cpu": 2, "gpu": None, "ttl_minutes": 30, "snapshot": None}),
}


@pytest.mark.parametrize("provider", sorted(OLD_ROWS))
def test_a_row_written_before_typed_data_loads_with_its_meaning(provider: str) -> None:
    cls, row, expected = OLD_ROWS[provider]
    data = cls.from_data({**row, "a_key_of_a_later_version": {"x": 1}})
    for name, value in expected.items():
        assert getattr(data, name) == value, name
    assert "a_key_of_a_later_version" not in data.to_data()
    # what it stores reads back as the same typed data, and is JSON (the ledger's column)
    again = cls.from_data(json.loads(json.dumps(data.to_data())))
    assert again == data
    # every key the old row had is still written under its name (an older deskctl reading a newer row)
    assert set(row) <= {f.name for f in fields(cls)}


@pytest.mark.parametrize("provider", sorted(OLD_ROWS))
def test_an_empty_row_takes_the_defaults(provider: str) -> None:
    cls = OLD_ROWS[provider][0]
    assert cls.from_data({}) == cls()
    handle = RemoteHandle(provider=provider, session_id="s", resource_id="r", data={"kept": 1})
    cls().store(handle)
    assert handle.data["kept"] == 1 and cls.of(handle) == cls()


def test_the_oldest_xvfb_row_without_procs_reads_them_from_its_marker(tmp_path: Any) -> None:
    """A handle saved before its marker's last write has no ``procs``: they come from the marker (as before)."""
    from deskctl.providers.xvfb import XvfbProvider

    marker = tmp_path / "desktop.json"
    procs = [{"role": "xvfb", "pid": 11, "ticks": 5}, {"role": "browser", "pid": 12, "ticks": 6}, {"bad": 1}]
    marker.write_text(json.dumps({"handle": {"data": {"procs": procs}}}))
    handle = RemoteHandle(provider="xvfb", session_id="s", resource_id="r",
                          data={"marker": str(marker), "dir": str(tmp_path)})
    assert XvfbProvider({})._procs(handle) == (XvfbProcess("xvfb", 11, 5), XvfbProcess("browser", 12, 6))


def test_values_stored_as_text_read_as_their_types() -> None:
    """Rows hand-edited or written through ``-o`` text: flags and numbers keep their meaning."""
    ssh = SshHandleData.from_data({"agent": "no", "compression": "yes", "port": "2200", "detached": "1"})
    assert (ssh.agent, ssh.compression, ssh.port, ssh.detached) == (False, True, 2200, True)
    xvfb = XvfbHandleData.from_data({"display_number": "7", "devtools_port": "9222"})
    assert (xvfb.display_number, xvfb.devtools_port) == (None, 9222)  # a number not stored as one is not trusted
    cua = CuaHandleData.from_data({"expires_at": "soon", "claim_ttl": "60"})
    assert (cua.expires_at, cua.claim_ttl) == (None, 60.0)
    assert DaytonaHandleData.from_data({"cpu": "2", "memory": True}).cpu is None


#: a docker row of the oldest shape (no display, name, exec_user, engine; its framebuffer file is gone)
DOCKER_OLD_ROW = {"container": "abc123", "image": "deskctl-desktop:minimal", "socket_path": "/x/X0",
                  "xauthority": "/x/Xauthority", "memory": None, "framebuffer": "/nonexistent/Xvfb_screen0"}


#: provider -> (its class, a row, code reading the handle ``h`` through the provider ``p``, what it prints)
PROBES = {
    "memory": ("deskctl.providers.memory:MemoryProvider", OLD_ROWS["memory"][1], "str(p._dir(h))", "/run/d/memory/s1"),
    "xvfb": ("deskctl.providers.xvfb:XvfbProvider", OLD_ROWS["xvfb"][1],
             "(p._env(h)['DISPLAY'], p._env(h)['XAUTHORITY'], [x.pid for x in p._procs(h)])",
             "(':7', '/run/d/xvfb/s1/Xauthority', [4100, 4102])"),
    "ssh": ("deskctl.providers.ssh:SSHProvider", OLD_ROWS["ssh"][1],
            "(lambda s: (str(s.target), s.agent, [str(j) for j in s.jump], s.identity_files))("
            "__import__('deskctl.providers.ssh.target', fromlist=['_'])._Settings.from_handle(h, p.opts))",
            "('ci@10.0.0.9:2222', False, ['j@bastion:22'], ('/k/a', '/k/b'))"),
    "kubernetes": ("deskctl.providers.kubernetes:KubernetesProvider", OLD_ROWS["kubernetes"][1], "p._ns(h)",
                   "desktops"),
    "use_computer": ("deskctl.providers.use_computer:UseComputerProvider", OLD_ROWS["use_computer"][1],
                     "(p._shell(h), p._guest_dialect(h), p._made_on(h))",
                     "('powershell', 'powershell', 'http://127.0.0.1:9/api')"),
    "cua_cloud": ("deskctl.providers.cua_cloud:CuaCloudProvider", OLD_ROWS["cua_cloud"][1], "p._claim_url(h)",
                  "/api/k8s/apis/osgym.cua.ai/v1alpha1/namespaces/osgym-linux/osgymsandboxclaims/r"),
    "docker": ("deskctl.providers.docker:DockerProvider", DOCKER_OLD_ROW,
               "(lambda d: (d.container, d.name, d.display, d.x11_files(), d.via_agent, p._framebuffer(h)))("
               "__import__('deskctl.providers.docker.common', fromlist=['_']).DockerHandleData.of(h))",
               "('abc123', 's', ':0', ('/x/X0', '/x/Xauthority'), False, None)"),
    "daytona": ("deskctl.providers.daytona:DaytonaProvider", OLD_ROWS["daytona"][1],
                "__import__('deskctl.providers.daytona.handle_data', fromlist=['_']).DaytonaHandleData.of(h).api_url",
                "http://127.0.0.1:9/api"),
}


@pytest.mark.parametrize("provider", sorted(PROBES))
def test_reading_handle_data_loads_no_pydantic(provider: str) -> None:
    """What ``deskctl do`` and ``down`` run: the provider made from the ledger's options, its handle data read
    through the provider's own methods, in a fresh process without pydantic."""
    target, row, expression, expected = PROBES[provider]
    module, name = target.split(":")
    code = (f"import sys, json\nfrom {module} import {name} as P\nfrom deskctl.providers.base import RemoteHandle\n"
            "p = P({})\nh = RemoteHandle(provider='x', session_id='s', resource_id='r', data=json.loads(sys.argv[1]))\n"
            f"v = {expression}\nprint(v if isinstance(v, str) else repr(v))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(row)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [expected, "[]"]


@pytest.mark.parametrize("row", [{"agent_host": "10.0.0.5"}, {"agent_port": 4000}, {"socket_path": "/x"}])
def test_a_docker_row_without_its_addresses_is_a_coded_error(row: dict[str, Any]) -> None:
    """A docker row that lacks where its display or agent is (hand-edited, or cut short) fails with a deskctl
    error naming what is missing, not a KeyError or TypeError (``internal``). The engine is a closed port: the
    provider's look at the container fails too, and the cause is what is told."""
    import time

    from deskctl.errors import DeskctlError
    from deskctl.providers.docker import DockerProvider

    provider = DockerProvider({"host": "tcp://127.0.0.1:1", "api_timeout": 5})
    handle = RemoteHandle(provider="docker", session_id="dk-cut", resource_id="c-cut", data=dict(row))
    opened = provider._agent_driver if "agent_host" in row else provider._x11_driver
    with pytest.raises(DeskctlError) as caught:
        opened(handle)  # type: ignore[operator]
    assert caught.value.code != "internal" and "records no" in caught.value.message
    with pytest.raises(DeskctlError) as waited:
        provider.wait_ready(handle, time.monotonic() + 5)
    assert "records no" in waited.value.message
