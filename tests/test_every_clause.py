"""One contract with every clause of the format, on a host where everything is as promised: ACCEPTED.

Guards the whole path (parametrization, subjects, results, completeness) for every clause at once:
a clause whose checks could not be matched to what the contract asked would leave the run incomplete.
"""

import json
from pathlib import Path

from builders import (
    APART_CLAUSES,
    CLUSTER_CLAUSES,
    EVERY_CLAUSE_CONTRACT,
    IB_UP,
    as_gpus,
    dcgm4_document,
    h100_errors,
    h100_status,
    recording,
    stream_lines,
    sysfs_tree,
)
from conftest import DATA, nccl_log, pci_tree, routed_nic

from pytest_gpuaccept.clauses.registry import ALL_CLAUSES, expected_checks
from pytest_gpuaccept.contract import parse_contract

# What the contract asks of nvbandwidth (p2p with min_bidirectional, host_bandwidth; memory_bandwidth is PyTorch's).
ASKED = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce",
         "device_to_device_memcpy_write_ce", "device_to_device_bidirectional_memcpy_read_ce")
# The 4-GPU recording's driver and CUDA version (h100_sxm5_4gpu.json), as nvbandwidth's header prints them.
HOST_HEADER = ("nvbandwidth Version: v0.10.0\nBuilt from Git version: v0.10\n\nCUDA Runtime Version: 12.6 (12060)\n"
               "CUDA Driver Version (API): 12.6 (12060)\nDriver Version: 560.35.03")


def nv6_nvbandwidth() -> str:
    """Constructed here, not recorded: the real B300 nvbandwidth output as this host's nvbandwidth would print what
    the contract asks of it (ASKED): those testcases only, GPUs 0-3 only (rows and columns), its GPU-to-GPU figures
    divided by 6 as four H100s with 6 NVLinks to each peer could print them (at most 150 GB/s each way, 300 both ways),
    each SUM line added up again; the host copies as recorded (55.6-57.3 GB/s, under PCIe Gen5 x16); and the header of
    this host (HOST_HEADER: the recording's driver 560.35.03 and CUDA 12.6, where the B300 run says 610.57.04 and 13.3).
    The copies its 44 figures stand for (512 MiB x 16 x 2 of 3 samples each, plausible.py) take 7.3 s: the fake waits
    that long, as the real tool would."""
    text = (DATA / "nvbandwidth" / "b300_sxm6_7gpu_v0.10.0_ce_full_bidir_read1_read2_total.txt").read_text()
    out, cells = [HOST_HEADER], []
    for block in text.split("\nRunning ")[1:]:
        testcase = block.split(".", 1)[0]
        if testcase not in ASKED:
            continue
        out.append("")  # the blank line before each testcase
        for line in f"Running {block.rstrip()}".splitlines():
            tokens = line.split()
            if tokens and all(t.isdigit() for t in tokens):  # the column numbers
                line = "  " + "".join(t.rjust(10) for t in tokens[:4])
            elif tokens and tokens[0].isdigit() and any("." in t for t in tokens[1:]):  # a row
                if int(tokens[0]) >= 4:
                    continue
                kept = [t if t == "N/A" or "device_to_device" not in testcase else f"{float(t) / 6:.2f}"
                        for t in tokens[1:5]]
                cells += [float(t) for t in kept if t != "N/A"]
                line = f" {tokens[0]}" + "".join(t.rjust(10) for t in kept)
            elif line.startswith("SUM "):
                line, cells = f"SUM {tokens[1]} {sum(cells):.2f}", []
            out.append(line)
    return "\n".join(out) + "\n"


