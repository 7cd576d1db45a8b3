"""Credentials: environment first, then a REAL keyring backend chosen through keyring's own configuration
(keyrings.alt's file backend via PYTHON_KEYRING_BACKEND or keyringrc.cfg in a temp XDG_CONFIG_HOME)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.core
import pytest

from deskctl import credentials
from deskctl.credentials import (
    KEYRING_SERVICE,
    delete_secret,
    describe,
    keyring_status,
    presence_check,
    redact,
    resolve,
    store_secret,
)
from deskctl.errors import ConfigInvalid

FILE_BACKEND = "keyrings.alt.file.PlaintextKeyring"
_VARS = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_API_URL", "DAYTONA_TARGET",
         "CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY", "CUA_BASE_URL", "CUA_TOKEN_URL", "CUA_API_BASE",
         "USE_COMPUTER_API_KEY", "USE_COMPUTER_BASE_URL")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: None) -> Iterator[Path]:
    """A real file keyring in a temp XDG_DATA_HOME, selected by PYTHON_KEYRING_BACKEND."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", FILE_BACKEND)
    keyring.core.init_backend()  # keyring reads its configuration once per process; re-read it here
    try:
        yield tmp_path / "data" / "python_keyring"
    finally:
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
        keyring.core.init_backend()


def test_environment_wins_over_the_keyring(file_keyring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store_secret("daytona", "DAYTONA_API_KEY", "dtn-from-keyring-1111")
    found = resolve("daytona", "DAYTONA_API_KEY")
    assert found is not None and (found.source, found.value) == ("keyring", "dtn-from-keyring-1111")
    monkeypatch.setenv("DAYTONA_API_KEY", "dtn-from-env-2222")
    found = resolve("daytona", "DAYTONA_API_KEY")
    assert found is not None and (found.source, found.value) == ("env", "dtn-from-env-2222")


def test_the_keyring_entry_uses_service_deskctl_and_provider_colon_var(file_keyring: Path) -> None:
    store_secret("use-computer", "USE_COMPUTER_API_KEY", "uc_live_abcdef123456")
    assert keyring.get_password(KEYRING_SERVICE, "use-computer:USE_COMPUTER_API_KEY") == "uc_live_abcdef123456"
    stored = (file_keyring / "keyring_pass.cfg").read_text()
    assert stored.startswith("[deskctl]")  # the file backend really wrote it, under service deskctl


def test_resolved_secrets_are_redacted_everywhere(file_keyring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUA_CLIENT_SECRET", "cs-env-secret-9876")
    store_secret("cua-cloud", "CUA_CLIENT_ID", "ukey-keyring-5432")
    assert resolve("cua-cloud", "CUA_CLIENT_SECRET") is not None
    cred = resolve("cua-cloud", "CUA_CLIENT_ID")
    assert cred is not None
    assert "ukey-keyring-5432" not in repr(cred) and "ukey-keyring-5432" not in str(cred)
    assert redact("id ukey-keyring-5432 secret cs-env-secret-9876") == "id *** secret ***"
    rows = describe("cua-cloud")
    text = repr(rows) + repr([r.to_dict() for r in rows])
    assert "ukey-keyring-5432" not in text and "cs-env-secret-9876" not in text
    by_var = {r.var: r for r in rows}
    assert by_var["CUA_CLIENT_ID"].source == "keyring" and by_var["CUA_CLIENT_SECRET"].source == "env"
    assert by_var["CUA_API_KEY"].source == "missing"


def test_non_secret_values_are_shown(file_keyring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_URL", "http://127.0.0.1:9/api")
    row = next(r for r in describe("daytona") if r.var == "DAYTONA_API_URL")
    assert (row.source, row.secret, row.shown) == ("env", False, "http://127.0.0.1:9/api")


def test_presence_accepts_either_alternative(file_keyring: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message, remedy = presence_check("daytona")
    assert not ok and "DAYTONA_API_KEY or DAYTONA_JWT_TOKEN + DAYTONA_ORGANIZATION_ID" in message
    assert remedy is not None and "deskctl login daytona" in remedy
    monkeypatch.setenv("DAYTONA_JWT_TOKEN", "jwt-abc-123456")
    assert not presence_check("daytona")[0]  # the JWT alone is not enough
    store_secret("daytona", "DAYTONA_ORGANIZATION_ID", "org-42")
    ok, message, _ = presence_check("daytona")
    assert ok and "DAYTONA_JWT_TOKEN from env" in message and "DAYTONA_ORGANIZATION_ID from keyring" in message
    assert "jwt-abc-123456" not in message


def test_delete_is_idempotent(file_keyring: Path) -> None:
    store_secret("use-computer", "USE_COMPUTER_API_KEY", "uc_live_zzzz99999")
    assert delete_secret("use-computer", "USE_COMPUTER_API_KEY") is True
    assert delete_secret("use-computer", "USE_COMPUTER_API_KEY") is False
    assert resolve("use-computer", "USE_COMPUTER_API_KEY") is None


def test_keyring_configured_by_keyringrc_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               clean_env: None) -> None:
    config = tmp_path / "config" / "python_keyring"
    config.mkdir(parents=True)
    (config / "keyringrc.cfg").write_text(f"[backend]\ndefault-keyring={FILE_BACKEND}\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("PYTHON_KEYRING_BACKEND", raising=False)
    keyring.core.init_backend()
    try:
        assert keyring_status().backend == FILE_BACKEND
        store_secret("daytona", "DAYTONA_API_KEY", "dtn-rc-file-7777")
        assert (tmp_path / "data" / "python_keyring" / "keyring_pass.cfg").exists()
    finally:
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
        keyring.core.init_backend()


@pytest.mark.parametrize("backend", ["keyring.backends.null.Keyring", "keyring.backends.fail.Keyring"])
def test_an_unusable_backend_is_a_warning_not_a_crash(backend: str, monkeypatch: pytest.MonkeyPatch,
                                                      clean_env: None) -> None:
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", backend)
    keyring.core.init_backend()
    status = keyring_status()
    assert not status.usable and status.remedy is not None and "PYTHON_KEYRING_BACKEND" in status.remedy
    assert resolve("daytona", "DAYTONA_API_KEY") is None
    assert {r.source for r in describe("daytona")} == {"missing"}
    with pytest.raises(ConfigInvalid) as info:
        store_secret("daytona", "DAYTONA_API_KEY", "dtn-never-stored-1")
    assert "dtn-never-stored-1" not in info.value.message


def test_a_missing_keyring_library_is_a_warning(clean_env: None) -> None:
    # a real interpreter in which "import keyring" fails, as in an installation without it
    code = (
        "import sys; sys.modules['keyring'] = None\n"
        "from deskctl.credentials import keyring_status, resolve, describe\n"
        "s = keyring_status(); print(s.usable, '|', s.message, '|', s.remedy)\n"
        "print(resolve('daytona', 'DAYTONA_API_KEY'), {r.source for r in describe('daytona')})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    first, second = out.stdout.splitlines()
    assert first.startswith("False | the keyring library is not installed") and "keyrings.alt" in first
    assert second == "None {'missing'}"


def test_the_credentials_are_the_provider_classes_declarations() -> None:
    from deskctl.providers import known_provider_names, load_provider_class

    for name in known_provider_names():
        assert credentials.credential_set(name) is load_provider_class(name).credentials
    assert credentials.credential_set("cua") is credentials.credential_set("cua-cloud")  # an alias is the provider
    assert credentials.credential_set("no-such-provider") == credentials.CredentialSet()
    daytona = credentials.credential_set("daytona")
    assert daytona.required_any == (("DAYTONA_API_KEY",), ("DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"))
    assert daytona.secret == {"DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN"}
    cua = credentials.credential_set("cua-cloud")
    assert cua.required_any == (("CUA_CLIENT_ID", "CUA_CLIENT_SECRET"), ("CUA_API_KEY",))
    assert "CUA_CLOUD_NAMESPACE" in cua.variables and not cua.is_secret("CUA_CLOUD_NAMESPACE")
    ssh = credentials.credential_set("ssh")
    assert ssh.required_any == () and ssh.is_secret("DESKCTL_SSH_PASSWORD") and not ssh.is_secret("DESKCTL_SSH_HOST")
    assert credentials.credential_set("xvfb").variables == ()


def test_an_undeclared_secret_set_is_every_name_that_looks_secret() -> None:
    declared = credentials.CredentialSet(variables=("ACME_API_KEY", "ACME_URL", "ACME_TOKEN", "ACME_PASSWORD"))
    assert declared.secret == {"ACME_API_KEY", "ACME_TOKEN", "ACME_PASSWORD"}
    assert credentials.CredentialSet(variables=("ACME_URL",), secret=frozenset({"ACME_URL"})).is_secret("ACME_URL")


@pytest.mark.parametrize(("text", "shown"), [
    ("postgresql://deskctl:pw-secret1@db:5432/ledger", "postgresql://deskctl:***@db:5432/ledger"),
    ("cannot reach http://u:pw-secret1@127.0.0.1:9/api: refused", "cannot reach http://u:***@127.0.0.1:9/api: refused"),
    ("DOCKER_HOST=tcp://u:pw-secret1@h:2376", "DOCKER_HOST=tcp://u:***@h:2376"),
    ("https://pw-secret1@example.test/x", "https://***@example.test/x"),
    ("ssh host 'me:pw-secret1@lab:22'", "ssh host 'me:***@lab:22'"),
    ('{"url": "http://u:pw-secret1@h", "b": "c@d"}', '{"url": "http://u:***@h", "b": "c@d"}'),
    ("alice@lab-box:2222 and ssh://me@host and postgresql://deskctl@db/x",
     "alice@lab-box:2222 and ssh://me@host and postgresql://deskctl@db/x"),
    ("image debian:bookworm-slim@sha256:0123abcd", "image debian:bookworm-slim@sha256:0123abcd"),
])
def test_redact_removes_the_password_of_every_url(text: str, shown: str) -> None:
    assert redact(text) == shown
