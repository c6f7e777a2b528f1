"""A YAML validator that keeps line marks: every problem is `file:line: dotted.key: expected ..., got ...`.

Generic: it knows mappings, keys, converters and defaults, nothing of GPUs. The contract model and the
clause modules declare their sections with it (`Key`), and `section()` validates one section in one place.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .units import UnitError, parse_bandwidth, parse_duration, parse_size

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:*?\[\]-]+$")
HOST_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")
Convert = Callable[[Any, yaml.Node], Any]


# ---------------------------------------------------------------- YAML with line numbers

class Loader(yaml.SafeLoader):
    """A safe loader whose nodes keep their marks; duplicate keys are found while walking."""


# libyaml's parser, where PyYAML was built with it (its wheels are): a contract composed in 0.3 ms, not the pure-
# Python scanner's 5. The nodes are the same classes, resolved by the same resolver, with the same 0-based marks.
_LIBYAML: Any = getattr(yaml, "CSafeLoader", None)


def compose(text: str) -> yaml.Node | None:
    """The contract's YAML as nodes with their marks. Where libyaml finds a syntax error, the pure-Python loader
    composes the text again: the error, its wording and its line, is the one it always gave (and where only
    libyaml objects, the pure-Python loader's reading stands)."""
    if _LIBYAML is not None:
        try:
            node: yaml.Node | None = yaml.compose(text, Loader=_LIBYAML)
            return node
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=Loader)


def scalar(node: yaml.Node) -> Any:
    constructor = yaml.constructor.SafeConstructor()
    return constructor.construct_object(node, deep=True)


def describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    try:
        return repr(scalar(node))
    except yaml.YAMLError:
        return repr(node.value)


