"""Metering: the price catalog, the rate of a desktop, and what a span of time on it costs.

The catalog is data (``deskctl/data/prices.json``), not code: every row names its ``source`` and ``date``. A
user file of the same shape (``$DESKCTL_PRICES``, else ``home_dir()/"prices.json"``) is read first, so its rows
and resource rates take precedence. A rate of 0 means *known to be free* (a local desktop); an unknown rate is
``None`` and every cost derived from it is ``None``, shown as ``unknown``: never 0.

Rows either give ``usd_per_hour`` directly or give ``resources`` (``cpu``, ``memory_gib``, ``disk_gib``)
priced by the provider's ``resource_rates`` (Daytona bills each resource per second).

Model spend (``Desktop.meter``) is priced by the same files' ``models`` rows (``model``: a name or an
``fnmatch`` pattern, ``input_usd_per_mtok``, ``output_usd_per_mtok``, ``source``, ``date``), the user's first;
the packaged catalog names no model prices. A model no row names is priced by the ``genai-prices`` library when
it is installed (never required); else its cost is None (unknown), never 0.
"""

from __future__ import annotations

import math
import os
import time

from deskctl import _threads
from deskctl._jsonc import loads as json_loads
from deskctl._record import Record
from deskctl.errors import ConfigInvalid
from deskctl.lifecycle import TERMINAL_STATUSES
from deskctl.limits import BOUNDS, check_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from deskctl.ledger import SessionRecord
    from deskctl.spec import DesktopSpec

__all__ = [
    "MAX_TOKENS",
    "MAX_USD",
    "ModelPrice",
    "Rate",
    "catalog_rows",
    "check_model_usage",
    "cost_for",
    "format_cost",
    "lookup_rate",
    "model_cost",
    "rate_for",
    "session_cost",
    "spent_so_far",
    "user_prices_path",
]

_RESOURCE_KEYS = {"cpu": "cpu_per_hour", "memory_gib": "memory_gib_per_hour", "disk_gib": "disk_gib_per_hour"}
#: provider_options keys that choose a size (an instance class or snapshot) in the catalog, in order
_SIZE_OPTIONS = ("size", "snapshot", "instance_type")
#: provider_options keys that give resources explicitly (Daytona ``cpu``/``memory``/``disk`` in GiB)
_RESOURCE_OPTIONS = {"cpu": "cpu", "memory": "memory_gib", "disk": "disk_gib"}


class Rate(Record, frozen=True):
    """What a desktop costs per hour, billed in ``granularity_seconds`` steps with a ``minimum_seconds`` charge.

    ``usd_per_hour`` is 0 for a desktop known to be free. ``source`` and ``date`` say where the figure comes from.
    """

    usd_per_hour: float
    granularity_seconds: int
    minimum_seconds: int
    source: str
    date: str
    provider: str = ""
    platform: str = ""
    size: str = ""
    third_party: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "usd_per_hour": self.usd_per_hour, "granularity_seconds": self.granularity_seconds,
            "minimum_seconds": self.minimum_seconds, "source": self.source, "date": self.date,
            "provider": self.provider, "platform": self.platform, "size": self.size,
            "third_party": self.third_party,
        }  # fmt: skip


def user_prices_path() -> Path:
    """``$DESKCTL_PRICES``, else ``home_dir()/"prices.json"`` (which need not exist)."""
    from pathlib import Path

    return Path(_user_prices_file())


def _user_prices_file() -> str:
    """:func:`user_prices_path` as a str, made without pathlib (which imports urllib.parse and ipaddress: a tenth
    of a `deskctl down` process, which works out a session's cost)."""
    from deskctl.paths import pure_path_str

    env = os.environ.get("DESKCTL_PRICES", "").strip()
    if env.startswith("~"):
        from pathlib import Path  # its expanduser (an unknown user is its RuntimeError)

        return str(Path(env).expanduser())
    if env:
        return pure_path_str(env)
    from deskctl.paths import home_path

    return os.path.join(home_path(), "prices.json")


