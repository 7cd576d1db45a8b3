"""Loopback fake servers of the cloud providers, written from ``shared/specs/*.md`` (test code only)."""
