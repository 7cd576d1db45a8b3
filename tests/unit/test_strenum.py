"""deskctl._strenum.StrEnum held to enum.StrEnum side by side: one class body made on each base, the same answers."""

from __future__ import annotations

import copy
import enum
import pickle
import subprocess
import sys
from typing import Any

import pytest

from deskctl._strenum import StrEnum


def _colour(base: Any, name: str) -> Any:
    """The one class body under test, on ``base``, importable as ``name`` from this module (for pickle)."""

    class Colour(base):  # type: ignore[misc,valid-type]
        __qualname__ = name
        RED = "red"
        GREEN = "green"
        BLUE = "blue"
        CRIMSON = "red"  # an alias of RED
        __hidden = "private"  # a private name: no member

        @property
        def loud(self) -> str:
            return str(self.value).upper()

        def paint(self, thing: str) -> str:
            return f"{thing} in {self}"

        @classmethod
        def first(cls) -> Any:
            return next(iter(cls))

        @staticmethod
        def count_of_walls() -> int:
            return 4

    Colour.__name__ = name
    return Colour


StdColour = _colour(enum.StrEnum, "StdColour")
OurColour = _colour(StrEnum, "OurColour")
BOTH = pytest.mark.parametrize("cls", [StdColour, OurColour], ids=["enum", "deskctl"])


def _same(std: object, ours: object) -> None:
    """``std`` (of enum's class) and ``ours`` are the same answer, the classes' names aside."""
    assert str(ours).replace("OurColour", "Colour") == str(std).replace("StdColour", "Colour")
    assert type(ours).__name__ == type(std).__name__ or (type(ours) is OurColour and type(std) is StdColour)


def _both(probe: Any) -> None:
    _same(probe(StdColour), probe(OurColour))


def test_members_are_instances_of_the_class_and_of_str() -> None:
    for cls in (StdColour, OurColour):
        assert isinstance(cls.RED, cls) and isinstance(cls.RED, str) and type(cls.RED) is cls
    assert isinstance(OurColour.RED, StrEnum) and not isinstance(OurColour.RED, enum.Enum)


@pytest.mark.parametrize("value", ["red", "green", "blue"])
def test_calling_the_class_with_a_value_or_a_member_gives_the_member(value: str) -> None:
    for cls in (StdColour, OurColour):
        member = cls(value)
        assert member is cls(member) is cls(str(member)) is getattr(cls, member.name)
        assert cls(StdColour(value)) is cls(OurColour(value)) is member  # a member of another class, by its value
    _both(lambda cls: repr(cls(value)))


@pytest.mark.parametrize("value", ["purple", "RED", "", 3, None, [], ["red"], {"red": 1}, b"red"])
def test_an_unknown_value_is_enums_value_error(value: object) -> None:
    messages = []
    for cls in (StdColour, OurColour):
        with pytest.raises(ValueError) as caught:
            cls(value)
        assert caught.value.__cause__ is None
        messages.append(str(caught.value))
    assert messages == [f"{value!r} is not a valid StdColour", f"{value!r} is not a valid OurColour"]


def test_iteration_len_members_and_names() -> None:
    _both(lambda cls: [repr(m) for m in cls])
    assert [m.value for m in OurColour] == ["red", "green", "blue"]  # definition order, no alias
    assert len(OurColour) == len(StdColour) == 3
    _both(lambda cls: list(cls.__members__.items()))
    assert OurColour.__members__["CRIMSON"] is OurColour.RED
    assert type(OurColour.__members__) is type(StdColour.__members__)  # a read-only mapping proxy
    with pytest.raises(TypeError):
        OurColour.__members__["PINK"] = "pink"
    assert OurColour.CRIMSON is OurColour.RED and OurColour.CRIMSON.name == "RED"
    assert "red" in OurColour and OurColour.RED in OurColour and "purple" not in OurColour


def test_only_plain_names_bound_to_a_string_are_members() -> None:
    for cls in (StdColour, OurColour):
        assert set(cls.__members__) == {"RED", "GREEN", "BLUE", "CRIMSON"}
        assert cls._Colour__hidden == "private"  # the name of the class statement mangles it


@BOTH
def test_name_and_value(cls: Any) -> None:
    assert cls.GREEN.name == "GREEN" and type(cls.GREEN.name) is str
    assert cls.GREEN.value == "green" and type(cls.GREEN.value) is str


def test_str_format_and_fstrings_give_the_value_and_repr_is_enums() -> None:
    _both(lambda cls: (str(cls.BLUE), format(cls.BLUE), format(cls.BLUE, ">6"), f"{cls.BLUE}|{cls.BLUE!s}",
                       "%s" % cls.BLUE, "{}".format(cls.BLUE)))  # noqa: UP031, UP032 (each way of formatting)
    for cls in (StdColour, OurColour):
        assert type(str(cls.BLUE)) is str and str(cls.BLUE) == "blue" and f"{cls.BLUE}" == "blue"
    _both(lambda cls: (repr(cls.BLUE), f"{cls.BLUE!r}", repr([cls.RED])))
    assert repr(OurColour.BLUE) == "<OurColour.BLUE: 'blue'>"


