"""Clauses judged in process on recorded real outputs: no pytest process started, no acceptance run, no fake tool.

Each test reads a real tool output from tests/data (tests/data/SOURCES.md says where each came from), parses it with
the plugin's own parser, builds the measurement the clause's fixture would have built (GemmLoad, MemoryCopies,
HostCopies, ClusterRun, ImexViews, DomainAllReduce), and calls the clause's judge function directly, in
milliseconds: the honest real figure passes its threshold, and the same figure against a stricter contract (or a
degraded copy of the output, marked constructed where it is made) fails, with its outcome, measured value, unit and
message asserted.

- compute, memory_bandwidth, host_bandwidth (torch): the live acceptance run of one H200 SXM (tests/data/h200/run-*,
  contracts/h200_sxm_1gpu.yaml); the in-process verdicts must agree with what that run recorded (run-results.json).
- memory_bandwidth and host_bandwidth through nvbandwidth: real nvbandwidth outputs of 8x H20-3e and 8x H100 hosts,
  and DCGM's own fixture of a real 1-GPU PCIe Gen3-class run (tests/data/nvbandwidth).
- cluster.nvlink_domain: the real GB200 NVL72 outputs of tests/data/nvl72 (the 18-node IMEX view, the 72-rank
  all_reduce table, NCCL's MNNVL lines, nvidia-smi's fabric sections).

A recording keeps a tool's output, not the wall time its run took: each ToolRun here lasts as long as the copies its
output reports (conftest.claimed_seconds, as the fake tools of the other tests wait), the least an honest run takes.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from builders import honest_channels, honest_traffic
from conftest import DATA, claimed_seconds
from pynvml import NVML_ERROR_INSUFFICIENT_RESOURCES

from pytest_gpuaccept.clauses import compute, host_bandwidth, memory_bandwidth, nvlink_domain, plausible
from pytest_gpuaccept.cluster.base import NodeState
from pytest_gpuaccept.contract import Contract, parse_contract
from pytest_gpuaccept.measurements import (
    ClusterRun,
    DomainAllReduce,
    GpuModels,
    ImexView,
    ImexViews,
    LoadRun,
    NodeOutcome,
    PairResult,
)
from pytest_gpuaccept.models import by_device_id
from pytest_gpuaccept.probes._run import ToolRun, parse_run
from pytest_gpuaccept.probes.gemm import parse_gemm
from pytest_gpuaccept.probes.imex import parse_domain
from pytest_gpuaccept.probes.membw import parse_membw
from pytest_gpuaccept.probes.nccl_tests import mnnvl_by_host, parse_all_reduce
from pytest_gpuaccept.probes.nvbandwidth import parse_nvbandwidth
from pytest_gpuaccept.probes.nvml import parse_samples
from pytest_gpuaccept.probes.torch_hostbw import parse_torch_hostbw
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.units import human_bytes
from pytest_gpuaccept.verdict import Check, Outcome

REPO = Path(__file__).resolve().parent.parent
H200 = DATA / "h200"
NVB = DATA / "nvbandwidth"
NVL72 = DATA / "nvl72"
H200_CONTRACT = (REPO / "contracts" / "h200_sxm_1gpu.yaml").read_text()
H200_SXM = "2335"  # the PCI device ID the H200's sysfs gave (SOURCES.md: "PCI 0x2335 at 0000:00:06.0")


def tool_run(key: str, argv: tuple[str, ...], stdout: str, duration_s: float | None = None) -> ToolRun:
    """A completed run of a recorded output; by default as long as the copies it reports (see the docstring)."""
    seconds = claimed_seconds(argv[0], stdout) + 0.05 if duration_s is None else duration_s
    return ToolRun(key, argv, 0, seconds, stdout, "", evidence=(f"{key}.txt",))


def models_of(device_ids: dict[int, str | None]) -> GpuModels:
    """Each GPU's PCI device ID (as sysfs would give it) and its model in the table (None where the table lacks it)."""
    return GpuModels(device_ids, {i: by_device_id(d) if d else None for i, d in device_ids.items()}, ("sysfs-pci-gpus.json",))


