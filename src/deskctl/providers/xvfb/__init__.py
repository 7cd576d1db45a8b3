"""The ``xvfb`` provider (a desktop on this host's own Xvfb): :class:`XvfbProvider` in :mod:`.provider`, its
options in :mod:`.options`, the host display's lock files, sockets and owner watcher in :mod:`.display`."""

from deskctl.providers._procs import SESSION_ENV
from deskctl.providers._procs import tagged_processes as _tagged_processes
from deskctl.providers.xvfb.display import file_id as _file_id
from deskctl.providers.xvfb.display import listening as _listening
from deskctl.providers.xvfb.display import lock_owner as _lock_owner
from deskctl.providers.xvfb.provider import XvfbProvider

__all__ = ["SESSION_ENV", "XvfbProvider", "_file_id", "_listening", "_lock_owner", "_tagged_processes"]
