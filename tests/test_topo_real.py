"""`nvidia-smi topo -m` as current drivers print it: the header underlined with ANSI escapes, even when piped.

Real outputs only (tests/data/SOURCES.md): the H200 this project recorded, and matrices from public reports
whose header carries `ESC[4m ... ESC[0m`, or what a paste left of it (`[4m`/`[0m`, caret `^[[4m`). Each is
read raw (as a caller holding run.stdout would), stripped, and through parse_run, to the figures a person
reads from it (tests/data/EXPECTED.yaml: GPU and NIC counts, every GPU pair).
"""

from pathlib import Path

import pytest
import yaml

from pytest_gpuaccept.probes import ParseError, strip_escapes
from pytest_gpuaccept.probes._run import ToolRun, parse_run
from pytest_gpuaccept.probes.nvidia_smi import parse_topo

DATA = Path(__file__).parent / "data"
EXPECTED = yaml.safe_load((DATA / "EXPECTED.yaml").read_text())["topo"]
H200 = DATA / "h200" / "nvidia-smi-topo-m.txt"

# How each file's header shows the underline: the escape itself, or what a paste left of it.
ANSI = {
    "h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt": "\x1b[4mGPU0",
    "h200_8gpu_nv18_8nic_ansi.txt": "\t\x1b[4mGPU0",
    "b200_8gpu_nv18_16nic_lines_repr.txt": "\x1b[4mGPU0",
    "a800_8gpu_nv8_8nic_ansi.txt": "\t\x1b[4mGPU0",
    "v100_8gpu_nv1_nv2_1nic_r580_ansi.txt": "\t\x1b[4mGPU0",
    "gb10_1gpu_4nic_ansi.txt": "\t\x1b[4mGPU0",
    "rtxpro6000_1gpu_empty_affinity_ansi.txt": "\t\x1b[4mGPU0",
    "b300_8gpu_nv18_9nic_sgr_remnant.txt": "\t[4mGPU0",
    "h200_1gpu_4nic_caret_escape.txt": "\t^[[4mGPU0",
}
END_OF_HEADER = {"\x1b[4mGPU0": "GPU NUMA ID\x1b[0m\n", "\t\x1b[4mGPU0": "GPU NUMA ID\x1b[0m\n",
                 "\t[4mGPU0": "GPU NUMA ID[0m\n", "\t^[[4mGPU0": "GPU NUMA ID^[[0m\n"}


def run_of(text: str) -> ToolRun:
    return ToolRun(key="nvidia-smi_topo_-m", argv=("nvidia-smi", "topo", "-m"), returncode=0, duration_s=0.1,
                   stdout=text, stderr="")


def readings(text: str) -> list[object]:
    """The matrix as read raw, after strip_escapes, and through parse_run (what the clauses get)."""
    reading = parse_run(run_of(text), parse_topo)
    assert reading.failure is None, reading.failure
    return [parse_topo(text), parse_topo(strip_escapes(text)), reading.value]


def test_the_h200_recording_is_an_ansi_header_1gpu_matrix_and_parses():
    text = H200.read_text()
    assert text.startswith("\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n")
    for topo in readings(text):
        assert (topo.gpu_count, topo.nic_count, topo.labels) == (1, 0, {})


@pytest.mark.parametrize("name", sorted(ANSI))
def test_every_real_ansi_header_matrix_reads_to_what_a_person_reads(name):
    text = (DATA / "topo" / name).read_text()
    header = text.splitlines(keepends=True)[0]
    assert header.startswith(ANSI[name]) and header.endswith(END_OF_HEADER[ANSI[name]])
    expected = EXPECTED[name]
    for topo in readings(text):
        assert topo.gpu_count == expected["gpu_count"]
        assert topo.nic_count == expected["nic_count"]
        assert {f"{i}-{j}": label for (i, j), label in topo.labels.items()} == expected["pairs"]


def test_at_least_five_real_ansi_matrices_besides_the_h200():
    assert len(ANSI) >= 5 and all((DATA / "topo" / name).exists() for name in ANSI)


@pytest.mark.parametrize("name, links", [
    ("h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt", 18), ("h200_8gpu_nv18_8nic_ansi.txt", 18),
    ("b300_8gpu_nv18_9nic_sgr_remnant.txt", 18), ("b200_8gpu_nv18_16nic_lines_repr.txt", 18),
    ("a800_8gpu_nv8_8nic_ansi.txt", 8),
])
def test_nvswitch_boxes_count_their_links_on_every_pair(name, links):
    topo = parse_topo((DATA / "topo" / name).read_text())
    assert {topo.nvlinks(i, j) for i in range(8) for j in range(8) if i != j} == {links}


def test_the_hybrid_cube_mesh_on_an_r580_driver_counts_links_per_pair():
    topo = parse_topo((DATA / "topo" / "v100_8gpu_nv1_nv2_1nic_r580_ansi.txt").read_text())
    assert (topo.nvlinks(0, 3), topo.nvlinks(0, 1), topo.nvlinks(0, 5), topo.nvlinks(7, 3)) == (2, 1, 0, 1)


def test_nic_rows_without_trailing_tabs_and_empty_affinity_cells_are_read():
    a800 = (DATA / "topo" / "a800_8gpu_nv8_8nic_ansi.txt").read_text()
    assert "\tPIX\t X\n\nLegend:" in a800  # the last NIC row, cut short
    assert parse_topo(a800).nic_count == 8
    empty = (DATA / "topo" / "rtxpro6000_1gpu_empty_affinity_ansi.txt").read_text()
    assert "GPU0\t X \t\t\t\tN/A\n" in empty
    assert parse_topo(empty).gpu_count == 1


def test_the_escape_removed_by_hand_reads_the_same():
    """The XD670 output with its ESC bytes gone but the `[4m`/`[0m` left (as pasted into an issue)."""
    real = (DATA / "topo" / "h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt").read_text()
    pasted = real.replace("\x1b", "")  # constructed from the real file
    assert pasted.startswith("[4mGPU0")
    assert parse_topo(pasted) == parse_topo(real)


# Constructed inputs (each a real file with one thing changed): what cannot be read with certainty is refused.
XD670 = (DATA / "topo" / "h100_hgx_xd670_8gpu_nv18_12nic_ansi.txt").read_text()


@pytest.mark.parametrize("text, message, quoted", [
    (XD670.replace("\x1b[4mGPU0", "\x1b[4mxGPU0", 1), "first column is glued", "xGPU0\tGPU1"),
    (XD670.replace("\x1b[4mGPU0", "%[4mGPU0", 1), "first column is glued", "%[4mGPU0\tGPU1"),
    (XD670.replace("\x1b[4m", "", 1).replace("\x1b[0m", "", 1).replace("GPU0\tGPU1", "GPU0\tGPU2", 1),
     "GPU columns out of order", "GPU0\tGPU2"),
    (XD670.replace("NV18", "NV1[8m", 1), "unknown connection label 'NV1[8m' in row GPU0", "GPU0\t X"),
])
def test_what_is_ambiguous_is_refused_quoting_the_line(text, message, quoted):
    with pytest.raises(ParseError, match=message.replace("[", r"\[")) as info:
        parse_topo(text)
    assert repr(quoted)[1:-1] in str(info.value)
