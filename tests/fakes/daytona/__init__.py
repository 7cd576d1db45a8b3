"""The Daytona fake: :class:`FakeDaytona` (see :mod:`fakes.daytona.server`)."""

from fakes.daytona.server import SNAPSHOTS, FakeDaytona, Injection, LoggedRequest

__all__ = ["SNAPSHOTS", "FakeDaytona", "Injection", "LoggedRequest"]
