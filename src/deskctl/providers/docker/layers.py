"""Any image as a deskctl desktop: what an image holds (probed once per image id), the thin layer that adds what it
lacks (Xvfb, xauth, fonts, a locale, time zones) through the image's own package manager, and the memory of a
build that failed.

A *task image* (any image that is not a deskctl desktop image, such as ``ubuntu:24.04`` or a Harbor task's
Dockerfile built as it is) becomes a desktop without changing what the task sees: its ``WORKDIR``, ``USER``,
``ENTRYPOINT``, ``CMD`` and environment stay as they are. The docker provider starts Xvfb in the running
container (``docker exec``) on the display its options name. When the image has no Xvfb, or the options ask for
fonts, a locale or a time zone it does not have, a layer is built on top of it:

    FROM <the image>
    USER root
    RUN <apt-get | apk | dnf> install ...
    USER <the image's own user>

tagged ``deskctl-layer:<hash of the image id and the layer's text>`` and built once. An image that needs a layer
but has no package manager deskctl knows (Debian/Ubuntu ``apt-get``, Alpine ``apk``, Fedora ``dnf``) or no
``/bin/sh`` is refused (``usage.bad_image``) with the reason, before anything is built.

A failed build is remembered by the hash of its inputs, with its message, in deskctl's cache folder: the next
attempt fails at once with the same words instead of building again (``force`` builds again).

Only the Debian (apt) path runs in deskctl's tests; the apk and dnf layers are checked as text (docs/harbor.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl.errors import DeskctlError, ProviderApiError, UsageError

if TYPE_CHECKING:
    import docker

__all__ = [
    "LAYER_REPOSITORY",
    "DesktopExtras",
    "ImageFacts",
    "build_cached",
    "check_extras",
    "ensure_desktop_image",
    "layer_dockerfile",
    "probe_image",
]

LAYER_REPOSITORY = "deskctl-layer"
#: on a layer: the id of the image it extends, and the user that image runs as
LABEL_LAYER_OF = "deskctl.layer.of"
LABEL_LAYER_USER = "deskctl.layer.user"
#: on a layer: what it was built for (the extras and whether it added Xvfb), so that asking again adds nothing
LABEL_LAYER_FOR = "deskctl.layer.for"
LABEL_PROBE = "deskctl.probe"
_PROVIDER = "docker"

#: package names per package manager: Xvfb, xauth, what makes a locale, the time zone database
PACKAGES: dict[str, dict[str, tuple[str, ...]]] = {
    "apt": {"xvfb": ("xvfb",), "xauth": ("xauth",), "locale": ("locales",), "tz": ("tzdata",)},
    "apk": {"xvfb": ("xvfb",), "xauth": ("xauth",), "locale": ("musl-locales",), "tz": ("tzdata",)},
    "dnf": {"xvfb": ("xorg-x11-server-Xvfb",), "xauth": ("xorg-x11-xauth",), "locale": (), "tz": ("tzdata",)},
}
#: how the probe names each package manager's command
_MANAGER_COMMANDS = {"apt-get": "apt", "apk": "apk", "dnf": "dnf", "microdnf": "dnf"}

_LOCALE_RE = re.compile(r"^(C|POSIX|C\.UTF-8|C\.utf8|[a-z]{2,3}(_[A-Z]{2})?(\.[A-Za-z0-9-]+)?(@[a-z]+)?)$")
_TIMEZONE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9][A-Za-z0-9_+-]*){0,2}$")
_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+._-]{0,99}$")


@dataclass(frozen=True)
class DesktopExtras:
    """What the provider options ask the desktop to have besides a display: font packages, a locale (``LANG``),
    a time zone (``TZ``)."""

    fonts: tuple[str, ...] = ()
    locale: str | None = None
    timezone: str | None = None

    def environment(self) -> dict[str, str]:
        """The variables the container gets for them (the image's own environment is otherwise untouched)."""
        env: dict[str, str] = {}
        if self.locale:
            env["LANG"] = env["LC_ALL"] = self.locale
        if self.timezone:
            env["TZ"] = self.timezone
        return env

    def __bool__(self) -> bool:
        return bool(self.fonts or self.locale or self.timezone)


def check_extras(options: Mapping[str, Any], provider: str = _PROVIDER) -> DesktopExtras:
    """The ``fonts``, ``locale`` and ``timezone`` options, checked (``usage.bad_option``): fonts are package
    names (a list, or one string separated by commas or spaces)."""
    raw_fonts = options.get("fonts") or ()
    fonts = tuple(re.split(r"[,\s]+", raw_fonts.strip())) if isinstance(raw_fonts, str) else \
        tuple(str(f) for f in raw_fonts) if isinstance(raw_fonts, list | tuple) else None
    if fonts is None:
        raise UsageError(f"fonts {raw_fonts!r} is not a list of package names", code="usage.bad_option",
                         provider=provider, remedy="fonts=fonts-noto-cjk or fonts=[\"fonts-wqy-zenhei\", ...]")
    fonts = tuple(f for f in fonts if f)
    for name in fonts:
        if not _PACKAGE_RE.match(name):
            raise UsageError(f"fonts: {name!r} is not a package name", code="usage.bad_option", provider=provider,
                             remedy="name the packages of the image's distribution, such as fonts-noto-cjk")
    locale = options.get("locale")
    if locale is not None and not (isinstance(locale, str) and _LOCALE_RE.match(locale)):
        raise UsageError(f"locale {locale!r} is not a locale name such as zh_CN.UTF-8", code="usage.bad_option",
                         provider=provider)
    timezone = options.get("timezone")
    if timezone is not None and not (isinstance(timezone, str) and _TIMEZONE_RE.match(timezone)
                                     and ".." not in timezone):
        raise UsageError(f"timezone {timezone!r} is not a time zone name such as Asia/Shanghai",
                         code="usage.bad_option", provider=provider)
    return DesktopExtras(fonts=fonts, locale=locale or None, timezone=timezone or None)


# -- what an image holds -----------------------------------------------------------------------------------------

#: run in a throw-away container of the image (as root, no network): what the desktop needs from it
_PROBE_SCRIPT = r"""
for c in Xvfb xauth apt-get apk dnf microdnf localedef; do
  if command -v "$c" >/dev/null 2>&1; then echo "have=$c"; fi
done
if [ -r /etc/os-release ]; then . /etc/os-release; echo "os=${ID:-}"; fi
if [ -e /usr/share/zoneinfo/UTC ]; then echo "zoneinfo=1"; fi
if command -v locale >/dev/null 2>&1; then locale -a 2>/dev/null | sed 's/^/locale=/'; fi
echo "probe=done"
"""


@dataclass(frozen=True)
class ImageFacts:
    """What :func:`probe_image` found in an image."""

    image_id: str
    user: str  # the image's USER ("" is root)
    commands: tuple[str, ...] = ()
    os: str = ""
    zoneinfo: bool = False
    locales: tuple[str, ...] = field(default=())

    @property
    def xvfb(self) -> bool:
        return "Xvfb" in self.commands

    @property
    def package_manager(self) -> str | None:
        for command, manager in _MANAGER_COMMANDS.items():
            if command in self.commands:
                return manager
        return None

    def has_locale(self, name: str) -> bool:
        if name in ("C", "POSIX") or _norm_locale(name) in ("c.utf8",):
            return True
        return _norm_locale(name) in {_norm_locale(n) for n in self.locales}


def _norm_locale(name: str) -> str:
    """``zh_CN.UTF-8`` and ``zh_CN.utf8`` (what ``locale -a`` prints) as one name."""
    base, dot, charset = name.partition(".")
    return f"{base}.{charset.lower().replace('-', '')}".lower() if dot else base.lower()


def _cache_dir() -> Path:
    from deskctl.paths import home_dir

    path = home_dir() / "cache" / "docker"
    path.mkdir(parents=True, exist_ok=True)
    return path


def probe_image(client: docker.DockerClient, image: str, info: Mapping[str, Any] | None = None) -> ImageFacts:
    """What ``image`` holds: a throw-away container (no network; registered with the owner watcher, so that it
    goes even when this process is killed) runs a few ``command -v``; the answer is kept per image id, so an image
    is probed once. An image with no ``/bin/sh`` is ``usage.bad_image``."""
    from deskctl.providers.docker.images import docker_errors

    if info is None:
        with docker_errors(f"inspect the image {image}"):
            info = client.api.inspect_image(image)  # type: ignore[no-untyped-call]
    image_id = str(info["Id"])
    user = str((info.get("Config") or {}).get("User") or "")
    cached = _cache_dir() / f"probe-{image_id.replace(':', '-')}.json"
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        data = json.loads(cached.read_text())
        return ImageFacts(image_id=image_id, user=user, commands=tuple(data["commands"]), os=str(data["os"]),
                          zoneinfo=bool(data["zoneinfo"]), locales=tuple(data["locales"]))
    from deskctl.providers.docker import _Watcher

    name = f"deskctl-probe-{uuid.uuid4().hex[:12]}"
    api = client.api
    watcher = _Watcher.get()
    watcher.add(name)  # removed by the owner watcher even when this process is killed mid-probe
    try:
        output, status = _run_probe(api, image, name)
    finally:
        with contextlib.suppress(Exception):
            api.remove_container(name, force=True)
        watcher.forget(name)
    if "probe=done" not in output:
        code = status.get("StatusCode")
        raise UsageError(f"the image {image} cannot run a shell script (exit {code}): {output.strip()[-300:]}",
                         code="usage.bad_image", provider=_PROVIDER)
    commands, os_id, zoneinfo, locales = [], "", False, []
    for line in output.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "have":
            commands.append(value)
        elif key == "os":
            os_id = value
        elif key == "zoneinfo":
            zoneinfo = True
        elif key == "locale" and value:
            locales.append(value)
    facts = ImageFacts(image_id=image_id, user=user, commands=tuple(commands), os=os_id, zoneinfo=zoneinfo,
                       locales=tuple(locales))
    with contextlib.suppress(OSError):
        _write_json(cached, {"commands": commands, "os": os_id, "zoneinfo": zoneinfo, "locales": locales})
    return facts


def _run_probe(api: Any, image: str, name: str) -> tuple[str, dict[str, Any]]:
    """Create, run and wait for the probe container ``name``; its output and exit status."""
    from deskctl.providers.docker.images import docker_errors

    try:
        with docker_errors(f"look into the image {image}"):
            api.create_container(
                image, entrypoint=["/bin/sh", "-c", _PROBE_SCRIPT], command=[], user="0", name=name,
                labels={LABEL_PROBE: "1"}, network_disabled=True,
                host_config=api.create_host_config(network_mode="none", auto_remove=False),
            )
            api.start(name)
            status = api.wait(name, timeout=120)
            output = api.logs(name, stdout=True, stderr=True).decode(errors="replace")
    except ProviderApiError as exc:
        if "no such file" in exc.message.lower() or "not found" in exc.message.lower():
            raise UsageError(f"the image {image} has no /bin/sh: deskctl cannot start a desktop in it",
                             code="usage.bad_image", provider=_PROVIDER,
                             remedy="base the task on an image with a shell (Debian, Ubuntu, Alpine, Fedora)"
                             ) from exc
        raise
    return output, dict(status or {})


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# -- the layer ---------------------------------------------------------------------------------------------------


def _install_line(manager: str, packages: Sequence[str]) -> str:
    names = " ".join(packages)
    if manager == "apt":
        return ("export DEBIAN_FRONTEND=noninteractive; apt-get update; "
                f"apt-get install -y --no-install-recommends {names}; rm -rf /var/lib/apt/lists/*")
    if manager == "apk":
        return f"apk add --no-cache {names}"
    if manager == "dnf":
        return (f"if command -v dnf >/dev/null 2>&1; then dnf install -y --setopt=install_weak_deps=False {names}"
                f" && dnf clean all; else microdnf install -y {names} && microdnf clean all; fi")
    raise ValueError(manager)


def _locale_packages(manager: str, locale: str) -> list[str]:
    if manager == "dnf":  # Fedora ships each language's locales as glibc-langpack-<language>
        return [f"glibc-langpack-{locale.split('_')[0].split('.')[0]}"]
    return list(PACKAGES[manager]["locale"])


def layer_dockerfile(base: str, facts: ImageFacts, extras: DesktopExtras, *, manager: str | None = None) -> str | None:
    """The Dockerfile of the layer that makes ``base`` a desktop with ``extras``, for its package manager
    (``manager`` overrides the one probed: the apk and dnf texts are tested this way); None when the image
    already has all of it. Raises ``usage.bad_image`` when something is missing and no known package manager
    can add it."""
    manager = manager or facts.package_manager
    wanted: list[str] = []
    why: list[str] = []
    locale_step = ""
    if not facts.xvfb:
        why.append("no Xvfb")
    if extras.fonts:
        why.append("fonts " + " ".join(extras.fonts))
    if extras.locale and not facts.has_locale(extras.locale):
        why.append(f"the locale {extras.locale}")
    if extras.timezone and not facts.zoneinfo:
        why.append("time zones")
    if not why:
        return None
    if manager not in PACKAGES:
        raise UsageError(
            f"the image {base} needs {', '.join(why)} and has no package manager deskctl knows "
            "(apt-get, apk, dnf) to add them", code="usage.bad_image", provider=_PROVIDER,
            remedy="install Xvfb (and the fonts, locale or tzdata asked for) in the task's Dockerfile, or base it "
                   "on Debian, Ubuntu, Alpine or Fedora")
    packages = PACKAGES[manager]
    if not facts.xvfb:
        wanted += packages["xvfb"]
        if "xauth" not in facts.commands:
            wanted += packages["xauth"]
    wanted += extras.fonts
    if extras.locale and not facts.has_locale(extras.locale):
        wanted += _locale_packages(manager, extras.locale)
        if manager == "apt":  # Debian's locales package compiles a locale on request
            name, _, charset = extras.locale.partition(".")
            name = name.split("@")[0]
            locale_step = (f"; localedef -i {name} -c -f {charset or 'UTF-8'} -A /usr/share/locale/locale.alias "
                           f"{extras.locale}")
    if extras.timezone and not facts.zoneinfo:
        wanted += packages["tz"]
    wanted = list(dict.fromkeys(wanted))
    user = facts.user or "root"
    return (f"# a deskctl desktop layer over {base}: {', '.join(why)}\n"
            f"FROM {base}\n"
            "USER root\n"
            f"RUN set -eu; {_install_line(manager, wanted)}{locale_step}\n"
            f"USER {user}\n")


def _inputs_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


# -- builds, cached both ways ------------------------------------------------------------------------------------


def _failure_file(key: str) -> Path:
    return _cache_dir() / f"failed-{key}.json"


def build_cached(client: docker.DockerClient, tag: str, key: str, build: Callable[[], None], *, force: bool = False,
                 retry_hint: str) -> bool:
    """Make ``tag`` with ``build`` unless it exists; a failure is remembered under ``key`` (the hash of the
    build's inputs) and raised again, with its message, by the next call instead of building again, unless
    ``force``. Returns whether it built."""
    from deskctl.providers.docker.images import image_exists

    failed = _failure_file(key)
    if force:
        failed.unlink(missing_ok=True)
    elif image_exists(client, tag):
        return False
    else:
        remembered = _remembered_failure(failed, retry_hint)
        if remembered is not None:
            raise remembered
    try:
        build()
    except DeskctlError as exc:
        if exc.code.startswith(("usage.", "provider.")) and not exc.code.startswith("provider.unreachable"):
            with contextlib.suppress(OSError):
                _write_json(failed, {"code": exc.code, "message": exc.message, "remedy": exc.remedy or "",
                                     "at": time.time()})
        raise
    failed.unlink(missing_ok=True)
    return True


def _remembered_failure(failed: Path, retry_hint: str) -> DeskctlError | None:
    """The error a remembered failed build raised, said again (None when none is remembered)."""
    try:
        record = json.loads(failed.read_text())
        code, message, at = str(record["code"]), str(record["message"]), float(record["at"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))
    message += f" (this build failed at {when} and is not tried again with the same inputs)"
    remedy = "; ".join(r for r in (str(record.get("remedy") or ""), f"{retry_hint} (or remove {failed})") if r)
    if code.startswith("usage."):
        return UsageError(message, code=code, provider=_PROVIDER, remedy=remedy)
    return ProviderApiError(message, provider=_PROVIDER, remedy=remedy)


def run_build(client: docker.DockerClient, *, tag: str, what: str, network_mode: str | None, labels: Mapping[str, str],
              progress: Callable[[str], None] | None = None, context: str | None = None, dockerfile: str = "Dockerfile",
              fileobj: bytes | None = None, buildargs: Mapping[str, str] | None = None, platform: str | None = None,
              nocache: bool = False, remedy: str) -> None:
    """One build through the Engine API (``context``: a folder; ``fileobj``: a tar), its log lines to
    ``progress``; a failed step is ``ProviderApiError`` with the last lines of the log and ``remedy``."""
    from deskctl.providers.docker.images import docker_errors

    log: list[str] = []
    kwargs: dict[str, Any] = {"tag": tag, "labels": dict(labels), "rm": True, "forcerm": True, "pull": False,
                              "decode": True, "network_mode": network_mode, "nocache": nocache,
                              "buildargs": dict(buildargs or {})}
    if platform:
        kwargs["platform"] = platform
    if fileobj is not None:
        kwargs.update(fileobj=io.BytesIO(fileobj), custom_context=True)
    else:
        kwargs.update(path=context, dockerfile=dockerfile)
    with docker_errors(f"build {what}"):
        for chunk in client.api.build(**kwargs):
            if "error" in chunk:
                tail = "\n".join(log[-15:])
                hint = remedy
                if "Temporary failure resolving" in tail or "Could not resolve" in tail:
                    hint = "the build could not reach the package mirror: retry with build_network=host"
                raise ProviderApiError(f"building {what} failed: {str(chunk['error']).strip()}\n{tail}",
                                       provider=_PROVIDER, remedy=hint)
            line = str(chunk.get("stream") or "").rstrip()
            if line:
                log.append(line)
                if progress:
                    progress(line)


def _layer_tar(text: str) -> bytes:
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass(frozen=True)
class DesktopImage:
    """The image a task-image desktop runs (the task's own, or a layer over it) and what it was made from."""

    image: str
    facts: ImageFacts
    layer: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ensure_desktop_image(client: docker.DockerClient, image: str, extras: DesktopExtras, *,
                         network_mode: str | None = None, force: bool = False,
                         progress: Callable[[str], None] | None = None) -> DesktopImage:
    """The image that runs ``image`` as a desktop with ``extras``: ``image`` itself when it has what is needed,
    else its layer (built once, see :func:`layer_dockerfile`)."""
    from deskctl.providers.docker.images import docker_errors, installation

    with docker_errors(f"inspect the image {image}"):
        info = client.api.inspect_image(image)  # type: ignore[no-untyped-call]
    labels_there = (info.get("Config") or {}).get("Labels") or {}
    wanted = json.dumps(asdict(extras), sort_keys=True)
    facts = probe_image(client, image, info)
    if labels_there.get(LABEL_LAYER_FOR) == wanted and facts.xvfb:
        return DesktopImage(image=image, facts=facts, layer=True)  # already this layer
    text = layer_dockerfile(image, facts, extras)
    if text is None:
        return DesktopImage(image=image, facts=facts, layer=False)
    key = _inputs_hash("layer", facts.image_id, text)
    tag = f"{LAYER_REPOSITORY}:{key}"
    labels = {LABEL_LAYER_OF: facts.image_id, LABEL_LAYER_USER: facts.user, LABEL_LAYER_FOR: wanted,
              "deskctl.image.source": installation()}

    def build() -> None:
        if progress:
            progress(f"deskctl: adding a desktop layer to {image} ({text.splitlines()[0].split(': ', 1)[-1]})")
        run_build(client, tag=tag, what=f"the desktop layer over {image}", network_mode=network_mode, labels=labels,
                  progress=progress, fileobj=_layer_tar(text), nocache=force,
                  remedy="the package names (fonts option) must exist in the image's distribution; read the log "
                         "above")

    build_cached(client, tag, key, build, force=force,
                 retry_hint="fix the options or the image, or build again with force (harbor run --force-build)")
    return DesktopImage(image=tag, facts=facts, layer=True)
