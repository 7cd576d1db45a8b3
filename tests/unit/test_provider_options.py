"""The typed options of the local providers (docker, xvfb, memory): one declaration that the CLI's ``-o``, the
provider, ``deskctl providers --json`` and docs/providers.md all read; and the docker handle's typed data, which
loads rows written by older versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.errors import UsageError
from deskctl.providers import PROVIDERS, load_provider_class
from deskctl.providers.base import RemoteHandle

REPO = Path(__file__).resolve().parents[2]
LOCAL = ("docker", "xvfb", "memory")


def _deskctl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DESKCTL_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=120,
                          env=env)


@pytest.mark.parametrize("name", LOCAL)
def test_the_local_providers_declare_typed_options_and_nothing_else(name: str) -> None:
    cls = load_provider_class(name)
    model = cls.options_class()
    assert model is not None and cls.option_names is None  # one declaration, no second list of names
    assert cls.declared_option_names() == model.names()
    for row in model.describe():
        assert row["type"] and row["doc"], row


def test_docker_options_are_converted_and_bounded() -> None:
    model = load_provider_class("docker").options_class()
    assert model is not None
    parsed = model.parse({"display": ":1", "cpus": "1.5", "reaper": "false", "memory": "512m",
                          "env": {"LANG": "C.UTF-8"}})
    assert (parsed.display, parsed.cpus, parsed.reaper) == (1, 1.5, False)  # type: ignore[attr-defined]
    for bad, code in (({"display": "x"}, "usage.bad_option"), ({"memory": "lots"}, "usage.bad_option"),
                      ({"host": "http://engine"}, "usage.bad_option"), ({"cpus": 0}, "usage.bad_option"),
                      ({"variant": "huge"}, "usage.bad_option"), ({"env": {"1BAD": "x"}}, "usage.bad_env"),
                      ({"locale": "not a locale"}, "usage.bad_option"), ({"memroy": "1g"}, "usage.unknown_option")):
        with pytest.raises(UsageError) as caught:
            model.parse(bad)
        assert caught.value.code == code, (bad, caught.value)


def test_a_bad_option_given_to_open_desktop_is_refused_before_anything_is_made(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """The library passes provider_options unchecked to the provider; the provider's typed options refuse them."""
    import deskctl

    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path))
    with pytest.raises(UsageError) as caught:
        deskctl.open_desktop("xvfb", geometry="320x200", provider_options={"start_timeout": "soon"})
    assert caught.value.code == "usage.bad_option" and "start_timeout" in caught.value.message


def test_providers_json_shows_each_option_as_declared(tmp_path: Path) -> None:
    proc = _deskctl("providers", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)["providers"]}
    for name in LOCAL:
        model = load_provider_class(name).options_class()
        assert model is not None
        assert rows[name]["options"] == json.loads(json.dumps(model.describe())), name
    assert [row["name"] for row in rows["xvfb"]["options"]] == ["window_manager", "browser", "devtools_port",
                                                                "owner_watch", "xvfb_args", "start_timeout"]
    assert rows["xvfb"]["default"] is True and rows["docker"]["default"] is False


def test_docs_show_the_options_as_declared() -> None:
    """docs/providers.md has a table per provider with typed options, made by ``python -m
    deskctl.providers._docs docs/providers.md``; a stale one fails here."""
    from deskctl.providers._docs import BLOCK, providers_with_options, update

    text = (REPO / "docs" / "providers.md").read_text()
    documented = {m.group("name") for m in BLOCK.finditer(text)}
    assert set(LOCAL) <= set(providers_with_options()) <= documented
    assert update(text) == text, "stale: run python -m deskctl.providers._docs docs/providers.md"
    assert documented <= set(PROVIDERS)


def test_the_docker_handle_data_loads_rows_of_older_versions() -> None:
    """A row of the oldest shape (no display, no exec_user, no engine, no name) reads as that version meant it;
    keys this version does not know are ignored."""
    from deskctl.providers.docker.common import DESKTOP_USER, DockerHandleData, _display_of, _exec_user, _via_agent

    old = RemoteHandle(provider="docker", session_id="dk-old", resource_id="abc123",
                       data={"container": "abc123", "image": "deskctl-desktop:minimal", "socket_path": "/x/X0",
                             "xauthority": "/x/Xauthority", "memory": None, "something_new": 1})
    data = DockerHandleData.of(old)
    assert (data.container, data.name, data.display, data.exec_user, data.engine) == \
        ("abc123", "dk-old", ":0", DESKTOP_USER, "")
    assert (_display_of(old), _exec_user(old), _via_agent(old)) == (":0", DESKTOP_USER, False)
    remote = RemoteHandle(provider="docker", session_id="dk-r", resource_id="",
                          data={"agent_host": "10.0.0.5", "agent_port": 4000, "display": ":1", "exec_user": ""})
    data = DockerHandleData.of(remote)
    assert (data.via_agent, data.agent_port, data.display, data.exec_user, data.container) == \
        (True, 4000, ":1", "", "")


def test_down_of_a_docker_desktop_path_loads_no_pydantic() -> None:
    """What `deskctl do` and `down` run of the docker provider (its handle data, its engine and clients) does not
    import pydantic: the typed options are read only where a desktop is made or checked."""
    code = ("import sys\nfrom deskctl.providers.docker import DockerProvider\n"
            "from deskctl.providers.base import RemoteHandle\n"
            "p = DockerProvider({'api_timeout': 5, 'host': 'tcp://127.0.0.1:1'})\n"
            "h = RemoteHandle(provider='docker', session_id='dk-x', resource_id='c', data={'display': ':0'})\n"
            "from deskctl.providers.docker.common import DockerHandleData\n"
            "print(p.engine, p._api_timeout(), DockerHandleData.of(h).display, p._engine_of(h))\n"
            "print(sorted(m for m in ('pydantic', 'pydantic_core') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["tcp://127.0.0.1:1 5.0 :0 tcp://127.0.0.1:1", "[]"], proc.stderr
