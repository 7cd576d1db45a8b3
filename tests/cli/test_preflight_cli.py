"""``deskctl preflight``, ``compat``, ``credentials``, ``login``, ``logout`` as a user runs them: a real
process, a real file keyring (keyrings.alt, chosen by PYTHON_KEYRING_BACKEND), a real Xvfb binary check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FILE_BACKEND = "keyrings.alt.file.PlaintextKeyring"
SECRET = "dtn-cli-secret-4f8e2a91"
_VENDOR_VARS = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_TARGET",
                "CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY", "USE_COMPUTER_API_KEY")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An isolated environment: temp XDG dirs and DESKCTL_HOME, a file keyring, cloud URLs on a closed
    loopback port (so a cloud provider's reachability probe fails at once instead of leaving the machine)."""
    base = {k: v for k, v in os.environ.items() if k not in _VENDOR_VARS and not k.startswith("DESKCTL_")}
    base.update({
        "DESKCTL_HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYTHON_KEYRING_BACKEND": FILE_BACKEND,
        "DAYTONA_API_URL": "http://127.0.0.1:9/api",
        "CUA_BASE_URL": "http://127.0.0.1:9",
        "CUA_TOKEN_URL": "http://127.0.0.1:9/token",
        "CUA_API_BASE": "http://127.0.0.1:9",
        "USE_COMPUTER_BASE_URL": "http://127.0.0.1:9",
        "NO_COLOR": "1",
        "COLUMNS": "80",
    })
    return base


def deskctl(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from deskctl.cli import main; main()", *args],
        input=stdin if stdin is not None else "", capture_output=True, text=True, env=env, timeout=120,
    )


def test_windows_with_computer_1_fails_with_the_way_out(env: dict[str, str]) -> None:
    out = deskctl(env, "preflight", "--platform", "windows", "--agent", "computer-1")
    assert out.returncode == 3, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "request"
    assert any(line.startswith("  FAIL  compat.agent_unsupported     computer-1 cannot run Windows tasks "
                               "(Windows-capable agents: oracle, nop); a Linux task can still drive a remote "
                               "Windows desktop through deskctl") for line in lines)
    assert ("        remedy: use --agent oracle or --agent nop, or declare a Linux task that drives the windows "
            "desktop as a tool: --task-os linux") in lines
    assert lines[-1].startswith("not ready: computer-1 cannot run Windows tasks")


def test_windows_with_computer_1_as_json(env: dict[str, str]) -> None:
    out = deskctl(env, "preflight", "--platform", "windows", "--agent", "computer-1", "--json")
    assert out.returncode == 3
    document = json.loads(out.stdout)
    assert document["error"]["code"] == "compat.agent_unsupported"
    assert "--task-os linux" in document["error"]["remedy"]
    assert document["ok"] is False and document["ready"] == [] and document["exit_code"] == 3
    assert {r["code"] for r in document["results"]} >= {"compat.task_os", "compat.agent_unsupported"}


def test_ubuntu_is_ready_through_xvfb(env: dict[str, str]) -> None:
    out = deskctl(env, "preflight", "--platform", "ubuntu", "--provider", "xvfb")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "xvfb  (ready)" in out.stdout.splitlines()
    assert out.stdout.splitlines()[-1] == "ready: xvfb"
    everyone = deskctl(env, "preflight", "--platform", "ubuntu", "--json")
    assert everyone.returncode == 0, everyone.stdout
    document = json.loads(everyone.stdout)
    assert "xvfb" in document["ready"] and "xvfb" in document["considered"]


def test_a_named_provider_that_cannot_serve_fails_even_if_another_could(env: dict[str, str]) -> None:
    out = deskctl(env, "preflight", "--platform", "windows", "--provider", "xvfb", "--agent", "oracle", "--json")
    assert out.returncode == 3
    document = json.loads(out.stdout)
    assert document["error"]["code"] == "compat.platform_unsupported"
    assert document["error"]["provider"] == "xvfb"


@pytest.mark.parametrize(("args", "hint"), [
    (("--platform", "ubuntoo"), "did you mean 'ubuntu'"),
    (("--provider", "xvbf"), "did you mean 'xvfb'"),
    (("--agent", "computr-1"), "did you mean 'computer-1'"),
    (("--task-os", "windoze"), "did you mean 'windows'"),
    (("--geometry", "big"), "WxH"),
    (("--max-usd", "-1"), "greater than 0"),
])
def test_bad_names_are_usage_errors_suggesting_the_closest(env: dict[str, str], args: tuple[str, ...],
                                                          hint: str) -> None:
    out = deskctl(env, "preflight", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert hint in out.stderr and out.stdout == ""
    as_json = deskctl(env, "preflight", *args, "--json")
    assert as_json.returncode == 2
    assert hint in json.loads(as_json.stdout)["error"]["message"]


def test_budget_cap_passed_by_the_projection_fails_with_exit_3(env: dict[str, str], tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"rates": [{"provider": "xvfb", "platform": "*", "usd_per_hour": 12,
                                             "source": "test", "date": "2026-11-29"}]}))
    env = {**env, "DESKCTL_PRICES": str(prices)}
    out = deskctl(env, "preflight", "--provider", "xvfb", "--max-minutes", "30", "--max-usd", "1", "--json")
    assert out.returncode == 3
    document = json.loads(out.stdout)
    assert document["error"]["code"] == "budget.exceeded"
    assert document["error"]["remedy"] == "--max-minutes 5 or --max-usd 6.00"


