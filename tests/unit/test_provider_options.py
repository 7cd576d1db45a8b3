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


def test_an_option_declaration_reads_the_environment_converts_and_keeps_secrets(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """The base class's contract: an environment variable fills an option not given (an empty one does not),
    strings are converted as the declared type, instances are frozen, ``given()``/``model_fields_set`` are what
    was set, and a secret option's value is in no repr, no error and no row of ``describe()``."""
    from typing import ClassVar

    from deskctl.providers.options import ProviderOptions, option

    class Secretive(ProviderOptions):
        provider: ClassVar[str] = "secretive"

        token: str = option(doc="the token", env="SECRETIVE_TOKEN_T", secret=True, min_length=12)
        pin: str | None = option("default-pin-1234", doc="a secret with a default", secret=True, pattern="^[0-9]+$")
        retries: int = option(3, doc="tries", env="SECRETIVE_RETRIES_T", ge=1, le=10)
        ratio: float = option(0.5, doc="a ratio", gt=0, lt=1)

    monkeypatch.delenv("SECRETIVE_TOKEN_T", raising=False)
    monkeypatch.setenv("SECRETIVE_RETRIES_T", "")
    with pytest.raises(UsageError) as missing:
        Secretive.parse({})
    assert missing.value.code == "usage.bad_option" and "'token'" in missing.value.message
    monkeypatch.setenv("SECRETIVE_TOKEN_T", "tok-from-env-0001")
    monkeypatch.setenv("SECRETIVE_RETRIES_T", "7")
    parsed = Secretive.parse({"ratio": "0.25"})
    assert (parsed.token, parsed.retries, parsed.ratio, parsed.pin) == (  # type: ignore[attr-defined]
        "tok-from-env-0001", 7, 0.25, "default-pin-1234")
    assert parsed.model_fields_set == {"token", "retries", "ratio"}
    assert parsed.given() == {"token": "tok-from-env-0001", "retries": 7, "ratio": 0.25}
    assert Secretive.parse({"token": "tok-given-000002"}).token == "tok-given-000002"  # type: ignore[attr-defined]
    for text in (repr(parsed), str(parsed)):
        assert "tok-from-env-0001" not in text and "default-pin-1234" not in text and "retries=7" in text
    with pytest.raises((AttributeError, TypeError, ValueError)):
        parsed.retries = 2  # type: ignore[attr-defined, misc]
    assert parsed.retries == 7  # type: ignore[attr-defined]
    assert list(Secretive.model_fields) == ["token", "pin", "retries", "ratio"]
    assert Secretive.names() == frozenset(Secretive.model_fields)
    for raw, rule in (({"token": "short-tok"}, "at least 12 characters"), ({"pin": "pin-not-digits-77"}, "pattern"),
                      ({"retries": "11"}, "less than or equal to 10"), ({"ratio": "7.5"}, "less than 1")):
        with pytest.raises(UsageError) as caught:
            Secretive.parse({"token": "tok-given-000002", **raw})
        message = str(caught.value) + caught.value.message
        assert caught.value.code == "usage.bad_option" and rule in message, message
        assert not any(str(value) in message for value in raw.values()), message
        assert "tok-given-000002" not in message
    rows = {row["name"]: row for row in Secretive.describe()}
    assert (rows["token"]["required"], rows["token"]["default"], rows["token"]["secret"]) == (True, None, True)
    assert (rows["pin"]["required"], rows["pin"]["default"], rows["pin"]["type"]) == (False, None, "str | None")
    assert rows["token"]["min_length"] == 12 and rows["token"]["env"] == "SECRETIVE_TOKEN_T"
    assert (rows["retries"]["ge"], rows["retries"]["le"], rows["ratio"]["gt"], rows["ratio"]["lt"]) == (1, 10, 0, 1)


def test_lax_conversion_of_strings_and_numbers() -> None:
    """What `-o` strings and TOML numbers become: as documented (pydantic's lax mode, which users rely on)."""
    from deskctl.providers.docker.options import Options as Docker
    from deskctl.providers.ssh.options import Options as Ssh
    from deskctl.providers.use_computer.options import Options as UseComputer

    parsed = Docker.parse({"pids_limit": " 7 ", "expiry_grace": "1e3", "reaper": "off", "memory": 1.0,
                           "fonts": ["a", "b"], "env": {"A": 1}, "shm_size": "256m", "api_timeout": 5})
    assert (parsed.pids_limit, parsed.expiry_grace, parsed.reaper, parsed.memory, parsed.fonts, parsed.env,
            parsed.shm_size, parsed.api_timeout) == (7, 1000.0, False, 1, ("a", "b"), {"A": "1"}, "256m", 5.0)
    assert type(parsed.api_timeout) is float and type(parsed.memory) is int
    assert Docker.parse({"pids_limit": "1.0"}).pids_limit == 1 and Docker.parse({"pids_limit": True}).pids_limit == 1
    assert Docker.parse({"memory": "2"}).memory == "2" and Docker.parse({"cpus": "inf"}).cpus == float("inf")
    assert Ssh.parse({"ssh_config": 1}).ssh_config is True and Ssh.parse({"ssh_config": "no"}).ssh_config == "no"
    assert UseComputer.parse({"resources": {"cpus": "4"}}).resources == {"cpus": 4}
    for model, raw in ((Docker, {"pids_limit": "1.5"}), (Docker, {"reaper": 2}), (Docker, {"image": 5}),
                       (Docker, {"fonts": 5}), (Docker, {"cpus": "nan"}), (Ssh, {"ssh_config": []})):
        with pytest.raises(UsageError) as caught:
            model.parse(raw)
        assert caught.value.code == "usage.bad_option" and f"option '{next(iter(raw))}" in caught.value.message


def test_the_xvfb_options_are_built_and_read_without_typing() -> None:
    """`deskctl up -o ...` builds the xvfb options class and converts the values: the annotations are read without
    the typing module (its import is 13 million instructions; typing's own objects are asked of typing only when a
    declaration used them, so typing was loaded)."""
    code = ("import sys\n"
            "from deskctl.providers.xvfb.options import Options\n"
            "made = Options.parse({'xvfb_args': ['-ac'], 'browser': 'x', 'devtools_port': '9222'})\n"
            "assert (made.xvfb_args, made.browser, made.devtools_port) == (('-ac',), 'x', 9222), made\n"
            "assert [row['type'] for row in Options.describe()] == "
            "['bool', 'str | None', 'int', 'bool', 'tuple[str, ...]', 'float'], Options.describe()\n"
            "print(sorted(m for m in ('typing', 'deskctl.spec') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_annotations_are_taken_apart_as_typing_does() -> None:
    import types
    import typing
    from collections.abc import Callable
    from typing import Any, Literal, Optional, Union

    from deskctl.providers.options import _LITERAL, _parts

    cases: list[Any] = [str, int, type(None), Any, str | None, int | str | None, Optional[int], Union[int, str],  # noqa: UP007, UP045
                        Literal["a", 1], tuple[str, ...], dict[str, int], list[int], typing.Tuple[str, ...],  # noqa: UP006
                        Callable[[int], str], typing.Dict[str, Literal["x"]]]  # noqa: UP006
    for annotation in cases:
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        expected = types.UnionType if origin is typing.Union else _LITERAL if origin is Literal else origin
        assert _parts(annotation) == (expected, args), annotation
