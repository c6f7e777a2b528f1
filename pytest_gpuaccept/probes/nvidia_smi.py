"""nvidia-smi: the `topo -m` matrix (how each GPU pair is connected)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from . import ParseError, strip_escapes
from ._run import Reading, ToolRun, ToolRunner, parse_run

TOOL = "nvidia-smi"
TOPO_ARGS = ["topo", "-m"]
_GPU = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")
# Every label nvidia-smi has printed for a GPU pair; SOC is the old name of SYS.
PCIE_LABELS = frozenset({"SYS", "SOC", "NODE", "PHB", "PXB", "PIX"})


@dataclass(frozen=True, slots=True)
class Topology:
    """The GPU-by-GPU part of `nvidia-smi topo -m`: `labels[(i, j)]` for i < j, as printed."""

    gpu_count: int
    labels: dict[tuple[int, int], str]
    nic_count: int

    def nvlinks(self, i: int, j: int) -> int:
        """NVLinks between two GPUs: NV# gives #, any PCIe/SYS/SOC path gives 0."""
        match = _NVLINK.match(self.labels[(min(i, j), max(i, j))])
        return int(match.group(1)) if match else 0


def parse_topo(text: str) -> Topology:
    """Read the matrix of `nvidia-smi topo -m`, as every driver in service (R470 to R610) prints it.

    Accepts the header line `\\tGPU0\\tGPU1 ... NIC0 ... CPU Affinity\\tNUMA Affinity\\tGPU NUMA ID` (tabs or
    spaces, any indent, or none), one row per GPU `GPU0\\t X \\tNV18\\t...` in any order, NIC/HCA rows with or
    without their trailing tabs, empty affinity cells, blank lines, the Legend and the NIC Legend after the
    matrix, and 1-GPU matrices (a header and one `X` row).

    Current drivers underline the header with ANSI escapes even when piped (`\\x1b[4mGPU0 ... ID\\x1b[0m`);
    parse_run strips them before this parser runs, and the parser strips them again so that it reads raw
    output too. A pasted copy often lost the ESC byte and left a literal SGR remnant on the header (`[4mGPU0`,
    `GPU NUMA ID[0m`), or shows the ESC in caret notation (`^[[4m`): such a remnant at the start or end of a
    token of the header is read as the escape it was and removed (never in a row: `NV1[8m` is refused, not read
    as NV1). A header whose first column is glued to anything else is refused, quoting the line.

    Refuses (ParseError, quoting the line) a label it does not know, a row of the wrong length, a missing or
    repeated GPU row, or a matrix that is not symmetric.
    """
    lines = strip_escapes(text).replace("\r\n", "\n").split("\n")
    header_at, gpu_count, nic_count = _read_header(lines)
    rows = _read_rows(lines[header_at + 1:], gpu_count)
    missing = [f"GPU{i}" for i in range(gpu_count) if i not in rows]
    if missing:
        raise ParseError(TOOL, f"matrix rows missing for {', '.join(missing)} (header has {gpu_count} GPUs)")
    labels = {}
    for i in range(gpu_count):
        for j in range(i + 1, gpu_count):
            if rows[i][j] != rows[j][i]:
                raise ParseError(TOOL, f"matrix not symmetric: GPU{i}-GPU{j} is {rows[i][j]} but GPU{j}-GPU{i} is {rows[j][i]}")
            labels[(i, j)] = rows[i][j]
    return Topology(gpu_count, labels, nic_count)


# What is left of an SGR escape (`ESC[4m`, `ESC[0m`, `ESC[1;4m`) that lost its ESC byte, or shows it in caret
# notation `^[`, at the start or the end of a token of the header line.
_SGR_REMNANT = re.compile(r"(?:^|(?<=\s))(?:\^\[)?\[[0-9;]*m|(?:\^\[)?\[[0-9;]*m(?=\s|$)")


def _read_header(lines: list[str]) -> tuple[int, int, int]:
    """(line index, GPU count, NIC count) of the header `GPU0 GPU1 ... NIC0 ... CPU Affinity ...`."""
    for index, line in enumerate(lines):
        tokens = _SGR_REMNANT.sub("", line).split()
        if not tokens or (len(tokens) > 1 and (tokens[1] == "X" or _is_label(tokens[1]))):
            continue  # a matrix row, not a header
        if tokens[0] == "GPU0":
            return index, *_count_columns(tokens, line)
        if tokens[0].endswith("GPU0") and len(tokens) > 1 and tokens[1] in ("GPU1", "NIC0", "CPU"):
            raise ParseError(TOOL, "the header's first column is glued to text that is not a terminal escape", line)
    raise ParseError(TOOL, "no matrix header starting with GPU0 in `topo -m` output")


def _count_columns(columns: list[str], line: str) -> tuple[int, int]:
    gpu_count = 0
    while gpu_count < len(columns) and columns[gpu_count] == f"GPU{gpu_count}":
        gpu_count += 1
    if gpu_count < len(columns) and _GPU.match(columns[gpu_count]):
        raise ParseError(TOOL, "GPU columns out of order in the header", line)
    # Device columns (GPUs, then NICs or HCAs) end where the affinity columns begin.
    device_columns: list[str] = []
    for token in columns:
        if token in ("CPU", "NUMA", "GPU") and device_columns and device_columns[-1] != token:
            break
        device_columns.append(token)
    return gpu_count, len(device_columns) - gpu_count


