"""host_bandwidth and the model table: nvbandwidth's host <-> GPU rows judged per GPU and direction, and
every figure set beside the published one of the GPU's model, found by the PCI device ID sysfs gives.

A clause's judgement is judged in process (tests/judging.py); one accepted and one rejected host stay whole runs.
Each real nvbandwidth output is judged on the host it ran on, as NVML reads it (its header's driver and CUDA version):
`nvml/h100_sxm5_8gpu_acceptance_sheet.json` for the H100 runs, a recording staged here for the B300's."""


import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from builders import h100_status, host_copy_runs, p5_log
from conftest import DATA, nvml_recording, pci_tree, staged_recording
from judging import Output, judge

from pytest_gpuaccept.models import by_device_id
from pytest_gpuaccept.probes.nvbandwidth import parse_nvbandwidth
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id
from pytest_gpuaccept.probes.torch_hostbw import parse_torch_hostbw

H100_RUNS = DATA / "nvbandwidth" / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt"
B300 = DATA / "nvbandwidth" / "b300_sxm6_7gpu_v0.10.0_ce_full_bidir_read1_read2_total.txt"
SHEET = "h100_sxm5_8gpu_acceptance_sheet.json"  # H100_RUNS's host: driver 595.71.05, CUDA 13.2 (SOURCES.md)


CONTRACT = "gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\n{section}"


def test_the_model_table_knows_the_h100_sxm5_by_its_device_id():
    model = by_device_id("0x2330")
    assert (model.name, model.form_factor, model.memory_bandwidth_gbyte_s, model.tflops["bf16"]) == \
        ("H100 SXM5 80GB", "sxm", 3350, 989.5)
    assert model.sources and by_device_id("0xffff") is None
    assert sysfs_bus_id("00000000:18:00.0") == "0000:18:00.0"


def test_each_gpu_and_direction_is_judged_on_its_cell_beside_the_pcie_figure(accept, fake_tools, tmp_path):
    fake_tools.add("nvbandwidth", host_copy_runs(H100_RUNS.read_text()))
    run = accept(CONTRACT.format(count=8, section="host_bandwidth:\n  min_bandwidth: '50 GB/s'\n"),
                 nvml_recording(SHEET), pci_tree(tmp_path / "sys", "0x2330", SHEET))
    result = parse_nvbandwidth(H100_RUNS.read_text())
    h2d = result.matrices["host_to_device_memcpy_ce"].cells[0]
    d2h = result.matrices["device_to_host_memcpy_ce"].cells[0]
    checks = {c["subject"]: c for c in run.checks("host_bandwidth")}
    assert len(checks) == 16 and {c["outcome"] for c in checks.values()} == {"passed"}
    for i in range(8):
        assert checks[f"GPU{i}:h2d"]["measured"] == h2d[i] and checks[f"GPU{i}:d2h"]["measured"] == d2h[i]
    assert checks["GPU0:h2d"]["message"] == ("GPU0:h2d host to GPU 55.37 GB/s >= 50 GB/s (nvbandwidth; 88% of the "
                                             "published 63 GB/s (PCIe Gen5 x16, H100 SXM5 80GB))")
    assert checks["GPU0:h2d"]["details"]["fraction_of_published"] == pytest.approx(55.37 / 63, abs=1e-4)
    assert fake_tools.calls("nvbandwidth") == [["nvbandwidth", "-t", "host_to_device_memcpy_ce", "-t",
                                                "device_to_host_memcpy_ce"]]


def test_a_slow_host_link_fails_per_gpu_and_direction(accept, fake_tools, tmp_path):
    fake_tools.add("nvbandwidth", host_copy_runs(H100_RUNS.read_text()))
    run = accept(CONTRACT.format(count=8, section="host_bandwidth:\n  min_bandwidth: '55.3 GB/s'\n"),
                 nvml_recording(SHEET), pci_tree(tmp_path / "sys", "0x2330", SHEET))
    failed = sorted(c["subject"] for c in run.checks("host_bandwidth") if c["outcome"] != "passed")
    assert failed == [f"GPU{i}:d2h" for i in range(8)]  # D2H 55.18-55.26 GB/s, H2D 55.33-55.37


def tree(root, device: str, recording: str | Path = "h100_sxm5_8gpu.json") -> Path:
    """conftest.pci_tree's sysfs, as the folder the harness reads."""
    pci_tree(root, device, recording)
    return root


def b300_host(tmp_path: Path, driver: str = "610.57.04", cuda: str = "13.3") -> Path:
    """CONSTRUCTED: the 8-GPU recording reading the driver and CUDA version the real B300 run prints (610.57.04, 13.3),
    as its host's NVML would; another `driver` makes it a host the run did not come from."""
    def change(reading):
        reading.update(driver=driver, cuda=cuda)
    return Path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", change).split("=", 1)[1])


