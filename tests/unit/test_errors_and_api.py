from __future__ import annotations

import json
import subprocess
import sys

import pytest

import deskctl
from deskctl import errors
from deskctl.actions import normalize_chord, normalize_key
from deskctl.credentials import redact, register_secret

EXIT_CODES = {
    errors.UsageError: 2, errors.ConfigInvalid: 2, errors.GeometryOutOfBounds: 2,
    errors.CredentialsMissing: 3, errors.CredentialsInvalid: 3, errors.CredentialsForbidden: 3,
    errors.QuotaExceeded: 3, errors.CompatError: 3, errors.GeometryUnsupported: 3,
    errors.BudgetExceeded: 4, errors.CleanupIncomplete: 5, errors.WaitTimeout: 6, errors.SessionPaused: 7,
    errors.ProviderUnreachable: 20, errors.RateLimited: 20, errors.ProviderApiError: 20,
    errors.ReadinessTimeout: 20, errors.GeometryMismatch: 20, errors.CapacityUnavailable: 20,
    errors.Interrupted: 130, errors.DeskctlError: 1,
}

CODES = {
    errors.ConfigInvalid: "config.invalid", errors.GeometryOutOfBounds: "geometry.out_of_bounds",
    errors.CredentialsMissing: "credentials.missing", errors.CredentialsInvalid: "credentials.invalid",
    errors.CredentialsForbidden: "credentials.forbidden", errors.QuotaExceeded: "quota.exceeded",
    errors.GeometryUnsupported: "geometry.unsupported", errors.BudgetExceeded: "budget.exceeded",
    errors.CleanupIncomplete: "cleanup.incomplete", errors.ProviderUnreachable: "provider.unreachable",
    errors.RateLimited: "provider.rate_limited", errors.ProviderApiError: "provider.api_error",
    errors.ReadinessTimeout: "readiness.timeout", errors.GeometryMismatch: "geometry.mismatch",
    errors.CapacityUnavailable: "capacity.unavailable", errors.Interrupted: "interrupted",
    errors.WaitTimeout: "wait.timeout", errors.SessionPaused: "session.paused", errors.DeskctlError: "internal",
}


@pytest.mark.parametrize("cls", list(EXIT_CODES))
def test_exit_codes_are_the_documented_ones(cls: type[errors.DeskctlError]) -> None:
    assert cls("x").exit_code == EXIT_CODES[cls]


@pytest.mark.parametrize("cls", list(CODES))
def test_codes_never_change(cls: type[errors.DeskctlError]) -> None:
    assert cls("x").code == CODES[cls]


def test_sigterm_interrupt_exits_143() -> None:
    import signal

    assert errors.Interrupted("x", signum=signal.SIGTERM).exit_code == 143


def test_finer_codes_must_stay_in_their_family() -> None:
    assert errors.CompatError("x", code="compat.agent_unsupported").code == "compat.agent_unsupported"
    with pytest.raises(ValueError):
        errors.CompatError("x", code="budget.exceeded")


def test_error_json_shape_is_stable_and_redacted() -> None:
    register_secret("sk-live-abcdef123456")
    err = errors.CredentialsInvalid("key sk-live-abcdef123456 was refused", provider="daytona", remedy="set it")
    doc = err.to_dict()
    assert set(doc) == {"error"}
    assert set(doc["error"]) == {"code", "message", "provider", "remedy"}
    assert "sk-live" not in json.dumps(doc)


def test_redact_scrubs_secret_shapes() -> None:
    text = redact("Authorization: Bearer abc.def.ghi and api_key=12345678 and ?token=zzz")
    assert "abc.def" not in text and "12345678" not in text and "zzz" not in text


def test_public_api_is_pinned() -> None:
    assert deskctl.__all__ == sorted(deskctl.__all__)
    assert set(deskctl.__all__) == {
        "BudgetExceeded", "CleanupIncomplete", "DeskctlError", "Desktop", "DesktopSpec", "Geometry",
        "InfrastructureError", "Interrupted", "Platform", "PreflightError", "UsageError", "__version__", "aio",
        "attach", "open_desktop", "preflight",
    }
    for name in deskctl.__all__:
        assert getattr(deskctl, name) is not None


def test_import_stays_light() -> None:
    code = (
        "import sys, deskctl; heavy = {'httpx', 'paramiko', 'PIL', 'Xlib', 'docker', 'keyring', 'psycopg', 'tenacity'};"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_loads_no_typing_or_signal() -> None:
    """``import deskctl`` (the errors and the package) leaves typing to the type checkers (``if TYPE_CHECKING:``
    under the module's own ``TYPE_CHECKING = False``) and takes SIGINT from ``_signal``: typing alone is ~13M
    instructions, a third of a bare ``python -c pass``."""
    code = "import sys, deskctl; print(sorted(m for m in ('typing', 'signal') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_stays_light() -> None:
    code = (
        "import sys; from deskctl.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'httpx', 'paramiko', 'PIL', 'Xlib', 'docker', 'keyring', 'psycopg', 'pydantic'};"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.strip().splitlines()[-1] == "[]"
    assert "preflight" in proc.stdout and "reap" in proc.stdout


@pytest.mark.parametrize(
    ("chord", "keys"),
    [("ctrl+s", ("ctrl", "s")), ("cmd+shift+T", ("super", "shift", "T")), ("Return", ("enter",)),
     ("pageup", ("pageup",)), ("PgDn", ("pagedown",)), ("f24", ("f24",)), ("ctrl++", ("ctrl", "+")),
     ("é", ("é",)), ("esc", ("escape",))],
)
def test_key_chords_normalise(chord: str, keys: tuple[str, ...]) -> None:
    assert normalize_chord(chord) == keys


@pytest.mark.parametrize("bad", ["", "ctrl+", "hyper", "f25"])
def test_bad_keys_are_usage_errors(bad: str) -> None:
    with pytest.raises(errors.UsageError):
        normalize_chord(bad) if "+" in bad or not bad else normalize_key(bad)


def test_actions_are_frozen_values_like_dataclasses() -> None:
    """The action classes are written out (no @dataclass, for `deskctl do`'s start-up) and keep what frozen
    dataclasses gave: equality and hash by fields within one class, the dataclass repr, immutability, pickling,
    positional and keyword patterns, and the fields in order."""
    import copy
    import dataclasses
    import pickle

    from deskctl import actions as act

    click = act.Click(1, 2)
    assert click == act.Click(1, 2, "left", 1) == act.Click(x=1, y=2, button="left", count=1)
    assert click != act.Click(1, 2, "right") and act.KeyDown("a") != act.KeyUp("a") and click != (1, 2, "left", 1)
    assert hash(click) == hash(act.Click(1, 2)) and len({click, act.Click(1, 2), act.Move(1, 2)}) == 2
    assert repr(click) == "Click(x=1, y=2, button='left', count=1)"
    assert repr(act.KeyPress(("ctrl", "s"))) == "KeyPress(keys=('ctrl', 's'))"
    with pytest.raises(dataclasses.FrozenInstanceError):
        click.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        click.extra = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(click)) == click and copy.deepcopy(click) == click
    match act.Drag(1, 2, 3, 4):
        case act.Drag(x1, y1, x2=x2, button=button):
            assert (x1, y1, x2, button) == (1, 2, 3, "left")
        case _:
            raise AssertionError("no match")
    assert act.action_values(act.Scroll(1, 2, dy=-3)) == {"x": 1, "y": 2, "dx": 0, "dy": -3}
    with pytest.raises(TypeError):
        act.Move(1)  # type: ignore[call-arg]
