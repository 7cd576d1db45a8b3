"""The remote providers' options: one declaration (``NAME/options.py``) that the run-time table, the CLI's name
check and ``describe()`` all follow, and that the processes which only drive or end a desktop never load."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from deskctl.providers import load_provider_class
from deskctl.providers._option_values import render_table

#: provider name -> package under deskctl.providers
PACKAGES = {"daytona": "daytona", "cua-cloud": "cua_cloud", "use-computer": "use_computer", "kubernetes": "kubernetes",
            "ssh": "ssh"}


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_run_time_table_is_made_from_the_declaration(name: str) -> None:
    package = PACKAGES[name]
    model = importlib.import_module(f"deskctl.providers.{package}.options").Options
    table = Path(importlib.import_module(f"deskctl.providers.{package}._option_table").__file__ or "")
    assert table.read_text() == render_table(model), "run: python -m deskctl.providers._option_values"
    cls = load_provider_class(name)
    assert cls.options_class() is model
    assert cls.declared_option_names() == frozenset(model.model_fields)
    assert model.provider == name
    rows = {row["name"]: row for row in model.describe()}
    assert all(row["doc"] for row in rows.values())


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_driving_a_desktop_does_not_load_pydantic(name: str) -> None:
    """`deskctl do` and `down` build the provider from the ledger's options: the class and its option values
    come without pydantic (the declaration is loaded only where options are checked)."""
    target = load_provider_class(name)
    package = f"deskctl.providers.{PACKAGES[name]}"
    code = (f"import sys; from {target.__module__} import {target.__name__} as P; p = P({{}}); "
            f"from {package}._option_table import TABLE; [getattr(p.opts, n) for n in TABLE]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_bad_value_is_refused_when_the_provider_is_made() -> None:
    from deskctl.errors import ConfigInvalid
    from deskctl.providers.daytona import DaytonaProvider

    with pytest.raises(ConfigInvalid, match="ttl_minutes"):
        DaytonaProvider({"ttl_minutes": "soon"})
    with pytest.raises(ConfigInvalid):
        DaytonaProvider({"poll_interval": -1})
    assert DaytonaProvider({"target": "eu", "ttl_minutes": "30"}).opts.ttl_minutes == 30


def test_kubernetes_takes_a_cpu_quantity_as_its_docs_say() -> None:
    """docs/kubernetes.md names "500m" among the cpus values; the old hand-written check refused it."""
    from deskctl.errors import UsageError
    from deskctl.providers.kubernetes import KubernetesProvider

    for good in ("500m", "1", 2, 0.5):
        KubernetesProvider.check_options({"cpus": good, "image": "x"})
    for bad in (-1, "lots", True, "Sometimes"):
        with pytest.raises(UsageError) as info:
            KubernetesProvider.check_options({"cpus": bad} if bad != "Sometimes" else {"image_pull_policy": bad})
        assert info.value.code == "usage.bad_option"


def test_the_secret_free_declarations_describe_every_option() -> None:
    """Secrets are credentials (environment, keyring), never options: options are stored in the ledger."""
    for package in sorted(set(PACKAGES.values())):
        model = importlib.import_module(f"deskctl.providers.{package}.options").Options
        rows = model.describe()
        assert rows and not any(row["secret"] for row in rows)
        assert all(row["type"] for row in rows)
