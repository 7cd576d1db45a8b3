"""Fixtures of the use-computer tests: a fresh loopback fake per test and a provider pointed at it
(:func:`fakes._cloud.cloud_fixtures`)."""

from __future__ import annotations

from deskctl.providers.use_computer import UseComputerProvider
from fakes._cloud import cloud_fixtures
from fakes.use_computer import FakeUseComputer
from use_computer._use_computer_target import FAST_OPTIONS

fake, uc_env, provider = cloud_fixtures(FakeUseComputer, UseComputerProvider, FAST_OPTIONS, env="uc_env")
