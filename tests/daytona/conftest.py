"""Fixtures of the Daytona tests: a fresh loopback fake per test and a provider pointed at it
(:func:`fakes._cloud.cloud_fixtures`)."""

from __future__ import annotations

from daytona._daytona_target import FAST_OPTIONS
from deskctl.providers.daytona import DaytonaProvider
from fakes._cloud import cloud_fixtures
from fakes.daytona import FakeDaytona

fake, daytona_env, provider = cloud_fixtures(FakeDaytona, DaytonaProvider, FAST_OPTIONS, env="daytona_env")
