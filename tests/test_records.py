"""`record` behaves as @dataclass(frozen=True) does: the same records compared, hashed and shown alike."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from dataclasses import dataclass, field

import pytest

from pytest_gpuaccept.integrity import replaced_code
from pytest_gpuaccept.records import record


def _pair(body: dict[str, object]) -> tuple[type, type]:
    """The same class body made by @dataclass(frozen=True) and by @record."""
    annotations = {"name": "str", "value": "float", "note": "str", "extra": "tuple[int, ...]"}
    made: list[type] = []
    for decorate in (dataclass(frozen=True), record):
        namespace = {"__annotations__": dict(annotations), "__module__": __name__, **body,
                     "note": field(default="", compare=False), "extra": field(default_factory=tuple, repr=False)}
        made.append(decorate(type("Reading", (), namespace)))
    return made[0], made[1]


@pytest.mark.parametrize("args", [("a", 1.0), ("a", math.nan), ("b", 2.5)])
@pytest.mark.parametrize("other", [("a", 1.0), ("a", math.nan), ("b", 2.5)])
def test_equality_and_hash_as_dataclass(args: tuple[str, float], other: tuple[str, float]) -> None:
    plain, ours = _pair({})
    nan = math.nan  # one NaN object: a tuple holding the same object compares equal, as in @dataclass
    fix = [(n, nan if v != v else v) for n, v in (args, other)]
    assert (ours(*fix[0]) == ours(*fix[1])) == (plain(*fix[0]) == plain(*fix[1]))
    assert (ours(*fix[0]) == ours(*fix[0])) == (plain(*fix[0]) == plain(*fix[0]))
    assert hash(ours(*fix[0])) == hash(plain(*fix[0]))


def test_compare_false_and_repr_false_fields() -> None:
    plain, ours = _pair({})
    assert ours("a", 1.0, note="x") == ours("a", 1.0, note="y")
    assert hash(ours("a", 1.0, note="x")) == hash(ours("a", 1.0, note="y"))
    assert repr(ours("a", 1.0, "n", (1,))) == repr(plain("a", 1.0, "n", (1,))) == "Reading(name='a', value=1.0, note='n')"
    assert ours("a", 1.0) != plain("a", 1.0)  # another class: not equal, as between two dataclasses
    assert ours("a", 1.0).__eq__(("a", 1.0)) is NotImplemented


def test_frozen_replace_pickle_and_fields() -> None:
    _, ours = _pair({})
    reading = ours("a", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.value = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.other = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        del reading.name
    assert reading.value == 1.0 and copy.copy(reading) == reading and copy.deepcopy(reading) == reading
    assert dataclasses.replace(reading, value=2.0) == ours("a", 2.0)
    assert [f.name for f in dataclasses.fields(reading)] == ["name", "value", "note", "extra"]
    assert dataclasses.asdict(reading) == {"name": "a", "value": 1.0, "note": "", "extra": ()}


def test_records_of_the_package_pickle_and_pass_the_integrity_scan() -> None:
    from pytest_gpuaccept.units import parse_size

    size = parse_size("80 GB")
    assert pickle.loads(pickle.dumps(size)) == size
    assert hash(pickle.loads(pickle.dumps(size))) == hash(size)
    assert repr(size).startswith("Size(")
    assert replaced_code() == []
