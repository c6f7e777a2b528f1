"""NVIDIA nvbandwidth: copy-engine and SM bandwidth matrices, from its text output (v0.4-v0.10) or `-j` JSON.

Text, per testcase (bidirectional ones print three matrices, keyed `<testcase>_read1|_read2|_total`):

    Running device_to_device_memcpy_read_ce.
    memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
               0         1
     0       N/A    370.90
     1    370.90       N/A

    SUM device_to_device_memcpy_read_ce 741.80
    COEFFICIENT_OF_VARIATION device_to_device_memcpy_read_ce 0.00

A matrix is read only when it is whole: its rows numbered 0..n-1 in order, every row as wide as the
header, and its SUM line present and equal (to rounding) to the sum of the cells. A testcase nvbandwidth
cannot run (peer access not possible, a single GPU) is printed `Waiving <testcase>.` (v0.2-v0.4), a bare
`Waived: ` in its place (v0.5 and later) or `"status": "Waived"` (JSON): it is kept as waived, with the
words printed, never as a number. A verification ASSERT, an abort or an error line, a cut or elided
matrix: ParseError, quoting the line.

The header is kept as the tool's word on where it ran, for a judge to set beside NVML's (clauses/plausible.py):

    CUDA Runtime Version: 12060                      (v0.2-v0.8; v0.10: `13.3 (13030)`)
    CUDA Driver Version: 12060                       (v0.10: `CUDA Driver Version (API): 13.3 (13030)`)
    Driver Version: 560.35.05
    Device 0: NVIDIA A100-SXM4-40GB (00000000:99:00)  (v0.2-v0.4: the name alone; v0.10 lists none)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import ParseError, option_value
from ._run import Reading, ToolRunner, parse_run

TOOL = "nvbandwidth"
_RUNNING = re.compile(r"^Running (\w+)\.\s*$")
_SUM = re.compile(r"^SUM (\w+) ([\d.]+)\s*$")
_COV = re.compile(r"^COEFFICIENT_OF_VARIATION (\w+) ([\d.]+)\s*$")
_VERSION = re.compile(r"nvbandwidth Version: (\S+)")
_DRIVER = re.compile(r"^Driver Version: (\S+)")
# cuDriverGetVersion as printed: `12080` (v0.2-v0.8), `13.3 (13030)` (v0.10, `CUDA Driver Version (API)`)
_CUDA_DRIVER = re.compile(r"^CUDA Driver Version(?: \(API\))?: (?:\S+ \()?(\d+)\)?\s*$")
_CUDA_RUNTIME = re.compile(r"^CUDA Runtime Version: (?:\S+ \()?(\d+)\)?\s*$")
# `Device 0: NVIDIA H20-3e (00000000:18:00)` (v0.5 on), `Device 0: NVIDIA H100 80GB HBM3` (v0.2-v0.4)
_DEVICE = re.compile(r"^Device (\d+): (.+?)(?: \(([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2})\))?\s*$")
_FAILURE = re.compile(r"ASSERT|Abort|Segmentation fault|CUDA_ERROR|cudaError|^ERROR|FAILED|failed with", re.IGNORECASE)
_WAIVING = re.compile(r"^Waiving (\w+)\.\s*$")  # v0.2-v0.4: the testcase named
_WAIVED = re.compile(r"^Waived:")  # v0.5 and later, text output: `Waived: ` and nothing else


@dataclass(frozen=True, slots=True)
class Matrix:
    """One printed matrix: cells[row][column], None where nvbandwidth printed N/A (the diagonal)."""

    key: str  # the SUM key: the testcase, suffixed _read1/_read2/_total for the bidirectional ones
    description: str
    unit: str  # "GB/s" or "ns": a latency matrix is never a bandwidth
    cells: tuple[tuple[float | None, ...], ...]
    sum: float
    coefficient_of_variation: float | None = None


@dataclass(frozen=True, slots=True)
class Device:
    """A `Device N: NAME (BUS)` line: CUDA's ordinal, cuDeviceGetName, and the PCI address where printed."""

    ordinal: int
    name: str
    bus_id: str | None  # `00000000:18:00` (domain:bus:device); None where the version prints the name alone


@dataclass(frozen=True, slots=True)
class NvBandwidth:
    version: str | None
    driver: str | None  # `Driver Version:` (nvbandwidth reads it from NVML: the host's NVML must say the same)
    matrices: dict[str, Matrix] = field(default_factory=dict)
    waived: frozenset[str] = frozenset()
    waived_lines: dict[str, str] = field(default_factory=dict)  # each waived testcase: what nvbandwidth printed
    cuda_driver: int | None = None  # cuDriverGetVersion (12080 is CUDA 12.8); None where not printed
    cuda_runtime: int | None = None
    devices: tuple[Device, ...] = ()

    def matrix(self, key: str) -> Matrix | None:
        return self.matrices.get(key)


