"""Helpers shared by the command modules: the ``--json`` option and printing data to stdout."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["echo_json", "json_option", "note"]

F = TypeVar("F", bound=Callable[..., Any])


def json_option(func: F) -> F:
    """``--json``: print one machine-readable document on stdout (errors as ``{"error": {...}}``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(func)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def note(message: str) -> None:
    """A message for the person (progress, hints): stderr, never stdout."""
    click.echo(message, err=True)