def four_rank_rtx_log() -> bytes:
    """The real 8-GPU RTX 5090 log, ranks 0-3 kept and placed on the 4-GPU recording's GPUs (nccl_log). Constructed
    here: its rank lines name the recording's GPUs, NVIDIA H100 80GB HBM3, as this host's all_reduce_perf would (its
    PCIe figures are within what four H100s carry); a rank line naming another GPU than NVML's is another host's."""
    log = nccl_log(DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt", "h100_sxm5_4gpu.json", ranks=4)
    return log.replace(b"NVIDIA GeForce RTX 5090", b"NVIDIA H100 80GB HBM3")


def sdc_gemm_on_four_gpus() -> str:
    """Our seeded GEMM's real CPU run (tests/data/sdc_gemm), its first four workers as the 4-GPU recording's GPUs and
    its first repeat only (sdc: {iterations: 1}): device, names, bus IDs and repeats built here."""
    lines = [json.loads(line) for line in (DATA / "sdc_gemm" / "cpu_8workers_n128_x2_torch2.13.0.txt").read_text()
             .splitlines()]
    kept = []
    for data in lines:
        if data.get("sdc_gemm"):
            data.update(device="cuda", repeats=1, gpus=4)
        if "gpu" in data:
            if data["gpu"] >= 4:
                continue
            data.update(name="NVIDIA H100 80GB HBM3", bus_id=f"00000000:{0x18 + 0x10 * data['gpu']:02X}:00.0",
                        digests=data["digests"][:1])
        kept.append(json.dumps(data))
    return "\n".join(kept) + "\n"


def test_a_host_that_keeps_every_promise_is_accepted(accept, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_4gpu_nv6_4nic_matrix_only.txt", when="topo")
    fake_tools.add("nvidia-smi", h100_status(4), when="nvlink -s")
    fake_tools.add("nvidia-smi", h100_errors(4), when="nvlink -e")
    # sdc's checked sweep (-n 1 -c 1: its header's iterations set to 1, built here), before the allreduce run's rule.
    fake_tools.add_nccl(four_rank_rtx_log().replace(b"iters: 20", b"iters: 1"), iters=2, when="-n 1 -c 1")
    fake_tools.add_nccl(four_rank_rtx_log())
    fake_tools.add("nvbandwidth", nv6_nvbandwidth())  # the asked testcases of the B300 run, as four H100s could print
    # The memory workload: the recorded CPU run's two lines, relabelled as GPUs 0-3 (built here, not recorded).
    head, *lines = (DATA / "torch" / "membw_cpu_2dev.txt").read_text().splitlines()
    gpus = [lines[n % 2].replace('"gpu": 0', '"gpu": N').replace('"gpu": 1', '"gpu": N').replace("N", str(n), 1)
            .replace('"device": "cpu"', f'"device": "cuda:{n}"') for n in range(4)]
    fake_tools.add("python", "\n".join([head, *gpus]) + "\n", when="membw")
    fake_tools.add("python", sdc_gemm_on_four_gpus(), when="sdc_gemm")  # before the "gemm" rule, which it also matches
    # The GEMM workload: the recorded CPU run's windows, as GPUs 0-3 (GPUs 2 and 3 repeat 0 and 1; built here).
    head, *windows = as_gpus((DATA / "torch" / "gemm_cpu_2proc_fp32_n256.txt").read_text()).splitlines()
    more = [w.replace('"gpu": 0', '"gpu": 2').replace('"gpu": 1', '"gpu": 3') for w in windows]
    fake_tools.add("python", "\n".join([head, *windows, *more]) + "\n", when="gemm")
    fake_tools.add("ethtool", DATA / "ethtool" / "ice_25g_dac_link_partner.txt")
    fake_tools.add("ib_write_bw", DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt")
    fake_tools.add("iperf3", "iperf 3.17 (cJSON 1.7.15)\n", when="--version")
    routed_nic(fake_tools, tmp_path / "sys", iperf3_output=DATA / "iperf3" / "json_3.9_tcp_10s_omit3_1.82Gbps.json")
    fake_tools.add("train-job", "training\n", hang=30)
    fake_tools.add("dcgmi", dcgm4_document([f"165232200000{i}" for i in range(4)]))  # constructed: builders.py
    sysfs = sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP}, errors=True)
    pci_tree(tmp_path / "sys", "0x2330", "h100_sxm5_4gpu.json")  # the GPUs' PCI functions: H100 SXM5
    health = {i: {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "power_limit_enforced_w": 700.0,
                  "power_limit_default_w": 700.0} for i in range(4)}
    nvml = recording(tmp_path, health=health)
    reading = json.loads(Path(nvml.split("=", 1)[1]).read_text())
    for gpu in reading["gpus"]:
        gpu["persistence_mode"] = 1  # as record-nvml reads it now (the recording predates the field)
    (tmp_path / "burnin.jsonl").write_text("\n".join(stream_lines(2, gpus=4)) + "\n")  # constructed: builders.py
    reading["burnin"] = {"stream": str(tmp_path / "burnin.jsonl")}
    fake_tools.add("burn-job", "burning\n", hang=30)
    Path(nvml.split("=", 1)[1]).write_text(json.dumps(reading))
    run = accept(EVERY_CLAUSE_CONTRACT.replace("/usr/bin/python3", str(fake_tools.bin_dir / "python")), nvml, sysfs)
    failing = [(c["clause"], c["subject"], c["message"]) for c in run.checks() if c["outcome"] != "passed"]
    assert failing == []
    # nics.count and rdma.count replace nics and rdma when a count is given: the one pair no contract has both of.
    assert {c["clause"] for c in run.checks()} == set(ALL_CLAUSES) - APART_CLAUSES - CLUSTER_CLAUSES
    assert run.json["verdict"] == "accepted" and run.json["complete"] is True
    assert run.json["not_in_contract"] == [c for c in ALL_CLAUSES if c in APART_CLAUSES | CLUSTER_CLAUSES]
    assert run.result.ret == 0
    # gpus: count, driver, cuda + model and memory per GPU; 6 pairs; links and errors per GPU; p2p; one each for
    # allreduce, nics, rdma, iperf3; utilisation and eight health clauses per GPU: every check once.
    # p2p: 12 ordered pairs and 6 pairs both ways; memory_bandwidth, compute, form_factor and identity per GPU;
    # host 4 x 2; persistence_mode per GPU; dcgm's level-1 software test per GPU; seven burn-in clauses per GPU;
    # PCIe AER per GPU, for ens6f0 and for mlx5_0; rdma.errors and nics.errors one each; sdc one.
    assert len(run.checks()) == 3 + 4 * 2 + 4 + 6 + 4 * 2 + 12 + 6 + 4 + 4 + 4 + 8 + 4 + 4 * 9 + 4 + 4 + 4 * 7 + 4 + 2 + 2 \
        + 1
    names = {"net": ["ens6f0"], "infiniband": ["mlx5_0"]}
    assert len(run.checks()) == len(expected_checks(parse_contract(EVERY_CLAUSE_CONTRACT), lambda: names))
