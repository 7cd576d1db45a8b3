"""The check of a provider class in parts (providers/_later.py), shared by tests/unit/test_docker_parts.py and
test_xvfb_parts.py: the list names every method of the other parts once, none uses ``super()``, and the class holds
a stand-in for each (or, once looked up, the part's own)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence

from deskctl.providers._later import Later


def _own_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items()
            if callable(getattr(value, "__func__", value)) and not name.startswith("__")}


def check_parts(provider: type, later: Mapping[str, Sequence[str]], written_out: set[str]) -> None:
    """``later`` (``module:class`` to method names) names every method the parts define but ``written_out`` (the
    ones the provider class writes out itself: the base declares them abstract), each once."""
    named: list[str] = []
    for target, names in later.items():
        module, _, part = target.partition(":")
        cls = getattr(importlib.import_module(module), part)
        assert set(names) == _own_methods(cls) - written_out, target
        named += names
        for name in names:
            function = getattr(vars(cls)[name], "__func__", vars(cls)[name])
            assert "__class__" not in function.__code__.co_freevars, f"{target}.{name} uses super()"
            # on the class: the stand-in, or (once looked up) the part's own; not a method of the class's body
            on_class = vars(provider)[name]
            assert isinstance(on_class, Later) or on_class is vars(cls)[name], name
    assert len(named) == len(set(named))
    assert not set(named) & written_out
