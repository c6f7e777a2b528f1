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
header, and its SUM line present and equal (to rounding) to the sum of the cells. A testcase printed as
Waived (peer access not possible) is kept as such, never as a number. A verification ASSERT, an abort or
an error line, a cut or elided matrix: ParseError, quoting the line.
"""

from __future__ import annotations

import json
import re
from dataclasses import field
from typing import Any

from ..records import record
from . import ParseError
from ._run import Reading, ToolRunner, parse_run

TOOL = "nvbandwidth"
_RUNNING = re.compile(r"^Running (\w+)\.\s*$")
_SUM = re.compile(r"^SUM (\w+) ([\d.]+)\s*$")
_COV = re.compile(r"^COEFFICIENT_OF_VARIATION (\w+) ([\d.]+)\s*$")
_VERSION = re.compile(r"nvbandwidth Version: (\S+)")
_DRIVER = re.compile(r"^Driver Version: (\S+)")
_FAILURE = re.compile(r"ASSERT|Abort|Segmentation fault|CUDA_ERROR|cudaError|^ERROR|FAILED|failed with", re.IGNORECASE)
_WAIVED = re.compile(r"^(?:Waived|.*\bwaived\b)", re.IGNORECASE)


@record
class Matrix:
    """One printed matrix: cells[row][column], None where nvbandwidth printed N/A (the diagonal)."""

    key: str  # the SUM key: the testcase, suffixed _read1/_read2/_total for the bidirectional ones
    description: str
    unit: str  # "GB/s" or "ns": a latency matrix is never a bandwidth
    cells: tuple[tuple[float | None, ...], ...]
    sum: float
    coefficient_of_variation: float | None = None


@record
class NvBandwidth:
    version: str | None
    driver: str | None
    matrices: dict[str, Matrix] = field(default_factory=dict)
    waived: frozenset[str] = frozenset()

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


def parse_nvbandwidth(text: str) -> NvBandwidth:
    """Every matrix of a text output (several runs concatenated are read in turn), or its `-j` JSON."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_nvbandwidth_json(stripped)
    lines = text.splitlines()
    version = driver = None
    matrices: dict[str, Matrix] = {}
    waived: set[str] = set()
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
            continue
        if testcase is not None and _WAIVED.match(line):
            waived.add(testcase)
            testcase = None
            continue
        if testcase is None or not re.search(r"\((GB/s|ns)\)\s*$", line):
            continue
        # A matrix: description, header of column numbers, rows, then (after blank lines) its SUM.
        description = line
        if n >= len(lines):
            raise ParseError(TOOL, f"{testcase}: the output ends after the matrix title", line)
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
            raise ParseError(TOOL, f"{testcase}: no SUM line after the matrix: cut", lines[n] if n < len(lines) else line)
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
        matrices[key] = Matrix(key, description, _unit(description), cells, float(match.group(2)), cov)
    if not matrices and not waived:
        raise ParseError(TOOL, "no matrix and no waived testcase in the output")
    return NvBandwidth(version, driver, matrices, frozenset(waived))


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
    waived: set[str] = set()
    for case in cases:
        name, status = str(case.get("name", "")), str(case.get("status", ""))
        if status == "Waived":
            waived.add(name)
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
    return NvBandwidth(str(version) if version else None, str(driver) if driver else None, matrices, frozenset(waived))


# Testcases the p2p clause runs; see docs/contract.md for how each cell maps to a subject.
P2P_TESTCASES = ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce",
                 "device_to_device_bidirectional_memcpy_read_ce")


def run_nvbandwidth(runner: ToolRunner, testcases: tuple[str, ...], key: str = "nvbandwidth_p2p",
                    timeout_s: float = 900.0) -> Reading[NvBandwidth]:
    """One run for the given testcases (`-t` each), text output, read whole or refused."""
    args = [arg for case in testcases for arg in ("-t", case)]
    return parse_run(runner.run(TOOL, args, min(runner.default_timeout_s, timeout_s), key=key), parse_nvbandwidth)
