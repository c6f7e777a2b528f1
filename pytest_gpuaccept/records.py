"""Records: frozen dataclasses whose methods are written once, here, not once per class.

@dataclass writes every method of every class with exec() as the module is imported: for this package's
hundred-odd frozen records that was 0.05 to 0.1 s of each run's start (benchmarks/overhead.py), spent
compiling the same six methods again and again. `record` gives every record the same six functions, which read
the class's fields from tuples made once per class. They behave as @dataclass(frozen=True)'s do: equal when of
the same class with equal compared fields (compared as tuples, so a field is equal to itself even when NaN),
hashed on those fields, shown as `Name(field=value, ...)` with the fields that have repr=True, and frozen:
assigning a field, adding an attribute or deleting one raises FrozenInstanceError.

@dataclass's own work, its fields, waits until a record is first made or its fields are first read: a run
makes a third of the package's records (an 8-GPU contract without a cluster never makes a cluster's), and
that work was 0.02 to 0.035 s of every run's start.

Nor is __init__ written per class: @dataclass's exec() of it was half of what making a record cost (28 ms
for the 41 records and 9 classes an 8-GPU run makes, 2026-12-01). Every record shares one __init__ that
sets the fields from a tuple of their names and defaults made once per class: the arguments @dataclass's
would take (positional in field order, or by name, defaults and default factories filled in), the same
TypeErrors for a missing, an unexpected or a repeated argument. It writes the instance's dictionary at once,
where @dataclass's assigned each field through the frozen __setattr__ (one Python call per field).
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
import reprlib
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, TypeVar, overload

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
    """__init__ writes the fields into the instance's dictionary; nothing assigns anything, before or after."""
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


class _Factory:
    """A field's default_factory, told apart from a default value in a record's defaults."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


_REQUIRED = object()  # a field without a default


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """@dataclass's __init__ for every record: the fields in order from the arguments, else their defaults."""
    names, defaults, known = self.__record_init__
    values = self.__dict__
    if not kwargs and len(args) == len(names):
        values.update(zip(names, args))
        return
    where = f"{self.__class__.__qualname__}.__init__()"
    if len(args) > len(names):
        least = 1 + sum(default is _REQUIRED for default in defaults)
        takes = f"{len(names) + 1}" if least == len(names) + 1 else f"from {least} to {len(names) + 1}"
        raise TypeError(f"{where} takes {takes} positional arguments but {len(args) + 1} were given")
    given = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in known:
            raise TypeError(f"{where} got an unexpected keyword argument {name!r}")
        if name in given:
            raise TypeError(f"{where} got multiple values for argument {name!r}")
        given[name] = value
    missing = []
    for name, default in zip(names, defaults):
        if name in given:
            values[name] = given[name]
        elif default is _REQUIRED:
            missing.append(repr(name))
        elif default.__class__ is _Factory:
            values[name] = default.make()
        else:
            values[name] = default
    if missing:
        listed = (missing[0] if len(missing) == 1 else " and ".join(missing) if len(missing) == 2
                  else ", ".join(missing[:-1]) + ", and " + missing[-1])
        raise TypeError(f"{where} missing {len(missing)} required positional argument"
                        f"{'s' if len(missing) > 1 else ''}: {listed}")


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_shown__)
    return f"{self.__class__.__qualname__}({shown})"


_MADE_LATER = ("__dataclass_fields__", "__record_compared__", "__record_hashed__", "__record_shown__",
               "__record_init__")
_MAKING = threading.RLock()  # the sampling and output threads make records too


class _Later:
    """An attribute that @dataclass's work sets: reading it on a record not made yet makes the record first."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type) -> Any:
        _made(owner)
        return getattr(owner if instance is None else instance, self.name)


def _parameter(field: dataclasses.Field[Any]) -> str:
    """A field as inspect.signature shows the parameter of @dataclass's __init__."""
    shown = f"{field.name}: {inspect.formatannotation(field.type)}"
    if field.default is not dataclasses.MISSING:
        return f"{shown} = {field.default!r}"
    return shown if field.default_factory is dataclasses.MISSING else f"{shown} = <factory>"


