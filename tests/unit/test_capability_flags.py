"""What a provider cannot do is a capability flag the conformance suite reads (``deskctl.testing``), not a list of
expected failures per target; and the parts that ask about providers go through the registry."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from deskctl.providers import PROVIDERS, provider_class
from deskctl.providers.base import Capabilities
from deskctl.providers.memory import MemoryProvider
from deskctl.testing import CAPABILITY_TESTS, unsupported_by

SUITE = Path(__file__).resolve().parents[1] / "conformance"


class HoldlessProvider(MemoryProvider):
    """The memory desktop, declaring that it cannot hold a key or a button."""

    name = "holdless"
    capabilities = replace(MemoryProvider.capabilities, hold_input=False)


def test_each_capability_test_names_a_flag_and_a_test_of_the_suite() -> None:
    names = {node.name for path in SUITE.glob("test_*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef)}
    for test, flag in CAPABILITY_TESTS.items():
        assert test in names, test
        assert isinstance(getattr(Capabilities(platforms=frozenset()), flag), bool), flag
        assert flag in Capabilities(platforms=frozenset()).to_dict()


def test_a_provider_without_a_flag_is_expected_to_refuse_the_tests_that_need_it(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    monkeypatch.setitem(PROVIDERS, "holdless", (f"{__name__}:HoldlessProvider", "part of the tests"))
    assert unsupported_by("memory", "test_key_down_holds_a_modifier_until_key_up") is None
    why = unsupported_by("holdless", "test_key_down_holds_a_modifier_until_key_up")
    assert why is not None and "hold_input=False" in why
    assert unsupported_by("holdless", "test_move_and_mouse_down_up") is not None
    assert unsupported_by("holdless", "test_exec_as_another_user") is None  # it can do that
    assert unsupported_by("holdless", "test_screenshot_shows_what_is_on_screen") is None  # no flag: must pass


def test_provider_class_is_none_for_what_cannot_load() -> None:
    assert provider_class("memory") is MemoryProvider
    assert provider_class("no-such-provider") is None


def test_a_built_in_class_reads_its_aliases_from_the_registry() -> None:
    """One alias table: a built-in provider's class need not repeat the registry's ALIASES."""

    class Kube(MemoryProvider):
        name = "kubernetes"

    class Declared(MemoryProvider):
        name = "kubernetes"
        aliases = ("kube",)

    class Outside(MemoryProvider):
        name = "acme"

    assert (Kube.aliases, Declared.aliases, Outside.aliases) == (("k8s",), ("kube",), ())
