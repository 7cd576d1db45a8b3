"""The compatibility matrix, as data: who serves which platform, which agent runs which task OS, which task
OS goes with which desktop platform, which screen sizes each provider offers, and HiDPI scales.

The facts live in ``deskctl/data/compat.json``; every row names its source (a key of ``sources``) and the
date of that source. A user file of the same shape (``$DESKCTL_COMPAT``, else ``home_dir()/"compat.json"``)
adds or replaces rows, e.g. to declare an in-house agent Windows-capable.

What a provider class declares (its :class:`~deskctl.providers.base.Capabilities`: platforms, settable or
fixed sizes, scale) is not repeated in the data file: the packaged rows of deskctl's own providers carry only
the vendors' facts, notes and sources, and the effective tables (:func:`platform_table`,
:func:`geometry_table`) merge them with the classes. A row may still state ``platforms`` or sizes, for a
provider whose module is absent (a user file's in-house provider); a loaded class wins over it.

Every check here is pure and local: nothing touches the network.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from deskctl._record import Record
from deskctl.checks import CheckResult
from deskctl.errors import CompatError, ConfigInvalid, UsageError
from deskctl.spec import Geometry, Platform, WindowGeometry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.checks import Status
    from deskctl.providers.base import Provider
    from deskctl.spec import DesktopSpec

__all__ = [
    "TASK_OSES",
    "Matrix",
    "agent_task_oses",
    "geometry_table",
    "known_agents",
    "load_matrix",
    "natural_task_os",
    "normalize_agent",
    "normalize_task_os",
    "platform_check",
    "platform_table",
    "platforms_for",
    "provider_checks",
    "providers_for",
    "request_checks",
    "require_platform",
    "serving_providers",
    "suggest",
    "user_compat_path",
]

TASK_OSES = ("linux", "windows")
_TASK_OS_ALIASES = {"win": "windows", "ubuntu": "linux", "debian": "linux", "macos": "linux"}


class Matrix(Record, frozen=True):
    """The parsed data file. ``raw`` is the JSON document as loaded (for ``deskctl compat --json``)."""

    raw: dict[str, Any]

    @property
    def sources(self) -> dict[str, dict[str, str]]:
        sources: dict[str, dict[str, str]] = self.raw["sources"]
        return sources

    def rows(self, table: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.raw[table]
        return rows

    def source_label(self, row: dict[str, Any]) -> str:
        """``"<ref> (<date>)"`` for a row, for messages and the printed matrix."""
        source = self.sources.get(str(row.get("source")), {})
        return f"{source.get('ref', row.get('source'))} ({row.get('date') or source.get('date')})"


#: table -> the fields that identify a row; a user row with the same key replaces the packaged one
_ROW_KEYS: dict[str, tuple[str, ...]] = {
    "platform_provider": ("provider",),
    "agents": ("agent",),
    "task_os_platform": ("platform",),
    "geometry": ("provider", "platform"),
    "hidpi": ("provider", "platform"),
}


def user_compat_path() -> Path:
    """``$DESKCTL_COMPAT``, else ``home_dir()/"compat.json"`` (which need not exist)."""
    env = os.environ.get("DESKCTL_COMPAT", "").strip()
    if env:
        return Path(env).expanduser()
    from deskctl.paths import home_dir

    return home_dir() / "compat.json"


def load_matrix() -> Matrix:
    """The packaged matrix, with the user's file (same shape, every row with ``source`` and ``date``) merged
    over it: a user row replaces the packaged row with the same key (an agent name, a provider, ...)."""
    path = user_compat_path()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = -1
    return _load(str(path), mtime)


def _packaged_text() -> str:
    # beside the package when installed as files (always, but for a zip import), as metering reads prices.json:
    # importlib.resources and what it loads (tempfile, shutil, zipfile) cost a `deskctl up` more than the file
    beside = Path(__file__).parent.parent / "data" / "compat.json"
    try:
        return beside.read_text(encoding="utf-8")
    except FileNotFoundError:
        if Path(__file__).exists():
            raise
    from importlib.resources import files

    return files("deskctl.data").joinpath("compat.json").read_text(encoding="utf-8")


@cache
def _load(user_path: str, user_mtime_ns: int) -> Matrix:
    text = _packaged_text()
    doc: dict[str, Any] = json.loads(text)
    if user_mtime_ns < 0:
        return Matrix(doc)
    try:
        user = json.loads(Path(user_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigInvalid(
            f"compatibility file {user_path} cannot be read: {exc}",
            remedy="fix the file, or unset DESKCTL_COMPAT / remove it to use the packaged matrix",
        ) from exc
    return Matrix(_merge_user(doc, user, user_path))


def _merge_user(doc: dict[str, Any], user: Any, where: str) -> dict[str, Any]:
    if not isinstance(user, dict):
        raise ConfigInvalid(f"compatibility file {where}: the top level must be a JSON object")
    sources = {**doc["sources"], **dict(user.get("sources") or {})}
    merged = {**doc, "sources": sources}
    for table, key_fields in _ROW_KEYS.items():
        rows = user.get(table, [])
        if not isinstance(rows, list):
            raise ConfigInvalid(f"compatibility file {where}: {table!r} must be a list")
        for index, row in enumerate(rows):
            label = f"compatibility file {where}: {table}[{index}]"
            if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in key_fields):
                raise ConfigInvalid(f"{label} must be an object naming {', '.join(key_fields)}")
            for k in ("source", "date"):
                if not isinstance(row.get(k), str) or not row[k].strip():
                    raise ConfigInvalid(f"{label} needs a non-empty {k!r} (every row names its source and date)")
            if row["source"] not in sources:
                sources[row["source"]] = {"title": row["source"], "ref": where, "date": row["date"]}
        keys = {tuple(r[k] for k in key_fields) for r in rows}
        packaged = [r for r in doc[table] if tuple(r[k] for k in key_fields) not in keys]
        merged[table] = [*rows, *packaged]
    return merged


def suggest(value: str, known: list[str] | tuple[str, ...]) -> str | None:
    import difflib  # here: only a misspelt name needs it, and every `deskctl up` loads this module

    close = difflib.get_close_matches(value, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


# -- agents and task OS ---------------------------------------------------------------------------------------


def known_agents() -> list[str]:
    return [str(row["agent"]) for row in load_matrix().rows("agents")]


def normalize_agent(name: str) -> str:
    """The agent name as the matrix spells it.

    A name close to a known one (a likely typo) is a usage error suggesting it; any other unknown name is
    accepted, because Harbor treats every other installed agent as Linux-only (see :func:`agent_task_oses`).
    """
    raw = name.strip().lower().replace("_", "-")
    known = known_agents()
    if raw in known:
        return raw
    import difflib  # here: only a misspelt name needs it

    close = difflib.get_close_matches(raw, known, n=1, cutoff=0.75)
    if close:
        raise UsageError(
            f"unknown agent {name!r} (did you mean {close[0]!r}?); known: {', '.join(known)}",
            code="usage.unknown_agent",
            remedy=f"--agent {close[0]}",
        )
    return raw


def normalize_task_os(value: str) -> str:
    raw = value.strip().lower()
    raw = _TASK_OS_ALIASES.get(raw, raw)
    if raw in TASK_OSES:
        return raw
    hint = suggest(raw, TASK_OSES)
    raise UsageError(
        f"unknown task OS {value!r}" + (f" (did you mean {hint!r}?)" if hint else "")
        + f"; Harbor task OSes: {', '.join(TASK_OSES)}",
        code="usage.unknown_task_os",
        remedy=f"--task-os {hint or 'linux'}",
    )


def agent_task_oses(agent: str) -> tuple[tuple[str, ...], bool]:
    """The task OSes an agent can run, and whether the agent is listed (False: Harbor's default applies)."""
    matrix = load_matrix()
    for row in matrix.rows("agents"):
        if row["agent"] == agent:
            return tuple(row["task_os"]), True
    return tuple(matrix.raw["default_agent_task_os"]["task_os"]), False


def _windows_agents() -> list[str]:
    return [str(row["agent"]) for row in load_matrix().rows("agents") if "windows" in row["task_os"]]


def natural_task_os(platform: Platform) -> str:
    """The task OS Harbor declares for a desktop of this platform when deskctl is the task environment."""
    for row in load_matrix().rows("task_os_platform"):
        if row["platform"] == platform.value:
            return str(row["natural_task_os"])
    return "linux"


def request_checks(platform: Platform, agent: str | None, task_os: str | None) -> list[CheckResult]:
    """Provider-independent checks of a request: agent x task OS, task OS x platform.

    ``task_os=None`` means the platform's natural task OS (a Windows desktop as the environment of a
    Windows task); a Linux task that drives a remote Windows desktop passes ``task_os="linux"``.
    """
    matrix = load_matrix()
    results: list[CheckResult] = []
    effective_os = normalize_task_os(task_os) if task_os else natural_task_os(platform)
    os_row = next((r for r in matrix.rows("task_os_platform") if r["platform"] == platform.value), None)
    if os_row is not None:
        source = matrix.source_label(os_row)
        if effective_os in os_row["task_os"]:
            how = (
                "as a tool driven from a Linux task"
                if platform is Platform.WINDOWS and effective_os == "linux"
                else "as the task environment"
            )
            results.append(CheckResult(
                "pass", "compat.task_os",
                f"{effective_os} task with a {platform.value} desktop: served {how} [{source}]",
            ))
        else:
            results.append(CheckResult(
                "warn", "compat.task_os",
                f"Harbor declares {platform.value} desktops as {os_row['natural_task_os']} tasks and rejects a "
                f"{effective_os} task environment with it; deskctl can still serve it as a tool [{source}]",
                remedy=f"--task-os {os_row['natural_task_os']}",
            ))
    if agent:
        name = normalize_agent(agent)
        oses, listed = agent_task_oses(name)
        row = next((r for r in matrix.rows("agents") if r["agent"] == name), matrix.raw["default_agent_task_os"])
        source = matrix.source_label(row)
        if effective_os in oses:
            status: Status = "pass" if listed else "warn"
            note = "" if listed else " (agent not in the matrix: assumed Linux-only, Harbor's default)"
            results.append(CheckResult(
                status, "compat.agent", f"{name} can run {effective_os} tasks{note} [{source}]",
            ))
        else:
            capable = _windows_agents()
            if effective_os == "windows":
                message = (
                    f"{name} cannot run Windows tasks (Windows-capable agents: {', '.join(capable)}); "
                    "a Linux task can still drive a remote Windows desktop through deskctl"
                )
                remedy = (
                    f"use --agent {' or --agent '.join(capable)}, or declare a Linux task that drives the "
                    f"{platform.value} desktop as a tool: --task-os linux"
                )
            else:
                message = f"{name} cannot run {effective_os} tasks (it runs: {', '.join(oses)})"
                remedy = f"--task-os {oses[0]}"
            results.append(CheckResult("fail", "compat.agent_unsupported", f"{message} [{source}]", remedy=remedy))
    return results


# -- platforms and providers ----------------------------------------------------------------------------------


def _provider_class(name: str) -> type[Provider] | None:
    from deskctl.providers import known_provider_names, provider_class

    return provider_class(name) if name in known_provider_names() else None


def platforms_for(provider: str) -> frozenset[Platform]:
    """Platforms a provider serves: its Capabilities when its module loads, else the data file."""
    cls = _provider_class(provider)
    caps = getattr(cls, "capabilities", None) if cls is not None else None
    if caps is not None:
        return frozenset(caps.platforms)
    for row in load_matrix().rows("platform_provider"):
        if row["provider"] == provider:
            return frozenset(Platform(p) for p in row.get("platforms", ()))
    return frozenset()


def serving_providers(platform: Platform) -> list[str]:
    """Every provider that serves ``platform``, installed or only named by the data file: the data file's order
    first (the order remedies suggest them in), then other installed providers."""
    from deskctl.providers import known_provider_names

    names = [str(r["provider"]) for r in load_matrix().rows("platform_provider")]
    names += [n for n in known_provider_names() if n not in names]
    return [name for name in names if platform in platforms_for(name)]


def providers_for(platform: Platform) -> list[str]:
    """Installed providers (module present) that serve ``platform``, in registry order."""
    from deskctl.providers import known_provider_names

    return [name for name in known_provider_names() if platform in platforms_for(name)]


def _geometry_row(provider: str, platform: Platform) -> dict[str, Any] | None:
    for row in load_matrix().rows("geometry"):
        if row["provider"] == provider and row["platform"] == platform.value:
            return row
    return None


def _hidpi_scale(provider: Provider, platform: Platform) -> tuple[float, str | None]:
    for row in load_matrix().rows("hidpi"):
        if row["provider"] == provider.name and row["platform"] == platform.value:
            return float(row["scale"]), str(row.get("note") or "")
    caps = getattr(type(provider), "capabilities", None)
    return (float(caps.hidpi_scale) if caps is not None else 1.0), None


def platform_check(provider: Provider, platform: Platform) -> CheckResult:
    """Platform x provider, the one check of it: ``compat.platform`` (pass) or ``compat.platform_unsupported``
    (fail, naming who serves the platform). Used by preflight and, through :func:`require_platform`, by create."""
    matrix = load_matrix()
    name = provider.name
    caps = getattr(type(provider), "capabilities", None)
    served = frozenset(caps.platforms) if caps is not None else platforms_for(name)
    data_row = next((r for r in matrix.rows("platform_provider") if r["provider"] == name), None)
    source = matrix.source_label(data_row) if data_row else "provider capabilities"
    if platform not in served:
        others = [p for p in serving_providers(platform) if p != name]
        return CheckResult(
            "fail", "compat.platform_unsupported",
            f"{name} cannot serve {platform.value} desktops (it serves: "
            f"{', '.join(sorted(p.value for p in served)) or 'nothing'}; "
            f"{platform.value} is served by: {', '.join(others) or 'no known provider'}) [{source}]",
            remedy=(f"--provider {others[0]}" if others else "choose another --platform"),
            provider=name,
        )
    return CheckResult("pass", "compat.platform", f"{name} serves {platform.value} desktops [{source}]",
                       provider=name)


def require_platform(provider: Provider, platform: Platform) -> None:
    """Raise :class:`~deskctl.errors.CompatError` (``compat.platform_unsupported``) when ``provider`` cannot serve
    ``platform``: the guard of a provider's create, for a session made without preflight."""
    result = platform_check(provider, platform)
    if result.status == "fail":
        raise CompatError(result.message, code=result.code, provider=result.provider, remedy=result.remedy)


def provider_checks(spec: DesktopSpec, provider: Provider) -> list[CheckResult]:
    """Cross-provider checks for one provider: platform x provider, geometry, HiDPI, model down-scaling."""
    platform = platform_check(provider, spec.platform)
    if platform.status == "fail":
        return [platform]
    return [platform, *_geometry_checks(spec, provider)]


def _geometry_checks(spec: DesktopSpec, provider: Provider) -> list[CheckResult]:
    matrix = load_matrix()
    name, platform, geometry = provider.name, spec.platform, spec.geometry
    row = _geometry_row(name, platform)
    source = matrix.source_label(row) if row else "provider capabilities"
    results: list[CheckResult] = []
    if geometry is None:
        results.append(CheckResult(
            "pass", "geometry.native", f"native size accepted; deskctl reports the live size [{source}]",
            provider=name,
        ))
    else:
        reason = provider.check_geometry(geometry, platform)
        caps = getattr(type(provider), "capabilities", None)
        if reason is None and caps is None and row is not None:
            reason = _data_geometry_reason(name, platform, geometry, row)
        if reason is not None:
            results.append(CheckResult(
                "fail", "geometry.unsupported", f"{reason} [{source}]",
                remedy=_geometry_remedy(provider, platform, row), provider=name,
            ))
            return results
        results.append(CheckResult(
            "pass", "geometry.pinned", f"{geometry} can be set on {name} {platform.value} [{source}]",
            provider=name,
        ))
    scale, note = _hidpi_scale(provider, platform)
    if scale != 1.0:
        results.append(CheckResult(
            "pass", "geometry.hidpi",
            f"display scale {scale:g}: deskctl converts screenshots and clicks to one coordinate space"
            + (f" ({note})" if note else ""),
            provider=name,
        ))
    window = spec.window_geometry
    if geometry is not None and window is not None:
        results.extend(_window_checks(geometry, window, name))
    if geometry is not None:
        downscale = matrix.raw["model_downscale"]
        pixels = geometry.width * geometry.height
        if max(geometry.width, geometry.height) > downscale["long_edge"] or pixels > downscale["max_pixels"]:
            results.append(CheckResult(
                "warn", "geometry.model_downscale",
                f"{geometry} exceeds {downscale['long_edge']} px long edge or {downscale['max_pixels']} px: "
                f"{downscale['note']} [{matrix.source_label(downscale)}]",
                remedy="--geometry 1280x800 (or scale clicks back from the model's image size)",
                provider=name,
            ))
    return results


def _window_checks(geometry: Geometry, window: WindowGeometry, provider: str) -> list[CheckResult]:
    """Harbor's computer-1 rule: a browser window at (0,0) that does not fill the desktop exposes background."""
    source = load_matrix().source_label({"source": "harbor", "date": load_matrix().sources["harbor"]["date"]})
    if window.x + window.width > geometry.width or window.y + window.height > geometry.height:
        return [CheckResult(
            "warn", "geometry.window_outside",
            f"browser window {window} reaches outside the {geometry} desktop; part of it cannot be seen or "
            f"clicked [{source}]",
            remedy=f"--window-geometry {geometry}+0+0", provider=provider,
        )]
    if (window.x, window.y) == (0, 0) and (window.width, window.height) != (geometry.width, geometry.height):
        return [CheckResult(
            "warn", "geometry.window_fill",
            f"browser window ({window.width}x{window.height} at 0,0) does not fill the {geometry} desktop; "
            f"screenshots will include exposed desktop background [{source}]",
            remedy=f"--window-geometry {geometry}+0+0", provider=provider,
        )]
    return []


def _data_geometry_reason(name: str, platform: Platform, geometry: Geometry, row: dict[str, Any]) -> str | None:
    if row.get("settable"):
        min_size = Geometry.parse(row["min"])
        max_size = Geometry.parse(row["max"])
        if min_size.width <= geometry.width <= max_size.width and min_size.height <= geometry.height <= max_size.height:
            return None
        return f"{name} sizes range {min_size}..{max_size} on {platform.value} (asked {geometry})"
    fixed = [str(s) for s in row.get("fixed", [])]
    if str(geometry) in fixed:
        return None
    if fixed:
        return f"{name} offers only {', '.join(fixed)} on {platform.value} (asked {geometry}); use --geometry native"
    return f"{name} cannot set the screen size on {platform.value} (asked {geometry}): {row.get('note', '')}".rstrip(
        ": "
    )


def _geometry_remedy(provider: Provider, platform: Platform, row: dict[str, Any] | None) -> str:
    fixed = provider.supported_sizes(platform)
    if fixed:
        return "--geometry " + " or --geometry ".join(f"{w}x{h}" for w, h in fixed) + " (or native)"
    if row is not None and row.get("fixed"):
        return "--geometry " + " or --geometry ".join(row["fixed"]) + " (or native)"
    caps = getattr(type(provider), "capabilities", None)
    if caps is not None and caps.settable_geometry:
        (min_w, min_h), (max_w, max_h) = caps.min_size, caps.max_size
        return f"--geometry WxH within {min_w}x{min_h}..{max_w}x{max_h}"
    return "--geometry native"


# -- the effective tables (data merged with installed providers' Capabilities) ----------------------------------


def platform_table() -> list[dict[str, Any]]:
    """The data file's ``platform_provider`` rows, each with the ``platforms`` the provider serves (its
    Capabilities when its module loads, else the row's own), then a row for every other known provider (an
    entry point's, one the data file does not name yet): no provider deskctl can use is missing."""
    from deskctl.providers import known_provider_names

    matrix = load_matrix()
    rows = list(matrix.rows("platform_provider"))
    named = {str(row["provider"]) for row in rows}
    rows += [{"provider": name, "note": "", "source": "deskctl", "date": matrix.sources["deskctl"]["date"]}
             for name in known_provider_names() if name not in named]
    return [{**row, "platforms": sorted(p.value for p in platforms_for(str(row["provider"])))} for row in rows]


def geometry_table() -> list[dict[str, Any]]:
    """One row per (provider, platform): screen sizes and HiDPI scale as deskctl will enforce them.

    For an installed provider the row comes from its Capabilities (``origin: "capabilities"``) and keeps the
    data file's note; for the others it is the data file's row (``origin: "data"``).
    """
    matrix = load_matrix()
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    hidpi = {(r["provider"], r["platform"]): float(r["scale"]) for r in matrix.rows("hidpi")}
    data_rows = {(r["provider"], r["platform"]): r for r in matrix.rows("geometry")}
    providers = [str(r["provider"]) for r in matrix.rows("platform_provider")]
    from deskctl.providers import known_provider_names

    providers += [n for n in known_provider_names() if n not in providers]
    for name in providers:
        cls = _provider_class(name)
        caps = getattr(cls, "capabilities", None) if cls is not None else None
        if caps is not None and cls is not None:
            for platform in sorted(caps.platforms, key=lambda p: p.value):
                data = data_rows.get((name, platform.value), {})
                fixed = cls.supported_sizes(platform)
                rows.append({
                    "provider": name, "platform": platform.value, "origin": "capabilities",
                    "settable": fixed is None and caps.settable_geometry,
                    "min": "x".join(map(str, caps.min_size)), "max": "x".join(map(str, caps.max_size)),
                    "fixed": ["x".join(map(str, s)) for s in fixed or ()],
                    "scale": hidpi.get((name, platform.value), float(caps.hidpi_scale)),
                    "note": data.get("note", ""),
                    "source": "deskctl", "date": matrix.sources["deskctl"]["date"],
                })
                seen.add((name, platform.value))
        for key, data in data_rows.items():
            if key[0] == name and key not in seen:
                rows.append({**data, "origin": "data", "fixed": list(data.get("fixed", [])),
                             "scale": hidpi.get(key, 1.0)})
                seen.add(key)
    return rows