def test_compat_prints_every_table_with_sources(env: dict[str, str]) -> None:
    out = deskctl(env, "compat")
    assert out.returncode == 0
    text = out.stdout
    for heading in ("Platforms by provider", "Agents by task OS", "Task OS by desktop platform",
                    "Geometry and HiDPI scale by provider and platform"):
        assert heading in text
    xvfb = next(line for line in text.splitlines() if line.split()[:2] == ["xvfb", "ubuntu"])
    assert "settable 64x64..8192x8192" in xvfb and "[deskctl provider capabilities]" in xvfb
    assert "github.com/harbor-framework/harbor (PyPI harbor 0.26.0): harbor/trial/trial.py" in text
    document = json.loads(deskctl(env, "compat", "--json").stdout)
    assert "harbor" in document["sources"] and document["installed_providers"]["xvfb"] == ["ubuntu"]
    macos = [r for r in document["geometry_effective"] if r["platform"] == "macos"]
    assert macos and all(r["scale"] == 2.0 for r in macos if r["provider"] in ("use-computer", "cua-cloud"))
    windows = json.loads(deskctl(env, "compat", "--platform", "win", "--json").stdout)
    assert {r["provider"] for r in windows["platform_provider"]} == {"daytona", "cua-cloud", "use-computer"}


def test_compat_lists_every_provider_deskctl_knows(env: dict[str, str]) -> None:
    """Each provider `deskctl providers` lists has its row in `deskctl compat`'s platform table (kubernetes was
    missing: the table listed only the data file's rows)."""
    providers = json.loads(deskctl(env, "providers", "--json").stdout)
    names = {p["name"] for p in providers["providers"]}
    assert "kubernetes" in names
    document = json.loads(deskctl(env, "compat", "--json").stdout)
    assert {r["provider"] for r in document["platform_provider"]} >= names
    text = deskctl(env, "compat").stdout
    rows = {line.split()[1]: line for line in text.split("\n\n")[0].splitlines()[1:]}
    assert set(rows) >= names
    assert rows["kubernetes"].split()[:3] == ["*", "kubernetes", "ubuntu"] and "in-desktop agent" in rows["kubernetes"]


def test_providers_check_says_which_provider_is_ready_and_why_not(env: dict[str, str]) -> None:
    plain = json.loads(deskctl(env, "providers", "--json").stdout)["providers"]
    assert all("ready" not in row for row in plain)  # without --check nothing is probed
    checked = deskctl({**env, "DAYTONA_API_KEY": SECRET}, "providers", "--check", "--json")
    assert checked.returncode == 0, checked.stderr
    rows = {row["name"]: row for row in json.loads(checked.stdout)["providers"]}
    assert set(rows) == {row["name"] for row in plain} and all("ready" in row for row in rows.values())
    assert (rows["xvfb"]["ready"], rows["xvfb"]["reason"]) == (True, None)
    assert rows["ssh"]["ready"] is False and "needs a host" in rows["ssh"]["reason"]
    assert "DESKCTL_SSH_HOST" in rows["ssh"]["remedy"]
    assert rows["use-computer"]["ready"] is False and "USE_COMPUTER_API_KEY" in rows["use-computer"]["reason"]
    # a key is there but the service does not answer (a closed loopback port): not ready, and the key never shown
    assert rows["daytona"]["ready"] is False and rows["daytona"]["reason"]
    assert SECRET not in checked.stdout + checked.stderr
    text = deskctl(env, "providers", "--check")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert "xvfb           ready" in lines
    assert any(line.startswith("ssh            not ready: the ssh provider needs a host") for line in lines)
    assert any(line.strip().startswith("remedy: --host user@host") for line in lines)