H200_MODELS = models_of({0: H200_SXM})


def recorded(clause: str, subject: str) -> dict:
    """The check the live H200 run recorded (tests/data/h200/run-results.json)."""
    checks = json.loads((H200 / "run-results.json").read_text())["checks"]
    return next(c for c in checks if c["clause"] == clause and c["subject"] == subject)


def stricter(text: str, old: str, new: str) -> Contract:
    """The contract with one line made stricter (the line must be there)."""
    assert old in text
    return parse_contract(text.replace(old, new))


def assert_check(check: Check, outcome: Outcome, measured: object, unit: str | None, *fragments: str) -> None:
    assert (check.outcome, check.measured, check.unit) == (outcome, measured, unit), check
    for fragment in fragments:
        assert fragment in check.message, check.message


# ------------------------------------------------------------------ compute


def gemm_load(stdout: str) -> compute.GemmLoad:
    """The H200's GEMM run (tests/data/h200/run-gemm_torch.txt) with the NVML samples taken beside it
    (run-nvml-samples-gemm.json). Its wall time was not recorded: 20.9 s stands for it (its last window ended at
    20.0 s); the compute judge reads the windows' own clock, not the run's."""
    run = tool_run("gemm_torch", ("python", "-m", "pytest_gpuaccept.workloads.gemm", "--gpus", "1", "--dtype", "bf16",
                                  "--n", "8192", "--duration", "20"), stdout, duration_s=20.9)
    samples = json.loads((H200 / "run-nvml-samples-gemm.json").read_text())
    series = {s.index: s for s in parse_samples(samples)}
    load = LoadRun(run, series, None, None, ("nvml-samples-gemm.json",), samples_file="nvml-samples-gemm.json")
    return compute.GemmLoad(parse_run(run, parse_gemm), load, H200_MODELS)


def judge_compute(contract: Contract, stdout: str | None = None) -> Check:
    m = gemm_load(stdout if stdout is not None else (H200 / "run-gemm_torch.txt").read_text())
    return compute.judge(compute.SECTION.of(contract), Subject.of_gpu(0), m, contract)


def test_compute_the_real_h200_bf16_gemm_passes_its_contract_as_the_live_run_judged_it():
    check = judge_compute(parse_contract(H200_CONTRACT))
    assert_check(check, Outcome.PASSED, 728.603, "TFLOPS", "GPU0 sustained bf16 728.6 TFLOPS >= 692.65 TFLOPS",
                 "burst 736.8 TFLOPS", "74% of the published 989.5 (H200 SXM 141GB)")
    assert check.threshold == 692.65  # 0.70 x 989.5
    assert check.details["physical_cap"] == 989.5 and check.details["timeline"]["gpu"] == 0
    live = recorded("compute", "GPU0")
    assert (live["outcome"], live["measured"], live["threshold"], live["message"]) == \
        (check.outcome.value, check.measured, check.threshold, check.message)


def test_compute_the_same_gemm_fails_a_contract_asking_75_percent_of_peak():
    contract = stricter(H200_CONTRACT, "min_fraction_of_peak: 0.70", "min_fraction_of_peak: 0.75")
    check = judge_compute(contract)
    assert_check(check, Outcome.FAILED, 728.603, "TFLOPS", "GPU0 sustained bf16 728.6 TFLOPS < 742.12 TFLOPS")
    assert check.threshold == 742.125


def test_compute_a_copy_of_the_gemm_cut_at_its_tenth_window_fails_as_stopped_early():
    # Constructed: the real output's header and first ten windows, without the later windows and the `done` line,
    # as a GPU that fell off the bus half-way through would have left it.
    lines = (H200 / "run-gemm_torch.txt").read_text().splitlines()
    check = judge_compute(parse_contract(H200_CONTRACT), "\n".join(lines[:11]) + "\n")
    assert_check(check, Outcome.FAILED, None, "TFLOPS", "GPU0 stopped after 10.1 s of the 20 s run")


