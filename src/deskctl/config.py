"""Configuration files for the CLI, in a documented precedence:

    command-line flags > environment variables > project ``deskctl.toml`` > user config > built-in defaults

The project file is the first ``deskctl.toml`` found in the current directory or its parents; the user file is
``$XDG_CONFIG_HOME/deskctl/config.toml`` (``~/.config/deskctl/config.toml``), or ``$DESKCTL_CONFIG`` when set.
Both are read when a command runs, never at import time. Format::

    [defaults]            # defaults of any command's options, by option name
    provider = "docker"
    geometry = "1280x800"
    ttl = "2h"

    [providers.ssh]       # provider options (what `deskctl up -o KEY=VALUE` sets)
    host = "me@lab-box"
    key_file = "~/.ssh/id_ed25519"

Secrets do not belong here: they come from the environment or the OS keyring (`deskctl login`).
"""

from __future__ import annotations

import os

from deskctl.errors import ConfigInvalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["Config", "load_config", "project_file", "user_file"]

_KNOWN_TABLES = {"defaults", "providers"}


class Config:
    """The merged configuration: ``defaults`` (option name -> value) and ``providers`` (name -> options).

    ``defaults_source`` and :meth:`provider_source` name the file a value came from, for error messages. Keys
    of ``[defaults]`` are checked against the commands' options by the CLI (:func:`deskctl.cli._spec.defaults_map`),
    option names of ``[providers.NAME]`` against the provider's ``option_names`` when the provider is used."""

    def __init__(self, defaults: dict[str, Any], providers: dict[str, dict[str, Any]], sources: list[Path],
                 *, defaults_source: dict[str, str] | None = None,
                 providers_source: dict[str, str] | None = None) -> None:
        self.defaults = defaults
        self.providers = providers
        self.sources = sources
        self.defaults_source: dict[str, str] = dict(defaults_source or {})
        self._providers_source: dict[str, str] = dict(providers_source or {})

    def provider_options(self, name: str) -> dict[str, Any]:
        return dict(self.providers.get(name, {}))

    def provider_source(self, name: str) -> str:
        return f"{self._providers_source.get(name, 'configuration')} [providers.{name}]"


def user_file() -> Path:
    from pathlib import Path

    return Path(_user_file())


def project_file(start: Path | None = None) -> Path | None:
    from pathlib import Path

    found = _project_file(None if start is None else str(start))
    return None if found is None else Path(found)


# The paths as strings (os.path): a CLI call reads its configuration on every command, and most have none, so
# pathlib (with urllib.parse and ipaddress, about 9% of a ``deskctl do`` process) is imported only for a file
# that exists.
def _user_file() -> str:
    explicit = os.environ.get("DESKCTL_CONFIG")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "deskctl", "config.toml")


def _project_file(start: str | None = None) -> str | None:
    folder = os.path.realpath(os.getcwd() if start is None else start)
    while True:
        candidate = os.path.join(folder, "deskctl.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _read(path: Path) -> dict[str, Any]:
    import tomllib  # here: most runs have no config file, and every CLI call would pay for the parser

    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalid(f"{path}: not valid TOML: {exc}", remedy=f"fix or remove {path}") from exc
    except OSError as exc:
        raise ConfigInvalid(f"{path}: cannot be read: {exc.strerror}", remedy=f"check {path}") from exc
    unknown = set(data) - _KNOWN_TABLES
    if unknown:
        raise ConfigInvalid(
            f"{path}: unknown table(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_KNOWN_TABLES))}",
            remedy="see the Configuration section of the README",
        )
    for table in _KNOWN_TABLES & set(data):
        if not isinstance(data[table], dict):
            raise ConfigInvalid(f"{path}: [{table}] must be a table")
    providers = data.get("providers", {})
    if providers:
        from deskctl.providers import PROVIDERS, canonical_name, known_provider_names

        known = sorted(set(PROVIDERS) | set(known_provider_names()))
        for name, options in providers.items():
            if not isinstance(options, dict):
                raise ConfigInvalid(f"{path}: [providers.{name}] must be a table")
            if canonical_name(name) not in known:
                from deskctl.platforms import suggest

                raise ConfigInvalid(
                    f"{path}: [providers.{name}] names no provider{suggest(name, known)}; known: {', '.join(known)}",
                    remedy="see the Providers section of the README",
                )
    return data


def load_config(cwd: Path | None = None) -> Config:
    """User config, then the project file over it."""
    defaults: dict[str, Any] = {}
    providers: dict[str, dict[str, Any]] = {}
    sources: list[Path] = []
    defaults_source: dict[str, str] = {}
    providers_source: dict[str, str] = {}
    project = _project_file(None if cwd is None else str(cwd))
    for name in (_user_file(), project):
        if name is None or not os.path.isfile(name):
            continue
        from pathlib import Path

        path = Path(name)
        data = _read(path)
        sources.append(path)
        for key, value in data.get("defaults", {}).items():
            defaults[key.replace("-", "_")] = value
            defaults_source[key.replace("-", "_")] = str(path)
        for name, options in data.get("providers", {}).items():
            from deskctl.providers import canonical_name  # here: most configurations name no provider

            canonical = canonical_name(name)
            providers.setdefault(canonical, {}).update(options)
            providers_source[canonical] = str(path)
    return Config(defaults, providers, sources, defaults_source=defaults_source, providers_source=providers_source)