def _unit(description: str) -> str:
    if "(GB/s)" in description:
        return "GB/s"
    if "(ns)" in description:
        return "ns"
    raise ParseError(TOOL, "a matrix whose unit is neither (GB/s) nor (ns)", description)


def _cell(token: str, line: str) -> float | None:
    if token == "N/A":
        return None
    try:
        return float(token)
    except ValueError:
        raise ParseError(TOOL, f"a cell that is not a number: {token!r}", line) from None


def _check_sum(key: str, cells: tuple[tuple[float | None, ...], ...], printed: float, line: str) -> None:
    total = sum(c for row in cells for c in row if c is not None)
    count = sum(1 for row in cells for c in row if c is not None)
    if abs(total - printed) > 0.006 * max(count, 1) + 0.01:  # cells are printed to 2 decimals
        raise ParseError(TOOL, f"the cells of {key} add up to {total:.2f}, not the printed SUM: cut or edited", line)


# Every single-node testcase, in the order nvbandwidth v0.7-v0.10 runs them all (createTestcases() in
# nvbandwidth.cpp); v0.5 and v0.6 lack the SM bidirectional host copies and device_local_copy.
ALL_TESTCASES = (
    "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "host_to_device_bidirectional_memcpy_ce",
    "device_to_host_bidirectional_memcpy_ce", "device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
    "device_to_device_bidirectional_memcpy_read_ce", "device_to_device_bidirectional_memcpy_write_ce",
    "all_to_host_memcpy_ce", "all_to_host_bidirectional_memcpy_ce", "host_to_all_memcpy_ce",
    "host_to_all_bidirectional_memcpy_ce", "all_to_one_write_ce", "all_to_one_read_ce", "one_to_all_write_ce",
    "one_to_all_read_ce", "host_to_device_memcpy_sm", "device_to_host_memcpy_sm",
    "host_to_device_bidirectional_memcpy_sm", "device_to_host_bidirectional_memcpy_sm",
    "device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm",
    "device_to_device_bidirectional_memcpy_read_sm", "device_to_device_bidirectional_memcpy_write_sm",
    "all_to_host_memcpy_sm", "all_to_host_bidirectional_memcpy_sm", "host_to_all_memcpy_sm",
    "host_to_all_bidirectional_memcpy_sm", "all_to_one_write_sm", "all_to_one_read_sm", "one_to_all_write_sm",
    "one_to_all_read_sm", "host_device_latency_sm", "device_to_device_latency_sm", "device_local_copy")


def _read_matrix(lines: list[str], n: int, testcase: str, description: str) -> tuple[Matrix, int]:
    """The matrix whose title is lines[n - 1]: header of column numbers, rows, then (after blank lines) its SUM."""
    if n >= len(lines):
        raise ParseError(TOOL, f"{testcase}: the output ends after the matrix title", description)
    header = lines[n].split()
    n += 1
    if header != [str(i) for i in range(len(header))] or not header:
        raise ParseError(TOOL, f"{testcase}: expected the column numbers 0..n-1", lines[n - 1])
    rows: list[tuple[float | None, ...]] = []
    while n < len(lines) and lines[n].strip():
        tokens = lines[n].split()
        if tokens[0] != str(len(rows)) or len(tokens) != len(header) + 1:
            raise ParseError(TOOL, f"{testcase}: row {len(rows)} missing, out of order or not "
                                   f"{len(header)} cells wide", lines[n])
        rows.append(tuple(_cell(t, lines[n]) for t in tokens[1:]))
        n += 1
    if not rows:
        raise ParseError(TOOL, f"{testcase}: a matrix without rows", description)
    while n < len(lines) and not lines[n].strip():
        n += 1
    match = _SUM.match(lines[n].strip().strip('"')) if n < len(lines) else None
    if match is None:
        raise ParseError(TOOL, f"{testcase}: no SUM line after the matrix: cut", lines[n] if n < len(lines) else description)
    n += 1
    key = match.group(1)
    if not key.startswith(testcase):
        raise ParseError(TOOL, f"a SUM for {key} under Running {testcase}", lines[n - 1])
    cells = tuple(rows)
    _check_sum(key, cells, float(match.group(2)), lines[n - 1])
    cov = None
    if n < len(lines) and (cov_match := _COV.match(lines[n].strip().strip('"'))) and cov_match.group(1) == key:
        cov = float(cov_match.group(2))
        n += 1
    return Matrix(key, description, _unit(description), cells, float(match.group(2)), cov), n