# ------------------------------------------------------------------ memory_bandwidth


def judge_membw_torch(contract: Contract) -> Check:
    text = (H200 / "run-membw_torch.txt").read_text()
    run = tool_run("membw_torch", ("python", "-m", "pytest_gpuaccept.workloads.membw", "--gpus", "1", "--bytes",
                                   "4294967296", "--repeats", "20"), text)
    m = memory_bandwidth.from_torch(parse_run(run, parse_membw), H200_MODELS)
    return memory_bandwidth.judge(memory_bandwidth.SECTION.of(contract), Subject.of_gpu(0), m, contract)


def test_memory_bandwidth_the_real_h200_copy_passes_80_percent_of_peak_as_the_live_run_judged_it():
    check = judge_membw_torch(parse_contract(H200_CONTRACT))
    assert_check(check, Outcome.PASSED, 4252.881, "GB/s", "GPU0 device-local copy 4252.88 GB/s >= 3840 GB/s",
                 "PyTorch, 4294967296 bytes, median of 20", "89% of the published 4800 GB/s")
    assert check.details["physical_cap"] == 4800
    live = recorded("memory_bandwidth", "GPU0")
    assert (live["outcome"], live["measured"], live["threshold"], live["message"]) == \
        (check.outcome.value, check.measured, check.threshold, check.message)


def test_memory_bandwidth_the_same_copy_fails_90_percent_of_peak():
    contract = stricter(H200_CONTRACT, "min_fraction_of_peak: 0.80", "min_fraction_of_peak: 0.90")
    check = judge_membw_torch(contract)
    assert_check(check, Outcome.FAILED, 4252.881, "GB/s", "GPU0 device-local copy 4252.88 GB/s < 4320 GB/s")
    assert check.threshold == 4320.0


MEMBW_8 = "gpuaccept: 1\nvendor: V\ngpus: {{count: 8}}\nmemory_bandwidth: {{min_bandwidth: '{floor}', tool: nvbandwidth}}\n"


def test_memory_bandwidth_the_real_h20_3e_local_copy_is_judged_on_twice_the_printed_figure():
    """8x H20-3e (NVIDIA/nvbandwidth#48): 1115.72-1117.17 GB/s copied per GPU, so 2231.44-2234.34 GB/s of memory
    traffic. The H20-3e (0x232c) is not in the model table: the figure is taken on nvbandwidth's word, said so."""
    text = (NVB / "h20-3e_8gpu_v0.8_device_local_copy.txt").read_text()
    run = tool_run("nvbandwidth", ("nvbandwidth", "-t", "device_local_copy"), text)
    m = memory_bandwidth.from_nvbandwidth(parse_run(run, parse_nvbandwidth), models_of({i: "232c" for i in range(8)}))
    assert m.failure is None and m.too_fast is None
    honest = parse_contract(MEMBW_8.format(floor="2000 GB/s"))
    check = memory_bandwidth.judge(memory_bandwidth.SECTION.of(honest), Subject.of_gpu(2), m, honest)
    assert_check(check, Outcome.PASSED, 2231.44, "GB/s", "GPU2 device-local copy 2231.44 GB/s >= 2000 GB/s",
                 "nvbandwidth device_local_copy 1115.72 GB/s copied, x 2: read + written", "taken on the tool's word")
    assert check.details["physical_cap"] is None
    strict = parse_contract(MEMBW_8.format(floor="2232 GB/s"))
    judged = {i: memory_bandwidth.judge(memory_bandwidth.SECTION.of(strict), Subject.of_gpu(i), m, strict) for i in range(8)}
    assert [i for i, c in judged.items() if not c.passed] == [2]
    assert_check(judged[2], Outcome.FAILED, 2231.44, "GB/s", "GPU2 device-local copy 2231.44 GB/s < 2232 GB/s")


# ------------------------------------------------------------------ host_bandwidth


