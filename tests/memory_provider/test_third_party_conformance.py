"""A provider from outside this repository, found only through the ``deskctl.providers`` entry point of an
installed distribution (a dist-info on the path), passes the whole conformance suite, selected through
``DESKCTL_CONFORMANCE_TARGET`` (:mod:`deskctl.testing`): the way a third party runs the suite on its provider."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deskctl.errors import ConfigInvalid
from deskctl.testing import TARGET_ENV, load_targets

REPO = Path(__file__).resolve().parents[2]


def _install_toy(site: Path) -> None:
    """A distribution ``toy-desktops`` with a provider ``toy`` (the memory reference under its own name and
    folder) and the module naming its conformance target."""
    (site / "toy_desktops").mkdir(parents=True)
    (site / "toy_desktops" / "__init__.py").write_text(textwrap.dedent("""
        from deskctl.providers.memory import MemoryProvider

        class ToyProvider(MemoryProvider):
            name = "toy"
    """))
    (site / "toy_conformance.py").write_text(textwrap.dedent("""
        from memory_provider._memory_target import MEMORY_TARGET_KWARGS

        # no row of deskctl's price catalog names "toy": its cost is unknown, never 0
        TARGET = {**MEMORY_TARGET_KWARGS, "name": "toy", "open_kwargs": {"provider": "toy"},
                  "extra": {"cost_known": False}}
    """))
    dist = site / "toy_desktops-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-desktops\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[deskctl.providers]\ntoy = toy_desktops:ToyProvider\n")


def _pytest(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "tests/conformance", "-q", "-p", "no:cacheprovider",
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_an_entry_point_provider_passes_the_whole_conformance_suite(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install_toy(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "tests")]),
           TARGET_ENV: "toy_conformance:TARGET"}
    collected = _pytest(["--collect-only", "-k", "toy or memory"], env)
    ids = re.findall(r"\[(toy|memory)[\]-]", collected.stdout)
    assert ids.count("toy") == ids.count("memory") > 40, collected.stdout[-2000:] + collected.stderr[-2000:]
    ran = _pytest(["-k", "toy"], env)
    summary = ran.stdout.strip().splitlines()[-1]
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    # the toy is the memory provider's copy: a test needing a capability it lacks (window management, the
    # accessibility tree) must fail with usage.unsupported, a strict xfail (deskctl.testing.CAPABILITY_TESTS)
    from deskctl.providers.memory import MemoryProvider
    from deskctl.testing import CAPABILITY_TESTS

    lacking = sum(1 for flag in CAPABILITY_TESTS.values() if not getattr(MemoryProvider.capabilities, flag))
    assert re.search(rf"\b{ids.count('toy') - lacking} passed\b", summary), summary
    assert (f"{lacking} xfailed" in summary) == (lacking > 0), summary
    assert not re.search(r"failed|error|skipped|xpass", summary.replace("xfailed", "")), summary


def test_a_bad_target_name_is_config_invalid() -> None:
    for value in ("no_colon", "no_such_module_xyz:TARGET", "deskctl.testing:TARGET_ENV", "deskctl.testing:nope"):
        with pytest.raises(ConfigInvalid):
            load_targets(value)
    assert load_targets(None) == [] and load_targets(" ") == []
