"""The provider contract: what every backend implements, and the data it exchanges with the session.

A provider is stateless about sessions except through :class:`RemoteHandle`: everything needed to reach a
desktop again (from another process, for ``deskctl do`` or ``deskctl down``) is in ``handle.data``, which is
JSON and is stored in the ledger. Secrets never go into a handle.

Providers translate every third-party exception (httpx, docker, paramiko, Xlib, OSError) into a
:mod:`deskctl.errors` class at their boundary, chained with ``raise ... from exc``.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod

from deskctl._record import Record, field
from deskctl.core.frames import ExecResult, RawFrame, Screenshot
from deskctl.platforms import Platform

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, ClassVar

    from deskctl.actions import Action
    from deskctl.checks import CheckResult
    from deskctl.ledger import SessionRecord
    from deskctl.providers.options import ProviderOptions
    from deskctl.spec import DesktopSpec, Geometry

__all__ = [
    "LABEL_CREATED",
    "LABEL_DETACHED",
    "LABEL_EXPIRES",
    "LABEL_LEDGER",
    "LABEL_OWNER",
    "LABEL_SESSION",
    "Capabilities",
    "CredentialSet",
    "ExecResult",
    "Provider",
    "RawFrame",
    "RemoteHandle",
    "Screenshot",
    "lifetime_seconds",
    "past_expiry",
]

LABEL_SESSION = "deskctl.session"
LABEL_OWNER = "deskctl.owner"
LABEL_CREATED = "deskctl.created"
LABEL_EXPIRES = "deskctl.expires"
#: "1" on desktops of detached sessions (deskctl up): no owner process watches them, only their expiry
LABEL_DETACHED = "deskctl.detached"
#: which ledger recorded the session (:func:`deskctl.ledger.ledger_id`): the reaper finds this ledger's desktops
#: by it even when the ledger lost their rows or cannot be read
LABEL_LEDGER = "deskctl.ledger"


class Capabilities(Record, frozen=True):
    """What a provider can do, as data (never discovered by catching NotImplementedError).

    ``fixed_sizes`` maps a platform to the only sizes it offers; a platform absent from it has a settable
    size within ``min_size``..``max_size``.
    """

    platforms: frozenset[Platform]
    settable_geometry: bool = True
    min_size: tuple[int, int] = (64, 64)
    max_size: tuple[int, int] = (8192, 8192)
    fixed_sizes: Mapping[Platform, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    exec: bool = True
    exec_streams_separate: bool = True
    files: bool = False
    #: the resource carries the deskctl labels and :meth:`Provider.list_owned` asks the service for what exists
    #: under them, so a session absent from a successful listing is confirmed gone (even one the ledger has no
    #: handle for); False: the listing is only the ledger's own handles (use.computer), which confirms nothing
    labels: bool = True
    server_ttl: bool = False
    isolation: str = "none"  # none | container | vm | host
    start_url: bool = False
    local: bool = True
    hidpi_scale: float = 1.0
    #: the provider can tell where the pointer is (:meth:`Provider.cursor_position`)
    cursor_position: bool = False
    #: :meth:`Provider.clipboard_get` / :meth:`Provider.clipboard_set` work
    clipboard: bool = False
    #: :meth:`Provider.window_titles` works (``wait_for("title")``), as do ``open_url`` and ``launch``
    windows: bool = False
    #: a button or key can be held (``mouse_down``/``mouse_up``, ``key_down``/``key_up``); False: those actions
    #: are ``usage.unsupported``
    hold_input: bool = True
    #: ``exec(user=...)`` runs the command as another user of the desktop; False: ``usage.unsupported``
    exec_as_user: bool = True
    #: the desktop's Chromium answers DevTools (CDP): :meth:`Provider.browser_endpoint`, ``browser_pages``
    browser: bool = False
    #: :meth:`deskctl.Desktop.snapshot` / :meth:`deskctl.Desktop.restore` work (a backend in
    #: :data:`deskctl.episodes.BACKENDS`)
    snapshots: bool = False
    #: ``Desktop.windows()`` (id, title, class, pid, geometry, focused), ``focus`` and ``move_window`` work
    window_management: bool = False
    #: ``Desktop.accessibility_tree()``, ``find`` and ``click_element`` work (AT-SPI inside a Linux desktop)
    accessibility: bool = False
    #: how the provider bills: free | per_second | per_minute | per_hour | external (the host's owner bills it,
    #: deskctl does not know the price: cost "unknown" unless the user's price catalog names one)
    billing: str = "free"

    def to_dict(self) -> dict[str, Any]:
        return {
            "platforms": sorted(p.value for p in self.platforms),
            "settable_geometry": self.settable_geometry,
            "min_size": "x".join(map(str, self.min_size)),
            "max_size": "x".join(map(str, self.max_size)),
            "fixed_sizes": {
                p.value: ["x".join(map(str, s)) for s in sizes] for p, sizes in self.fixed_sizes.items()
            },
            "exec": self.exec,
            "exec_streams_separate": self.exec_streams_separate,
            "files": self.files,
            "labels": self.labels,
            "server_ttl": self.server_ttl,
            "isolation": self.isolation,
            "start_url": self.start_url,
            "local": self.local,
            "hidpi_scale": self.hidpi_scale,
            "cursor_position": self.cursor_position,
            "clipboard": self.clipboard,
            "windows": self.windows,
            "hold_input": self.hold_input,
            "exec_as_user": self.exec_as_user,
            "browser": self.browser,
            "snapshots": self.snapshots,
            "window_management": self.window_management,
            "accessibility": self.accessibility,
            "billing": self.billing,
        }


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSPHRASE")


class CredentialSet(Record, frozen=True):
    """The variables a provider reads, declared on its class (``Provider.credentials``): all of them, which are
    secret, and the alternatives that suffice.

    ``required_any`` lists alternatives; the provider is configured when every variable of one alternative
    resolves (nothing listed: nothing is required). ``secret`` left out means every variable whose name has
    KEY, TOKEN, SECRET, PASSWORD or PASSPHRASE in it. ``source`` names where the names come from.
    """

    variables: tuple[str, ...] = ()
    secret: frozenset[str] | None = None
    required_any: tuple[tuple[str, ...], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.secret is None:
            object.__setattr__(self, "secret",
                               frozenset(v for v in self.variables if any(w in v for w in _SECRET_WORDS)))

    def is_secret(self, var: str) -> bool:
        return var in (self.secret or ())


class RemoteHandle(Record):
    """How to reach one desktop: provider name, deskctl session id, the provider's own id, and JSON data."""

    provider: str
    session_id: str
    resource_id: str
    labels: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "session_id": self.session_id,
            "resource_id": self.resource_id,
            "labels": dict(self.labels),
            "data": dict(self.data),
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RemoteHandle:
        return cls(
            provider=str(raw["provider"]),
            session_id=str(raw["session_id"]),
            resource_id=str(raw["resource_id"]),
            labels=dict(raw.get("labels") or {}),
            data=dict(raw.get("data") or {}),
            created_at=float(raw.get("created_at") or time.time()),
        )


