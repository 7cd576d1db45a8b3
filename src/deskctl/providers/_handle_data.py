"""The typed shape of a provider's ``handle.data`` (what it stores in the handle and the ledger row to find its
desktop again): a frozen record per provider (:mod:`deskctl._record`), built on :class:`HandleData`.

No pydantic and no :mod:`dataclasses` here: ``deskctl do`` and ``down`` read handle data and import neither.
A row written by an older deskctl loads: a key it lacks takes the field's default (which is what that version
meant), a ``None`` counts as absent, and keys this version does not know are ignored (they stay in ``handle.data``
untouched). A field holding a secret is declared ``deskctl._record.field(repr=False)``; no provider keeps a secret
itself in its handle data (only the path of a 0600 file), so ``to_data()`` never carries one into the ledger or
``--json`` output.
"""

from __future__ import annotations

from deskctl._record import Record, record_fields

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypeVar

    from deskctl.providers.base import RemoteHandle

__all__ = ["HandleData"]

_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(record_fields(cls))
    return names


class HandleData(Record, frozen=True):
    """A provider's handle data: subclasses declare fields with defaults; :meth:`from_data` reads a stored row,
    :meth:`to_data` gives the JSON-ready mapping to store, :meth:`store` writes it into a handle."""

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Turn the stored JSON values into the fields' types (lists into tuples, ...); a subclass overrides."""
        return values

    @classmethod
    def from_data(cls: type[_Data], data: Mapping[str, Any]) -> _Data:
        known = _field_names(cls)
        return cls(**cls._convert({k: v for k, v in data.items() if k in known and v is not None}))

    @classmethod
    def of(cls: type[_Data], handle: RemoteHandle) -> _Data:
        """The handle's data, typed."""
        return cls.from_data(handle.data)

    def _dump(self, name: str, value: Any) -> Any:
        """One field's JSON value (a subclass overrides for nested records)."""
        return list(value) if isinstance(value, tuple) else value

    def to_data(self) -> dict[str, Any]:
        """Every field as JSON-ready values, keyed by the names older rows used."""
        return {name: self._dump(name, getattr(self, name)) for name in record_fields(self)}

    def store(self, handle: RemoteHandle) -> None:
        """Write every field into ``handle.data`` (keys it does not know stay as they are)."""
        handle.data.update(self.to_data())


if TYPE_CHECKING:
    _Data = TypeVar("_Data", bound=HandleData)
