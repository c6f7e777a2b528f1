"""Terminal escape sequences are removed from every tool's output before it is parsed; the raw bytes stay."""

from __future__ import annotations

import pytest
from conftest import DATA

from pytest_gpuaccept.probes import strip_escapes


def test_the_real_h200_topo_header_loses_its_underline_and_keeps_its_tabs():
    raw = (DATA / "h200" / "nvidia-smi-topo-m.txt").read_text()
    assert raw.startswith("\t\x1b[4mGPU0\tCPU Affinity")  # as the driver printed it, piped
    assert strip_escapes(raw).startswith("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t")


@pytest.mark.parametrize(("raw", "seen"), [
    ("\x1b[1;31mFAIL\x1b[0m", "FAIL"),  # colour (SGR with parameters)
    ("a\x1b[2Kb", "ab"),  # erase line
    ("\x1b]0;title\x07text", "text"),  # OSC window title, BEL-terminated
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink, ST-terminated
    ("\x1b(Bplain\x1b[m", "plain"),  # a charset designation and a bare reset, as tput sgr0 prints them
    ("no escapes at all\n", "no escapes at all\n"),
])
def test_escapes_of_every_kind_a_terminal_tool_prints_are_removed(raw, seen):
    assert strip_escapes(raw) == seen