def _read_rows(lines: list[str], gpu_count: int) -> dict[int, list[str]]:
    """The GPU rows after the header: their GPU cells by GPU index, each checked."""
    rows: dict[int, list[str]] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":") == "Legend":
            break
        match = _GPU.match(tokens[0])
        if not match:
            continue  # a NIC/HCA row: its cells describe NIC paths, not GPU pairs
        index = int(match.group(1))
        if index >= gpu_count:
            raise ParseError(TOOL, f"row GPU{index} has no column in the header", line)
        if index in rows:
            raise ParseError(TOOL, f"row GPU{index} appears twice", line)
        cells = tokens[1:1 + gpu_count]
        if len(cells) < gpu_count:
            raise ParseError(TOOL, f"row GPU{index} has {len(cells)} GPU cells, expected {gpu_count}", line)
        for column, cell in enumerate(cells):
            if column == index and cell != "X":
                raise ParseError(TOOL, f"row GPU{index} should read X against itself, reads {cell!r}", line)
            if column != index and not _is_label(cell):
                raise ParseError(TOOL, f"unknown connection label {cell!r} in row GPU{index}", line)
        rows[index] = cells
    return rows


def _is_label(token: str) -> bool:
    return token in PCIE_LABELS or bool(_NVLINK.match(token))


def run_topo(runner: ToolRunner, timeout_s: float = 60.0) -> ToolRun:
    """Run `nvidia-smi topo -m` (once per session: the runner memoises it)."""
    return runner.run(TOOL, TOPO_ARGS, timeout_s)


# ------------------------------------------------------------------ nvlink -s / nvlink -e

STATUS_ARGS = ["nvlink", "-s"]
ERRORS_ARGS = ["nvlink", "-e"]
_GPU_HEADER = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: (\S+)\))?$")
_LINK_SPEED = re.compile(r"^Link (\d+): (?:([\d.]+) GB/s|<?(inactive|Inactive|Not Active)>?)$")
_LINK_COUNTER = re.compile(r"^Link (\d+): ([A-Za-z][A-Za-z0-9 ]*?): (\d+)$")


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """`nvidia-smi nvlink -s`: per GPU, per link, the speed in GB/s, or None where the link is inactive."""

    links: dict[int, dict[int, float | None]]


@dataclass(frozen=True, slots=True)
class LinkErrors:
    """`nvidia-smi nvlink -e`: per GPU, per link, each error counter by name."""

    counters: dict[int, dict[int, dict[str, int]]]

    def total(self, gpu: int) -> int:
        return sum(sum(c.values()) for c in self.counters.get(gpu, {}).values())


def _per_gpu_lines(text: str, tool_args: str) -> Iterator[tuple[int, str]]:
    """(gpu, line) for each link line, in order; a line other than a GPU header or a link line is refused."""
    gpu = None
    for line in text.replace("\r\n", "\n").split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if match := _GPU_HEADER.match(stripped):
            gpu = int(match.group(1))
            continue
        if gpu is None or not stripped.startswith("Link "):
            raise ParseError(TOOL, f"unexpected line in `nvlink {tool_args}` output", line)
        yield gpu, stripped


def parse_nvlink_status(text: str) -> LinkStatus:
    """Read `nvidia-smi nvlink -s`: `GPU 0: NAME (UUID: ...)` then `Link 0: 26.562 GB/s` or `Link 3: <inactive>`.

    Elided output (`[snip]`, `[...]`) is refused: a missing link must not read as a healthy one. Comment lines at the
    top (`# cmd: nvidia-smi nvlink -s`, as a script that saves a capture writes first) are skipped, as a person
    skips them; one after the first GPU is refused like any other line.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):
        lines.pop(0)
    links: dict[int, dict[int, float | None]] = {}
    for gpu, line in _per_gpu_lines("\n".join(lines), "-s"):
        match = _LINK_SPEED.match(line)
        if not match:
            raise ParseError(TOOL, "unreadable link status", line)
        links.setdefault(gpu, {})[int(match.group(1))] = float(match.group(2)) if match.group(2) else None
    if not links:
        raise ParseError(TOOL, "no GPU in `nvlink -s` output")
    return LinkStatus(links)


def parse_nvlink_errors(text: str) -> LinkErrors:
    """Read `nvidia-smi nvlink -e`: `Link 0: Replay Errors: 0`, `Link 0: CRC Errors: 0`, ... per GPU."""
    counters: dict[int, dict[int, dict[str, int]]] = {}
    for gpu, line in _per_gpu_lines(text, "-e"):
        match = _LINK_COUNTER.match(line)
        if not match:
            raise ParseError(TOOL, "unreadable error counter", line)
        counters.setdefault(gpu, {}).setdefault(int(match.group(1)), {})[match.group(2)] = int(match.group(3))
    if not counters:
        raise ParseError(TOOL, "no GPU in `nvlink -e` output")
    return LinkErrors(counters)


def run_nvlink_status(runner: ToolRunner, timeout_s: float = 60.0) -> ToolRun:
    return runner.run(TOOL, STATUS_ARGS, timeout_s)


def run_nvlink_errors(runner: ToolRunner, when: str, timeout_s: float = 60.0) -> ToolRun:
    """The error counters `before` or `after` the load; two runs with their own evidence."""
    return runner.run(TOOL, ERRORS_ARGS, timeout_s, key=f"nvidia-smi_nvlink_-e.{when}")


def read_topo(runner: ToolRunner, timeout_s: float = 60.0) -> Reading[Topology]:
    return parse_run(run_topo(runner, timeout_s), parse_topo)


def read_nvlink_status(runner: ToolRunner, timeout_s: float = 60.0) -> Reading[LinkStatus]:
    return parse_run(run_nvlink_status(runner, timeout_s), parse_nvlink_status)


def read_nvlink_errors(runner: ToolRunner, when: str, timeout_s: float = 60.0) -> Reading[LinkErrors]:
    return parse_run(run_nvlink_errors(runner, when, timeout_s), parse_nvlink_errors)