def _name_the_waived(announced: list[tuple[str | None, str]], order: tuple[str, ...],
                     asked: bool) -> dict[str, str]:
    """Which testcase each nameless `Waived:` line stands for (v0.5+ text never prints it): nvbandwidth runs
    the testcases in `order` (those asked, or all of them) and announces each with `Running <name>.` or
    `Waived:`, so the nameless lines between two named ones fill the gap between them in `order`. Where
    their count does not fill the gap exactly, which testcase was waived cannot be told: ParseError."""
    named: dict[str, str] = {}
    last, pending = -1, []
    for name, line in announced:
        if name is None:
            pending.append(line)
            continue
        at = order.index(name) if name in order else -1
        if pending:
            gap = order[last + 1:at] if at > last else ()
            if len(gap) != len(pending):
                raise ParseError(TOOL, f"{len(pending)} testcase(s) printed as Waived before {name}, where "
                                       f"{len(gap)} were to run: which ones were waived cannot be told", pending[0])
            named.update(zip(gap, pending))
            pending = []
        last = at if at >= 0 else last
    rest = order[last + 1:]
    if pending and (len(rest) < len(pending) or (asked and len(rest) != len(pending))):
        raise ParseError(TOOL, f"{len(pending)} testcase(s) printed as Waived at the end, where {len(rest)} were "
                               "left to run: which ones were waived cannot be told", pending[0])
    named.update(zip(rest, pending))
    return named


_HEADER = (("version", _VERSION), ("driver", _DRIVER), ("cuda_driver", _CUDA_DRIVER), ("cuda_runtime", _CUDA_RUNTIME))


def _header(line: str, header: dict[str, str], devices: list[Device]) -> None:
    """A header line: the first of each field is kept (several runs concatenated: the first run's), and the
    `Device N:` lines in order."""
    for key, pattern in _HEADER:
        if key not in header and (match := (pattern.search(line) if key == "version" else pattern.match(line))):
            header[key] = match.group(1)
    if (match := _DEVICE.match(line)) and int(match.group(1)) == len(devices):
        devices.append(Device(int(match.group(1)), match.group(2).strip(), match.group(3)))