def h200_host_copies() -> host_bandwidth.HostCopies:
    text = (H200 / "run-hostbw_torch.txt").read_text()
    run = tool_run("hostbw_torch", ("python", "-m", "pytest_gpuaccept.workloads.hostbw", "--gpus", "1", "--bytes",
                                    "1073741824", "--repeats", "10", "--cpus=0=0-15"), text)
    # No sysfs link files were recorded: the cap is the model's own PCIe generation at x16 (plausible._pcie).
    return host_bandwidth.from_torch(parse_run(run, parse_torch_hostbw), H200_MODELS, 1, plausible.Paths(H200_MODELS))


def test_host_bandwidth_the_real_h200_torch_copies_pass_both_directions_as_the_live_run_judged_them():
    contract = parse_contract(H200_CONTRACT)
    m = h200_host_copies()
    for aspect, value, words in (("h2d", 55.287, "host to GPU 55.29 GB/s"), ("d2h", 55.174, "GPU to host 55.17 GB/s")):
        check = host_bandwidth.judge(host_bandwidth.SECTION.of(contract), Subject.of_gpu(0, aspect), m, contract)
        assert_check(check, Outcome.PASSED, value, "GB/s", f"GPU0:{aspect} {words} >= 20 GB/s",
                     "PyTorch, host buffer on CPUs 0-15", "88% of the published 63 GB/s (PCIe Gen5 x16, H200 SXM 141GB)")
        assert check.details["physical_cap"] == 63.0
        live = recorded("host_bandwidth", f"GPU0:{aspect}")
        assert (live["outcome"], live["measured"], live["threshold"], live["message"]) == \
            (check.outcome.value, check.measured, check.threshold, check.message)


def test_host_bandwidth_the_same_copies_fail_a_56_gbs_floor():
    contract = stricter(H200_CONTRACT, 'min_bandwidth: "20 GB/s"', 'min_bandwidth: "56 GB/s"')
    m = h200_host_copies()
    h2d, d2h = (host_bandwidth.judge(host_bandwidth.SECTION.of(contract), Subject.of_gpu(0, a), m, contract)
                for a in ("h2d", "d2h"))
    assert_check(h2d, Outcome.FAILED, 55.287, "GB/s", "GPU0:h2d host to GPU 55.29 GB/s < 56 GB/s")
    assert_check(d2h, Outcome.FAILED, 55.174, "GB/s", "GPU0:d2h GPU to host 55.17 GB/s < 56 GB/s")


HOSTBW = "gpuaccept: 1\nvendor: V\ngpus: {{count: {count}}}\nhost_bandwidth: {{min_bandwidth: '{floor}'}}\n"
HOST_CASES = ("nvbandwidth", "-t", "host_to_device_memcpy_ce", "-t", "device_to_host_memcpy_ce")


