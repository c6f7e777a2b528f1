"""Records: frozen dataclasses whose methods are written once, here, not once per class.

@dataclass writes every method of every class with exec() as the module is imported: for this package's
hundred-odd frozen records that was 0.05 to 0.1 s of each run's start (benchmarks/overhead.py), spent compiling
the same six methods again and again. `record` lets @dataclass write only what differs per class, its
__init__, and gives every record the same five other functions, which read the class's fields from
tuples made once at decoration. They behave as @dataclass(frozen=True)'s do: equal when of the same
class with equal compared fields (compared as tuples, so a field is equal to itself even when NaN),
hashed on those fields, shown as `Name(field=value, ...)` with the fields that have repr=True, and
frozen: assigning a field that is set, adding an attribute or deleting one raises FrozenInstanceError.
The one assignment let through is __init__'s own, of a field not yet set.
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


def _setattr(self: Any, name: str, value: Any) -> None:
    """__init__ sets each field once (as a plain dataclass's does, by assignment); nothing sets anything after."""
    if name in self.__dict__ or name not in self.__record_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_shown__)
    return f"{self.__class__.__qualname__}({shown})"


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T) -> T:
    """@dataclass(frozen=True), with every method but __init__ shared by all records."""
    made: Any = dataclasses.dataclass(eq=False, repr=False)(cls)
    fields = dataclasses.fields(made)
    # staticmethod: a getter made by a lambda would otherwise be bound to the instance that reads it
    made.__record_compared__ = staticmethod(_values(tuple(f.name for f in fields if f.compare)))
    made.__record_hashed__ = staticmethod(
        _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))))
    made.__record_shown__ = tuple(f.name for f in fields if f.repr)
    made.__eq__, made.__hash__, made.__repr__ = _eq, _hash, _repr
    made.__record_fields__ = frozenset(f.name for f in fields)
    made.__setattr__, made.__delattr__ = _setattr, _delattr
    result: T = made
    return result