def _first_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """The __init__ of a record not made yet: make it, then run the records' __init__."""
    _made(type(self)).__init__(self, *args, **kwargs)


def _made(cls: Any) -> Any:
    """Let @dataclass make the record's fields, once, then the tuples the shared methods read."""
    with _MAKING:
        if cls.__dict__.get("__init__") is not _first_init:
            return cls
        module = cls.__dict__["__record_module__"]
        for name in ("__record_module__", *_MADE_LATER):
            delattr(cls, name)  # @dataclass writes only what the class does not define
        # @dataclass reads the class's module in sys.modules (for string annotations naming ClassVar): a
        # module dropped from there since (pytester restores sys.modules after an in-process run) is put back
        # for the while.
        dropped = module is not None and cls.__module__ not in sys.modules
        if dropped:
            sys.modules[cls.__module__] = module
        undocumented = not cls.__dict__.get("__doc__")
        if undocumented:  # else @dataclass writes one from inspect.signature: of the shared __init__, slowly
            cls.__doc__ = cls.__name__
        try:
            dataclasses.dataclass(init=False, eq=False, repr=False)(cls)
        finally:
            if dropped and sys.modules.get(cls.__module__) is module:
                del sys.modules[cls.__module__]
        fields = dataclasses.fields(cls)
        init = [f for f in fields if f.init]
        cls.__record_init__ = (
            tuple(f.name for f in init),
            tuple(f.default if f.default is not dataclasses.MISSING
                  else _REQUIRED if f.default_factory is dataclasses.MISSING else _Factory(f.default_factory)
                  for f in init),
            frozenset(f.name for f in init))
        if undocumented:  # what @dataclass would have written: the class's name and its fields
            cls.__doc__ = f"{cls.__name__}({', '.join(map(_parameter, init))})"
        # staticmethod: a getter made by a lambda would otherwise be bound to the instance that reads it
        cls.__record_compared__ = staticmethod(_values(tuple(f.name for f in fields if f.compare)))
        cls.__record_hashed__ = staticmethod(
            _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))))
        cls.__record_shown__ = tuple(f.name for f in fields if f.repr)
        cls.__init__ = _init  # last: until now, a record made by another thread waits in _first_init
    return cls


def _ordering(compare: Callable[[tuple[Any, ...], tuple[Any, ...]], bool]) -> Callable[[Any, object], Any]:
    """An order=True comparison: of the compared fields as tuples, between records of the same class."""
    def ordered(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return compare(self.__record_compared__(self), self.__record_compared__(other))
    return ordered


_ORDER = {"__lt__": _ordering(operator.lt), "__le__": _ordering(operator.le), "__gt__": _ordering(operator.gt),
          "__ge__": _ordering(operator.ge)}


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, eq: bool = True, order: bool = False) -> Callable[[T], T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T | None = None, /, *, eq: bool = True, order: bool = False) -> T | Callable[[T], T]:
    """@dataclass(frozen=True, eq=..., order=...), with every method shared by all records, made when first used.

    eq=False: compared and hashed by identity (a record that stands for one thing, such as a clause).
    """
    if cls is None:
        return lambda decorated: _record(decorated, eq, order)
    return _record(cls, eq, order)


def _record(cls: T, eq: bool, order: bool) -> T:
    if "__init__" in cls.__dict__:
        raise TypeError(f"{cls.__qualname__}: a record's __init__ is the one @dataclass writes")
    if order and not eq:
        raise ValueError("eq must be true if order is true")  # as @dataclass says
    made: Any = cls
    if eq:
        made.__eq__, made.__hash__ = _eq, _hash
    for name, method in _ORDER.items() if order else ():
        setattr(made, name, method)
    made.__repr__ = _repr
    made.__setattr__, made.__delattr__ = _setattr, _delattr
    made.__init__ = _first_init
    made.__record_module__ = sys.modules.get(cls.__module__)
    for name in _MADE_LATER:
        setattr(made, name, _Later(name))
    return cls