def _packaged_text() -> str:
    # beside this module when installed as files (always, but for a zip import): importlib.resources and what
    # it loads (zipfile, tempfile) cost a `deskctl down` more CPU than reading the file
    beside = os.path.join(os.path.dirname(__file__), "data", "prices.json")
    try:
        with open(beside, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        if os.path.exists(__file__):
            raise
    from importlib.resources import files

    return (files("deskctl") / "data" / "prices.json").read_text(encoding="utf-8")


def _validate(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ConfigInvalid(f"price catalog {where}: the top level must be a JSON object")
    rows = doc.get("rates", [])
    if not isinstance(rows, list):
        raise ConfigInvalid(f"price catalog {where}: 'rates' must be a list")
    for index, row in enumerate(rows):
        label = f"price catalog {where}: rates[{index}]"
        if not isinstance(row, dict):
            raise ConfigInvalid(f"{label} must be an object")
        for key in ("provider", "source", "date"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise ConfigInvalid(f"{label} needs a non-empty {key!r} (every price names its source and date)")
        price = row.get("usd_per_hour")
        if price is not None and (isinstance(price, bool) or not isinstance(price, int | float) or price < 0):
            raise ConfigInvalid(f"{label}: usd_per_hour must be a number >= 0 or null (unknown), got {price!r}")
        for key in ("granularity_seconds", "minimum_seconds"):
            value = row.get(key, 1 if key == "granularity_seconds" else 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigInvalid(f"{label}: {key} must be a whole number >= 0, got {value!r}")
        resources = row.get("resources")
        if resources is not None and (
            not isinstance(resources, dict)
            or any(k not in _RESOURCE_KEYS or not isinstance(v, int | float) for k, v in resources.items())
        ):
            raise ConfigInvalid(f"{label}: resources must map cpu/memory_gib/disk_gib to numbers")
    models = doc.get("models", [])
    if not isinstance(models, list):
        raise ConfigInvalid(f"price catalog {where}: 'models' must be a list")
    for index, row in enumerate(models):
        label = f"price catalog {where}: models[{index}]"
        if not isinstance(row, dict):
            raise ConfigInvalid(f"{label} must be an object")
        for key in ("model", "source", "date"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise ConfigInvalid(f"{label} needs a non-empty {key!r} (every price names its source and date)")
        for key in ("input_usd_per_mtok", "output_usd_per_mtok"):
            value = row.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value) or not 0 <= value <= MAX_USD):
                raise ConfigInvalid(f"{label}: {key} must be a finite number >= 0 or null (unknown), got {value!r}")
    resource_rates = doc.get("resource_rates", {})
    if not isinstance(resource_rates, dict):
        raise ConfigInvalid(f"price catalog {where}: 'resource_rates' must be an object")
    for provider, table in resource_rates.items():
        label = f"price catalog {where}: resource_rates[{provider!r}]"
        if not isinstance(table, dict):
            raise ConfigInvalid(f"{label} must be an object")
        for key in ("source", "date"):
            if not isinstance(table.get(key), str) or not table[key].strip():
                raise ConfigInvalid(f"{label} needs a non-empty {key!r}")
        for key in _RESOURCE_KEYS.values():
            value = table.get(key)
            if value is not None and (not isinstance(value, int | float) or value < 0):
                raise ConfigInvalid(f"{label}: {key} must be a number >= 0")
    return doc


if TYPE_CHECKING:
    _Catalog = tuple[tuple[dict[str, Any], ...], dict[str, dict[str, Any]], tuple[dict[str, Any], ...]]


#: (user file, its mtime_ns, its size) -> its catalog: the last few read, oldest first (functools.lru_cache would
#: load functools and collections into every `deskctl ls`, `cost` and `down`)
_LOADED: dict[tuple[str, int, int], _Catalog] = {}
_LOADED_MAX = 8
_LOADED_LOCK = _threads.Lock()


def _load(user_path: str, user_mtime_ns: int, user_size: int) -> _Catalog:
    key = (user_path, user_mtime_ns, user_size)
    with _LOADED_LOCK:
        found = _LOADED.get(key)
    if found is not None:
        return found
    catalog = _read(user_path, user_mtime_ns)
    with _LOADED_LOCK:
        _LOADED[key] = catalog
        while len(_LOADED) > _LOADED_MAX:
            del _LOADED[next(iter(_LOADED))]
    return catalog


def _read(user_path: str, user_mtime_ns: int) -> _Catalog:
    docs: list[dict[str, Any]] = []
    if user_mtime_ns >= 0:
        try:
            with open(user_path, encoding="utf-8") as file:
                text = file.read()
            docs.append(_validate(json_loads(text), user_path))
        except (OSError, ValueError) as exc:
            raise ConfigInvalid(
                f"price catalog {user_path} cannot be read: {exc}",
                remedy="fix the file, or unset DESKCTL_PRICES / remove it to use the packaged catalog",
            ) from exc
    docs.append(_validate(json_loads(_packaged_text()), "deskctl/data/prices.json"))
    rows: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    resource_rates: dict[str, dict[str, Any]] = {}
    for doc in docs:  # user first: its rows match first and its resource rates win
        rows.extend(doc.get("rates", []))
        models.extend(doc.get("models", []))
        for provider, table in doc.get("resource_rates", {}).items():
            resource_rates.setdefault(provider, table)
    return tuple(rows), resource_rates, tuple(models)


def _catalog() -> _Catalog:
    path = _user_prices_file()
    try:
        stat = os.stat(path)
    except OSError:
        return _load(path, -1, -1)
    # size as well as mtime: two writes within one timestamp tick still differ in the key, mostly
    return _load(path, stat.st_mtime_ns, stat.st_size)


def catalog_rows() -> list[dict[str, Any]]:
    """Every catalog row, the user's first (for display and tests)."""
    return [dict(r) for r in _catalog()[0]]


def _norm(value: Any) -> str:
    return str(value).strip().lower()


def lookup_rate(provider: str, platform: str, options: dict[str, Any] | None = None) -> Rate | None:
    """The rate for ``provider`` on ``platform`` with ``options`` (``size``/``snapshot`` choose a row; Daytona's
    ``cpu``/``memory``/``disk`` give resources). None when the catalog does not know the price."""
    options = options or {}
    rows, resource_rates, _ = _catalog()
    provider, platform = _norm(provider), _norm(platform)
    if options.get("usd_per_hour") is not None:
        return _option_rate(provider, platform, options["usd_per_hour"], rows)
    size = next((_norm(options[k]) for k in _SIZE_OPTIONS if options.get(k)), None)
    candidates = [
        r for r in rows if _norm(r["provider"]) == provider and _norm(r.get("platform", "*")) in (platform, "*")
    ]
    row: dict[str, Any] | None = None
    for candidate in candidates:
        row_size = _norm(candidate.get("size", "*"))
        if (size is not None and row_size in (size, "*")) or (
            size is None and (row_size == "*" or candidate.get("default"))
        ):
            row = candidate
            break
    explicit = {
        target: options[key] for key, target in _RESOURCE_OPTIONS.items()
        if isinstance(options.get(key), int | float) and not isinstance(options.get(key), bool)
    }  # fmt: skip
    if row is None and not (explicit and provider in resource_rates and size is None):
        return None
    base = dict(row or {"source": "explicit resources", "date": ""})
    resources = dict(base.get("resources") or {})
    resources.update(explicit)
    granularity = int(base.get("granularity_seconds", 1))
    minimum = int(base.get("minimum_seconds", 0))
    source, date, third_party = str(base["source"]), str(base["date"]), bool(base.get("third_party", False))
    if resources and (explicit or base.get("usd_per_hour") is None):
        table = resource_rates.get(provider)
        if table is None or any(table.get(_RESOURCE_KEYS[k]) is None for k in resources):
            return None
        if set(resources) != set(_RESOURCE_KEYS) and row is None:
            return None  # explicit resources must name all of cpu, memory and disk to be priced
        price = sum(float(amount) * float(table[_RESOURCE_KEYS[k]]) for k, amount in resources.items())
        granularity = int(table.get("granularity_seconds", granularity))
        minimum = int(table.get("minimum_seconds", minimum))
        described = ", ".join(f"{k}={resources[k]:g}" for k in sorted(resources))
        source = f"{described} x {table['source']}"
        date = str(table["date"])
        third_party = third_party or bool(table.get("third_party", False))
    else:
        if base.get("usd_per_hour") is None:
            return None
        price = float(base["usd_per_hour"])
    return Rate(
        usd_per_hour=price, granularity_seconds=max(1, granularity), minimum_seconds=minimum, source=source,
        date=date, provider=provider, platform=platform, size=_norm(base.get("size", size or "*")),
        third_party=third_party,
    )  # fmt: skip


def _option_rate(provider: str, platform: str, value: Any, rows: tuple[dict[str, Any], ...]) -> Rate:
    """The rate a provider option ``usd_per_hour`` gives (a cluster of one's own: the kubernetes provider), billed
    in the steps of the provider's catalog row."""
    try:
        price = float(value)
    except (TypeError, ValueError):
        price = -1.0
    if price < 0 or isinstance(value, bool):
        raise ConfigInvalid(f"provider option usd_per_hour={value!r} is not a number >= 0")
    row = next((r for r in rows if _norm(r["provider"]) == provider), {})
    return Rate(usd_per_hour=price, granularity_seconds=max(1, int(row.get("granularity_seconds", 1))),
                minimum_seconds=int(row.get("minimum_seconds", 0)), source="provider option usd_per_hour",
                date="", provider=provider, platform=platform, size="*")


#: bounds of one metered model call (deskctl.limits' tokens and meter_usd): more tokens or dollars than any real
#: call spends is a caller's error
MAX_TOKENS = int(BOUNDS["tokens"].hi)
MAX_USD = float(BOUNDS["meter_usd"].hi)
_ROLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


class ModelPrice(Record, frozen=True):
    """What one call of a model cost: ``usd`` (None: unknown) and where the price comes from."""

    usd: float | None
    source: str | None


def check_model_usage(role: Any, model: Any, input_tokens: Any, output_tokens: Any,
                      usd: Any) -> tuple[str, str, int, int, float | None]:  # fmt: skip
    """The arguments of ``Desktop.meter``, checked (``usage.bad_meter``, exit 2): ``role`` a short lower-case
    word, ``model`` a non-empty name, token counts whole numbers in 0..:data:`MAX_TOKENS`, ``usd`` None or a
    finite number in 0..:data:`MAX_USD` (the ``tokens`` and ``meter_usd`` bounds of :mod:`deskctl.limits`)."""
    from deskctl.errors import UsageError

    def bad(message: str) -> UsageError:
        return UsageError(f"meter: {message}", code="usage.bad_meter",
                          remedy="meter(role='agent', model='NAME', input_tokens=N, output_tokens=N, usd=None)")

    if not isinstance(role, str) or not 0 < len(role) <= 32 or not set(role) <= _ROLE_CHARS:
        raise bad(f"role {str(role)[:40]!r} must be 1 to 32 of a-z, 0-9, '_', '.', '-' (agent, user, judge, ...)")
    if not isinstance(model, str) or not model.strip() or len(model) > 200 or not model.isprintable():
        raise bad(f"model {str(model)[:40]!r} must be a printable name of 1 to 200 characters")
    counts: list[int] = []
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(value, float):  # a token count is an int, not even 3.0
            raise bad(f"{name} {str(value)[:40]!r} must be a whole number from 0 to {MAX_TOKENS}")
        counts.append(check_number("tokens", value, what=f"meter: {name}", strings=False))
    if usd is not None:
        usd = float(check_number("meter_usd", usd, what="meter: usd (None: priced from the catalog)", strings=False))
    return role, model.strip(), counts[0], counts[1], usd


def model_cost(model: str, input_tokens: int, output_tokens: int) -> ModelPrice:
    """The cost of a call of ``model``: the first ``models`` row of the catalogs (the user's first) whose ``model``
    matches (case-insensitive; ``fnmatch`` patterns), else the ``genai-prices`` library when installed, else
    unknown (``usd`` None, never 0). A row with a null price is known to be unknown."""
    import fnmatch

    name = _norm(model)
    for row in _catalog()[2]:
        if fnmatch.fnmatchcase(name, _norm(row["model"])):
            per_in, per_out = row.get("input_usd_per_mtok"), row.get("output_usd_per_mtok")
            if per_in is None or per_out is None:
                return ModelPrice(None, f"{row['source']} ({row['date']}): price unknown")
            return ModelPrice((input_tokens * float(per_in) + output_tokens * float(per_out)) / 1e6,
                              f"{row['source']} ({row['date']})")
    return _library_cost(model, input_tokens, output_tokens)


def _library_cost(model: str, input_tokens: int, output_tokens: int) -> ModelPrice:
    """The ``genai-prices`` library's price, only when it is importable (UNVERIFIED: not installed in deskctl's
    tests); anything it cannot price, or any failure of it, is unknown."""
    try:
        from genai_prices import Usage, calc_price  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return ModelPrice(None, None)
    try:
        found = calc_price(Usage(input_tokens=input_tokens, output_tokens=output_tokens), model_ref=model)
        usd = float(found.total_price)
    except Exception:  # a model it does not know (LookupError) or any change of its API: unknown, never 0
        return ModelPrice(None, None)
    if not math.isfinite(usd) or usd < 0:
        return ModelPrice(None, None)
    return ModelPrice(usd, "genai-prices library")


def rate_for(spec: DesktopSpec) -> Rate | None:
    """The rate of the desktop ``spec`` asks for, or None when its price is unknown (never 0 for unknown)."""
    platform = spec.platform.value if hasattr(spec.platform, "value") else str(spec.platform)
    return lookup_rate(spec.provider, platform, dict(spec.provider_options))


def cost_for(rate: Rate | None, seconds: float) -> float | None:
    """The cost of ``seconds`` of billable time at ``rate``: rounded up to the rate's granularity, at least its
    minimum. None when the rate is unknown."""
    if rate is None:
        return None
    billed = max(0.0, float(seconds))
    if billed > 0 or rate.minimum_seconds:
        billed = max(billed, float(rate.minimum_seconds))
    if rate.granularity_seconds > 1 and billed > 0:
        # tolerate float noise so that exactly 60.0000000001 s is one minute, not two
        steps = math.ceil(billed / rate.granularity_seconds - 1e-9)
        billed = steps * rate.granularity_seconds
    return rate.usd_per_hour * billed / 3600.0


def format_cost(cost: float | None) -> str:
    """``"unknown"`` for None, else dollars to four decimals (``"$0.0123"``)."""
    if cost is None:
        return "unknown"
    return f"${cost:,.4f}"


def session_cost(record: SessionRecord, now: float | None = None) -> float | None:
    """What a session has cost so far: its recorded cost once over, else its rate times the time since the
    create request (0 if nothing was sent). None when the rate is unknown."""
    if not record.active:
        if record.cost_usd is not None or record.created_at is not None:
            return record.cost_usd
        return 0.0
    if record.created_at is None:
        return 0.0
    if record.rate_usd_per_hour is None:
        return None
    return record.rate_usd_per_hour * record.elapsed_billable(time.time() if now is None else now) / 3600.0


def spent_so_far(record: SessionRecord, now: float) -> float | None:
    """What ``deskctl ls`` shows a session has cost: its recorded cost once one is recorded or the session is
    over (None there: unknown, as the reaper records a row it could not price), else its recorded rate from the
    create request until ``now`` (0 before a create was sent; None when the rate is unknown)."""
    if record.cost_usd is not None or record.status in TERMINAL_STATUSES:
        return record.cost_usd
    if record.created_at is None:
        return 0.0
    if record.rate_usd_per_hour is None:
        return None
    rate = Rate(usd_per_hour=record.rate_usd_per_hour, granularity_seconds=1, minimum_seconds=0,
                source=record.rate_source or "", date="")
    return cost_for(rate, now - record.created_at)
