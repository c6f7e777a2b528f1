"""Plausibility (issue 25): a figure above what its path can carry, a run shorter than its own timed work, and an
all_reduce size the command did not ask for never pass; honest hosts still do (tests/test_p2p.py and friends).

The tool outputs are real (tests/data, with their sources in SOURCES.md), each judged on the host it came from as NVML
reads it (its header's driver, CUDA version and PCI bus IDs: `nvml/h100_sxm5_8gpu_acceptance_sheet.json` for the
Korean sheet's nvbandwidth and p2pBandwidthLatencyTest, a recording staged here with another output's driver): a copy
tool's header that is not this host's is refused before any figure is read (tests/test_copy_tool_headers.py). The PCIe
link files under sys/ are constructed here, in the test's code: the kernel writes `32.0 GT/s PCIe` and `16` into
current_link_speed and current_link_width of a Gen5 x16 function, and `8.0 GT/s PCIe` for Gen3.

A clause's judgement is judged in process (tests/judging.py); one rejected and one accepted host stay whole runs."""

import re
from pathlib import Path

import pytest
from builders import pcie_links
from conftest import DATA, nccl_log, nvml_recording, pci_tree, staged_recording
from judging import Output, judge

from pytest_gpuaccept import models
from pytest_gpuaccept.clauses import plausible
from pytest_gpuaccept.clauses.allreduce import asked_size, unasked_sizes
from pytest_gpuaccept.clauses.p2p import P2pView, published
from pytest_gpuaccept.measurements import GpuModels
from pytest_gpuaccept.probes._run import ToolRun
from pytest_gpuaccept.probes.nccl_tests import parse_all_reduce
from pytest_gpuaccept.probes.nvbandwidth import parse_nvbandwidth
from pytest_gpuaccept.probes.nvidia_smi import parse_topo
from pytest_gpuaccept.probes.p2p_latency import parse_p2p_latency

P2P_H100 = DATA / "p2pBandwidthLatencyTest" / "h100_8gpu_full_p2p_writes_spreadsheet_quoted_no_trailing_spaces.txt"
NVB_H100 = DATA / "nvbandwidth" / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt"
B300 = DATA / "nvbandwidth" / "b300_sxm6_7gpu_v0.10.0_ce_full_bidir_read1_read2_total.txt"
PCIE_TOPO = DATA / "topo" / "pcie_8gpu_node_sys_no_nic_lmdeploy.txt"  # NODE / SYS between every pair: no NVLink
P5 = DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt"
DCGM = DATA / "nvbandwidth" / "dcgm_tests_v0.5_json_verbose_1gpu_pcie3_waived_latency.json"
SHEET = "h100_sxm5_8gpu_acceptance_sheet.json"  # the host of P2P_H100 and NVB_H100: driver 595.71.05, buses 19, 3b, ...


def p2p_contract(count, tool="nvbandwidth", extra=""):
    return f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\np2p:\n  min_bandwidth: '10 GB/s'\n  tool: {tool}\n{extra}"


def host_contract(count=8):
    return f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\nhost_bandwidth:\n  min_bandwidth: '10 GB/s'\n"


def staged_host(tmp_path, source: str, driver: str, cuda: str | None = None) -> Path:
    """CONSTRUCTED: the NVML recording `source` reading the driver (and CUDA version) a real output's header prints,
    as the host that output ran on would."""
    def change(reading):
        reading.update({k: v for k, v in (("driver", driver), ("cuda", cuda)) if v})
    return Path(staged_recording(tmp_path, source, change).split("=", 1)[1])


# ------------------------------------------------------------------ 1. never above what the path carries


def test_a_pcie_only_host_whose_p2p_tool_prints_nvlink_figures_fails_every_pair(accept, fake_tools, tmp_path):
    """The issue's host: H100s on PCIe only (topo -m: NODE and SYS), sysfs Gen5 x16, and a p2pBandwidthLatencyTest
    that prints 365-393 GB/s: six times what PCIe Gen5 x16 carries (its GPUs at the buses NVML reads here)."""
    fake_tools.add("nvidia-smi", PCIE_TOPO, when="topo -m")
    fake_tools.add("p2pBandwidthLatencyTest", P2P_H100)
    sysfs = pci_tree(tmp_path / "sys", "0x2330", SHEET)
    pcie_links(tmp_path / "sys", recording=SHEET)
    run = accept(p2p_contract(8, "p2pBandwidthLatencyTest"), nvml_recording(SHEET), sysfs)
    checks = {c["subject"]: c for c in run.checks("p2p")}
    assert len(checks) == 56 and {c["outcome"] for c in checks.values()} == {"failed"}
    assert checks["GPU0->GPU1"]["message"] == (
        "p2p GPU0->GPU1 reads 365.3 GB/s but the path is PCIe Gen5 x16 (no NVLink: nvidia-smi topo -m: NODE), "
        "at most 63 GB/s each way: physically impossible (p2pBandwidthLatencyTest P2P writes)")
    assert "SYS" in checks["GPU0->GPU4"]["message"]
    assert {"sysfs-pci-links.json", "nvidia-smi_topo_-m.txt"} <= set(checks["GPU0->GPU1"]["evidence"])
    assert run.json["verdict"] == "rejected"


