"""The platforms a desktop can run (:class:`Platform`), apart from :mod:`deskctl.spec` so that code that only
names a platform (providers' capabilities, attaching to a running session) does not load pydantic.
:mod:`deskctl.spec` re-exports :class:`Platform`: both names are the same class."""

from __future__ import annotations

from deskctl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from enum import StrEnum
else:
    from deskctl._strenum import StrEnum  # enum.StrEnum's part deskctl uses, without enum (see its docstring)

__all__ = ["Platform", "suggest"]


class Platform(StrEnum):
    UBUNTU = "ubuntu"
    WINDOWS = "windows"
    MACOS = "macos"

    @classmethod
    def parse(cls, value: str | Platform) -> Platform:
        if isinstance(value, Platform):
            return value
        raw = str(value).strip().lower()
        key = _PLATFORM_ALIASES.get(raw, raw)
        try:
            return cls(key)
        except ValueError:
            known = sorted({p.value for p in cls} | set(_PLATFORM_ALIASES))
            raise UsageError(
                f"unknown platform {value!r}" + suggest(raw, known) + f"; allowed: {', '.join(known)}",
                code="usage.unknown_platform",
            ) from None


_PLATFORM_ALIASES = {"linux": "ubuntu", "win": "windows", "mac": "macos", "osx": "macos"}


def suggest(value: str, known: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or an empty string."""
    import difflib  # here: only a misspelt value needs it, and every `deskctl do` loads this module

    close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
