"""The ``docker`` provider: an isolated desktop per container on a local Docker engine, driven at X11 speed.

How a desktop is made (all through the Docker Engine API with the ``docker`` SDK; no CLI output is parsed):

* the container is named after the session id and carries the deskctl labels; it runs the packaged desktop
  image (``deskctl image build``) as a non-root user, with ``network: none`` unless
  ``provider_options["network"]`` names one, and the memory/CPU limits of ``provider_options``;
* Xvfb in the container listens only on the unix socket ``/tmp/.X11-unix/X0``; that directory is a bind mount
  of ``<runtime_dir>/docker/<session>/x11`` on the host, and the server demands an MIT-MAGIC-COOKIE that the
  host wrote (``.../xauth/Xauthority``, mounted read-only). No TCP port is open anywhere;
* input and capture go through the shared X11 driver over that socket: one connection per desktop, no
  ``docker exec`` per action. :meth:`DockerProvider.exec` uses the Engine API exec, stdout and stderr apart
  (``env`` and ``user`` are its fields); ``upload``/``download`` stream tars through its archive endpoints.

On a remote engine (provider option ``host``, else ``DOCKER_HOST``, naming ``tcp://``): nothing is shared
through host directories. The container runs the in-desktop agent (``DESKCTL_SERVE_AGENT=1``, see
:mod:`deskctl.agent`) on a port the engine publishes on an ephemeral host port, and input and capture go through
:class:`deskctl.agent.client.AgentDriver`. Its session token (random, per session) and its display's cookie are
written into the created container with the archive endpoint before it starts: the token never travels in an
environment variable, a label or a log. This process keeps the token in a 0600 file of its runtime directory so
that another of its processes (``deskctl do`` after ``deskctl up``) reconnects; a machine without that file
reads it back from the container through the Engine API. ``exec`` and files use the Engine API as locally.
``ssh://`` engines are refused (``compat.docker_ssh``): the agent's port would have to be forwarded through
the SSH connection, which is not done yet.

Orphans: before a container is created, its name is registered with a watcher process (one per owner
process, testcontainers' Ryuk pattern) that holds the read end of a pipe whose write end only the owner has.
When the owner dies, even by SIGKILL, the kernel closes the pipe; the watcher then force-removes every
container still registered. A destroyed or detached (``deskctl up``) desktop is unregistered. ``deskctl reap``
finds the rest by label (:meth:`DockerProvider.list_owned`).

The package: :mod:`.provider` (the class: readiness, destroy, listing, drivers; the methods of its other parts
taken from them when first used), :mod:`.container` (create), :mod:`.preflight`, :mod:`.files` (exec and the
archive endpoints), :mod:`.engine` (engines, clients, errors, removal), :mod:`.engine_api` (the Engine API calls of
the hot paths, spoken over HTTP/1.1 by :mod:`.engine_http`), :mod:`.common` (labels, sizes, the typed handle data
:class:`~.common.DockerHandleData`), :mod:`.watcher`, :mod:`.framebuffer`, the image builder :mod:`.images` and
:mod:`.layers`, the script run in a task image as the data file ``guest/start-xvfb.sh``, and the options, typed, in
:mod:`.options` (docs/providers.md lists them).
"""

from deskctl.providers.docker.common import LABEL_AGENT, is_remote, parse_memory
from deskctl.providers.docker.provider import DockerProvider
from deskctl.providers.docker.watcher import _Watcher

TYPE_CHECKING = False
if TYPE_CHECKING:
    from deskctl.providers.docker.watch import _watch

__all__ = ["LABEL_AGENT", "DockerProvider", "_Watcher", "_watch", "is_remote", "parse_memory"]


def __getattr__(name: str) -> object:
    """``_watch``, the watcher process's entry, imported by that process only."""
    if name == "_watch":
        from deskctl.providers.docker.watch import _watch

        return _watch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