def tree(root, device: str, recording: str | Path = "h100_sxm5_8gpu.json") -> Path:
    """conftest.pci_tree's sysfs, as the folder the harness reads: the functions of `recording`'s GPUs."""
    pci_tree(root, device, recording)
    return root


def outcomes(checks) -> set[str]:
    return {c.outcome.value for c in checks}


def test_a_card_without_nvlink_is_capped_by_its_own_pcie_generation_without_topology_or_sysfs(tmp_path):
    """RTX 5090s (NVML: NVLink NotSupported; the model has none; the driver and CUDA version the output prints) and no
    link files: the model's Gen5 x16 caps it."""
    nvml = staged_host(tmp_path, "rtx5090_4gpu.json", "595.71.05", "13.2")
    judged = judge(p2p_contract(4), {"nvbandwidth": Output(NVB_H100)}, tmp_path, nvml=nvml)
    checks = {c.subject: c for c in judged.of("p2p")}
    assert outcomes(checks.values()) == {"failed"}
    message = checks["GPU0->GPU1"].message
    assert "but the path is PCIe Gen5 x16 (the GeForce RTX 5090's own)" in message and "at most 63 GB/s" in message


def test_an_h100_pair_is_capped_by_its_nvlinks_and_an_honest_figure_passes(accept, fake_tools, tmp_path):
    """The same p2pBandwidthLatencyTest on the H100 host it came from (NV18 both in topo -m and in NVML) passes:
    18 x 25 GB/s = 450 GB/s each way, 900 both ways."""
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt", when="topo -m")
    fake_tools.add("p2pBandwidthLatencyTest", P2P_H100)
    run = accept(p2p_contract(8, "p2pBandwidthLatencyTest", "  min_bidirectional: '700 GB/s'\n"),
                 nvml_recording(SHEET), pci_tree(tmp_path / "sys", "0x2330", SHEET))
    assert {c["outcome"] for c in run.checks()} == {"passed"}
    check = run.checks("p2p")[0]
    assert check["details"]["physical_cap"] == 450
    assert check["details"]["physical_cap_source"] == (
        "18 NVLinks (nvidia-smi topo -m: NV18) x 25 GB/s per link (H100 SXM5 80GB); from `nvidia-smi topo -m` for the "
        "links, the model table (pytest_gpuaccept/models/gpus.json) for their rate")
    assert check["details"]["sources"][0] == "p2pBandwidthLatencyTest" and len(check["details"]["sources"]) == 2
    assert "tool's word" not in check["message"]


def test_a_host_copy_above_the_gpus_pcie_link_fails(tmp_path):
    """H100s whose links sysfs shows at Gen3 x16 (8 GT/s): the 55 GB/s host copies they print cannot be."""
    sysfs = tree(tmp_path / "sys", "0x2330", SHEET)
    pcie_links(tmp_path / "sys", speed="8.0 GT/s PCIe", recording=SHEET)
    judged = judge(host_contract(), {"nvbandwidth": Output(NVB_H100)}, tmp_path, nvml=SHEET, sysfs=sysfs)
    checks = {c.subject: c for c in judged.of("host_bandwidth")}
    assert outcomes(checks.values()) == {"failed"}
    assert checks["GPU0:h2d"].message == ("GPU0:h2d host to GPU reads 55.37 GB/s but the path is PCIe Gen3 x16, "
                                          "at most 15.75 GB/s each way: physically impossible (nvbandwidth)")


def test_the_same_host_copies_pass_on_gen5_links(tmp_path):
    sysfs = tree(tmp_path / "sys", "0x2330", SHEET)
    pcie_links(tmp_path / "sys", recording=SHEET)
    judged = judge(host_contract(), {"nvbandwidth": Output(NVB_H100)}, tmp_path, nvml=SHEET, sysfs=sysfs)
    assert outcomes(judged.of("host_bandwidth")) == {"passed"}
    details = judged.of("host_bandwidth")[0].details
    assert (details["physical_cap"], details["physical_cap_source"]) == (
        63, "PCIe Gen5 x16; from sysfs 0000:19:00.0 (max_link_speed, max_link_width)")


