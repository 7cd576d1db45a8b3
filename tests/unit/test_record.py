"""deskctl._record: the value classes on the `deskctl do` path (screenshots, handles, ledger rows, X addresses) are
records, not dataclasses, and behave as the dataclasses they replaced, to their callers and to `dataclasses`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from deskctl._record import Record, field, record_fields, replace
from deskctl.core.frames import ExecResult, RawFrame, Screenshot
from deskctl.core.x11auth import X11Address
from deskctl.ledger import Event, SessionRecord
from deskctl.observe.transform import ImageTransform, TransformedScreenshot
from deskctl.providers.base import Capabilities, CredentialSet, RemoteHandle


def _session(**changes: object) -> SessionRecord:
    values: dict[str, object] = {"session_id": "dk-1", "provider": "xvfb", "platform": "ubuntu",
                                 "geometry": "320x240", "owner": "h:1", "detached": True, "status": "ready",
                                 "intent_at": 1.0}
    values.update(changes)
    return SessionRecord(**values)  # type: ignore[arg-type]


def test_construction_defaults_and_errors_are_a_dataclasses() -> None:
    shot = Screenshot(b"png", 3, 4)
    assert shot == Screenshot(png=b"png", width=3, height=4) and shot != Screenshot(b"png", 3, 5)
    assert repr(shot) == "Screenshot(png=b'png', width=3, height=4)"
    assert RawFrame(b"", 1, 1).mode == "BGRX" and ExecResult(0, "out").to_dict()["stderr"] == ""
    one, two = RemoteHandle("xvfb", "dk-1", "r"), RemoteHandle("xvfb", "dk-1", "r")
    assert one.labels == {} and one.labels is not two.labels  # default_factory: one per instance
    with pytest.raises(TypeError, match="missing required argument 'height'"):
        Screenshot(b"png", 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'depth'"):
        Screenshot(b"png", 3, 4, depth=24)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values"):
        Screenshot(b"png", 3, 4, width=3)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional arguments"):
        Screenshot(b"png", 3, 4, 5)  # type: ignore[call-arg]
    assert CredentialSet(("X_API_KEY", "X_URL")).secret == frozenset({"X_API_KEY"})  # __post_init__ ran


def test_frozen_records_refuse_assignment_and_hash_by_value_mutable_ones_do_not_hash() -> None:
    shot = Screenshot(b"png", 3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        shot.width = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del shot.png  # type: ignore[misc]
    assert hash(shot) == hash(Screenshot(b"png", 3, 4))
    assert {X11Address(":5"), X11Address(":5")} == {X11Address(display=":5")}
    record = _session()
    record.status = "ended"  # a ledger row is mutable, as its dataclass was
    assert record.status == "ended"
    with pytest.raises(TypeError):
        hash(record)


def test_the_dataclasses_module_sees_records_as_dataclasses() -> None:
    record = _session(labels={"a": "b"})
    assert dataclasses.is_dataclass(record) and not dataclasses.is_dataclass(Record)
    assert [f.name for f in dataclasses.fields(Screenshot)] == ["png", "width", "height"]
    assert dataclasses.asdict(record) == record.to_dict() and record.to_dict()["labels"] == {"a": "b"}
    assert dataclasses.replace(Capabilities(frozenset()), hold_input=False).hold_input is False
    assert {f.name for f in dataclasses.fields(Capabilities) if f.type == "bool"} >= {"exec", "hold_input"}
    assert replace(Event("dk-1", 1.0, "ready"), kind="ended") == Event("dk-1", 1.0, "ended")
    assert record_fields(Screenshot) == ("png", "width", "height")
    with pytest.raises(TypeError, match="no field"):
        replace(Screenshot(b"", 1, 1), depth=3)


def test_subclasses_add_fields_after_their_bases_as_records_or_as_dataclasses() -> None:
    zoomed = TransformedScreenshot(b"png", 2, 2, ImageTransform((0, 0, 4, 4), (2, 2)))
    assert zoomed.width == 2 and zoomed.transform.to_dict()["size"] == [2, 2]
    assert zoomed != Screenshot(b"png", 2, 2)  # another class: never equal, as between dataclasses

    @dataclasses.dataclass(frozen=True)
    class Tagged(Screenshot):
        tag: str = "t"

    tagged = Tagged(b"png", 1, 2)
    assert (tagged.width, tagged.tag) == (1, "t") and tagged == Tagged(b"png", 1, 2, "t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.tag = "u"  # type: ignore[misc]


def test_a_declaration_a_dataclass_would_refuse_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default field"):
        class Bad(Record):
            a: int = 1
            b: int

    with pytest.raises(TypeError, match="frozen exactly when"):
        class Thawed(Screenshot, frozen=False):
            extra: int = 0

    with pytest.raises(ValueError):
        field(default=1, default_factory=int)


def test_import_deskctl_and_a_record_load_no_dataclasses_module() -> None:
    """The point of records: a process that only holds them (a `deskctl do`) never imports dataclasses/inspect."""
    code = ("import sys, json; import deskctl.ledger, deskctl.providers.base, deskctl.core.x11auth; "
            "from deskctl.core.frames import Screenshot; Screenshot(b'', 1, 1); "
            "print(json.dumps(sorted({'dataclasses', 'inspect'} & set(sys.modules))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ}, check=True).stdout
    assert json.loads(out) == []