def test_host_bandwidth_the_real_h100_nvbandwidth_rows_pass_50_gbs_on_every_gpu_and_direction():
    """8x H100 80GB HBM3, nvbandwidth v0.10.0 (the Korean acceptance sheet): H2D 55.33-55.37, D2H 55.18-55.26 GB/s.
    The sheet gives NVML's name, not the PCI device ID: 0x2330 (H100 SXM5 80GB, the part NVML names so) is assumed."""
    text = (NVB / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt").read_text()
    models = models_of({i: "2330" for i in range(8)})
    m = host_bandwidth.from_nvbandwidth(parse_run(tool_run("nvbandwidth", HOST_CASES, text), parse_nvbandwidth), models,
                                        plausible.Paths(models))
    assert (m.failure, m.too_fast, m.columns) == (None, None, 8)
    contract = parse_contract(HOSTBW.format(count=8, floor="50 GB/s"))
    checks = [host_bandwidth.judge(host_bandwidth.SECTION.of(contract), Subject.of_gpu(i, a), m, contract)
              for i in range(8) for a in ("h2d", "d2h")]
    assert {c.outcome for c in checks} == {Outcome.PASSED} and len(checks) == 16
    assert_check(checks[14], Outcome.PASSED, 55.33, "GB/s", "GPU7:h2d host to GPU 55.33 GB/s >= 50 GB/s",
                 "(nvbandwidth; 88% of the published 63 GB/s (PCIe Gen5 x16, H100 SXM5 80GB))")
    strict = parse_contract(HOSTBW.format(count=8, floor="55.3 GB/s"))
    failed = {str(c.subject): c for i in range(8) for a in ("h2d", "d2h")
              if not (c := host_bandwidth.judge(host_bandwidth.SECTION.of(strict), Subject.of_gpu(i, a), m, strict)).passed}
    assert sorted(failed) == [f"GPU{i}:d2h" for i in range(8)]  # every D2H figure is below 55.3, every H2D above
    assert_check(failed["GPU2:d2h"], Outcome.FAILED, 55.18, "GB/s", "GPU2:d2h GPU to host 55.18 GB/s < 55.3 GB/s")


def test_host_bandwidth_a_real_pcie_gen3_class_host_link_fails_20_gbs():
    """DCGM's own fixture of a real `nvbandwidth -j` run on one GPU behind a PCIe Gen3-class link: 12.3964 GB/s host
    to GPU, 13.2001 back (a Check's measured value is rounded to 3 decimals). The GPU's model is not recorded: no
    fraction and no cap, said so."""
    text = (NVB / "dcgm_tests_v0.5_json_verbose_1gpu_pcie3_waived_latency.json").read_text()
    models = models_of({0: None})
    run = tool_run("nvbandwidth", ("nvbandwidth", "-j", "-t", "host_to_device_memcpy_ce", "-t", "device_to_host_memcpy_ce"),
                   text)
    m = host_bandwidth.from_nvbandwidth(parse_run(run, parse_nvbandwidth), models, plausible.Paths(models))
    contract = parse_contract(HOSTBW.format(count=1, floor="20 GB/s"))
    h2d = host_bandwidth.judge(host_bandwidth.SECTION.of(contract), Subject.of_gpu(0, "h2d"), m, contract)
    assert_check(h2d, Outcome.FAILED, 12.396, "GB/s", "GPU0:h2d host to GPU 12.4 GB/s < 20 GB/s",
                 "no physical cap (GPU0's PCIe link is unknown (no sysfs link files, no model)): taken on the tool's word")
    lenient = parse_contract(HOSTBW.format(count=1, floor="12 GB/s"))
    d2h = host_bandwidth.judge(host_bandwidth.SECTION.of(lenient), Subject.of_gpu(0, "d2h"), m, lenient)
    assert_check(d2h, Outcome.PASSED, 13.2, "GB/s", "GPU0:d2h GPU to host 13.2 GB/s >= 12 GB/s")


# ------------------------------------------------------------------ cluster.nvlink_domain

TRAYS = [f"h{t}" for t in range(1, 19)]
RACK = """gpuaccept: 1
vendor: "Trial NVL72 rack"
gpus:
  count: 4
  model: "GB200"
cluster:
  engine: slurm
  nodes: ["h[1-18]"]
  node_timeout: 10 min
  nvlink_domain: {fabric: true, imex: true, min_busbw: "800 GB/s"}
"""
MNNVL_GB200 = NVL72 / "nccl_info_mnnvl_fabric_gb200_1tray_fragment_nccl_issue1769.txt"
MNNVL_OFF = NVL72 / "nccl_info_mnnvl0_h100_3node_24rank_fragment_nccl_issue1453.txt"
IMEX_18 = NVL72 / "imex_ctl_N_18node_all_connected_aws_pcluster_doc.txt"
IMEX_2 = NVL72 / "imex_ctl_N_2node_gh200_imex570_no_version_fiberrepro.txt"


def smi_field(text: str, name: str) -> str:
    found = re.search(rf"^\s*{name}\s*:\s*(.+?)\s*$", text, re.M)
    assert found is not None, name
    return found.group(1)


def gb200_fabric() -> dict:
    """A healthy GB200 GPU's `gpus[].fabric` as a tray's NVML reading records it. No real NVML recording of a GB200
    was found, so the dict is constructed from real values: state, clique and health mask from NCCL's print of the
    NVML fabric info of a real GB200 tray (NVIDIA/nccl#1769), status and cluster UUID from a real nvidia-smi -q
    (`Status : Success`, the ClusterUUID of kubernetes-sigs/dra-driver-nvidia-gpu#626)."""
    line = next(x for x in MNNVL_GB200.read_text().splitlines() if "MNNVL busId" in x)
    said = re.search(r"cliqueId (0x[0-9a-f]+) state (\d+) healthMask (0x[0-9a-f]+)", line)
    assert said is not None
    smi = (NVL72 / "nvidia_smi_q_fabric_unhealthy_grepC3_dradriver_issue626.txt").read_text()
    assert smi_field(smi, "Status") == "Success"
    return {"state": int(said.group(2)), "status": 0, "cluster_uuid": smi_field(smi, "ClusterUUID"),
            "clique_id": int(said.group(1), 16), "health_mask": int(said.group(3), 16)}


def refused_fabric() -> dict:
    """The real Azure tray that did not join the fabric (Azure/azhpc-images#506), as NVML gives it: state Completed,
    status NVML_ERROR_INSUFFICIENT_RESOURCES (nvidia-smi prints it "Insufficient Resources"), clique 0, a zero UUID.
    The pasted section has no Health lines: a mask of 0 (every field "not supported") is constructed."""
    smi = (NVL72 / "nvidia_smi_q_fabric_insufficient_resources_azhpc_pr506.txt").read_text()
    assert (smi_field(smi, "State"), smi_field(smi, "Status")) == ("Completed", "Insufficient Resources")
    return {"state": 3, "status": NVML_ERROR_INSUFFICIENT_RESOURCES, "cluster_uuid": smi_field(smi, "ClusterUUID"),
            "clique_id": int(smi_field(smi, "CliqueId")), "health_mask": 0}


def tray(name: str, fabric: dict, hostname: str | None = None) -> NodeOutcome:
    """One tray's per-node results as the login node keeps them (constructed around the fabric values): 4 GB200s."""
    gpus = [{"index": i, "name": "NVIDIA GB200", "uuid": f"GPU-{name}-{i}", "fabric": dict(fabric)} for i in range(4)]
    return NodeOutcome(NodeState(name, True, True, "IDLE", 4), f"nodes/{name}",
                       {"host": {"hostname": hostname or name, "gpus": gpus}}, None)


def rack(**odd: NodeOutcome) -> ClusterRun:
    nodes = {name: tray(name, gb200_fabric()) for name in TRAYS}
    return ClusterRun("slurm", {**nodes, **odd}, ())


def test_nvlink_domain_fabric_trays_with_the_real_gb200_fabric_values_pass():
    contract = parse_contract(RACK)
    check = nvlink_domain.judge_fabric(nvlink_domain.SECTION.of(contract), Subject.whole("h3"), rack(), contract)
    assert_check(check, Outcome.PASSED, "completed", None, "h3: 4 GPUs in the fabric, completed, healthy, clique 32766 "
                 "of cluster dc6e40c4-d722-4357-9ba6-5291dd461278 (as 18 of 18 trays)")
    assert check.details["domain_clique"]["clique_id"] == 0x7FFE


def test_nvlink_domain_fabric_a_tray_with_the_real_insufficient_resources_registration_fails():
    contract = parse_contract(RACK)
    run = rack(h7=tray("h7", refused_fabric()))
    check = nvlink_domain.judge_fabric(nvlink_domain.SECTION.of(contract), Subject.whole("h7"), run, contract)
    assert_check(check, Outcome.FAILED, "completed", None, "h7: GPU0: fabric registration failed (NVML status 23)",
                 "GPU0: clique 0 of cluster 00000000-0000-0000-0000-000000000000, not the domain's clique 32766 of cluster "
                 "dc6e40c4-d722-4357-9ba6-5291dd461278")
    # the other trays still pass: the domain is the clique 17 of 18 trays are in
    other = nvlink_domain.judge_fabric(nvlink_domain.SECTION.of(contract), Subject.whole("h8"), run, contract)
    assert other.passed and "(as 17 of 18 trays)" in other.message


def imex_views(text_of: dict[str, str]) -> ImexViews:
    """Each tray's view (its `nvidia-imex-ctl -N` text, parsed) and its own address: tray h<k+1> is node #k of the
    real output, its IMEX channel devices an honest tray's (builders.honest_channels). That every tray prints the real
    output one node printed is the construction."""
    views = {}
    for tray_name, text in text_of.items():
        domain = parse_domain(text)
        views[tray_name] = ImexView(domain, (domain.nodes[int(tray_name[1:]) - 1].address,), None, (f"imex-{tray_name}.txt",),
                                    **honest_channels())
    return ImexViews(views)


def unavailable(text: str, index: int) -> str:
    """Constructed: a degraded copy of the real 18-node view in which node #index is UNAVAILABLE and every
    connection from or to it disconnected (D)."""
    lines = []
    for line in text.splitlines():
        tokens = line.split()
        if line.startswith(f"Node #{index} "):
            line = line.replace("READY      ", "UNAVAILABLE")
        elif tokens and tokens[0].isdigit() and len(tokens) == 19:
            row = int(tokens[0])
            cells = ["D" if row != to and index in (row, to) else cell for to, cell in enumerate(tokens[1:])]
            line = f"      {row:<9} " + "   ".join(cells)
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_nvlink_domain_imex_every_tray_of_the_real_18_node_domain_passes_and_so_does_an_older_2_node_one():
    contract = parse_contract(RACK)
    section = nvlink_domain.SECTION.of(contract)
    views = imex_views({name: IMEX_18.read_text() for name in TRAYS})
    checks = [nvlink_domain.judge_imex(section, Subject.whole(name), views, contract) for name in TRAYS]
    assert {c.outcome for c in checks} == {Outcome.PASSED}
    assert_check(checks[1], Outcome.PASSED, "READY", None,
                 "h2: IMEX READY and connected to all 17 other nodes in every tray's view (its own: domain UP)")
    assert checks[1].details["addresses"] == ["172.31.48.98"]
    assert checks[1].details["sources"] == ["its own nvidia-imex-ctl", "17 other trays' nvidia-imex-ctl",
                                            "the driver's IMEX channel devices (/dev/nvidia-caps-imex-channels, /proc/devices)"]
    # IMEX 570.00 on 2 GH200 nodes: no Version column, 2-space grid, no blank line before the domain state
    older = imex_views({"h1": IMEX_2.read_text(), "h2": IMEX_2.read_text()})
    pair = nvlink_domain.judge_imex(section, Subject.whole("h2"), older, contract)
    assert_check(pair, Outcome.PASSED, "READY", None, "h2: IMEX READY and connected to all 1 other nodes")


def test_nvlink_domain_imex_a_tray_the_others_see_unavailable_fails_and_its_peers_still_pass():
    contract = parse_contract(RACK)
    section = nvlink_domain.SECTION.of(contract)
    real = IMEX_18.read_text()
    # h6 (node #5) answers for itself with the real, all-connected view; every other tray sees it UNAVAILABLE.
    views = imex_views({name: real if name == "h6" else unavailable(real, 5) for name in TRAYS})
    down = nvlink_domain.judge_imex(section, Subject.whole("h6"), views, contract)
    assert_check(down, Outcome.FAILED, "not ready", None,
                 "h6: h1 sees it UNAVAILABLE; h10 sees it UNAVAILABLE; h11 sees it UNAVAILABLE; h12 sees it UNAVAILABLE")
    # a down peer's disconnections are its own fault, not h1's
    peer = nvlink_domain.judge_imex(section, Subject.whole("h1"), views, contract)
    assert_check(peer, Outcome.PASSED, "READY", None, "h1: IMEX READY")


def domain_allreduce(run: ClusterRun, mnnvl: dict) -> DomainAllReduce:
    """The real 72-rank GB200 NVL72 all_reduce table (coreweave/nccl-tests#43) as the domain's result. The posted
    table keeps only rank 71's line (on one host), so cluster.run.pair_result, which wants every tray among the rank
    lines, is not used: the result is its last line's, from the same parsed row."""
    table = parse_all_reduce((NVL72 / "nccltests_gb200_nvl72_72rank_table_coreweave_pr43.txt").read_text())
    assert table.ranks == 72 and table.largest is not None
    result = PairResult(0, table.largest.oop_busbw_gbyte_s, human_bytes(table.largest.size_bytes), None,
                        ("nvlink-domain-allreduce.txt",))
    return DomainAllReduce(run, tuple(run.nodes), (), 4, result, mnnvl, traffic={t: honest_traffic() for t in run.nodes})


def mnnvl_everywhere() -> dict:
    """Constructed: every tray logging what the real GB200 tray's lines log (4 ranks in clique 0x7ffe, state 3),
    plus the communicator line `... MNNVL 1` the real fragment was cut before, one per rank."""
    real = mnnvl_by_host(MNNVL_GB200.read_text())["gb200a-04"]
    assert real.cliques == ((0x7FFE, 3),) * 4 and real.comm_flags == ()
    return {name: dataclasses.replace(real, comm_flags=(1,) * 4, nodes=(18,) * 4) for name in TRAYS}


def test_nvlink_domain_busbw_the_real_72_rank_table_passes_800_gbs_over_mnnvl():
    contract = parse_contract(RACK)
    check = nvlink_domain.judge_busbw(nvlink_domain.SECTION.of(contract), Subject.whole("domain"),
                                      domain_allreduce(rack(), mnnvl_everywhere()), contract)
    assert_check(check, Outcome.PASSED, 834.57, "GB/s",
                 "all_reduce busbw 834.57 GB/s at 8 GiB >= 800 GB/s over 18 trays x 4 GPUs, MNNVL on every tray")
    assert check.details["physical_cap"] == 1775.0  # 900 GB/s one way x 2 x 71/72


def test_nvlink_domain_busbw_the_same_table_fails_900_gbs():
    contract = stricter(RACK, 'min_busbw: "800 GB/s"', 'min_busbw: "900 GB/s"')
    check = nvlink_domain.judge_busbw(nvlink_domain.SECTION.of(contract), Subject.whole("domain"),
                                      domain_allreduce(rack(), mnnvl_everywhere()), contract)
    assert_check(check, Outcome.FAILED, 834.57, "GB/s", "all_reduce busbw 834.57 GB/s at 8 GiB < 900 GB/s")
    assert check.threshold == 900.0


def test_nvlink_domain_busbw_trays_whose_real_nccl_lines_prove_no_mnnvl_fail_by_name():
    """Two trays log what real hosts logged: h4 is the GB200 tray gb200a-04 whose fragment has MNNVL fabric lines but
    no communicator line, h9 the H100 node of NVIDIA/nccl#1453 whose communicator says `MNNVL 0`."""
    contract = parse_contract(RACK)
    mnnvl = mnnvl_everywhere()
    del mnnvl["h4"], mnnvl["h9"]
    mnnvl.update(mnnvl_by_host(MNNVL_GB200.read_text()))
    mnnvl.update(mnnvl_by_host(MNNVL_OFF.read_text()))
    run = rack(h4=tray("h4", gb200_fabric(), "gb200a-04"), h9=tray("h9", gb200_fabric(), "h100clust-worker-1"))
    check = nvlink_domain.judge_busbw(nvlink_domain.SECTION.of(contract), Subject.whole("domain"),
                                      domain_allreduce(run, mnnvl), contract)
    assert_check(check, Outcome.FAILED, 834.57, "GB/s", "not over the NVLink domain: h4: NCCL logged no communicator line "
                 "with its MNNVL flag (MNNVL not proven); h9: fell back to the network (MNNVL 0)")
    assert check.required == ">= 800 over NVLink"
