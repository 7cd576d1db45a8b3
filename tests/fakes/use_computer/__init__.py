"""The use.computer fake: :class:`FakeUseComputer` (see :mod:`fakes.use_computer.server`)."""

from fakes.use_computer.server import FakeUseComputer, Injection, LoggedRequest

__all__ = ["FakeUseComputer", "Injection", "LoggedRequest"]
