"""Load and validate a contract YAML (format 1) into frozen dataclasses, with file:line errors."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .units import Bandwidth, Duration, Size, UnitError, parse_bandwidth, parse_duration, parse_size

FORMAT_VERSION = 1
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:*?\[\]-]+$")
HOST_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")
TOOL_KEYS = ("nvidia-smi", "all_reduce_perf", "ethtool", "iperf3", "ib_write_bw", "ibstat", "python")
ALLREDUCE_TOOLS = ("nccl-tests", "torch")


class ContractError(Exception):
    """One or more problems in a contract; each problem is one line naming file, line and key."""

    def __init__(self, problems: list[str]) -> None:
        problems = sorted(problems, key=_line_of)  # in file order; stable within a line
        super().__init__("\n".join(problems))
        self.problems = problems


def _line_of(problem: str) -> int:
    match = re.search(r":(\d+): ", problem)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class Tools:
    paths: dict[str, str] = field(default_factory=dict)
    timeout: Duration | None = None


@dataclass(frozen=True)
class Gpus:
    count: int | None = None
    model: str | None = None
    memory: Size | None = None
    driver: SpecifierSet | None = None
    cuda: SpecifierSet | None = None


@dataclass(frozen=True)
class NVLink:
    every_pair: bool = True
    min_links: int = 1
    links_per_gpu: int | None = None
    link_speed: Bandwidth | None = None
    errors_stable: bool = False


@dataclass(frozen=True)
class AllReduce:
    min_busbw: Bandwidth
    max_bytes: Size
    min_bytes: Size
    repeats: int = 1
    args: tuple[str, ...] = ()
    tool: str = "nccl-tests"


@dataclass(frozen=True)
class Nics:
    interfaces: tuple[str, ...]
    min_speed: Bandwidth


@dataclass(frozen=True)
class Rdma:
    devices: tuple[str, ...]
    min_fraction_of_line_rate: float
    line_rate: Bandwidth | None
    message_size: Size
    peer: str | None


@dataclass(frozen=True)
class Iperf3:
    server: str
    min_throughput: Bandwidth
    duration: Duration
    streams: int = 8
    port: int = 5201


@dataclass(frozen=True)
class Utilisation:
    min_percent: float
    duration: Duration
    warmup: Duration
    workload: str | tuple[str, ...] = "builtin"


@dataclass(frozen=True)
class Health:
    ecc: bool = False
    row_remapping: bool = False
    throttle: bool = False
    pcie_gen: int | None = None
    pcie_width: int | None = None


@dataclass(frozen=True)
class Contract:
    path: str
    sha256: str
    vendor: str
    reference: str | None = None
    description: str | None = None
    tools: Tools = field(default_factory=Tools)
    gpus: Gpus | None = None
    nvlink: NVLink | None = None
    allreduce: AllReduce | None = None
    nics: Nics | None = None
    rdma: Rdma | None = None
    iperf3: Iperf3 | None = None
    utilisation: Utilisation | None = None
    health: Health | None = None
    lines: dict[str, int] = field(default_factory=dict)

    def sections(self) -> list[str]:
        """The measurement sections present, in the order of the format."""
        return [name for name in SECTIONS if getattr(self, name) is not None]


SECTIONS = ("gpus", "nvlink", "allreduce", "nics", "rdma", "iperf3", "utilisation", "health")


# ---------------------------------------------------------------- YAML with line numbers

class _Loader(yaml.SafeLoader):
    """A safe loader whose nodes keep their marks; duplicate keys are found while walking."""


def _compose(text: str) -> yaml.Node | None:
    return yaml.compose(text, Loader=_Loader)


def _scalar(node: yaml.Node) -> Any:
    constructor = yaml.constructor.SafeConstructor()
    return constructor.construct_object(node, deep=True)


def _describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    try:
        return repr(_scalar(node))
    except yaml.YAMLError:
        return repr(node.value)


class _Validator:
    """Walks the composed YAML, collecting every problem rather than stopping at the first."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []

    def problem(self, node: yaml.Node | None, key: str, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        self.problems.append(f"{self.path}:{line}: {key}: {message}")

    def mapping(self, node: yaml.Node, key: str, allowed: tuple[str, ...]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The entries of a mapping node; unknown and duplicate keys are problems."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, key, f"expected a mapping, got {_describe(node)}")
            return {}
        entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else _describe(key_node)
            dotted = f"{key}.{name}" if key != "contract" else str(name)
            if name in entries:
                self.problem(key_node, dotted, "duplicate key")
                continue
            if name not in allowed:
                hint = _closest(str(name), allowed)
                self.problem(key_node, dotted, f"unknown key{hint}; expected one of: {', '.join(allowed)}")
                continue
            entries[name] = (key_node, value_node)
        return entries

    def value(self, node: yaml.Node, key: str, convert: Callable[[Any, yaml.Node], Any]) -> Any:
        try:
            return convert(_scalar(node) if isinstance(node, yaml.ScalarNode) else node, node)
        except (UnitError, ValueError) as exc:
            self.problem(node, key, str(exc))
            return _INVALID


_INVALID = object()


def _closest(name: str, allowed: tuple[str, ...]) -> str:
    import difflib

    match = difflib.get_close_matches(name, allowed, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


# ---------------------------------------------------------------- value converters

def _int(low: int, high: int | None = None) -> Callable[[Any, yaml.Node], int]:
    def convert(value: Any, _node: yaml.Node) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ValueError(f"expected a whole number {bound}, got {_shown(value)}")
        return value
    return convert


def _number(low: float, high: float, low_open: bool = False) -> Callable[[Any, yaml.Node], float]:
    def convert(value: Any, _node: yaml.Node) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and (value < low or value > high or (low_open and value == low)):
            ok = False
        if not ok:
            bracket = "(" if low_open else "["
            raise ValueError(f"expected a number in {bracket}{low:g}, {high:g}], got {_shown(value)}")
        return float(value)
    return convert


def _shown(value: Any) -> str:
    """How a found value is quoted in an error message."""
    return _describe(value) if isinstance(value, yaml.Node) else repr(value)


def _bool(value: Any, _node: yaml.Node) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {_shown(value)}")
    return value


def _text(value: Any, _node: yaml.Node) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty text, got {_shown(value)}")
    if any(ord(ch) < 32 and ch not in "\t" for ch in value):
        raise ValueError(f"expected a text without control characters, got {value!r}")
    return value


def _host(value: Any, node: yaml.Node) -> str:
    value = _text(value, node)
    if not HOST_PATTERN.match(value):
        raise ValueError(f"expected a host name or IP address (letters, digits, '.', ':', '-'), got {value!r}")
    return value


def _specifier(value: Any, node: yaml.Node) -> SpecifierSet:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"expected a version specifier such as '>=550' (quoted), got {value!r}")
    value = _text(value, node)
    try:
        spec = SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"expected a PEP 440 version specifier such as '>=550', got {value!r}") from None
    if not str(spec):
        raise ValueError(f"expected a PEP 440 version specifier such as '>=550', got {value!r}")
    return spec


def _names(value: Any, node: yaml.Node) -> tuple[str, ...]:
    if not isinstance(value, yaml.SequenceNode) or not value.value:
        raise ValueError(f"expected a non-empty list of names or globs such as ['ens1f0', 'ib*'], got {_shown(value)}")
    names = []
    for item in value.value:
        name = _scalar(item) if isinstance(item, yaml.ScalarNode) else item
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            found = name if isinstance(name, str) else _describe(item)
            raise ValueError(f"expected names of the characters A-Za-z0-9_.:-*?[], got {found!r}")
        if name.count("[") != name.count("]"):
            raise ValueError(f"expected a valid glob, got {name!r} (unbalanced brackets)")
        names.append(name)
    return tuple(names)


def _argv(value: Any, node: yaml.Node) -> tuple[str, ...]:
    if not isinstance(value, yaml.SequenceNode):
        raise ValueError(f"expected a list of arguments such as ['-n', '40'], got {_shown(value)}")
    out = []
    for item in value.value:
        arg = _scalar(item) if isinstance(item, yaml.ScalarNode) else None
        if isinstance(arg, (int, float)) and not isinstance(arg, bool):
            arg = str(arg)
        if not isinstance(arg, str) or "\x00" in arg:
            raise ValueError(f"expected every argument to be a text, got {_describe(item)}")
        out.append(arg)
    return tuple(out)


def _workload(value: Any, node: yaml.Node) -> str | tuple[str, ...]:
    if isinstance(value, str):
        if value != "builtin":
            raise ValueError(f"expected 'builtin' or an argv list such as ['torchrun', 'train.py'], got {value!r}")
        return value
    argv = _argv(value, node)
    if not argv:
        raise ValueError("expected 'builtin' or a non-empty argv list, got []")
    return argv


def _one_of(*choices: str) -> Callable[[Any, yaml.Node], str]:
    def convert(value: Any, _node: yaml.Node) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
        return value
    return convert


def _quantity(parse: Callable[[object], Any]) -> Callable[[Any, yaml.Node], Any]:
    def convert(value: Any, _node: yaml.Node) -> Any:
        return parse(_describe(value) if isinstance(value, yaml.Node) else value)
    return convert


def _tool_path(value: Any, node: yaml.Node) -> str:
    value = _text(value, node)
    if not value.startswith("/"):
        raise ValueError(f"expected an absolute path, got {value!r}")
    return value


_bandwidth = _quantity(parse_bandwidth)
_size = _quantity(parse_size)
_duration = _quantity(parse_duration)

# Each section: key -> (converter, required, default). Declared as data, validated in one place.
Schema = dict[str, tuple[Callable[[Any, yaml.Node], Any], bool, Any]]
_SCHEMAS: dict[str, Schema] = {
    "gpus": {
        "count": (_int(1, 64), False, None), "model": (_text, False, None), "memory": (_size, False, None),
        "driver": (_specifier, False, None), "cuda": (_specifier, False, None),
    },
    "nvlink": {
        "every_pair": (_bool, True, None), "min_links": (_int(1, 64), False, 1),
        "links_per_gpu": (_int(1, 64), False, None), "link_speed": (_bandwidth, False, None),
        "errors_stable": (_bool, False, False),
    },
    "allreduce": {
        "min_busbw": (_bandwidth, True, None), "max_bytes": (_size, False, parse_size("8 GiB")),
        "min_bytes": (_size, False, parse_size("8 MiB")), "repeats": (_int(1, 100), False, 1),
        "args": (_argv, False, ()), "tool": (_one_of(*ALLREDUCE_TOOLS), False, "nccl-tests"),
    },
    "nics": {"interfaces": (_names, True, None), "min_speed": (_bandwidth, True, None)},
    "rdma": {
        "devices": (_names, True, None), "min_fraction_of_line_rate": (_number(0.0, 1.0, low_open=True), True, None),
        "line_rate": (_bandwidth, False, None), "message_size": (_size, False, parse_size("64 KiB")),
        "peer": (_host, False, None),
    },
    "iperf3": {
        "server": (_host, True, None), "min_throughput": (_bandwidth, True, None),
        "duration": (_duration, False, parse_duration("10 s")), "streams": (_int(1, 128), False, 8),
        "port": (_int(1, 65535), False, 5201),
    },
    "utilisation": {
        "min_percent": (_number(0.0, 100.0, low_open=True), True, None),
        "duration": (_duration, False, parse_duration("60 s")), "warmup": (_duration, False, parse_duration("10 s")),
        "workload": (_workload, False, "builtin"),
    },
    "health": {
        "ecc": (_bool, False, False), "row_remapping": (_bool, False, False), "throttle": (_bool, False, False),
        "pcie_gen": (_int(1, 7), False, None), "pcie_width": (_int(1, 32), False, None),
    },
}
_TOP = ("gpuaccept", "vendor", "reference", "description", "tools") + SECTIONS
_CLASSES: dict[str, type] = {
    "gpus": Gpus, "nvlink": NVLink, "allreduce": AllReduce, "nics": Nics, "rdma": Rdma,
    "iperf3": Iperf3, "utilisation": Utilisation, "health": Health,
}


def _section(v: _Validator, name: str, key_node: yaml.Node, node: yaml.Node) -> Any:
    schema = _SCHEMAS[name]
    entries = v.mapping(node, name, tuple(schema))
    if isinstance(node, yaml.MappingNode) and not node.value:
        v.problem(node, name, "expected at least one key: an empty section checks nothing")
        return _INVALID
    values: dict[str, Any] = {}
    ok = isinstance(node, yaml.MappingNode)
    for key, (convert, required, default) in schema.items():
        if key in entries:
            value = v.value(entries[key][1], f"{name}.{key}", convert)
            ok &= value is not _INVALID
            values[key] = value
        elif required:
            v.problem(key_node, f"{name}.{key}", "missing: this key is required")
            ok = False
        else:
            values[key] = default
    if not ok:
        return _INVALID
    return _CLASSES[name](**values)


def _cross_checks(v: _Validator, sections: dict[str, Any], lines: dict[str, int]) -> None:
    def at(key: str, message: str) -> None:
        v.problems.append(f"{v.path}:{lines.get(key.split('.')[0], 1)}: {key}: {message}")

    gpus = sections.get("gpus")
    has_count = isinstance(gpus, Gpus) and gpus.count is not None
    for name in ("nvlink", "allreduce", "utilisation", "health"):
        if sections.get(name) is not None and not has_count and gpus is not _INVALID:
            at(f"{name}", "needs gpus.count: this clause is judged over the host's GPUs, add gpus.count")
    nvlink = sections.get("nvlink")
    if isinstance(nvlink, NVLink) and not nvlink.every_pair:
        at("nvlink.every_pair", "expected true: 'false' checks nothing, remove the nvlink section instead")
    if isinstance(nvlink, NVLink) and has_count and gpus.count < 2:
        at("nvlink", f"needs gpus.count of at least 2 to have GPU pairs, got {gpus.count}")
    if isinstance(nvlink, NVLink) and nvlink.errors_stable and "allreduce" not in sections:
        at("nvlink.errors_stable", "needs an allreduce section: the error counters are compared across its load")
    if isinstance(sections.get("health"), Health) and "utilisation" not in sections:
        at("health", "needs a utilisation section: the GPUs' health is read around its load")
    allreduce = sections.get("allreduce")
    if isinstance(allreduce, AllReduce) and allreduce.min_bytes.nbytes > allreduce.max_bytes.nbytes:
        at("allreduce.min_bytes", f"expected at most max_bytes ({allreduce.max_bytes}), got {allreduce.min_bytes}")
    util = sections.get("utilisation")
    if isinstance(util, Utilisation) and util.warmup.seconds >= util.duration.seconds:
        at("utilisation.warmup", f"expected less than duration ({util.duration}), got {util.warmup}")


def load_contract(path: str | Path) -> Contract:
    """Read and validate a contract file; raise ContractError listing every problem found."""
    shown = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ContractError([f"{shown}:0: contract: file not found"]) from None
    except OSError as exc:
        raise ContractError([f"{shown}:0: contract: cannot read the file: {exc.strerror}"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError([f"{shown}:1: contract: expected UTF-8 text, got an invalid byte at offset {exc.start}"]) from None
    return parse_contract(text, shown, hashlib.sha256(data).hexdigest())


def parse_contract(text: str, path: str = "<contract>", sha256: str = "") -> Contract:
    """Validate contract text; the pure half of load_contract."""
    v = _Validator(path)
    try:
        root = _compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ContractError([f"{path}:{line}: contract: expected valid YAML, got a syntax error: {problem}"]) from None
    if root is None:
        raise ContractError([f"{path}:1: contract: expected a mapping with 'gpuaccept: 1', got an empty file"])
    entries = v.mapping(root, "contract", _TOP)
    if v.problems and not isinstance(root, yaml.MappingNode):
        raise ContractError(v.problems)
    lines = {name: key.start_mark.line + 1 for name, (key, _value) in entries.items()}

    if "gpuaccept" not in entries:
        v.problem(root, "gpuaccept", f"missing: expected 'gpuaccept: {FORMAT_VERSION}' (the format version) as the first key")
    else:
        v.value(entries["gpuaccept"][1], "gpuaccept", _one_of_int(FORMAT_VERSION))
    vendor = None
    if "vendor" not in entries:
        v.problem(root, "vendor", "missing: expected the vendor's name, e.g. vendor: \"Example GPU Cloud\"")
    else:
        vendor = v.value(entries["vendor"][1], "vendor", _text)
    reference = v.value(entries["reference"][1], "reference", _text) if "reference" in entries else None
    description = v.value(entries["description"][1], "description", _text) if "description" in entries else None

    tools = Tools()
    if "tools" in entries:
        tool_entries = v.mapping(entries["tools"][1], "tools", TOOL_KEYS + ("timeout",))
        paths = {}
        timeout = None
        for key, (_k, value_node) in tool_entries.items():
            if key == "timeout":
                timeout = v.value(value_node, "tools.timeout", _duration)
            else:
                paths[key] = v.value(value_node, f"tools.{key}", _tool_path)
        tools = Tools(paths={k: p for k, p in paths.items() if p is not _INVALID},
                      timeout=timeout if isinstance(timeout, Duration) else None)

    sections = {name: _section(v, name, entries[name][0], entries[name][1]) for name in SECTIONS if name in entries}
    _cross_checks(v, sections, lines)
    if not any(name in entries for name in SECTIONS) and not v.problems:
        v.problem(root, "contract", f"expected at least one section to check ({', '.join(SECTIONS)}), got none")
    if v.problems:
        raise ContractError(v.problems)
    return Contract(path=path, sha256=sha256, vendor=vendor, reference=reference, description=description,
                    tools=tools, lines=lines, **sections)


def _one_of_int(expected: int) -> Callable[[Any, yaml.Node], int]:
    def convert(value: Any, _node: yaml.Node) -> int:
        if value != expected or isinstance(value, bool):
            raise ValueError(f"expected {expected} (the only format this version reads), got {value!r}")
        return expected
    return convert