@BOTH
def test_a_member_is_its_string_as_dict_key_and_in_frozensets(cls: Any) -> None:
    assert cls.RED == "red" and "red" == cls.RED and cls.RED != "RED" and cls.RED != cls.GREEN  # noqa: SIM300
    assert hash(cls.RED) == hash("red")  # enum.StrEnum hashes as str too: both find the plain string
    by_member = {cls.RED: 1, cls.GREEN: 2}
    assert by_member["red"] == 1 and {"green": 2}[cls.GREEN] == 2
    assert "blue" not in by_member
    assert cls.RED in frozenset({"red"}) and "red" in frozenset({cls.RED})
    assert frozenset(cls) == {"red", "green", "blue"}
    assert sorted(cls) == [cls.BLUE, cls.GREEN, cls.RED] and cls.BLUE < cls.GREEN
    assert cls.RED + "!" == "red!" and cls.RED.upper() == "RED" and cls.RED.startswith("r")


@BOTH
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trips_to_the_same_member(cls: Any, protocol: int) -> None:
    assert pickle.loads(pickle.dumps(cls.GREEN, protocol)) is cls.GREEN
    assert pickle.loads(pickle.dumps({cls.RED: [cls.BLUE]}, protocol)) == {cls.RED: [cls.BLUE]}


@BOTH
def test_copy_and_deepcopy_give_the_same_member(cls: Any) -> None:
    assert copy.copy(cls.GREEN) is cls.GREEN and copy.deepcopy(cls.GREEN) is cls.GREEN
    assert copy.deepcopy({"c": [cls.RED]})["c"][0] is cls.RED


def test_properties_methods_classmethods_and_staticmethods_of_the_body_work() -> None:
    _both(lambda cls: (cls.RED.loud, cls.GREEN.paint("a wall"), repr(cls.first()), repr(cls.RED.first()),
                       cls.count_of_walls(), cls.BLUE.count_of_walls()))
    assert OurColour.GREEN.paint("a wall") == "a wall in green"


def test_a_sunder_name_is_refused_as_in_enum() -> None:
    for base in (enum.StrEnum, StrEnum):
        with pytest.raises(ValueError, match="_sunder_ names, such as '_colour_', are reserved"):
            class Bad(base):  # type: ignore[misc,valid-type]
                _colour_ = "red"


def test_a_member_value_that_is_not_a_string_is_a_type_error_as_in_enum() -> None:
    messages = []
    for base in (enum.StrEnum, StrEnum):
        with pytest.raises(TypeError) as caught:
            class Bad(base):  # type: ignore[misc,valid-type]
                ONE = 1
        messages.append(str(caught.value))
    assert messages[0] == messages[1] == "1 is not a string"


def test_a_class_with_members_cannot_be_subclassed_but_a_base_without_may() -> None:
    messages = []
    for cls in (StdColour, OurColour):
        with pytest.raises(TypeError) as caught:
            class More(cls):  # type: ignore[misc,valid-type]
                PINK = "pink"
        messages.append(str(caught.value).replace(cls.__name__, "Colour"))
    assert messages[0] == messages[1] == "<enum 'More'> cannot extend <enum 'Colour'>"

    class Shouting(StrEnum):
        def shout(self) -> str:
            return self.upper() + "!"

    class Animal(Shouting):
        CAT = "cat"

    assert Animal.CAT.shout() == "CAT!" and isinstance(Animal.CAT, Shouting) and list(Animal) == [Animal.CAT]


@BOTH
def test_members_cannot_be_renamed_revalued_reassigned_or_deleted(cls: Any) -> None:
    for attribute in ("name", "value"):
        with pytest.raises(AttributeError):
            setattr(cls.RED, attribute, "x")
    with pytest.raises(AttributeError, match="cannot reassign member 'RED'"):
        cls.RED = "x"
    with pytest.raises(AttributeError, match="cannot delete member 'RED'"):
        del cls.RED
    assert cls.RED.value == "red" and cls("red") is cls.RED


def test_our_members_take_no_attribute_at_all() -> None:
    for attribute in ("colour", "_name_", "_value_", "__dict__"):
        with pytest.raises(AttributeError):
            setattr(OurColour.RED, attribute, "x")
        with pytest.raises(AttributeError):
            delattr(OurColour.RED, attribute)
    assert OurColour.RED.name == "RED" and OurColour.RED.value == "red"


def test_importing_it_loads_none_of_enums_imports() -> None:
    """The point of the module: a process that defines a StrEnum loads neither enum nor what enum pulls."""
    code = ("import sys; from deskctl._strenum import StrEnum\n"
            "class C(StrEnum):\n    A = 'a'\n"
            "assert C('a') is C.A and repr(C.A) == \"<C.A: 'a'>\"\n"
            "print(sorted({'enum', 'functools', 'collections', 'types', 'operator', 're', 'typing'}"
            " & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]"