def test_without_a_cap_the_figure_is_taken_on_the_tools_word_and_says_so(tmp_path):
    judged = judge(host_contract(), {"nvbandwidth": Output(NVB_H100)}, tmp_path, nvml=SHEET,
                   sysfs=tree(tmp_path / "sys", "0xffff", SHEET))
    check = judged.of("host_bandwidth")[0]
    assert check.outcome.value == "passed"
    assert check.message.endswith("; no physical cap (GPU0's PCIe link is unknown (no sysfs link files, no model)): "
                                  "taken on the tool's word)")


@pytest.mark.parametrize("entry, label", [
    ({"current_link_speed": "2.5 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
      "max_link_width": "16"}, "PCIe Gen5 x16"),  # an idle GPU trains down to Gen1: its maximum is what a copy gets
    ({"max_link_speed": "16.0 GT/s PCIe", "max_link_width": "16"}, "PCIe Gen4 x16"),
    ({"current_link_speed": "8 GT/s", "current_link_width": "8"}, "PCIe Gen3 x8"),  # no maximum: the current link
])
def test_the_pcie_link_is_read_as_the_copies_would_use_it(entry, label):
    assert plausible.parse_pci_link({"bus_id": "0000:18:00.0", **entry}).label == label


def test_an_unreadable_link_is_no_link():
    assert plausible.parse_pci_link({"current_link_speed": "Unknown", "current_link_width": "0"}) is None


# ------------------------------------------------------------------ 2. never shorter than its own timed work


def test_the_work_of_real_outputs():
    """B300 nvbandwidth v0.10: 196 figures counted (7 + 7 + 7 + 7 host, 42 read, 42 write, 42 read1, 42 write1; no
    read2, write2 or total: the same copies), each 512 MiB x 16 copies x 2 of its 3 samples = 16 GiB; `-b 64`, an
    eighth of that. H100 p2pBandwidthLatencyTest: 4 matrices of 64 cells, 800 MB each one way and 1.6 GB each both
    ways, a diagonal cell's figure counting its bytes twice."""
    work = plausible.nvbandwidth_work(parse_nvbandwidth(B300.read_text()), ())
    assert work.nbytes == 196 * 16 * 2**30 and work.seconds == pytest.approx(12.84, abs=0.01)
    assert plausible.nvbandwidth_work(parse_nvbandwidth(B300.read_text()), ("-b", "64")).nbytes == 196 * 2 * 2**30
    work = plausible.p2p_latency_work(parse_p2p_latency(P2P_H100.read_text()))
    assert work.nbytes == 2 * (56 * 800e6 + 8 * 1600e6) + 2 * (56 * 1600e6 + 8 * 3200e6)
    assert work.nbytes == 345.6e9 and work.seconds == pytest.approx(3.22, abs=0.01)


def test_a_run_shorter_than_its_work_is_not_a_measurement():
    work = plausible.Work(120e9, 0.5, "64 MiB x 16 copies per figure")
    run = ToolRun("k", ("nvbandwidth", "-t", "x"), 0, 0.01, "", "")
    assert plausible.too_fast(run, work) == ("`nvbandwidth -t x` ran 0.01 s but reports moving 111.8 GiB at 240 GB/s on "
                                             "average, 0.50 s of copies (64 MiB x 16 copies per figure): not a measurement")
    assert plausible.too_fast(ToolRun("k", ("t",), 0, 0.5, "", ""), work) is None


def test_a_p2p_tool_that_finishes_instantly_fails(tmp_path):
    """On the host it came from (NVML's buses are the ones it prints), printed at once: 3.22 s of copies in no time."""
    judged = judge(p2p_contract(8, "p2pBandwidthLatencyTest"), {"p2pBandwidthLatencyTest": Output(P2P_H100, seconds=0)},
                   tmp_path, nvml=SHEET, sysfs=tree(tmp_path / "sys", "0x2330", SHEET))
    messages = {c.message for c in judged.of("p2p")}
    assert outcomes(judged.of("p2p")) == {"failed"} and len(messages) == 1
    (message,) = messages
    assert re.fullmatch(r"`p2pBandwidthLatencyTest` ran 0\.0\d s but reports moving 321\.9 GiB at 107 GB/s on average, "
                        r"3\.22 s of copies \(40,000,000 ints x 5 repeats per figure\): not a measurement", message), message
    honest = judge(p2p_contract(8, "p2pBandwidthLatencyTest"), {"p2pBandwidthLatencyTest": Output(P2P_H100)},
                   tmp_path / "honest", nvml=SHEET, sysfs=tree(tmp_path / "sys2", "0x2330", SHEET))
    assert outcomes(honest.of("p2p")) == {"passed"}