def lifetime_seconds(spec: DesktopSpec, labels: Mapping[str, str]) -> float | None:
    """Seconds the session may live: the least of its expiry label (set by the session, at least 60 s from
    now), its ttl and its max minutes; None when it states none of them."""
    limits = [float(x) for x in (spec.ttl_seconds, spec.max_minutes * 60 if spec.max_minutes else None) if x]
    try:
        expires = float(labels.get(LABEL_EXPIRES, ""))
    except ValueError:
        expires = None
    if expires is not None:
        limits.append(max(60.0, expires - time.time()))
    return min(limits) if limits else None


def past_expiry(labels: Mapping[str, str], now: float) -> bool:
    """Whether the ``deskctl.expires`` label names a time before ``now`` (False when it is absent or unreadable)."""
    try:
        return float(labels.get(LABEL_EXPIRES, "inf")) < now
    except ValueError:
        return False


class Provider(ABC):
    """A backend that makes desktops. Subclasses live one per module in ``deskctl.providers``.

    Construct with ``provider_options`` (from the spec or config). Instances may cache connections per handle;
    :meth:`close` releases them without destroying anything.

    A provider's facts are class attributes, read without an instance by every part of deskctl: ``name``,
    ``aliases``, ``capabilities`` (platforms and geometry rules: settable range, fixed sizes), ``credentials``
    and ``option_names``.
    """

    name: ClassVar[str]
    #: other spellings users type for ``name``; a built-in provider's are its registry's (``deskctl.providers.ALIASES``,
    #: read without importing the module) and the class need not repeat them: :meth:`__init_subclass__` fills them in
    aliases: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capabilities]
    #: the environment/keyring variables it reads and which of them suffice (``deskctl credentials``, preflight)
    credentials: ClassVar[CredentialSet] = CredentialSet()
    #: the ``provider_options`` keys it reads; the CLI and the config refuse others (None: undeclared, any key)
    option_names: ClassVar[frozenset[str] | None] = None
    #: ``"module:Class"`` of the provider's typed options (:class:`deskctl.providers.options.ProviderOptions`),
    #: loaded only when options are checked or described; when set, it is the one declaration of the options
    #: and ``option_names`` is not needed
    options_model: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if "aliases" not in cls.__dict__ and isinstance(name, str):
            from deskctl.providers import ALIASES, PROVIDERS

            if name in PROVIDERS:
                cls.aliases = tuple(sorted(alias for alias, target in ALIASES.items() if target == name))

    @classmethod
    def options_class(cls) -> type[ProviderOptions] | None:
        """The provider's typed options class (imported on first use), or None when it declares none."""
        if cls.options_model is None:
            return None
        module, _, name = cls.options_model.partition(":")
        __import__(module)  # importlib.import_module's work, without importlib's import
        found: type[ProviderOptions] = getattr(sys.modules[module], name)
        return found

    @classmethod
    def declared_option_names(cls) -> frozenset[str] | None:
        """The option keys the provider reads (None: undeclared, any key)."""
        model = cls.options_class()
        return model.names() if model is not None else cls.option_names

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})
        self._settings_cache: ProviderOptions | None = None

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse malformed option values with a :class:`~deskctl.errors.UsageError` (exit 2), without any I/O:
        called when a spec is built from flags, before a preflight or a ledger row. Default: the typed options
        (``options_model``) parse them."""
        model = cls.options_class()
        if model is not None:
            model.parse(options, where=f"{cls.name} options")

    def settings(self, spec: DesktopSpec | None = None) -> ProviderOptions:
        """The typed options (``options_model``): the provider's own, under those of ``spec`` when given; a bad
        value is ``usage.bad_option`` / ``usage.unknown_option`` (exit 2). Loads the options class: the paths that
        must stay at the interpreter's floor (``deskctl do``, ``down``) read what they need from the handle or
        the provider's ``_option_table`` instead."""
        model = self.options_class()
        if model is None:
            raise TypeError(f"provider {self.name!r} declares no options_model")
        if spec is None or not spec.provider_options:
            cached: ProviderOptions | None = getattr(self, "_settings_cache", None)
            if cached is None:
                cached = self._settings_cache = model.parse(self.options, where=f"{self.name} options")
            return cached
        return model.parse({**self.options, **spec.provider_options}, where=f"{self.name} options")

    # -- before anything is paid for -------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        """Cheap, read-only checks. Never creates, starts or changes a billable resource."""
        return []

    # -- lifecycle -------------------------------------------------------------------------------
    @abstractmethod
    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        """Make the desktop. Never retried blindly: on an ambiguous failure the provider finds what it
        made by the ``deskctl.session`` label and destroys it before raising."""

    @abstractmethod
    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        """Return when the desktop answers (by state, never by sleep); ``deadline`` is ``time.monotonic()``
        based. Raise :class:`~deskctl.errors.ReadinessTimeout` with the last state seen."""

    @abstractmethod
    def destroy(self, handle: RemoteHandle) -> None:
        """Idempotent: "already gone" is success. Confirms the desktop is gone, else raises
        :class:`~deskctl.errors.CleanupIncomplete` naming what is left."""

    @abstractmethod
    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        """Desktops that exist with deskctl labels (optionally matching ``selector``), for the reaper."""

    def unlisted_remedy(self, record: SessionRecord) -> str:
        """How a person finds and deletes a desktop of ``record`` that :meth:`list_owned` cannot confirm gone (the
        create's answer was lost, so the ledger has no handle), and then closes its ledger row."""
        return (f"find the desktop of {record.session_id} in {self.name}'s own console and delete it, then run "
                f"deskctl reap --confirmed-gone {record.session_id} to close the ledger row")

    def is_alive(self, handle: RemoteHandle) -> bool:
        """Whether the desktop still exists (used by ``ls`` and the reaper). Default: it is listed."""
        return any(h.resource_id == handle.resource_id for h in self.list_owned())

    # -- while open ------------------------------------------------------------------------------
    @abstractmethod
    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        """The live display size in action coordinates."""

    @abstractmethod
    def screenshot(self, handle: RemoteHandle) -> Screenshot: ...

    def raw_frame(self, handle: RemoteHandle) -> RawFrame:
        """The screen's pixels without PNG encoding, for a live view. Default: the screenshot, decoded; the X11
        providers override it with their fast capture."""
        import io

        from PIL import Image

        shot = self.screenshot(handle)
        with Image.open(io.BytesIO(shot.png)) as image:
            rgb = image.convert("RGB")
        return RawFrame(rgb.tobytes(), rgb.width, rgb.height, "RGB")

    @abstractmethod
    def act(self, handle: RemoteHandle, action: Action) -> None: ...

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Run ``command`` through the guest's shell in ``cwd`` with ``env`` added, as ``user`` (None: the
        desktop's user). ``background``: start it detached (a GUI app) and return at once, with its ``pid``.
        A timeout gives exit code 124. Shared shell plumbing: :mod:`deskctl.providers._guest`."""
        raise self._unsupported("run commands")

    # -- files and harness actions (shared implementations: _files.FileTransfer, _guest.GuestActions) ---------
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        """Make ``remote`` a copy of the local file or directory ``local`` (parents created, files replaced)."""
        raise self._unsupported("copy files")

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        """Make ``local`` a copy of the remote file or directory ``remote``."""
        raise self._unsupported("copy files")

    def clipboard_get(self, handle: RemoteHandle) -> str:
        raise self._unsupported("read the clipboard")

    def clipboard_set(self, handle: RemoteHandle, text: str) -> None:
        raise self._unsupported("set the clipboard")

    def open_url(self, handle: RemoteHandle, url: str, browser: str | None = None) -> None:
        """Open ``url`` with the desktop's default opener, or with the program ``browser``."""
        raise self._unsupported("open URLs")

    def launch(self, handle: RemoteHandle, app: str, args: Sequence[str] = ()) -> int | None:
        """Start an application detached; its process id where the guest tells it."""
        raise self._unsupported("launch applications")

    def window_titles(self, handle: RemoteHandle) -> list[str]:
        """Titles of the desktop's top-level windows."""
        raise self._unsupported("list windows")

    def browser_endpoint(self, handle: RemoteHandle) -> Any:
        """The DevTools endpoint of the desktop's Chromium as the caller reaches it (a
        :class:`deskctl.browser.BrowserEndpoint`); only where ``capabilities.browser`` says so."""
        raise self._unsupported("reach a browser's DevTools")

    def _unsupported(self, what: str) -> Exception:
        from deskctl.errors import UsageError

        return UsageError(f"provider {self.name!r} cannot {what}", code="usage.unsupported", provider=self.name)

    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        """Where the pointer is, in action coordinates; only where ``capabilities.cursor_position`` says so."""
        from deskctl.errors import UsageError

        raise UsageError(f"provider {self.name!r} cannot tell where the pointer is", code="usage.unsupported",
                         provider=self.name)

    def keepalive(self, handle: RemoteHandle) -> None:
        """Tell the provider the session is in use (for providers that reap idle sandboxes)."""

    def detach(self, handle: RemoteHandle) -> None:
        """Release this process's hold on a desktop that must outlive it (``deskctl up``)."""

    def close(self) -> None:
        """Release clients and connections; never destroys anything."""

    # -- helpers ---------------------------------------------------------------------------------
    @classmethod
    def supported_sizes(cls, platform: Platform) -> tuple[tuple[int, int], ...] | None:
        """Fixed sizes for a platform, or None when the size is settable."""
        sizes = cls.capabilities.fixed_sizes.get(platform)
        return tuple(sizes) if sizes else None

    def check_geometry(self, geometry: Geometry | None, platform: Platform) -> str | None:
        """None when the provider can give this size on this platform, else the reason (for preflight)."""
        if geometry is None:
            return None
        fixed = self.supported_sizes(platform)
        if fixed is not None:
            if (geometry.width, geometry.height) in fixed:
                return None
            offered = ", ".join(f"{w}x{h}" for w, h in fixed)
            return f"{self.name} offers only {offered} on {platform.value} (asked {geometry}); use --geometry native"
        caps = self.capabilities
        if not caps.settable_geometry:
            return f"{self.name} cannot set the screen size; use --geometry native"
        (min_w, min_h), (max_w, max_h) = caps.min_size, caps.max_size
        if not (min_w <= geometry.width <= max_w and min_h <= geometry.height <= max_h):
            return f"{self.name} sizes range {min_w}x{min_h}..{max_w}x{max_h} (asked {geometry})"
        return None
