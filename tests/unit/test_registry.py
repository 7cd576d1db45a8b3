"""The provider registry: built-in names, install hints, and third-party providers by entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deskctl.errors import UsageError
from deskctl.providers import PROVIDERS, known_provider_names, load_provider_class


def test_built_in_providers_load_and_declare_capabilities_as_data() -> None:
    for name in known_provider_names():
        cls = load_provider_class(name)
        assert cls.name == name
        assert cls.capabilities.platforms, name


def test_an_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(UsageError) as info:
        load_provider_class("dokcer")
    assert info.value.code == "usage.unknown_provider" and "did you mean 'docker'" in info.value.message


def test_a_provider_whose_module_cannot_import_names_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PROVIDERS, "broken", ("deskctl.providers.xvfb_missing_dependency:X", "pip install thing"))
    with pytest.raises(UsageError) as info:
        load_provider_class("broken")
    assert info.value.code == "usage.provider_unavailable" and info.value.remedy == "pip install thing"


def test_no_install_hint_asks_for_a_package_deskctl_always_installs() -> None:
    """A dependency of deskctl itself (pyproject's ``dependencies``) is there whenever deskctl is: a provider that
    cannot be imported then has a broken install, and a hint to ``pip install`` that package sends the user the
    wrong way."""
    from importlib.metadata import requires

    hard = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower()
            for r in requires("deskctl") or [] if "extra ==" not in r}
    assert {"docker", "paramiko", "httpx"} <= hard
    for name, (_target, hint) in PROVIDERS.items():
        asked = {word.strip("'\"").lower()
                 for part in re.findall(r"pip install ([^;(]+)", hint) for word in part.split()}
        assert not asked & hard, f"{name}: {hint!r} asks to install {sorted(asked & hard)}, which deskctl depends on"


def test_a_third_party_provider_registers_by_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "acme_desktops").mkdir(parents=True)
    (site / "acme_desktops" / "__init__.py").write_text(textwrap.dedent("""
        from deskctl.providers.xvfb import XvfbProvider

        class AcmeProvider(XvfbProvider):
            name = "acme"
            aliases = ("acme-cloud",)
    """))
    dist = site / "acme_desktops-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-desktops\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[deskctl.providers]\nacme = acme_desktops:AcmeProvider\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("import json, deskctl; from deskctl.providers import known_provider_names, load_provider_class;"
            "print(json.dumps([known_provider_names(), load_provider_class('acme').__name__]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    names, cls = json.loads(out)
    assert "acme" in names and cls == "AcmeProvider"
    # the aliases its class declares resolve too, as a built-in's do
    code = "from deskctl.providers import resolve_name; print(resolve_name('Acme_Cloud'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "acme"
    # a third party cannot shadow a built-in name
    (dist / "entry_points.txt").write_text("[deskctl.providers]\nacme = acme_desktops:AcmeProvider\n"
                                           "xvfb = acme_desktops:AcmeProvider\n")
    code = "from deskctl.providers import load_provider_class; print(load_provider_class('xvfb').__name__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "XvfbProvider"
    # and it is usable end to end through the CLI
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--provider", "acme", "--geometry", "320x240"],
                        env=env, capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    down = subprocess.run([sys.executable, "-m", "deskctl", "down", up.stdout.strip()], env=env,
                          capture_output=True, text=True)
    assert down.returncode == 0, down.stderr


def test_the_alias_table_is_the_classes_declarations() -> None:
    """ALIASES lets a name be resolved without importing a provider module; it must say what the classes say."""
    from deskctl.providers import ALIASES

    declared = {alias: name for name in PROVIDERS for alias in load_provider_class(name).aliases}
    assert declared == ALIASES
    assert not set(ALIASES) & set(PROVIDERS)  # an alias never hides a provider


@pytest.mark.parametrize(("typed", "name"), [
    ("cua", "cua-cloud"), ("use.computer", "use-computer"), ("Use_Computer", "use-computer"),
    (" XVFB ", "xvfb"), ("cua_cloud", "cua-cloud"), ("docker", "docker"),
])
def test_resolve_name_takes_every_spelling_of_a_provider(typed: str, name: str) -> None:
    from deskctl.providers import resolve_name

    assert resolve_name(typed) == name
    assert load_provider_class(typed).name == name


def test_resolve_name_refuses_a_misspelt_name_with_the_closest_one() -> None:
    from deskctl.providers import resolve_name

    with pytest.raises(UsageError) as info:
        resolve_name("daytonna")
    assert info.value.code == "usage.unknown_provider" and info.value.exit_code == 2
    assert "did you mean 'daytona'" in info.value.message and info.value.remedy == "--provider daytona"
    with pytest.raises(UsageError) as info:
        resolve_name("qqqq")
    assert info.value.remedy is None and "known: cua-cloud, daytona" in info.value.message


def test_a_built_in_missing_from_the_installation_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from deskctl.providers import resolve_name

    monkeypatch.setitem(PROVIDERS, "gone", ("deskctl.providers.no_such_module:X", "pip install gone"))
    with pytest.raises(UsageError) as info:
        resolve_name("gone")
    assert info.value.code == "usage.provider_unavailable"


def test_resolving_an_alias_imports_no_provider_module() -> None:
    code = ("import sys\nfrom deskctl.spec import DesktopSpec\n"
            "print(DesktopSpec.build(provider='use.computer').provider)\n"
            "print(sorted(m for m in sys.modules if m.startswith('deskctl.providers.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.splitlines() == ["use-computer", "[]"]
