"""memory_bandwidth: our PyTorch workload's output read back (recomputed, never taken on its word), judged
against min_bandwidth or a fraction of the published figure of the GPU's model; a CPU figure never passes.
nvbandwidth's device_local_copy is judged only where its header is this host's (NVML's driver, CUDA version, GPUs)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, nvml_recording, pci_tree, staged_recording
from judging import Output, judge

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.membw import parse_membw
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id

RECORDED = (DATA / "torch" / "membw_cpu_2dev.txt").read_text()  # a real CPU run: devices "cpu"
AS_GPUS = RECORDED.replace('"device": "cpu"', '"device": "cuda:0"', 1).replace('"device": "cpu"', '"device": "cuda:1"', 1)


def test_the_recorded_cpu_run_reads_back_with_its_rates_recomputed():
    copies = parse_membw(RECORDED)
    assert {i: (c.device, c.gbyte_s) for i, c in copies.items()} == {0: ("cpu", 15.866), 1: ("cpu", 15.135)}


def test_a_rate_that_disagrees_with_its_own_timings_is_refused():
    with pytest.raises(ParseError) as raised:
        parse_membw(RECORDED.replace('"gbyte_s": 15.866', '"gbyte_s": 3015.866'))
    assert "is not 2 x bytes / median seconds (15.866)" in str(raised.value)


CONTRACT = """\
gpuaccept: 1
vendor: V
tools: {{python: "{python}"}}
gpus: {{count: 2}}
memory_bandwidth: {{{threshold}, size: "256 MiB", repeats: 5}}
"""


def _run(accept, fake_tools, tmp_path, output: str, threshold: str, device: str = "0x2330"):
    fake_tools.add("python", output)
    return accept(CONTRACT.format(python=fake_tools.bin_dir / "python", threshold=threshold),
                  nvml_recording("h100_sxm5_8gpu.json"), pci_tree(tmp_path / "sys", device))


def test_a_fraction_of_peak_on_an_h100_sxm5_requires_0_8_x_3350(accept, fake_tools, tmp_path):
    run = _run(accept, fake_tools, tmp_path, AS_GPUS, "min_fraction_of_peak: 0.8")
    checks = run.checks("memory_bandwidth")
    assert [(c["required"], c["threshold"]) for c in checks] == [(">= 2680", 2680.0)] * 2
    assert (checks[0]["outcome"], checks[0]["measured"]) == ("failed", 15.866)
    assert checks[0]["message"] == ("GPU0 device-local copy 15.87 GB/s < 2680 GB/s (PyTorch, 268435456 bytes, median "
                                    "of 5; 0% of the published 3350 GB/s (H100 SXM5 80GB, 3350 GB/s))")
    assert fake_tools.calls("python") == [["python", "-m", "pytest_gpuaccept.workloads.membw", "--gpus", "2",
                                           "--bytes", "268435456", "--repeats", "5"]]


def test_min_bandwidth_is_judged_as_written(accept, fake_tools, tmp_path):
    run = _run(accept, fake_tools, tmp_path, AS_GPUS, 'min_bandwidth: "15.5 GB/s"')
    assert [(c["subject"], c["outcome"]) for c in run.checks("memory_bandwidth")] == [("GPU0", "passed"), ("GPU1", "failed")]


def test_a_copy_that_ran_on_the_cpu_is_never_a_gpu_figure(accept, fake_tools, tmp_path):
    run = _run(accept, fake_tools, tmp_path, RECORDED, 'min_bandwidth: "1 GB/s"')
    assert {c["message"] for c in run.checks("memory_bandwidth")} == {
        "not measured: the copy ran on cpu, not on GPU0: not a GPU figure",
        "not measured: the copy ran on cpu, not on GPU1: not a GPU figure"}


def test_a_fraction_of_an_unknown_model_is_not_measured_naming_the_device_id(accept, fake_tools, tmp_path):
    run = _run(accept, fake_tools, tmp_path, AS_GPUS, "min_fraction_of_peak: 0.8", device="0x1234")
    assert run.checks("memory_bandwidth")[0]["message"] == (
        "not measured: GPU0's device ID 0x1234 is not in the model table (pytest_gpuaccept/models/gpus.json): add "
        "it: no published figure to take 0.8 of")


def test_both_thresholds_at_once_is_a_usage_error(accept, fake_tools):
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 2}\n"
                 "memory_bandwidth: {min_bandwidth: '1 GB/s', min_fraction_of_peak: 0.8}\n")
    assert run.result.ret == 4
    run.result.stderr.fnmatch_lines(["*memory_bandwidth: expected exactly one of min_bandwidth and min_fraction_of_peak"])


def test_the_workload_runs_for_real_on_this_cpu_or_says_pytorch_is_missing():
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "pytest_gpuaccept.workloads.membw", "--gpus", "1",
                           "--bytes", str(8 << 20), "--repeats", "3", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    if importlib.util.find_spec("torch") is None:
        assert done.returncode == 3 and "PyTorch is not installed" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        copies = parse_membw(done.stdout)
        assert copies[0].device == "cpu" and copies[0].gbyte_s > 0


# ------------------------------------------------------------------ nvbandwidth's header against NVML

H20 = (DATA / "nvbandwidth" / "h20-3e_8gpu_v0.8_device_local_copy.txt").read_text()  # driver 550.127.08, CUDA 12060
NVB_CONTRACT = "gpuaccept: 1\nvendor: V\ngpus: {count: 8}\nmemory_bandwidth: {min_bandwidth: '2000 GB/s', tool: nvbandwidth}\n"


def h20_host(tmp_path: Path, driver: str) -> Path:
    """CONSTRUCTED: the 8-GPU recording as the host of the real H20-3e run: its `Device N: NAME (BUS)` lines as NVML's
    GPUs (PCI device 0x232c, the H20-3e's in NVIDIA's open-gpu-kernel-modules README), CUDA 12.6 as its header's
    12060, and the NVIDIA driver given: the run's own 550.127.08, or another host's."""
    devices = re.findall(r"^Device (\d+): (.+?) \(([0-9a-f:]+)\)$", H20, re.M)

    def change(reading):
        reading.update(driver=driver, cuda="12.6")
        for n, name, bus in devices:
            reading["gpus"][int(n)].update(name=name, pci_bus_id=f"{bus}.0", pci_device_id="0x232c")
        reading["cuda_devices"]["bus_ids"] = [sysfs_bus_id(g["pci_bus_id"]) for g in reading["gpus"]]
    return Path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", change).split("=", 1)[1])


def _h20_judged(tmp_path: Path, driver: str):
    nvml = h20_host(tmp_path, driver)
    pci_tree(tmp_path / "sys", None, nvml)
    return judge(NVB_CONTRACT, {"nvbandwidth": Output(H20)}, tmp_path, nvml=nvml, sysfs=tmp_path / "sys")


def test_another_hosts_saved_local_copy_run_is_rejected_naming_nvmls_driver(tmp_path):
    """The real H20-3e run replayed, as long as its copies took, on eight H20-3es at the buses it prints whose driver
    is another (570.133.20): not this host's output, every GPU fails naming both versions."""
    judged = _h20_judged(tmp_path, "570.133.20")
    checks = judged.of("memory_bandwidth")
    assert len(checks) == 8 and {c.outcome.value for c in checks} == {"failed"}
    assert {c.message for c in checks} == {
        "nvbandwidth's header says driver 550.127.08, but NVML here says driver 570.133.20: not this host's output"}
    assert judged.verdict == "rejected"


def test_the_same_run_on_its_own_host_is_accepted_with_its_header_confirmed(tmp_path):
    judged = _h20_judged(tmp_path, "550.127.08")
    checks = {c.subject: c for c in judged.of("memory_bandwidth")}
    assert {c.outcome.value for c in checks.values()} == {"passed"} and judged.verdict == "accepted"
    assert checks["GPU0"].measured == 2232.6
    assert checks["GPU0"].details["header_confirmed"][:3] == [
        "driver 550.127.08", "CUDA 12.6", "device 0 NVIDIA H20-3e at PCI 0000:18:00 (NVML GPU0)"]
    assert checks["GPU0"].details["header_unconfirmed"] == []
