"""Credentials: where each provider's secrets come from, and redaction of every secret in every output.

Resolution order for a variable: the process environment, then the OS keyring (service ``deskctl``,
username ``PROVIDER:VARIABLE``). Every secret value deskctl reads is registered with :func:`register_secret`
so that :func:`redact` can scrub it from messages, logs, errors, the ledger and JSON.

The keyring is optional: ``keyring`` is imported only when a variable is not in the environment, and a
missing or failing backend is reported (:func:`keyring_status`) as a warning with a remedy, never raised.
Which backend ``keyring`` uses is keyring's own configuration (``PYTHON_KEYRING_BACKEND`` or
``keyringrc.cfg`` under ``XDG_CONFIG_HOME``).
"""

from __future__ import annotations

import os

from deskctl._record import Record  # not @dataclass: its import (inspect, ast, dis) was a tenth of `deskctl up`

# redaction lives apart, for what only redacts; re-exported here (one registry of secrets)
from deskctl._redact import REDACTED, redact, register_secret

# what a provider declares lives with the provider contract; re-exported here, where it is read
from deskctl.providers.base import CredentialSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

__all__ = [
    "KEYRING_SERVICE",
    "REDACTED",
    "Credential",
    "CredentialSet",
    "KeyringStatus",
    "VarStatus",
    "credential_set",
    "delete_secret",
    "describe",
    "keyring_status",
    "mask",
    "presence_check",
    "redact",
    "register_secret",
    "resolve",
    "store_secret",
]

KEYRING_SERVICE = "deskctl"


def mask(value: str) -> str:
    """The display form of a secret: ``***`` (nothing of the value, not even its length), ``""`` when empty."""
    return REDACTED if value else ""


# -- what each provider needs (vendors' own variable names) ---------------------------------------------------


def credential_set(provider: str) -> CredentialSet:
    """The variables of ``provider`` as its class declares them (none for a name that is no provider)."""
    from deskctl.providers import provider_class

    cls = provider_class(provider)  # None: unknown, or its module cannot load: it reads nothing deskctl can name
    return cls.credentials if cls is not None else CredentialSet()


# -- the keyring (optional, lazily imported) ------------------------------------------------------------------


class KeyringStatus(Record, frozen=True):
    """Whether a usable keyring backend is configured; ``remedy`` says how to get one when not."""

    usable: bool
    backend: str
    message: str
    remedy: str | None = None


_KEYRING_REMEDY = (
    "pip install keyrings.alt (or a desktop keyring) and set PYTHON_KEYRING_BACKEND, "
    "or set the variables in the environment"
)


def _keyring() -> Any:
    import keyring

    return keyring


def keyring_status() -> KeyringStatus:
    """Which backend ``keyring`` would use, without reading any secret. Never raises."""
    try:
        keyring = _keyring()
    except ImportError as exc:
        return KeyringStatus(False, "none", f"the keyring library is not installed ({exc})", _KEYRING_REMEDY)
    try:
        backend = keyring.get_keyring()
    except Exception as exc:
        return KeyringStatus(False, "error", f"keyring backend failed to load: {redact(str(exc))}", _KEYRING_REMEDY)
    name = f"{type(backend).__module__}.{type(backend).__name__}"
    priority = getattr(backend, "priority", 1)
    if "fail" in name.lower() or "null" in name.lower() or (isinstance(priority, int | float) and priority <= 0):
        return KeyringStatus(False, name, f"no usable keyring backend ({name})", _KEYRING_REMEDY)
    if "plaintext" in name.lower():
        return KeyringStatus(True, name, f"keyring backend {name} (stores secrets unencrypted on disk)")
    return KeyringStatus(True, name, f"keyring backend {name}")


def _username(provider: str, var: str) -> str:
    return f"{provider}:{var}"


def _keyring_get(provider: str, var: str) -> str | None:
    status = keyring_status()
    if not status.usable:
        return None
    try:
        value = _keyring().get_password(KEYRING_SERVICE, _username(provider, var))
    except Exception:  # a locked or broken backend is a miss, reported by keyring_status/describe
        return None
    return str(value) if value else None


