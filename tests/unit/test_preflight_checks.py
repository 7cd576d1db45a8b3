"""The one preflight recorder (:class:`CheckRecorder`) and the exception -> ``fail`` row (:func:`failure_from`)
that every provider's ``preflight()`` and the engine share."""

from __future__ import annotations

import threading

from deskctl.checks import CheckRecorder, failure_from
from deskctl.credentials import register_secret
from deskctl.errors import CredentialsInvalid, ProviderUnreachable


def test_each_row_is_timed_from_its_own_start_and_names_the_provider() -> None:
    checks = CheckRecorder("docker")
    threading.Event().wait(0.05)
    first = checks.add("pass", "docker.daemon", "Docker answers")
    checks.start()
    second = checks.add("warn", "docker.memory", "little memory left", "close other desktops")
    assert checks.results == [first, second]
    assert first.elapsed_ms >= 50 > second.elapsed_ms
    assert (second.status, second.code, second.remedy, second.provider) == (
        "warn", "docker.memory", "close other desktops", "docker")


def test_an_error_becomes_a_fail_row_with_its_code_or_the_one_given() -> None:
    checks = CheckRecorder("ssh")
    error = ProviderUnreachable("labbox:22 refused the connection", provider="ssh", remedy="start sshd")
    own = checks.add_error(error)
    named = checks.add_error(error, "ssh.no_target", remedy="--host user@host")
    assert (own.status, own.code, own.message, own.remedy) == (
        "fail", "provider.unreachable", "labbox:22 refused the connection", "start sshd")
    assert (named.code, named.message, named.remedy) == ("ssh.no_target", error.message, "--host user@host")


def test_secrets_never_reach_a_row() -> None:
    secret = "sk-recorder-7f3a9c1e55"
    register_secret(secret)
    checks = CheckRecorder("daytona")
    row = checks.add_error(CredentialsInvalid(f"key {secret} refused", remedy=f"export DAYTONA_API_KEY={secret}"))
    assert secret not in row.message and secret not in (row.remedy or "")
    raised = failure_from(RuntimeError(f"boom {secret}"), code="daytona.preflight", provider="daytona")
    assert secret not in raised.message


def test_an_exception_from_a_check_becomes_a_fail_row() -> None:
    deskctl_error = failure_from(ProviderUnreachable("no route", provider="cua-cloud"), code="cua-cloud.preflight",
                                 provider=None, elapsed_ms=3.0)
    assert (deskctl_error.code, deskctl_error.provider, deskctl_error.elapsed_ms) == (
        "provider.unreachable", "cua-cloud", 3.0)
    other = failure_from(KeyError("status"), code="cua-cloud.preflight", provider="cua-cloud")
    assert (other.status, other.code) == ("fail", "cua-cloud.preflight")
    assert other.message == "check cua-cloud.preflight raised KeyError: 'status'"
