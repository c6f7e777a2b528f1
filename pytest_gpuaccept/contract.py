"""The contract model: load a contract YAML (format 1) and validate it into frozen values, with file:line errors.

The top level (format, vendor, tools) is declared here; every section comes from its clause module
through the registry, so a new section needs no edit here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from . import node_sections, schema
from .clauses import registry
from .units import Duration

FORMAT_VERSION = 1
TOOL_KEYS = ("nvidia-smi", "all_reduce_perf", "nvbandwidth", "p2pBandwidthLatencyTest", "ethtool", "iperf3",
             "ib_write_bw", "python", "ip", "dcgmi")
NAME_PATTERN = schema.NAME_PATTERN


class ContractError(Exception):
    """One or more problems in a contract; each problem is one line naming file, line and key."""

    def __init__(self, problems: list[str]) -> None:
        problems = sorted(problems, key=_line_of)  # in file order; stable within a line
        super().__init__("\n".join(problems))
        self.problems = problems


def _line_of(problem: str) -> int:
    match = re.search(r":(\d+): ", problem)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True, slots=True)
class Tools:
    paths: dict[str, str] = field(default_factory=dict)
    timeout: Duration | None = None
    sha256: dict[str, str] = field(default_factory=dict)  # tool -> the SHA-256 its executable must have
    # Code the buyer allows in the judging process beside pytest's and this plugin's own dependencies:
    # a pytest plugin (or other module) name -> the SHA-256 its file must have (foreign.py).
    allow_plugins: dict[str, str] = field(default_factory=dict)
    user: str | None = None  # run the tools as this user (where pytest runs as root), never as pytest's own


@dataclass(frozen=True, slots=True)
class Contract:
    path: str
    sha256: str
    vendor: str
    reference: str | None = None
    description: str | None = None
    tools: Tools = field(default_factory=Tools)
    by_section: dict[str, object] = field(default_factory=dict)  # section name -> its value: read it with SECTION.of
    lines: dict[str, int] = field(default_factory=dict)
    raw: bytes = field(default=b"", repr=False)  # the file's bytes as judged (the bundle keeps a copy)
    node: str | None = None  # set on each node of a cluster run (--gpuaccept-node): it judges the per-node sections

    def sections(self) -> list[str]:
        """The measurement sections present, in the order of the format."""
        return [name for name in registry.SECTION_NAMES if name in self.by_section]


def not_a_contract(value: str) -> str | None:
    """What to say of a --contract value (a preset name already resolved to its file) that names no file at all, a
    usage error with no line in it (there is no file to have lines); None where it names a file."""
    from .presets import presets  # noqa: PLC0415 (the preset list only for this message)

    named = f"name a contract file or one of the shipped presets: {', '.join(presets()) or 'none'}"
    if not value.strip():
        return f"--contract: empty; {named}"
    if Path(value).is_file():
        return None
    return f"--contract {value}: {'a folder' if Path(value).is_dir() else 'no such file'}; {named}"


def load_contract(path: str | Path) -> Contract:
    """Read and validate a contract file; raise ContractError listing every problem found."""
    shown = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:  # no line to name: the file is not there
        raise ContractError([f"{shown}: contract: no such file"]) from None
    except IsADirectoryError:
        raise ContractError([f"{shown}: contract: a folder, not a contract file"]) from None
    except OSError as exc:
        raise ContractError([f"{shown}: contract: cannot be read: {exc.strerror}"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError([f"{shown}:1: contract: expected UTF-8 text, got an invalid byte at offset {exc.start}"]) from None
    return replace(parse_contract(text, shown, hashlib.sha256(data).hexdigest()), raw=data)


def parse_contract(text: str, path: str = "<contract>", sha256: str = "") -> Contract:
    """Validate contract text; the pure half of load_contract."""
    v = schema.Validator(path)
    try:
        root = schema.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = getattr(exc, "position", None)  # a ReaderError (a control character) has a position, no mark
        line = mark.line + 1 if mark is not None else text.count("\n", 0, position) + 1 if isinstance(position, int) else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ContractError([f"{path}:{line}: contract: expected valid YAML, got a syntax error: {problem}"]) from None
    if root is None:
        raise ContractError([f"{path}:1: contract: expected a mapping with 'gpuaccept: 1', got an empty file"])
    names = registry.SECTION_NAMES
    entries = v.mapping(root, "contract", ("gpuaccept", "vendor", "reference", "description", "tools") + names
                        + (node_sections.KEY,))
    if v.problems and not isinstance(root, yaml.MappingNode):
        raise ContractError(v.problems)
    lines = {name: key.start_mark.line + 1 for name, (key, _value) in entries.items()}

    if "gpuaccept" not in entries:
        v.problem(root, "gpuaccept", f"missing: expected 'gpuaccept: {FORMAT_VERSION}' (the format version) as the first key")
    else:
        v.value(entries["gpuaccept"][1], "gpuaccept", schema.one_of_int(FORMAT_VERSION))
    vendor = ""
    if "vendor" not in entries:
        v.problem(root, "vendor", "missing: expected the vendor's name, e.g. vendor: \"Example GPU Cloud\"")
    else:
        vendor = v.value(entries["vendor"][1], "vendor", schema.text)
    reference = v.value(entries["reference"][1], "reference", schema.text) if "reference" in entries else None
    description = v.value(entries["description"][1], "description", schema.text) if "description" in entries else None
    tools = _tools(v, entries["tools"][1]) if "tools" in entries else Tools()
    if node_sections.KEY in entries:  # what node-check runs (docs/node-check.md); a judging run only checks its form
        problem = node_sections.check_key(entries[node_sections.KEY][1], [n for n in names if n in entries], str(path))
        if problem is not None:
            v.problems.append(problem)

    sections = {s.name: schema.section(v, s.name, entries[s.name][0], entries[s.name][1], s.keys, s.build)
                for s in registry.SECTIONS if s.name in entries}
    _cross_checks(v, sections, lines)
    if not any(name in entries for name in names) and not v.problems:
        v.problem(root, "contract", f"expected at least one section to check ({', '.join(names)}), got none")
    if v.problems:
        raise ContractError(v.problems)
    return Contract(path=path, sha256=sha256, vendor=vendor, reference=reference, description=description,
                    tools=tools, by_section=sections, lines=lines, raw=text.encode())


def _tools(v: schema.Validator, node: yaml.Node) -> Tools:
    paths = {}
    timeout = None
    pins = {}
    allowed = {}
    other: dict[str, Any] = {}
    keys = TOOL_KEYS + ("timeout", "sha256", "allow_plugins", "user", "ssh_keygen")
    for key, (_k, value_node) in v.mapping(node, "tools", keys).items():
        if key == "timeout":
            timeout = v.value(value_node, "tools.timeout", schema.duration)
        elif key == "sha256":
            for tool, (_t, pin_node) in v.mapping(value_node, "tools.sha256", TOOL_KEYS).items():
                pins[tool] = v.value(pin_node, f"tools.sha256.{tool}", schema.sha256)
        elif key == "allow_plugins":
            for name, (_n, pin_node) in v.mapping(value_node, "tools.allow_plugins", None).items():
                allowed[name] = v.value(pin_node, f"tools.allow_plugins.{name}", schema.sha256)
        elif key == "user":
            other["user"] = v.value(value_node, "tools.user", schema.user_name)
        elif key == "ssh_keygen":  # a contract is copied into the bundle, and a bundle never names a program
            v.problem(value_node, "tools.ssh_keygen", "no longer read: verify and sign never run a program a bundle's "
                      "contract copy names; they use the system's ssh-keygen, or the one given with --ssh-keygen")
        else:
            paths[key] = v.value(value_node, f"tools.{key}", schema.tool_path)
    return Tools(paths={k: p for k, p in paths.items() if p is not schema.INVALID},
                 timeout=timeout if isinstance(timeout, Duration) else None,
                 sha256={k: p for k, p in pins.items() if p is not schema.INVALID},
                 allow_plugins={k: p for k, p in allowed.items() if p is not schema.INVALID},
                 **{k: value for k, value in other.items() if isinstance(value, str)})


def _cross_checks(v: schema.Validator, sections: dict[str, Any], lines: dict[str, int]) -> None:
    """Rules across keys and sections, each declared by its section; reported at the section's line."""
    gpus = sections.get("gpus")
    has_count = getattr(gpus, "count", None) is not None
    for section in registry.SECTIONS:
        value = sections.get(section.name)
        if value is None:
            continue
        line = lines.get(section.name, 1)
        if section.needs_gpu_count and not has_count and gpus is not schema.INVALID:
            schema.at_line(v, line, section.name,
                           "needs gpus.count: this clause is judged over the host's GPUs, add gpus.count")
        if section.needs_gpu_count and getattr(gpus, "mig", None) is not None:
            schema.at_line(v, line, section.name, "judges whole GPUs, and gpus.mig sells MIG slices: a MIG device "
                           "has no peer access or NVLink to another, no DCGM diag or per-GPU utilisation in NVML, and "
                           "the published figures are a whole GPU's; remove it, or contract whole GPUs")
        if section.cross_check is not None and value is not schema.INVALID:
            for key, message in section.cross_check(value, sections):
                schema.at_line(v, line, key, message)
