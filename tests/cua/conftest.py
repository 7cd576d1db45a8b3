"""Fixtures of the cua-cloud tests: a fresh loopback fake per test and a provider pointed at it
(:func:`fakes._cloud.cloud_fixtures`)."""

from __future__ import annotations

from cua._cua_target import FAST_OPTIONS
from deskctl.providers.cua_cloud import CuaCloudProvider
from fakes._cloud import cloud_fixtures
from fakes.cua import FakeCua

fake, cua_env, provider = cloud_fixtures(FakeCua, CuaCloudProvider, FAST_OPTIONS, env="cua_env")