class Validator:
    """Walks the composed YAML, collecting every problem rather than stopping at the first."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []

    def problem(self, node: yaml.Node | None, key: str, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        self.problems.append(f"{self.path}:{line}: {key}: {message}")

    def mapping(self, node: yaml.Node, key: str,
                allowed: tuple[str, ...] | None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The entries of a mapping node; unknown and duplicate keys are problems (`allowed` None: any name
        of the characters A-Za-z0-9_.:-)."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, key, f"expected a mapping, got {describe(node)}")
            return {}
        entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else describe(key_node)
            dotted = f"{key}.{name}" if key != "contract" else str(name)
            if name in entries:
                self.problem(key_node, dotted, "duplicate key")
                continue
            if allowed is None:
                if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]+", name):
                    self.problem(key_node, dotted, "expected a name of the characters A-Za-z0-9_.:-")
                    continue
            elif name not in allowed:
                hint = closest(str(name), allowed)
                self.problem(key_node, dotted, f"unknown key{hint}; expected one of: {', '.join(allowed)}")
                continue
            entries[name] = (key_node, value_node)
        return entries

    def value(self, node: yaml.Node, key: str, convert: Convert) -> Any:
        try:
            return convert(scalar(node) if isinstance(node, yaml.ScalarNode) else node, node)
        except (UnitError, ValueError) as exc:
            self.problem(node, key, str(exc))
            return INVALID


INVALID = object()


def closest(name: str, allowed: tuple[str, ...]) -> str:
    match = difflib.get_close_matches(name, allowed, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


# ---------------------------------------------------------------- value converters

def whole(low: int, high: int | None = None) -> Callable[[Any, yaml.Node], int]:
    def convert(value: Any, _node: yaml.Node) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ValueError(f"expected a whole number {bound}, got {shown(value)}")
        return value
    return convert


def number(low: float, high: float, low_open: bool = False) -> Callable[[Any, yaml.Node], float]:
    def convert(value: Any, _node: yaml.Node) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and (value < low or value > high or (low_open and value == low)):
            ok = False
        if not ok:
            bracket = "(" if low_open else "["
            raise ValueError(f"expected a number in {bracket}{low:g}, {high:g}], got {shown(value)}")
        return float(value)
    return convert


def shown(value: Any) -> str:
    """How a found value is quoted in an error message."""
    return describe(value) if isinstance(value, yaml.Node) else repr(value)


def boolean(value: Any, _node: yaml.Node) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {shown(value)}")
    return value


def text(value: Any, _node: yaml.Node) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty text, got {shown(value)}")
    if any(ord(ch) < 32 and ch not in "\t" for ch in value):
        raise ValueError(f"expected a text without control characters, got {value!r}")
    return value


def host(value: Any, node: yaml.Node) -> str:
    name = text(value, node)
    if not HOST_PATTERN.match(name):
        raise ValueError(f"expected a host name or IP address (letters, digits, '.', ':', '-'), got {name!r}")
    return name


def specifier(value: Any, node: yaml.Node) -> SpecifierSet:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"expected a version specifier such as '>=550' (quoted), got {value!r}")
    value = text(value, node)
    try:
        spec = SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"expected a PEP 440 version specifier such as '>=550', got {value!r}") from None
    if not str(spec):
        raise ValueError(f"expected a PEP 440 version specifier such as '>=550', got {value!r}")
    return spec


def names(value: Any, node: yaml.Node) -> tuple[str, ...]:
    if not isinstance(value, yaml.SequenceNode) or not value.value:
        raise ValueError(f"expected a non-empty list of names or globs such as ['ens1f0', 'ib*'], got {shown(value)}")
    found_names = []
    for item in value.value:
        name = scalar(item) if isinstance(item, yaml.ScalarNode) else item
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            found = name if isinstance(name, str) else describe(item)
            raise ValueError(f"expected names of the characters A-Za-z0-9_.:-*?[], got {found!r}")
        if name.count("[") != name.count("]"):
            raise ValueError(f"expected a valid glob, got {name!r} (unbalanced brackets)")
        found_names.append(name)
    return tuple(found_names)


def argv(value: Any, node: yaml.Node) -> tuple[str, ...]:
    if not isinstance(value, yaml.SequenceNode):
        raise ValueError(f"expected a list of arguments such as ['-n', '40'], got {shown(value)}")
    out = []
    for item in value.value:
        arg = scalar(item) if isinstance(item, yaml.ScalarNode) else None
        if isinstance(arg, (int, float)) and not isinstance(arg, bool):
            arg = str(arg)
        if not isinstance(arg, str) or "\x00" in arg:
            raise ValueError(f"expected every argument to be a text, got {describe(item)}")
        out.append(arg)
    return tuple(out)


def workload(value: Any, node: yaml.Node) -> str | tuple[str, ...]:
    if isinstance(value, str):
        if value != "builtin":
            raise ValueError(f"expected 'builtin' or an argv list such as ['torchrun', 'train.py'], got {value!r}")
        return value
    args = argv(value, node)
    if not args:
        raise ValueError("expected 'builtin' or a non-empty argv list, got []")
    return args


def one_of(*choices: str) -> Callable[[Any, yaml.Node], str]:
    def convert(value: Any, _node: yaml.Node) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
        return str(value)
    return convert


def quantity(parse: Callable[[object], Any]) -> Callable[[Any, yaml.Node], Any]:
    def convert(value: Any, _node: yaml.Node) -> Any:
        return parse(describe(value) if isinstance(value, yaml.Node) else value)
    return convert


def sha256(value: Any, node: yaml.Node) -> str:
    if isinstance(value, (int, float)):
        raise ValueError("expected a SHA-256 as 64 hex digits in quotes (YAML read these digits as a number)")
    digest = text(value, node).strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError(f"expected a SHA-256 as 64 hex digits, got {digest[:80]!r}")
    return digest


def user_name(value: Any, node: yaml.Node) -> str:
    name = text(value, node)
    if not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", name) or name == "root":
        raise ValueError(f"expected the name of a user other than root (such as 'gpuaccept'), got {name[:40]!r}")
    return name


def tool_path(value: Any, node: yaml.Node) -> str:
    path = text(value, node)
    if not path.startswith("/"):
        raise ValueError(f"expected an absolute path, got {path!r}")
    return path


bandwidth = quantity(parse_bandwidth)
size = quantity(parse_size)
duration = quantity(parse_duration)


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a section: its converter, whether it must be given, and its default (written here only)."""

    convert: Convert
    required: bool = False
    default: Any = None


def section(v: Validator, name: str, key_node: yaml.Node, node: yaml.Node, keys: dict[str, Key],
            build: Callable[..., Any]) -> Any:
    """Validate one section's mapping against its keys; the built value, or INVALID with the problems noted."""
    entries = v.mapping(node, name, tuple(keys))
    if isinstance(node, yaml.MappingNode) and not node.value:
        v.problem(node, name, "expected at least one key: an empty section checks nothing")
        return INVALID
    values: dict[str, Any] = {}
    ok = isinstance(node, yaml.MappingNode)
    for key, spec in keys.items():
        if key in entries:
            value = v.value(entries[key][1], f"{name}.{key}", spec.convert)
            ok &= value is not INVALID
            values[key] = value
        elif spec.required:
            v.problem(key_node, f"{name}.{key}", "missing: this key is required")
            ok = False
        else:
            values[key] = spec.default
    return build(**values) if ok else INVALID


def one_of_int(expected: int) -> Convert:
    def convert(value: Any, _node: yaml.Node) -> int:
        if value != expected or isinstance(value, bool):
            raise ValueError(f"expected {expected} (the only format this version reads), got {value!r}")
        return expected
    return convert


def at_line(v: Validator, line: int, key: str, message: str) -> None:
    """A problem found across keys (cross-checks), reported at the section's line."""
    v.problems.append(f"{v.path}:{line}: {key}: {message}")