def parse_nvbandwidth(text: str, asked: tuple[str, ...] = ()) -> NvBandwidth:
    """Every matrix of a text output (several runs concatenated are read in turn), or its `-j` JSON.

    `asked`: the testcases the command named with `-t`, in order (none: a run of all of them). A testcase
    nvbandwidth cannot run is printed `Waiving <name>.` (v0.2-v0.4) or, from v0.5, a bare `Waived:` in the
    place of its `Running <name>.` line; each is kept with the line printed, never read as a number.
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_nvbandwidth_json(stripped)
    lines = text.splitlines()
    header: dict[str, str] = {}
    devices: list[Device] = []
    matrices: dict[str, Matrix] = {}
    waived: dict[str, str] = {}
    announced: list[tuple[str | None, str]] = []
    testcase: str | None = None
    n = 0
    while n < len(lines):
        line = lines[n].strip().strip('"')
        n += 1
        _header(line, header, devices)
        if _FAILURE.search(line):
            raise ParseError(TOOL, "the run reported a failure", line)
        if match := _RUNNING.match(line):
            testcase = match.group(1)
            announced.append((testcase, line))
        elif match := _WAIVING.match(line):
            testcase = None
            announced.append((match.group(1), line))
            waived[match.group(1)] = line
        elif _WAIVED.match(line):
            testcase = None
            announced.append((None, line))
        elif testcase is not None and re.search(r"\((GB/s|ns)\)\s*$", line):
            matrix, n = _read_matrix(lines, n, testcase, line)
            matrices[matrix.key] = matrix
    waived.update(_name_the_waived(announced, asked or ALL_TESTCASES, bool(asked)))
    if not matrices and not waived:
        raise ParseError(TOOL, "no matrix and no waived testcase in the output")
    cuda_driver, cuda_runtime = header.get("cuda_driver"), header.get("cuda_runtime")
    return NvBandwidth(header.get("version"), header.get("driver"), matrices, frozenset(waived), waived,
                       int(cuda_driver) if cuda_driver else None, int(cuda_runtime) if cuda_runtime else None,
                       tuple(devices))


def parse_nvbandwidth_json(text: str) -> NvBandwidth:
    """`nvbandwidth -j`: {"nvbandwidth": {"version", "testcases": [{"name", "status", "bandwidth_matrix"...}]}}.

    Cells are JSON strings ("12.3964", "N/A"); a testcase that is neither Passed nor Waived is a failure.
    """
    try:
        data: Any = json.loads(text)
        root = data["nvbandwidth"]
        cases = root["testcases"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(TOOL, f"JSON without nvbandwidth.testcases: {exc}") from None
    matrices: dict[str, Matrix] = {}
    waived: dict[str, str] = {}
    for case in cases:
        name, status = str(case.get("name", "")), str(case.get("status", ""))
        if status == "Waived":
            waived[name] = json.dumps(case)[:200]
            continue
        if status != "Passed":
            raise ParseError(TOOL, f"testcase {name} has status {status!r}", json.dumps(case)[:200])
        description = str(case.get("bandwidth_description", "")).strip()
        try:
            cells = tuple(tuple(_cell(str(c), description) for c in row) for row in case["bandwidth_matrix"])
            printed = float(case["sum"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ParseError(TOOL, f"testcase {name} without a readable matrix and sum: {exc}") from None
        widths = {len(row) for row in cells}
        if not cells or len(widths) != 1:
            raise ParseError(TOOL, f"testcase {name}: a ragged or empty matrix")
        _check_sum(name, cells, printed, description)
        matrices[name] = Matrix(name, description, _unit(description), cells, printed)
    version = root.get("version")
    driver = root.get("Driver Version")
    devices = []
    for n, said in enumerate(root.get("GPU Device list") or ()):
        match = _DEVICE.match(f"Device {n}: {said}".strip())
        if match:
            devices.append(Device(n, match.group(2).strip(), match.group(3)))
    # -j has no `CUDA Driver Version` key; its `CUDA Runtime Version` holds cuDriverGetVersion's number in v0.5-v0.8
    # (main() overwrites the runtime's before printing), which a fixed release would not: kept as printed, never
    # compared with NVML's CUDA version.
    runtime = root.get("CUDA Runtime Version")
    return NvBandwidth(str(version) if version else None, str(driver) if driver else None, matrices, frozenset(waived),
                       waived, None, int(runtime) if isinstance(runtime, int) else None, tuple(devices))


# ------------------------------------------------------------------ what each figure stands for

# nvbandwidth's defaults (common.h): a buffer of 64 MiB (v0.2-v0.6) or 512 MiB (v0.7 on: 64d6837, "V0.7 (#32)"),
# copied loopCount 16 times per sample after WARMUP_COUNT 4 untimed copies (memcpy.cpp), in testSamples 3 samples;
# the figure printed is the samples' median (PerformanceStatistic::median), or their mean with --useMean.
BUFFER_MIB_BEFORE_V07, BUFFER_MIB_FROM_V07 = 64, 512
LOOP_COUNT, TEST_SAMPLES, WARMUP_COPIES = 16, 3, 4
_NUMBER = re.compile(r"^v?(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Copies:
    """The copies behind each GB/s figure of a run whose time is bounded by the figure: `buffer_bytes` x `loops`
    copies in each of `timed_samples` samples (of `samples`)."""

    buffer_bytes: int
    loops: int
    samples: int
    timed_samples: int
    basis: str

    @property
    def per_figure(self) -> int:
        return self.buffer_bytes * self.loops * self.timed_samples


def _whole(argv: tuple[str, ...] | list[str], *names: str) -> int | None:
    value = option_value(argv, *names)
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


def copies(result: NvBandwidth, argv: tuple[str, ...] | list[str]) -> Copies:
    """What each figure of `result` stands for, from the command line (`-b`/`--bufferSize` MiB, `--loopCount`,
    `-i`/`--testSamples`, `-m`/`--useMean`) and else the defaults of the version it printed (64 MiB where the version
    is not printed: the smallest of any). The samples whose copies the figure bounds: all of them under --useMean
    (their harmonic mean is at most their mean); else those at or below the median, n // 2 + 1 of n. Warm-up copies
    and faster samples are left out: the least time the figure implies, never more."""
    version = _NUMBER.match(result.version or "")
    default = BUFFER_MIB_FROM_V07 if version and (int(version.group(1)), int(version.group(2))) >= (0, 7) \
        else BUFFER_MIB_BEFORE_V07
    mib = _whole(argv, "-b", "--bufferSize") or default
    loops = _whole(argv, "--loopCount") or LOOP_COUNT
    samples = _whole(argv, "-i", "--testSamples") or TEST_SAMPLES
    mean = any(word in ("-m", "--useMean") for word in argv)
    timed = samples if mean else samples // 2 + 1
    return Copies(mib * 2**20, loops, samples, timed,
                  f"{mib} MiB x {loops} copies x {timed} of {samples} samples per figure")


# Testcases the p2p clause runs; see docs/contract.md for how each cell maps to a subject.
P2P_TESTCASES = ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
                 "device_to_device_bidirectional_memcpy_read_ce")


KEY = "nvbandwidth"  # the one run of a session; bundles made before issue 29 have one per section (the `key` each gave)


def run_nvbandwidth(runner: ToolRunner, testcases: tuple[str, ...], key: str = KEY,
                    timeout_s: float = 900.0) -> Reading[NvBandwidth]:
    """One run for the given testcases (`-t` each), text output, read whole or refused."""
    args = [arg for case in testcases for arg in ("-t", case)]
    run = runner.run(TOOL, args, min(runner.default_timeout_s, timeout_s), key=key)
    return parse_run(run, lambda text: parse_nvbandwidth(text, testcases))
