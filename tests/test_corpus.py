"""The corpus as a whole: every file in tests/data has its source in SOURCES.md and is read by a test that
names it (or, where a test reads a whole folder, by that folder's test), and every file of a tool's folder
is either read by that tool's parser or refused with a ParseError: none left out, none crashing a parser."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Callable

import pytest
from conftest import DATA

from pytest_gpuaccept.probes import ParseError, ethtool, ib_write_bw, kernel_log, nccl_tests, nvbandwidth, nvidia_smi

TESTS = Path(__file__).parent
NOT_DATA = {"SOURCES.md", "EXPECTED.yaml"}


def corpus() -> list[str]:
    return sorted(str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name not in NOT_DATA)


def source_patterns() -> list[str]:
    """The paths (or globs) each `- \\`path\\`` line of SOURCES.md gives a source for."""
    patterns = []
    for line in (DATA / "SOURCES.md").read_text().splitlines():
        if line.startswith("- `"):
            head = line.split(" | ", 1)[0]
            patterns += re.findall(r"`([^`]+)`", head)
    return patterns


def test_every_file_has_its_source():
    patterns = source_patterns()
    unsourced = [f for f in corpus() if not any(fnmatch.fnmatchcase(f, p) for p in patterns)]
    assert unsourced == []


def test_every_file_is_read_by_a_test_that_names_it():
    """A test module, the builders the test modules share, a benchmark a test runs, or an EXPECTED.yaml names the
    file (its name, or its folder read whole by a glob)."""
    benchmarks = TESTS.parent / "benchmarks"
    readers = "\n".join(p.read_text() for p in [*TESTS.glob("test_*.py"), TESTS / "builders.py", *benchmarks.glob("*.py"),
                                                 *DATA.rglob("EXPECTED.yaml")] if p.name != Path(__file__).name)
    unread = [f for f in corpus() if Path(f).name not in readers and f"{Path(f).parent}/*" not in readers]
    assert unread == []


# The parser of each folder whose files are one tool's output; ParseError is how a parser refuses.
PARSERS: dict[str, Callable[[str], object]] = {
    "topo": nvidia_smi.parse_topo,
    "allreduce": nccl_tests.parse_all_reduce,
    "ethtool": ethtool.parse_ethtool,
    "ibwritebw": ib_write_bw.parse_ib_write_bw,
    "kernel": kernel_log.parse_xids,
}


@pytest.mark.parametrize("name", [f for f in corpus() if f.split("/")[0] in PARSERS])
def test_a_tools_parser_reads_or_refuses_each_file_of_its_folder(name):
    raw = (DATA / name).read_text(errors="replace")
    try:
        PARSERS[name.split("/")[0]](raw)
    except ParseError as refused:
        assert str(refused)  # a refusal says why


@pytest.mark.parametrize("name", [f for f in corpus() if f.startswith("nvbandwidth/")])
def test_nvbandwidth_reads_or_refuses_each_file(name):
    raw = (DATA / name).read_text(errors="replace")
    parse = nvbandwidth.parse_nvbandwidth_json if name.endswith(".json") else nvbandwidth.parse_nvbandwidth
    try:
        parse(raw)
    except ParseError as refused:
        assert str(refused)