def test_without_a_known_device_id_there_is_no_fraction_but_still_a_judgement(tmp_path):
    judged = judge(CONTRACT.format(count=8, section="host_bandwidth:\n  min_bandwidth: '50 GB/s'\n"),
                   {"nvbandwidth": Output(H100_RUNS)}, tmp_path, nvml=SHEET, sysfs=tree(tmp_path / "sys", "0xffff", SHEET))
    check = judged.of("host_bandwidth")[0]
    assert check.outcome.value == "passed" and "published" not in check.message
    assert "fraction_of_published" not in (check.details or {})


def test_a_gpu_beyond_the_matrix_fails(tmp_path):
    judged = judge(CONTRACT.format(count=8, section="host_bandwidth:\n  min_bandwidth: '50 GB/s'\n"),
                   {"nvbandwidth": Output(B300)}, tmp_path, nvml=b300_host(tmp_path),
                   sysfs=tree(tmp_path / "sys", "0x2330"))  # 7 columns
    check = judged.one("host_bandwidth", "GPU7:h2d")
    assert (check.outcome.value, check.message) == ("failed", "GPU7 not in nvbandwidth's matrix: it has 7 GPUs")


def test_another_hosts_saved_host_copies_are_rejected_naming_nvmls_driver(tmp_path):
    """The real H100 run (driver 595.71.05, CUDA 13.2) replayed, as long as its copies took, on H100s whose NVML reads
    driver 560.35.03 (the 8-GPU recording): not this host's output, every GPU and direction fails naming both."""
    judged = judge(CONTRACT.format(count=8, section="host_bandwidth:\n  min_bandwidth: '50 GB/s'\n"),
                   {"nvbandwidth": Output(H100_RUNS)}, tmp_path, sysfs=tree(tmp_path / "sys", "0x2330"))
    checks = judged.of("host_bandwidth")
    assert len(checks) == 16 and {c.outcome.value for c in checks} == {"failed"}
    assert {c.message for c in checks} == {
        "nvbandwidth's header says driver 595.71.05, but NVML here says driver 560.35.03: not this host's output"}
    assert judged.verdict == "rejected"


def test_the_same_host_copies_on_their_own_host_are_accepted_with_the_header_confirmed(tmp_path):
    judged = judge(CONTRACT.format(count=8, section="host_bandwidth:\n  min_bandwidth: '50 GB/s'\n"),
                   {"nvbandwidth": Output(H100_RUNS)}, tmp_path, nvml=SHEET, sysfs=tree(tmp_path / "sys", "0x2330", SHEET))
    checks = judged.of("host_bandwidth")
    assert {c.outcome.value for c in checks} == {"passed"} and judged.verdict == "accepted"
    assert checks[0].details["header_confirmed"] == ["driver 595.71.05", "CUDA 13.2"]
    assert checks[0].details["header_unconfirmed"] == ["GPU names and PCI addresses: nvbandwidth lists no device"]


def test_p2p_figures_are_set_beside_half_the_nvlink_bandwidth_of_the_model(tmp_path):
    judged = judge(CONTRACT.format(count=7, section="p2p:\n  min_bandwidth: '700 GB/s'\n"),
                   {"nvbandwidth": Output(B300)}, tmp_path, nvml=b300_host(tmp_path), sysfs=tree(tmp_path / "sys", "0x3182"))
    check = judged.one("p2p", "GPU0->GPU1")
    assert check.message.endswith("85% of the published 900 GB/s (B300 SXM6 AC NVLink))")
    assert check.details["fraction_of_published"] == pytest.approx(check.measured / 900, abs=1e-3)


def test_allreduce_busbw_is_set_beside_the_one_way_nvlink_figure(tmp_path):
    judged = judge(CONTRACT.format(count=8, section="allreduce:\n  min_busbw: '450 GB/s'\n  max_bytes: '16 GiB'\n"
                                                    "  args: ['-n', '1']\n"),
                   {"all_reduce_perf": Output(p5_log())}, tmp_path, sysfs=tree(tmp_path / "sys", "0x2330"))
    check = judged.of("allreduce")[0]
    assert check.message == ("busbw 483.05 GB/s at 16 GiB >= 450 GB/s (nccl-tests; 107% of the published "
                             "450 GB/s (H100 SXM5 80GB NVLink, one direction))")
    assert check.details["fraction_of_published"] == pytest.approx(483.05 / 450, abs=1e-4)


HOSTBW = (DATA / "torch" / "hostbw_cpu_2dev_pinned_cpus.txt").read_text()  # a real CPU run: device cpu


def _torch_host(tmp_path, output: str):
    contract = (f'gpuaccept: 1\nvendor: V\ntools: {{python: "{tmp_path / "bin" / "python"}"}}\ngpus:\n  count: 2\n'
                "host_bandwidth:\n  min_bandwidth: '3 GB/s'\n  tool: torch\n  size: '64 MiB'\n  repeats: 3\n")
    return judge(contract, {"python": Output(output)}, tmp_path, nvml="h100_sxm5_4gpu.json",
                 sysfs=tree(tmp_path / "sys", "0x2330", "h100_sxm5_4gpu.json"))


