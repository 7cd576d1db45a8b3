"""The layering of deskctl's modules, read from the source (ast, as tests/unit/test_import_graph.py does):

* the layer the in-desktop agent shares with the providers (:mod:`deskctl.core`) and the agent itself import
  nothing of :mod:`deskctl.providers`, not even inside a function, so the agent's image is built from that layer
  alone and an edit of a provider or of the registry does not change the image;
* the image's build context (``AGENT_FILES``) holds every deskctl module the agent imports;
* the registry imports nothing above :mod:`deskctl.errors` when it is imported.
"""

from __future__ import annotations

from unit.test_import_graph import _imports, _modules


def _closure(start: str, modules: dict[str, object]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += sorted(_imports(name, modules[name], modules, everywhere=True))  # type: ignore[arg-type]
    return seen


def test_the_agent_and_its_layer_import_no_provider_module() -> None:
    modules = _modules()
    for name in sorted(modules):
        if name.startswith(("deskctl.core", "deskctl.agent")):
            reached = {m for m in _imports(name, modules[name], modules, everywhere=True)
                       if m.startswith("deskctl.providers")}
            assert reached == set(), f"{name} imports {sorted(reached)}"


def test_the_agent_image_holds_every_module_the_agent_imports() -> None:
    from deskctl.providers.docker.images import AGENT_FILES

    modules = _modules()
    needed = _closure("deskctl.agent.server", modules) | _closure("deskctl.agent.__main__", modules)
    shipped = {f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in AGENT_FILES}
    assert needed - shipped == set()
    assert not any(name.startswith("deskctl.providers") for name in shipped)


def test_the_registry_imports_nothing_above_the_errors() -> None:
    modules = _modules()
    assert _imports("deskctl.providers", modules["deskctl.providers"], modules) <= {"deskctl.errors",
                                                                                    "deskctl._redact"}
