"""The cua cloud fake: :class:`FakeCua` (see :mod:`fakes.cua.server`)."""

from fakes.cua.server import API_VERSION, FakeCua, LoggedRequest, Pool

__all__ = ["API_VERSION", "FakeCua", "LoggedRequest", "Pool"]
