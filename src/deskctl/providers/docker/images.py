"""Desktop container images: build them from the Dockerfile shipped in the package, find and list them.

An image is tagged ``deskctl-desktop:<variant>-<hash>`` where the hash covers every input of the build: the
packaged files (``deskctl/data/docker/``, and the deskctl modules of the in-desktop agent, :data:`AGENT_FILES`,
copied into the build context under ``agent/``: nothing else of deskctl, so an unrelated edit rebuilds nothing),
the variant and the base image (its name and, when it is present
locally, its id). Building what already exists does nothing, so a second ``deskctl image build`` takes well
under a second. Each image also carries labels so that the ``docker`` provider finds the newest image built
from *this* version of the packaged files, whatever base it was built on (``--base`` lets a machine with no
registry use a base it made itself, for example a ``debootstrap`` tree brought in with ``docker import``).

Everything here talks to the Docker Engine API through the ``docker`` SDK, imported only when used; every
``docker`` exception is translated into a :mod:`deskctl.errors` class.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl.errors import (
    DeskctlError,
    InfrastructureError,
    NotFound,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    UsageError,
)

if TYPE_CHECKING:
    import docker

__all__ = [
    "AGENT_FILES",
    "DEFAULT_BASE",
    "REPOSITORY",
    "VARIANTS",
    "BuildResult",
    "ImageInfo",
    "build_image",
    "connect",
    "daemon_remedy",
    "docker_errors",
    "files_hash",
    "find_image",
    "image_exists",
    "image_tag",
    "list_images",
    "prune_images",
]

#: the base image used when ``--base`` is not given (needs a registry the daemon can pull from)
DEFAULT_BASE = "debian:bookworm-slim"
REPOSITORY = "deskctl-desktop"
VARIANTS = ("minimal", "browser")

LABEL_FILES = "deskctl.image.files"
LABEL_VARIANT = "deskctl.image.variant"
LABEL_BASE = "deskctl.image.base"
LABEL_INPUTS = "deskctl.image.inputs"
#: the deskctl installation (its package folder) that built the image: a prune removes only its own
#: installation's superseded builds, so two checkouts sharing one engine keep each other's images
LABEL_SOURCE = "deskctl.image.source"

_PROVIDER = "docker"

#: the deskctl modules ``deskctl-agent`` imports (deskctl.agent.server and what it needs, nothing more), copied
#: into the image at /opt/deskctl-agent; tests/agent pins that the server imports no other deskctl module
AGENT_FILES = (
    "deskctl/__init__.py",
    "deskctl/_fds.py",
    "deskctl/_fsreplace.py",
    "deskctl/_record.py",
    "deskctl/_redact.py",
    "deskctl/_strenum.py",
    "deskctl/actions.py",
    "deskctl/errors.py",
    "deskctl/limits.py",
    "deskctl/platforms.py",
    "deskctl/core/__init__.py",
    "deskctl/core/frames.py",
    "deskctl/core/png.py",
    "deskctl/core/shell.py",
    "deskctl/core/x11.py",
    "deskctl/core/x11auth.py",
    "deskctl/core/x11connect.py",
    "deskctl/core/x11keyboard.py",
    "deskctl/core/x11keys.py",
    "deskctl/core/x11shm.py",
    "deskctl/core/x11wire.py",
    "deskctl/agent/__init__.py",
    "deskctl/agent/__main__.py",
    "deskctl/agent/protocol.py",
    "deskctl/agent/server.py",
)


def daemon_remedy(engine: str | None = None) -> str:
    """The command that makes a Docker daemon answer, for errors and preflight."""
    if engine:
        return f"nothing answers at {engine}: start the Docker daemon there, or name another engine"
    host = os.environ.get("DOCKER_HOST")
    if host:
        return f"nothing answers at DOCKER_HOST={host}: start the daemon there, or unset DOCKER_HOST"
    return ("start the Docker daemon: `sudo systemctl start docker`, or without systemd "
            "`sudo sh -c 'dockerd >/var/log/dockerd.log 2>&1 &'`")


#: how to be let in by an engine that demands TLS client certificates (the Docker CLI's variables)
TLS_REMEDY = ("set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH to the folder of the engine's ca.pem and your client's "
              "cert.pem and key.pem, as for the docker CLI")


_SSH_TRANSPORT = "docker.transport.sshconn"
_sdk_lock = threading.Lock()


def _real_ssh_transport() -> Any:
    import importlib
    import sys

    with _sdk_lock:
        if isinstance(sys.modules.get(_SSH_TRANSPORT), _DeferredSshTransport):
            del sys.modules[_SSH_TRANSPORT]
        return importlib.import_module(_SSH_TRANSPORT)


def _ssh_adapter(*args: Any, **kwargs: Any) -> Any:
    """Stands in for ``SSHHTTPAdapter`` in the SDK: builds the real one (an ``ssh://`` engine's client)."""
    return _real_ssh_transport().SSHHTTPAdapter(*args, **kwargs)


class _DeferredSshTransport(types.ModuleType):
    """The SDK's SSH transport module until something uses it: importing it imports paramiko and invoke, about
    half of ``import docker`` (a whole ``deskctl down`` pays it, on engines that are never ssh://)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "SSHHTTPAdapter":
            return _ssh_adapter
        return getattr(_real_ssh_transport(), name)


def import_docker() -> Any:
    """The ``docker`` SDK, imported with its SSH transport deferred (see :class:`_DeferredSshTransport`)."""
    import sys

    with _sdk_lock:
        if "docker" not in sys.modules and _SSH_TRANSPORT not in sys.modules:
            sys.modules[_SSH_TRANSPORT] = _DeferredSshTransport(_SSH_TRANSPORT)
    import docker

    return docker


@contextlib.contextmanager
def docker_errors(doing: str, *, provider: str = _PROVIDER, engine: str | None = None) -> Iterator[None]:
    """Translate every exception of the ``docker`` SDK (and the transport under it) raised while ``doing``
    (on ``engine``, a Docker host URL, when it is not the one of the environment)."""
    import_docker()
    import docker.errors
    import requests.exceptions

    try:
        yield
    except DeskctlError:
        raise
    except docker.errors.ImageNotFound as exc:
        raise PreflightError(f"cannot {doing}: image not found ({_explain(exc)})", code="preflight.image_missing",
                             provider=provider, remedy="deskctl image build") from exc
    except docker.errors.NotFound as exc:
        raise NotFound(f"cannot {doing}: {_explain(exc)}", provider=provider) from exc
    except docker.errors.APIError as exc:
        status = exc.status_code
        raise ProviderApiError(f"cannot {doing}: Docker said {status}: {_explain(exc)}", status=status,
                               provider=provider) from exc
    except requests.exceptions.SSLError as exc:
        raise ProviderUnreachable(
            f"cannot {doing}: the TLS handshake with the Docker engine failed ({_tls_reason(exc)})",
            provider=provider, remedy=TLS_REMEDY) from exc
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as exc:
        raise ProviderUnreachable(f"cannot {doing}: the Docker daemon does not answer", provider=provider,
                                  remedy=daemon_remedy(engine)) from exc
    except requests.exceptions.Timeout as exc:
        raise ProviderUnreachable(f"cannot {doing}: the Docker daemon did not answer in time", provider=provider,
                                  remedy=daemon_remedy(engine)) from exc
    except PermissionError as exc:
        raise ProviderUnreachable(f"cannot {doing}: permission denied on the Docker socket", provider=provider,
                                  remedy="add your user to the docker group (`sudo usermod -aG docker $USER`, "
                                         "then log in again), or run as root") from exc
    except docker.errors.DockerException as exc:
        text = str(exc)
        if "HTTP request to an HTTPS server" in text or isinstance(exc, docker.errors.TLSParameterError) \
                or "SSLError" in text:
            what = "demands TLS" if "HTTPS server" in text else "was not reached over TLS"
            raise ProviderUnreachable(f"cannot {doing}: the Docker engine {what} ({_tls_reason(exc)})",
                                      provider=provider, remedy=TLS_REMEDY) from exc
        if "Permission denied" in text:
            raise ProviderUnreachable(f"cannot {doing}: permission denied on the Docker socket", provider=provider,
                                      remedy="add your user to the docker group (`sudo usermod -aG docker $USER`, "
                                             "then log in again), or run as root") from exc
        raise ProviderUnreachable(f"cannot {doing}: the Docker daemon does not answer", provider=provider,
                                  remedy=daemon_remedy(engine)) from exc
    except OSError as exc:
        raise ProviderUnreachable(f"cannot {doing}: {exc.strerror or exc}", provider=provider,
                                  remedy=daemon_remedy(engine)) from exc


def _tls_reason(exc: Exception) -> str:
    """The last line of a TLS failure, without the SDK's wrapping (no secret is in it: paths and reasons)."""
    text = str(exc)
    for marker in ("HTTP request to an HTTPS server", "CERTIFICATE_VERIFY_FAILED", "certificate required",
                   "bad certificate", "unknown ca", "No such file or directory", "client_cert"):
        if marker.lower() in text.lower():
            return {"HTTP request to an HTTPS server": "it speaks HTTPS; this client spoke plain HTTP",
                    "CERTIFICATE_VERIFY_FAILED": "its certificate is not signed by the CA this client trusts",
                    "certificate required": "it wants a client certificate; none was sent",
                    "bad certificate": "it refused this client's certificate",
                    "unknown ca": "it does not know the CA of this client's certificate",
                    "No such file or directory": "a certificate file of DOCKER_CERT_PATH is missing",
                    "client_cert": "DOCKER_CERT_PATH holds no cert.pem/key.pem pair"}[marker]
    return text.splitlines()[-1][:200] if text else type(exc).__name__


def _explain(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    text = explanation.decode() if isinstance(explanation, bytes) else str(explanation or exc)
    return text.strip()


def connect(timeout: float = 60.0, engine: str | None = None,
            environment: Mapping[str, str] | None = None) -> docker.DockerClient:
    """A client for the daemon at ``engine`` (a Docker host URL: ``unix://``, ``tcp://``, ``ssh://``; the TLS
    settings of the environment apply: ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``, as for the Docker CLI), else the
    one named by ``DOCKER_HOST``, else the local socket; ``environment`` instead of ``os.environ``; raises
    :class:`~deskctl.errors.ProviderUnreachable` with the command that starts the daemon when none answers."""
    try:
        import_docker()
        import docker
    except ImportError as exc:
        raise UsageError("the docker provider needs the docker package", code="usage.provider_unavailable",
                         provider=_PROVIDER, remedy="reinstall deskctl (docker is one of its dependencies)") from exc
    with docker_errors("reach the Docker daemon", engine=engine):
        from docker.utils import kwargs_from_env

        kwargs = kwargs_from_env(environment=dict(os.environ if environment is None else environment))
        if engine:
            kwargs["base_url"] = engine
        # DockerClient(**kwargs) is this, with the API client that keeps the engine's CA (_engine_api_client)
        client = docker.DockerClient.__new__(docker.DockerClient)
        client.api = _engine_api_client()(timeout=int(max(1, timeout)), **kwargs)
        return client


def _engine_api_client() -> type[docker.APIClient]:
    """The SDK's API client, except that an engine's CA (``DOCKER_CERT_PATH/ca.pem`` under ``DOCKER_TLS_VERIFY``)
    is the one its certificate is checked against, as the Docker CLI does: requests would otherwise take
    ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` (the system's public CAs, where they are set) for every request and
    refuse the engine's own certificate."""
    import docker

    class EngineAPIClient(docker.APIClient):  # type: ignore[misc]
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any,
                                       cert: Any) -> Any:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return EngineAPIClient


# -- hashing the inputs ----------------------------------------------------------------------------------------


def context_dir() -> Path:
    """The build context shipped in the package (Dockerfile and entrypoint)."""
    return Path(str(resources.files("deskctl") / "data" / "docker"))


def context_files() -> list[tuple[str, Path]]:
    """Every file of the build context as (name in the context, file): the packaged Dockerfile and entrypoint,
    and the agent's modules under ``agent/``."""
    root = context_dir()
    files = [(p.relative_to(root).as_posix(), p)
             for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    package = Path(str(resources.files("deskctl"))).parent
    files.extend((f"agent/{name}", package / name) for name in AGENT_FILES)
    return files


def files_hash() -> str:
    """sha256 (hex, 16 chars) over the name and content of every file of the build context."""
    digest = hashlib.sha256()
    for name, path in context_files():
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def context_tar() -> bytes:
    """The build context as an uncompressed tar (what the Engine API's build takes)."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, path in context_files():
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o755 if name.endswith(".sh") else 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise UsageError(f"unknown image variant {variant!r}; allowed: {', '.join(VARIANTS)}",
                         code="usage.bad_variant")
    return variant


def _base_id(client: docker.DockerClient, base: str) -> str | None:
    try:
        with docker_errors(f"inspect the base image {base}"):
            return str(client.api.inspect_image(base)["Id"])  # type: ignore[no-untyped-call]
    except (NotFound, PreflightError):
        return None


def image_tag(variant: str, base: str, base_id: str | None) -> str:
    """``deskctl-desktop:<variant>-<hash of files, variant, base name and base id>``."""
    digest = hashlib.sha256(f"{files_hash()}\0{variant}\0{base}\0{base_id or ''}".encode()).hexdigest()[:12]
    return f"{REPOSITORY}:{_check_variant(variant)}-{digest}"


# -- listing ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageInfo:
    """One desktop image: ``current`` is True when it was built from this version of the packaged files."""

    tag: str
    id: str
    variant: str
    base: str
    created: str
    size_mb: float
    current: bool
    source: str = ""  # the installation that built it ("" for builds older than the label)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_images(client: docker.DockerClient | None = None) -> list[ImageInfo]:
    """Every deskctl desktop image the daemon has, newest first."""
    client = client or connect()
    current = files_hash()
    found: list[ImageInfo] = []
    with docker_errors("list desktop images"):
        raw = client.api.images(filters={"label": LABEL_VARIANT})
    for item in raw:
        labels = item.get("Labels") or {}
        tags = [t for t in (item.get("RepoTags") or []) if t.startswith(REPOSITORY + ":") and "-" in t.split(":")[-1]]
        found.append(ImageInfo(
            tag=tags[0] if tags else "<none>",
            id=str(item["Id"]),
            variant=labels.get(LABEL_VARIANT, "?"),
            base=labels.get(LABEL_BASE, "?"),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(item.get("Created") or 0))),
            size_mb=round(int(item.get("Size") or 0) / 1e6, 1),
            current=labels.get(LABEL_FILES) == current,
            source=labels.get(LABEL_SOURCE, ""),
        ))
    found.sort(key=lambda i: i.created, reverse=True)
    return found


def find_image(variant: str, client: docker.DockerClient | None = None) -> str | None:
    """The tag of the newest image of ``variant`` built from this version of the packaged files, or None."""
    _check_variant(variant)
    for info in list_images(client):
        if info.current and info.variant == variant and info.tag != "<none>":
            return info.tag
    return None


# -- building --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    tag: str
    variant: str
    base: str
    built: bool  # False: it already existed, nothing was done
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_image(
    variant: str = "minimal",
    base: str | None = None,
    *,
    client: docker.DockerClient | None = None,
    network_mode: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> BuildResult:
    """Build the desktop image of ``variant`` on ``base`` unless an image with the same input hash exists.

    The base is pulled when it is not present locally (a machine with no registry passes ``base`` it made
    itself). ``network_mode`` is the network of the build's ``RUN`` steps (``host`` when the default bridge
    cannot reach the package mirror). ``progress`` receives each line of the build log.
    """
    started = time.monotonic()
    _check_variant(variant)
    base = base or DEFAULT_BASE
    client = client or connect(timeout=600)
    base_id = _base_id(client, base)
    if base_id is None:
        if progress:
            progress(f"pulling the base image {base}")
        try:
            with docker_errors(f"pull the base image {base}"):
                client.images.pull(base)
        except InfrastructureError as exc:
            raise PreflightError(
                f"the base image {base} is not here and cannot be pulled: {exc.message}",
                code="preflight.image_missing", provider=_PROVIDER,
                remedy="make a local base without a registry (see docs/docker.md, 'Offline base'), then "
                       "`deskctl image build --base deskctl-base:bookworm`",
            ) from exc
        base_id = _base_id(client, base)
    tag = image_tag(variant, base, base_id)
    if not force and image_exists(client, tag):
        _tag_floating(client, tag, variant)
        return BuildResult(tag, variant, base, built=False, seconds=time.monotonic() - started)
    labels = {LABEL_FILES: files_hash(), LABEL_VARIANT: variant, LABEL_BASE: base,
              LABEL_INPUTS: tag.rsplit("-", 1)[-1], LABEL_SOURCE: installation()}
    log: list[str] = []
    with docker_errors(f"build {tag}"):
        import io

        stream = client.api.build(
            fileobj=io.BytesIO(context_tar()), custom_context=True, tag=tag,
            buildargs={"BASE": base, "VARIANT": variant}, labels=labels,
            rm=True, forcerm=True, pull=False, decode=True, network_mode=network_mode,
        )
        for chunk in stream:
            if "error" in chunk:
                tail = "\n".join(log[-15:])
                hint = ("the build could not reach the package mirror: retry with `--network host`"
                        if "Temporary failure resolving" in tail or "Could not resolve" in tail
                        else "read the build log above")
                raise ProviderApiError(f"building {tag} failed: {str(chunk['error']).strip()}\n{tail}",
                                       provider=_PROVIDER, remedy=hint)
            line = str(chunk.get("stream") or chunk.get("status") or "").rstrip()
            if line:
                log.append(line)
                if progress:
                    progress(line)
    _tag_floating(client, tag, variant)
    return BuildResult(tag, variant, base, built=True, seconds=time.monotonic() - started)


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """Whether the engine has the image ``tag``."""
    try:
        with docker_errors(f"inspect {tag}"):
            client.api.inspect_image(tag)  # type: ignore[no-untyped-call]
    except (NotFound, PreflightError):
        return False
    return True


def _tag_floating(client: docker.DockerClient, tag: str, variant: str) -> None:
    """Point ``deskctl-desktop:<variant>`` at the newest build, for people who type image names."""
    with docker_errors(f"tag {tag}"):
        client.api.tag(tag, REPOSITORY, variant)


def installation() -> str:
    """The folder of the deskctl package that runs: what :data:`LABEL_SOURCE` records."""
    return str(Path(__file__).resolve().parent)


def prune_images(client: docker.DockerClient | None = None, *, dry_run: bool = False,
                 every_installation: bool = False) -> list[str]:
    """Remove the desktop images not built from this version of the packaged files (superseded builds) by
    this installation of deskctl (or by a deskctl older than :data:`LABEL_SOURCE`); another installation's
    images are kept unless ``every_installation``, and an image a container still uses is always kept.
    Returns the tags removed (with ``dry_run``: the tags that would be, nothing removed; an image in use is
    left out of both)."""
    client = client or connect()
    removed: list[str] = []
    in_use = _images_in_use(client) if dry_run else set()
    here = installation()
    for info in list_images(client):
        if info.current or (info.source and info.source != here and not every_installation):
            continue
        if dry_run:
            if info.id not in in_use:
                removed.append(info.tag)
            continue
        try:
            with docker_errors(f"remove {info.tag}"):
                client.api.remove_image(info.id, force=False)
        except ProviderApiError as exc:
            if exc.status == 409:  # in use by a container
                continue
            raise
        except NotFound:
            continue
        removed.append(info.tag)
    return removed


def _images_in_use(client: docker.DockerClient) -> set[str]:
    """Ids of the images a container (running or stopped) was made from: those a prune keeps."""
    with docker_errors("list containers"):
        return {str(c.get("ImageID")) for c in client.api.containers(all=True) if c.get("ImageID")}