def test_torch_host_copies_come_from_each_gpus_own_numa_node(tmp_path):
    judged = _torch_host(tmp_path, HOSTBW.replace("device cpu", "device cuda", 1))  # relabelled here
    checks = {c.subject: c for c in judged.of("host_bandwidth")}
    assert checks["GPU0:h2d"].measured == round(67108864 / 0.016804914000204008 / 1e9, 3)
    assert "host buffer on CPUs 0" in checks["GPU0:h2d"].message
    assert [[Path(a[0]).name, *a[1:]] for a in judged.recordings.asked if Path(a[0]).name == "python"] == [
        ["python", "-m", "pytest_gpuaccept.workloads.hostbw", "--gpus", "2", "--bytes", "67108864", "--repeats", "3",
         "--cpus=0=0-55", "--cpus=1=0-55"]]


def test_torch_host_copies_between_cpu_tensors_are_never_a_gpu_figure(tmp_path):
    judged = _torch_host(tmp_path, HOSTBW)
    assert {c.message for c in judged.of("host_bandwidth")} == {
        "not measured: the copies ran on the cpu, not to and from GPUs"}


def test_the_host_workload_runs_for_real_on_this_cpu_or_says_pytorch_is_missing():
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "pytest_gpuaccept.workloads.hostbw", "--gpus", "1",
                           "--bytes", str(1 << 20), "--repeats", "2", "--cpus", "0=0", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    if importlib.util.find_spec("torch") is None:
        assert done.returncode == 3 and "PyTorch is not installed" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        result = parse_torch_hostbw(done.stdout)
        assert set(result.figures) == {(0, "h2d"), (0, "d2h")} and result.cpus == {0: "0"}


def test_nvlink_pairs_and_links_are_set_beside_the_models_published_links(tmp_path):
    outputs = {"nvidia-smi topo": Output(DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"),
               "nvidia-smi nvlink -s": Output(h100_status(8))}
    judged = judge(CONTRACT.format(count=8, section="nvlink:\n  every_pair: true\n  min_links: 18\n  links_per_gpu: 18\n"),
                   outputs, tmp_path, sysfs=tree(tmp_path / "sys", "0x2330"))
    pair = judged.of("nvlink")[0]
    assert pair.message == "NV18 between GPU0 and GPU1 (100% of the 18 NVLinks of a H100 SXM5 80GB)"
    links = judged.of("nvlink.links")[0]
    assert links.details["fraction_of_published"] == pytest.approx(26.562 / 25, abs=1e-4)
    assert links.details["published"] == "18 links of 25 GB/s each way (H100 SXM5 80GB)"


@pytest.mark.parametrize("device, outcome, message", [
    ("0x2330", "passed", "GPU0 is PCI device 0x2330, a H100 SXM5 80GB (sxm)"),
    ("0x2331", "failed", "GPU0 is PCI device 0x2331, a H100 PCIe (pcie), not sxm as contracted"),
    ("0x9999", "not_measured", "not measured: GPU0's device ID 0x9999 is not in the model table "
                               "(pytest_gpuaccept/models/gpus.json): add it"),
])
def test_the_form_factor_comes_from_the_pci_device_id_not_the_name(tmp_path, device, outcome, message):
    """An H100 PCIe and an H100 SXM5 both call themselves "NVIDIA H100 ..." in NVML: the device ID tells them apart."""
    judged = judge(CONTRACT.format(count=8, section="").replace("count: 8\n", "count: 8\n  form_factor: sxm\n"), {},
                   tmp_path, sysfs=tree(tmp_path / "sys", device))
    check = judged.of("gpus.form_factor")[0]
    assert (check.outcome.value, check.message) == (outcome, message)
    assert len(judged.of("gpus.form_factor")) == 8


def test_without_gpus_count_the_form_factor_judges_every_gpu_at_once(tmp_path):
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  form_factor: pcie\n", {}, tmp_path,
                   sysfs=tree(tmp_path / "sys", "0x2330"))
    (check,) = judged.of("gpus.form_factor")
    assert (check.subject, check.outcome.value, check.measured) == ("GPUs", "failed", "sxm")


@pytest.mark.parametrize("device, outcome, message", [
    ("0x2330", "passed", "GPU0 is 'NVIDIA H100 80GB HBM3', PCI device 0x2330: H100 SXM5 80GB"),
    ("0x2331", "failed", "GPU0 is 'NVIDIA H100 80GB HBM3', which is not the name of its PCI device 0x2331 in sysfs "
                         "(H100 PCIe: 'NVIDIA H100 PCIe')"),
])
def test_model_h100_sxm5_passes_on_a_real_h100_sxm5_by_its_device_id(tmp_path, device, outcome, message):
    judged = judge(CONTRACT.format(count=8, section="").replace("count: 8\n", "count: 8\n  model: 'H100 SXM5'\n"), {},
                   tmp_path, sysfs=tree(tmp_path / "sys", device))
    check = judged.of("gpus.model")[0]
    assert (check.outcome.value, check.message) == (outcome, message)
