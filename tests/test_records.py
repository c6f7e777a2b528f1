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


def test_a_record_is_made_when_first_used_and_its_fields_read_before() -> None:
    """@dataclass's work waits for the first instance or the first read of the fields; both give the same."""
    _, ours = _pair({})
    assert ours.__dict__["__init__"].__name__ == "_first_init"
    assert [f.name for f in dataclasses.fields(ours)] == ["name", "value", "note", "extra"]
    assert dataclasses.is_dataclass(ours) and ours("a", 1.0).extra == ()
    _, later = _pair({})
    assert later("a", 1.0, note="x") == later("a", 1.0) and repr(later("b", 2.0)) == "Reading(name='b', value=2.0, note='')"
    with pytest.raises(TypeError):
        later("a")  # the __init__ @dataclass wrote: `value` is required
    with pytest.raises(TypeError, match="__init__"):
        record(type("Own", (), {"__init__": lambda self: None}))


def test_a_record_made_by_many_threads_at_once_is_made_once() -> None:
    import threading

    _, ours = _pair({})
    start, made, failed = threading.Barrier(8), [], []

    def make(n: int) -> None:
        start.wait()
        try:
            made.append(ours(str(n), float(n)))
        except Exception as error:  # noqa: BLE001 - the test reports it below
            failed.append(error)

    threads = [threading.Thread(target=make, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and sorted(r.value for r in made) == [float(n) for n in range(8)]
    assert all(r.extra == () and r.note == "" for r in made)  # default_factory kept: made once, not twice


def test_a_record_unpickled_where_its_class_was_never_made_compares_hashes_and_shows() -> None:
    """Unpickling makes no __init__ call: a process that only unpickles must still compare, hash and show."""
    import subprocess
    import sys

    from pytest_gpuaccept.units import Size

    data = pickle.dumps(Size(8 * 2**30, "8 GiB"))
    code = ("import pickle, sys; from pytest_gpuaccept.units import Size; "
            "assert Size.__dict__['__init__'].__name__ == '_first_init', 'made at import'; "
            "s = pickle.loads(sys.stdin.buffer.read()); h, r = hash(s), repr(s); "
            "print(h == hash(Size(8 * 2**30, '8 GiB')), s == Size(8 * 2**30, '8 GiB'), r)")
    shown = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, text=False)
    assert shown.returncode == 0, shown.stderr.decode()
    assert shown.stdout.decode().split(" ", 2) == ["True", "True", "Size(nbytes=8589934592, text='8 GiB')\n"]


def test_a_record_whose_module_left_sys_modules_is_still_made() -> None:
    """pytester drops the modules an in-process run imported; their records may be made only afterwards."""
    import sys
    import types

    module = types.ModuleType("gpuaccept_records_gone")
    sys.modules[module.__name__] = module
    try:
        made = record(type("Gone", (), {"__annotations__": {"value": "int"}, "__module__": module.__name__}))
    finally:
        del sys.modules[module.__name__]
    assert made(3).value == 3 and module.__name__ not in sys.modules


@pytest.mark.parametrize("args, kwargs", [
    ((), {}), (("a",), {}), (("a", 1.0, "n", (1,), "too many"), {}), (("a", 1.0), {"name": "b"}),
    (("a", 1.0), {"unknown": 1}), ((), {"value": 1.0}), (("a", 1.0, "n", (1,), 5, 6), {}),
])
def test_the_shared_init_refuses_what_the_dataclass_init_refuses_and_says_so_alike(
        args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    plain, ours = _pair({})
    with pytest.raises(TypeError) as theirs:
        plain(*args, **kwargs)
    with pytest.raises(TypeError) as mine:
        ours(*args, **kwargs)
    assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("args, kwargs", [
    (("a", 1.0), {}), (("a",), {"value": 1.0}), ((), {"value": 1.0, "name": "a", "extra": (2,)}),
    (("a", 1.0, "n", (1,)), {}), (("a", 1.0), {"extra": (3,), "note": "x"}),
])
def test_the_shared_init_sets_what_the_dataclass_init_sets(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    plain, ours = _pair({})
    made, expected = ours(*args, **kwargs), plain(*args, **kwargs)
    assert dataclasses.asdict(made) == dataclasses.asdict(expected)
    assert list(vars(made)) == [f.name for f in dataclasses.fields(ours)]  # in field order, as @dataclass's


def test_a_default_factory_makes_a_new_value_for_each_record() -> None:
    made = record(type("Bag", (), {"__annotations__": {"items": "list[int]"}, "__module__": __name__,
                                   "items": field(default_factory=list)}))
    first, second = made(), made()
    assert first.items == [] and first.items is not second.items


def test_an_undocumented_record_is_documented_by_its_fields_as_dataclass_would() -> None:
    plain, ours = _pair({})
    ours("a", 1.0)
    assert ours.__doc__ == plain.__doc__ == \
        "Reading(name: 'str', value: 'float', note: 'str' = '', extra: 'tuple[int, ...]' = <factory>)"
    typed = record(type("Typed", (), {"__annotations__": {"count": int, "names": list[str]}, "__module__": __name__}))
    typed(1, [])
    assert typed.__doc__ == dataclass(frozen=True)(
        type("Typed", (), {"__annotations__": {"count": int, "names": list[str]}, "__module__": __name__})).__doc__


def test_an_ordered_record_sorts_as_an_ordered_dataclass() -> None:
    def made(decorate: object) -> type:
        namespace = {"__annotations__": {"name": "str", "rank": "int", "note": "str"}, "__module__": __name__,
                     "note": field(default="", compare=False)}
        return decorate(type("Ranked", (), namespace))  # type: ignore[operator, no-any-return]

    plain, ours = made(dataclass(frozen=True, order=True)), made(record(order=True))
    rows = [("b", 1, "x"), ("a", 2, "y"), ("a", 1, "z"), ("b", 1, "w")]
    assert [(r.name, r.rank, r.note) for r in sorted(ours(*row) for row in rows)] == \
        [(r.name, r.rank, r.note) for r in sorted(plain(*row) for row in rows)]
    assert ours("a", 1) <= ours("a", 1, "other") and not ours("a", 1) < ours("a", 1) and ours("b", 0) > ours("a", 9)
    with pytest.raises(TypeError):
        ours("a", 1) < plain("a", 1)  # noqa: B015 - another class: not ordered, as between two dataclasses
    with pytest.raises(ValueError, match="eq must be true"):
        record(eq=False, order=True)(type("Bad", (), {"__annotations__": {"x": "int"}, "__module__": __name__}))


def test_a_record_without_eq_is_itself_only() -> None:
    made = record(eq=False)(type("One", (), {"__annotations__": {"name": "str"}, "__module__": __name__}))
    first, second = made("a"), made("a")
    assert first == first and first != second and hash(first) == object.__hash__(first)
    assert {first: 1, second: 2}[second] == 2 and repr(first) == "One(name='a')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.name = "b"