def store_secret(provider: str, var: str, value: str) -> None:
    """Store ``value`` in the keyring. Raises :class:`~deskctl.errors.ConfigInvalid` when no backend works."""
    from deskctl.errors import ConfigInvalid

    register_secret(value)
    status = keyring_status()
    if not status.usable:
        raise ConfigInvalid(f"cannot store {var}: {status.message}", provider=provider, remedy=status.remedy)
    try:
        _keyring().set_password(KEYRING_SERVICE, _username(provider, var), value)
    except Exception as exc:
        raise ConfigInvalid(
            f"cannot store {var} in the keyring ({status.backend}): {redact(str(exc))}",
            provider=provider, remedy=_KEYRING_REMEDY,
        ) from exc


def delete_secret(provider: str, var: str) -> bool:
    """Remove a stored secret. True when one was removed, False when none was stored."""
    from deskctl.errors import ConfigInvalid

    status = keyring_status()
    if not status.usable:
        raise ConfigInvalid(f"cannot remove {var}: {status.message}", provider=provider, remedy=status.remedy)
    keyring = _keyring()
    try:
        if keyring.get_password(KEYRING_SERVICE, _username(provider, var)) is None:
            return False
        keyring.delete_password(KEYRING_SERVICE, _username(provider, var))
    except Exception as exc:
        if type(exc).__name__ == "PasswordDeleteError":
            return False
        raise ConfigInvalid(
            f"cannot remove {var} from the keyring ({status.backend}): {redact(str(exc))}",
            provider=provider, remedy=_KEYRING_REMEDY,
        ) from exc
    return True


# -- resolution -----------------------------------------------------------------------------------------------


class Credential(Record, frozen=True):
    """A resolved variable. ``repr`` and ``str`` never show the value."""

    provider: str
    var: str
    value: str
    source: Literal["env", "keyring"]

    def __repr__(self) -> str:
        return f"Credential(provider={self.provider!r}, var={self.var!r}, source={self.source!r}, value={REDACTED!r})"

    __str__ = __repr__


def resolve(provider: str, var: str) -> Credential | None:
    """``var`` for ``provider`` from the environment, else the keyring; None when neither has it.

    Secret values are registered for redaction before they are returned.
    """
    value = os.environ.get(var)
    source: Literal["env", "keyring"] = "env"
    if not value:
        value = _keyring_get(provider, var)
        source = "keyring"
    if not value:
        return None
    if credential_set(provider).is_secret(var) or source == "keyring":
        register_secret(value)
    return Credential(provider, var, value, source)


class VarStatus(Record, frozen=True):
    """One row of ``deskctl credentials``: where a variable would come from, with the value redacted."""

    provider: str
    var: str
    source: str  # env | keyring | missing
    secret: bool
    shown: str  # the value for non-secrets, a mask for secrets, "" when missing
    required: bool = False  # part of one of the alternatives that configure the provider

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "var": self.var, "source": self.source, "secret": self.secret,
                "required": self.required, "value": self.shown}


def describe(provider: str) -> list[VarStatus]:
    """Every variable of ``provider`` with where it resolves from; secret values are masked."""
    cset = credential_set(provider)
    required = {var for alternative in cset.required_any for var in alternative}
    rows: list[VarStatus] = []
    for var in cset.variables:
        cred = resolve(provider, var)
        secret = cset.is_secret(var)
        if cred is None:
            rows.append(VarStatus(provider, var, "missing", secret, "", var in required))
        else:
            shown = mask(cred.value) if secret else redact(cred.value)
            rows.append(VarStatus(provider, var, cred.source, secret, shown, var in required))
    return rows


def presence_check(provider: str) -> tuple[bool, str, str | None]:
    """Whether one alternative of the provider's required variables fully resolves.

    Returns ``(ok, message, remedy)``; the message names variables and sources, never values.
    """
    cset = credential_set(provider)
    if not cset.required_any:
        return True, f"{provider} needs no credentials", None
    for alternative in cset.required_any:
        found = [resolve(provider, var) for var in alternative]
        if all(found):
            where = ", ".join(f"{c.var} from {c.source}" for c in found if c is not None)
            return True, f"{provider} credentials present ({where})", None
    options = " or ".join(" + ".join(alt) for alt in cset.required_any)
    first = cset.required_any[0]
    remedy = f"set {first[0]} in the environment, or run: deskctl login {provider} --var {first[0]}"
    return False, f"{provider} requires {options} (environment or keyring) [{cset.source}]", remedy
