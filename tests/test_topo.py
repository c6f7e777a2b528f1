"""parse_topo on every real `nvidia-smi topo -m` output of the corpus, and on broken ones."""

from pathlib import Path

import pytest
import yaml

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.nvidia_smi import parse_topo

DATA = Path(__file__).parent / "data"
EXPECTED = yaml.safe_load((DATA / "EXPECTED.yaml").read_text())["topo"]
FILES = sorted((DATA / "topo").iterdir())


def test_every_corpus_file_has_expectations():
    assert {f.name for f in FILES} == set(EXPECTED)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_real_topo_outputs_parse_to_the_expected_pairs(path):
    expected = EXPECTED[path.name]
    topo = parse_topo(path.read_text())
    assert topo.gpu_count == expected["gpu_count"]
    assert topo.nic_count == expected["nic_count"]
    assert {f"{i}-{j}": label for (i, j), label in topo.labels.items()} == expected["pairs"]


def test_nv_labels_count_links_and_pcie_paths_count_zero():
    topo = parse_topo((DATA / "topo" / "dgx1_v100_8gpu_4mlx5_unordered_rows.txt").read_text())
    assert topo.nvlinks(0, 3) == 2
    assert topo.nvlinks(3, 0) == 2
    assert topo.nvlinks(0, 1) == 1
    assert topo.nvlinks(0, 5) == 0


def test_the_old_soc_label_counts_zero():
    topo = parse_topo((DATA / "topo" / "tf_gdr_4gpu_mlx4_soc.txt").read_text())
    assert topo.labels[(0, 2)] == "SOC" and topo.nvlinks(0, 2) == 0


H100 = (DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt").read_text()


@pytest.mark.parametrize("text, message", [
    ("", "no matrix header starting with GPU0"),
    ("Failed to initialize NVML: Driver/library version mismatch\n", "no matrix header starting with GPU0"),
    (H100.replace("NV18", "NV?", 1), "unknown connection label 'NV?' in row GPU0"),
    (H100.replace("NV18", "PCI", 1), "unknown connection label 'PCI' in row GPU0"),
    ("\n".join(H100.splitlines()[:5]), "matrix rows missing for GPU4, GPU5, GPU6, GPU7"),
    (H100.replace("NV18", "SYS", 1), "matrix not symmetric: GPU0-GPU1 is SYS but GPU1-GPU0 is NV18"),
    (H100 + H100.splitlines()[1] + "\n", "row GPU0 appears twice"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n", "row GPU1 has 1 GPU cells, expected 2"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X\nGPU2\tNV4\tNV4\t X\n", "row GPU2 has no column in the header"),
    ("\tGPU0\tGPU1\nGPU0\tNV4\tNV4\nGPU1\tNV4\t X\n", "row GPU0 should read X against itself"),
])
def test_what_cannot_be_read_with_certainty_is_refused(text, message):
    with pytest.raises(ParseError, match=message.replace("?", r"\?")):
        parse_topo(text)


def test_a_refusal_quotes_the_line():
    with pytest.raises(ParseError) as info:
        parse_topo(H100.replace("NV18", "NV?", 1))
    assert str(info.value).startswith("nvidia-smi: unknown connection label 'NV?' in row GPU0: 'GPU0")