def test_login_credentials_preflight_logout_never_show_the_secret(env: dict[str, str]) -> None:
    login = deskctl(env, "login", "daytona", "--var", "DAYTONA_API_KEY", stdin=SECRET + "\n")
    assert login.returncode == 0, login.stderr
    assert "stored DAYTONA_API_KEY for daytona in the keyring" in login.stderr
    shown = deskctl(env, "credentials", "daytona")
    assert shown.returncode == 0
    row = next(line for line in shown.stdout.splitlines() if "DAYTONA_API_KEY" in line)
    assert row.split()[:2] == ["DAYTONA_API_KEY", "keyring"] and "***" in row
    as_json = json.loads(deskctl(env, "credentials", "--json").stdout)
    api_key = next(v for v in as_json["providers"]["daytona"]["variables"] if v["var"] == "DAYTONA_API_KEY")
    assert api_key["source"] == "keyring" and as_json["providers"]["daytona"]["configured"] is True
    runs = [login, shown,
            deskctl(env, "credentials", "--json"),
            deskctl(env, "preflight", "--provider", "daytona"),
            deskctl(env, "preflight", "--provider", "daytona", "--json"),
            deskctl(env, "preflight", "--platform", "windows", "--json")]
    for run in runs:
        assert SECRET not in run.stdout and SECRET not in run.stderr
    preflight = json.loads(runs[4].stdout)
    assert "credentials.missing" not in {r["code"] for r in preflight["results"]}
    logout = deskctl(env, "logout", "daytona")
    assert logout.returncode == 0 and "removed from the keyring for daytona: DAYTONA_API_KEY" in logout.stderr
    gone = json.loads(deskctl(env, "credentials", "daytona", "--json").stdout)
    assert gone["providers"]["daytona"]["configured"] is False
    again = deskctl(env, "logout", "daytona")
    assert again.returncode == 0 and "nothing stored" in again.stderr


def test_secret_from_the_environment_never_appears(env: dict[str, str]) -> None:
    env = {**env, "DAYTONA_API_KEY": SECRET}
    for args in (("credentials",), ("credentials", "--json"), ("preflight", "--provider", "daytona"),
                 ("preflight", "--provider", "daytona", "--json")):
        run = deskctl(env, *args)
        assert SECRET not in run.stdout + run.stderr, args
    shown = deskctl(env, "credentials", "daytona").stdout
    assert next(line for line in shown.splitlines() if "DAYTONA_API_KEY" in line).split()[1] == "env"


def test_login_without_var_asks_for_each_required_variable(env: dict[str, str]) -> None:
    out = deskctl(env, "login", "cua", stdin="ukey-cli-0001\ncs-cli-0002\n")
    assert out.returncode == 0, out.stderr
    assert "stored CUA_CLIENT_ID" in out.stderr and "stored CUA_CLIENT_SECRET" in out.stderr
    document = json.loads(deskctl(env, "credentials", "cua-cloud", "--json").stdout)
    assert document["providers"]["cua-cloud"]["configured"] is True
    assert "ukey-cli-0001" not in json.dumps(document) and "cs-cli-0002" not in json.dumps(document)


def test_login_refuses_a_value_flag_unknown_variables_and_empty_input(env: dict[str, str]) -> None:
    flag = deskctl(env, "login", "daytona", "--value", SECRET)
    assert flag.returncode == 2 and SECRET not in flag.stdout + flag.stderr
    var = deskctl(env, "login", "daytona", "--var", "DAYTONA_API_KY", stdin="x\n")
    assert var.returncode == 2 and "did you mean 'DAYTONA_API_KEY'" in var.stderr
    provider = deskctl(env, "login", "daytonna", stdin="x\n")
    assert provider.returncode == 2 and "did you mean 'daytona'" in provider.stderr
    empty = deskctl(env, "login", "use-computer", stdin="\n")
    assert empty.returncode == 2 and "empty value" in empty.stderr


def test_an_unusable_keyring_is_a_warning_with_a_remedy(env: dict[str, str]) -> None:
    env = {**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    shown = deskctl(env, "credentials")
    assert shown.returncode == 0
    assert "warning: no usable keyring backend" in shown.stderr and "PYTHON_KEYRING_BACKEND" in shown.stderr
    login = deskctl(env, "login", "daytona", stdin=SECRET + "\n")
    assert login.returncode == 2 and "remedy:" in login.stderr and SECRET not in login.stderr
    preflight = deskctl(env, "preflight", "--provider", "daytona", "--json")
    codes = {r["code"] for r in json.loads(preflight.stdout)["results"]}
    assert {"credentials.missing", "credentials.keyring"} <= codes


def test_credentials_text_shows_sources_required_and_optional(env: dict[str, str]) -> None:
    env = {**env, "DAYTONA_API_KEY": SECRET, "DAYTONA_API_URL": "http://127.0.0.1:9/api"}
    out = deskctl(env, "credentials", "daytona")
    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        "daytona  (configured)",
        "  DAYTONA_API_KEY            env  ***",
        "  DAYTONA_JWT_TOKEN          missing",
        "  DAYTONA_ORGANIZATION_ID    missing",
        "  DAYTONA_API_URL            env  http://127.0.0.1:9/api",
        "  DAYTONA_TARGET             not set",
        "keyring: keyring backend keyrings.alt.file.PlaintextKeyring (stores secrets unencrypted on disk)",
    ]
