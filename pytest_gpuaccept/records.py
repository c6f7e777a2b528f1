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

@dataclass's own work, the fields and the exec() of __init__, waits until a record is first made or its
fields are first read: a run makes a third of the package's records (an 8-GPU contract without a cluster
never makes a cluster's), and that work was 0.02 to 0.035 s of every run's start.
"""
from __future__ import annotations

import dataclasses
import operator
import reprlib
import sys
import threading
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


_MADE_LATER = ("__dataclass_fields__", "__record_compared__", "__record_hashed__", "__record_shown__",
               "__record_fields__")
_MAKING = threading.RLock()  # the sampling and output threads make records too


class _Later:
    """An attribute that @dataclass's work sets: reading it on a record not made yet makes the record first."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type) -> Any:
        _made(owner)
        return getattr(owner if instance is None else instance, self.name)


def _first_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """The __init__ of a record not made yet: make it, then run the __init__ @dataclass wrote."""
    _made(type(self)).__init__(self, *args, **kwargs)


def _made(cls: Any) -> Any:
    """Let @dataclass write the record's __init__ and fields, once, then the tuples the shared methods read."""
    with _MAKING:
        if cls.__dict__.get("__init__") is not _first_init:
            return cls
        module = cls.__dict__["__record_module__"]
        for name in ("__init__", "__record_module__", *_MADE_LATER):
            delattr(cls, name)  # @dataclass writes only what the class does not define
        # @dataclass reads the class's module in sys.modules (for string annotations naming ClassVar): a
        # module dropped from there since (pytester restores sys.modules after an in-process run) is put back
        # for the while.
        dropped = module is not None and cls.__module__ not in sys.modules
        if dropped:
            sys.modules[cls.__module__] = module
        try:
            dataclasses.dataclass(eq=False, repr=False)(cls)
        finally:
            if dropped and sys.modules.get(cls.__module__) is module:
                del sys.modules[cls.__module__]
        fields = dataclasses.fields(cls)
        # staticmethod: a getter made by a lambda would otherwise be bound to the instance that reads it
        cls.__record_compared__ = staticmethod(_values(tuple(f.name for f in fields if f.compare)))
        cls.__record_hashed__ = staticmethod(
            _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))))
        cls.__record_shown__ = tuple(f.name for f in fields if f.repr)
        cls.__record_fields__ = frozenset(f.name for f in fields)
    return cls


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T) -> T:
    """@dataclass(frozen=True), with every method but __init__ shared by all records, made when first used."""
    if "__init__" in cls.__dict__:
        raise TypeError(f"{cls.__qualname__}: a record's __init__ is the one @dataclass writes")
    made: Any = cls
    made.__eq__, made.__hash__, made.__repr__ = _eq, _hash, _repr
    made.__setattr__, made.__delattr__ = _setattr, _delattr
    made.__init__ = _first_init
    made.__record_module__ = sys.modules.get(cls.__module__)
    for name in _MADE_LATER:
        setattr(made, name, _Later(name))
    return cls