@pytest.mark.parametrize("sleep, outcome", [(0, "failed"), (None, "passed")])
def test_an_nvbandwidth_that_finishes_instantly_fails_host_bandwidth(tmp_path, sleep, outcome):
    """DCGM's nvbandwidth v0.5 output (one GPU, 12.4 and 13.2 GB/s host copies among 14 figures: 2.53 s of copies at
    64 MiB x 16 x 2 of 3 samples each), on a host whose NVML reads its driver 565.02: printed at once it fails;
    printed after as long as its copies took (the harness's default) it passes."""
    nvml = staged_host(tmp_path, "h100_sxm5_8gpu.json", "565.02")
    judged = judge(host_contract(1), {"nvbandwidth": Output(DCGM, seconds=sleep)}, tmp_path, nvml=nvml,
                   sysfs=tree(tmp_path / "sys", "0x2330", nvml))
    checks = judged.of("host_bandwidth")
    assert len(checks) == 2 and outcomes(checks) == {outcome}
    assert all(("not a measurement" in c.message) == (outcome == "failed") for c in checks)


# ------------------------------------------------------------------ 3. only the sizes the command asked for


@pytest.mark.parametrize("argv, flag, size", [
    (["-b", "8", "-e", "8G"], "-e", 8 * 2**30), (["-e", "8589934592"], "-e", 8589934592),
    (["--maxbytes=128M"], "--maxbytes", 128 * 2**20), (["-e", "1K", "-e", "2K"], "-e", 2048), (["-b", "8"], "-e", None),
    (["-e", "lots"], "-e", None),
])
def test_sizes_are_read_as_nccl_tests_reads_them(argv, flag, size):
    assert asked_size(argv, flag, "--maxbytes" if flag == "-e" else "--minbytes") == size


def test_a_16_gib_row_when_8_gib_was_asked_fails(tmp_path):
    """The P5 log's sweep ends at 16 GiB; the contract asks max_bytes 8 GiB, so the command says -e 8589934592."""
    contract = ("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nallreduce:\n  min_busbw: '100 GB/s'\n"
                "  max_bytes: '8 GiB'\n  args: ['-n', '1']\n")
    judged = judge(contract, {"all_reduce_perf": Output(nccl_log(P5, ranks=8))}, tmp_path)
    check = judged.of("allreduce")[0]
    assert [a for a in judged.recordings.asked if a[0] == "all_reduce_perf"][0][5:7] == ["-e", "8589934592"]
    assert check.outcome.value == "failed"
    assert ("the table has a row at 16 GiB (17179869184 B), above the `-e 8589934592` (8 GiB) the command asked: "
            "not this command's measurement") in check.message
    assert "at 16 GiB >=" not in check.message


def test_a_judged_size_below_the_asked_minimum_is_not_a_measurement():
    result = parse_all_reduce(P5.read_text())
    assert unasked_sizes(result, ["-b", "17179869184", "-e", "17179869184"]) == []
    assert unasked_sizes(result, ["-b", "34359738368", "-e", "68719476736"]) == [
        "the largest row, 16 GiB, is below the `-b 34359738368` the command asked: not this command's measurement"]
    assert "asked no -e" in unasked_sizes(result, ["-b", "8"])[0]


def test_the_published_figure_of_a_pair_the_topology_shows_without_nvlink_is_pcies():
    """H100 SXM5s whose `topo -m` shows NODE between them (the real lmdeploy PCIe matrix): "x % of the published
    figure" is of PCIe Gen5 x16, not of the model's NVLink (which the pair does not have)."""
    h100 = models.by_device_id("2330")
    assert h100 is not None
    known = GpuModels({0: "2330", 1: "2330"}, {0: h100, 1: h100}, ())
    topology = parse_topo(PCIE_TOPO.read_text())
    on_pcie = P2pView("nvbandwidth", (), models=known, paths=plausible.Paths(known, topology))
    assert published(on_pcie, 0, 1, both=False) == (63.0, "H100 SXM5 80GB PCIe Gen5 x16")
    unknown_path = P2pView("nvbandwidth", (), models=known)  # no topology read: the model's NVLink figure
    assert published(unknown_path, 0, 1, both=False) == (450.0, "H100 SXM5 80GB NVLink")
