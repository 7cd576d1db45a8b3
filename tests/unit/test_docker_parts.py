"""The docker provider's class takes the methods of its other parts (preflight.py, container.py, files.py) when they
are first looked up (provider.py's ``_LATER``, providers/_later.py): the list must name every one of them, and each
must work bound to a DockerProvider (no ``super()``, whose check of the instance's class would fail)."""

from __future__ import annotations

import json
import subprocess
import sys

from deskctl.providers.docker.provider import _LATER, DockerProvider
from unit._parts import check_parts

_PARTS = ["deskctl.providers.docker.preflight", "deskctl.providers.docker.container",
          "deskctl.providers.docker.files", "deskctl.providers.docker.devtools",
          "deskctl.providers._framebuffer", "deskctl.providers.docker.watch"]


def test_the_list_names_every_method_of_the_other_parts_once() -> None:
    # create is written out on the class (the base declares it abstract)
    check_parts(DockerProvider, _LATER, {"create"})


def test_the_methods_are_the_parts_own_once_looked_up() -> None:
    from deskctl.providers.docker.container import _DockerCreate
    from deskctl.providers.docker.files import _DockerFiles
    from deskctl.providers.docker.preflight import _DockerPreflight

    provider = DockerProvider({"reaper": False})
    assert provider.upload.__func__ is _DockerFiles.upload  # type: ignore[attr-defined]
    assert DockerProvider._needed_memory is _DockerPreflight.__dict__["_needed_memory"].__func__
    assert provider._agent_host.__func__ is _DockerCreate._agent_host  # type: ignore[attr-defined]
    assert DockerProvider.exec_streams_output is True
    provider.close()


def test_importing_the_provider_imports_none_of_the_other_parts() -> None:
    """A fresh process: the class is whole (instantiable: create is not abstract) without those modules."""
    code = ("import json, sys\nfrom deskctl.providers.docker import DockerProvider\n"
            "DockerProvider({'reaper': False}).close()\n"
            f"print(json.dumps(sorted(set({_PARTS!r}) & set(sys.modules))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
