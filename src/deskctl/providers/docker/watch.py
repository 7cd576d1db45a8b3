"""The body of the docker provider's watcher process (:class:`~deskctl.providers.docker.watcher._Watcher`
starts it as ``python -c "from deskctl.providers.docker import _watch; _watch()"``): it removes the containers
its owner registered once the owner's pipe closes. Above the provider, which it uses to remove them."""

from __future__ import annotations

import contextlib
import sys

from deskctl.errors import DeskctlError
from deskctl.providers.docker.provider import DockerProvider

__all__ = ["_watch"]


def _watch() -> None:
    """Body of the watcher process: keep the set of registered names until stdin closes, then remove them."""
    import signal

    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    names: dict[str, str] = {}  # name -> the engine it runs on ("": the environment's)
    for raw in sys.stdin:
        line = raw.strip()
        if line.startswith("+"):
            name, _, engine = line[1:].partition("\t")
            names[name] = engine
        elif line.startswith("-"):
            names.pop(line[1:], None)
    if not names:
        return
    provider = DockerProvider()
    try:
        for name, engine in names.items():
            with contextlib.suppress(DeskctlError):
                provider._remove_by_name(name, engine)
    finally:
        provider.close()
