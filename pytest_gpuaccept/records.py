"""Records: frozen dataclasses whose __eq__, __hash__ and __repr__ are written once, here, not once per class.

@dataclass writes every method of every class with exec() as the module is imported: for this package's
hundred-odd frozen records that was 0.04 s of each run's start (benchmarks/overhead.py), spent compiling
the same three methods again and again. `record` lets @dataclass write what differs per class (__init__
and the frozen guards) and gives every record the same three functions, which read the class's fields
from a tuple made once at decoration. They behave as @dataclass(frozen=True)'s do: equal when of the
same class with equal compared fields (compared as tuples, so a field is equal to itself even when NaN),
hashed on those fields, and shown as `Name(field=value, ...)` with the fields that have repr=True.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform  # the checkers' view; typing has it from 3.11 only
else:
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated

T = TypeVar("T", bound=type)


def _values(names: tuple[str, ...]) -> Callable[[object], tuple[Any, ...]]:
    """A C getter of these attributes that always returns a tuple (attrgetter of one name does not)."""
    if not names:
        return lambda _: ()
    if len(names) == 1:
        get = operator.attrgetter(names[0])
        return lambda instance: (get(instance),)
    return operator.attrgetter(*names)


def _eq(self: Any, other: object) -> Any:  # a bool, or NotImplemented for an instance of another class
    compared = self.__record_compared__
    if other.__class__ is not self.__class__:
        return NotImplemented
    return compared(self) == compared(other)


def _hash(self: Any) -> int:
    return hash(self.__record_hashed__(self))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_shown__)
    return f"{self.__class__.__qualname__}({shown})"


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T) -> T:
    """@dataclass(frozen=True), with the comparison, hash and repr shared by every record."""
    made: Any = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
    fields = dataclasses.fields(made)
    # staticmethod: a getter made by a lambda would otherwise be bound to the instance that reads it
    made.__record_compared__ = staticmethod(_values(tuple(f.name for f in fields if f.compare)))
    made.__record_hashed__ = staticmethod(
        _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))))
    made.__record_shown__ = tuple(f.name for f in fields if f.repr)
    made.__eq__, made.__hash__, made.__repr__ = _eq, _hash, _repr
    result: T = made
    return result
