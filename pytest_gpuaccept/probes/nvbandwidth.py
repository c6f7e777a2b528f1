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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import ParseError
from ._run import Reading, ToolRunner, parse_run

TOOL = "nvbandwidth"
_RUNNING = re.compile(r"^Running (\w+)\.\s*$")
_SUM = re.compile(r"^SUM (\w+) ([\d.]+)\s*$")
_COV = re.compile(r"^COEFFICIENT_OF_VARIATION (\w+) ([\d.]+)\s*$")
_VERSION = re.compile(r"nvbandwidth Version: (\S+)")
_DRIVER = re.compile(r"^Driver Version: (\S+)")
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
class NvBandwidth:
    version: str | None
    driver: str | None
    matrices: dict[str, Matrix] = field(default_factory=dict)
    waived: frozenset[str] = frozenset()
    waived_lines: dict[str, str] = field(default_factory=dict)  # each waived testcase: what nvbandwidth printed

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
    version = driver = None
    matrices: dict[str, Matrix] = {}
    waived: dict[str, str] = {}
    announced: list[tuple[str | None, str]] = []
    testcase: str | None = None
    n = 0
    while n < len(lines):
        line = lines[n].strip().strip('"')
        n += 1
        if (match := _VERSION.search(line)) and version is None:
            version = match.group(1)
        if (match := _DRIVER.match(line)) and driver is None:
            driver = match.group(1)
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
    return NvBandwidth(version, driver, matrices, frozenset(waived), waived)


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
    return NvBandwidth(str(version) if version else None, str(driver) if driver else None, matrices, frozenset(waived),
                       waived)


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
