"""The ``xvfb`` provider (a desktop on this host's own Xvfb): :class:`XvfbProvider` in :mod:`.provider`, its
options in :mod:`.options`, the host display's lock files, sockets and owner watcher in :mod:`.display`."""

from deskctl.providers.xvfb.provider import XvfbProvider

TYPE_CHECKING = False
if TYPE_CHECKING:
    from deskctl.providers._procs import SESSION_ENV
    from deskctl.providers._procs import tagged_processes as _tagged_processes
    from deskctl.providers.xvfb.display import file_id as _file_id
    from deskctl.providers.xvfb.display import listening as _listening
    from deskctl.providers.xvfb.display import lock_owner as _lock_owner

__all__ = ["SESSION_ENV", "XvfbProvider", "_file_id", "_listening", "_lock_owner", "_tagged_processes"]

#: the names this package re-exports from others, by module and name there: imported when first asked for (a
#: ``deskctl do`` or ``screenshot`` uses none of them)
_ELSEWHERE = {
    "SESSION_ENV": ("deskctl.providers._procs", "SESSION_ENV"),
    "_tagged_processes": ("deskctl.providers._procs", "tagged_processes"),
    "_file_id": ("deskctl.providers.xvfb.display", "file_id"),
    "_listening": ("deskctl.providers.xvfb.display", "listening"),
    "_lock_owner": ("deskctl.providers.xvfb.display", "lock_owner"),
}


def __getattr__(name: str) -> object:
    import sys

    if name not in _ELSEWHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, there = _ELSEWHERE[name]
    __import__(module)
    value = getattr(sys.modules[module], there)
    globals()[name] = value
    return value
