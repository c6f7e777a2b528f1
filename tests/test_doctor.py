"""Preflight: `python -m pytest_gpuaccept doctor` and the line a run prints at its start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, SYSTEM_PATH, nvml_recording

EVERY_TOOL = """\
gpuaccept: 1
vendor: V
gpus: {count: 8}
nvlink: {every_pair: true}
p2p: {min_bandwidth: "350 GB/s"}
host_bandwidth: {min_bandwidth: "48 GB/s"}
allreduce: {min_busbw: "450 GB/s"}
nics: {interfaces: [ens6f0], min_speed: "25 Gb/s"}
rdma: {devices: ["mlx5_*"], min_fraction_of_line_rate: 0.9}
iperf3: {server: 10.0.0.2, min_throughput: "1 Gb/s"}
"""


def doctor(*args: str, path: str = SYSTEM_PATH, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "doctor", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": path}, cwd=cwd)


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_on_this_machine_the_h100_preset_lacks_the_gpu_tools_and_says_how_to_get_each():
    done = doctor("--contract", "h100-sxm5-8gpu")
    assert done.returncode == 1, done.stdout
    out = done.stdout
    for name, hint in (("libnvidia-ml.so.1", "the NVIDIA driver's NVML library"),
                       ("libcuda.so.1", "the NVIDIA driver's CUDA library"),
                       ("nvidia-smi", "the NVIDIA driver (Debian/Ubuntu: nvidia-driver"),
                       ("nvbandwidth", "git clone https://github.com/NVIDIA/nvbandwidth"),
                       ("all_reduce_perf", "git clone https://github.com/NVIDIA/nccl-tests && make -C nccl-tests CUDA_HOME="),
                       ("ib_write_bw", "apt install perftest")):
        assert f"  MISSING  {name}" in out and hint in out, name
    assert "  MISSING  torch" in out  # not installed, or a CPU-only build: no GPU load either way
    assert "needed by p2p, host_bandwidth" in out
    assert out.rstrip().splitlines()[-1] == ("7 of 8 missing: a run now would reject allreduce, compute, gpus, "
                                             "host_bandwidth, memory_bandwidth, nvlink, p2p, rdma, utilisation as not measured")


def test_on_a_fake_host_with_every_tool_doctor_exits_0(fake_tools, tmp_path):
    for tool in ("nvidia-smi", "nvbandwidth", "all_reduce_perf", "ib_write_bw", "ethtool", "iperf3", "ip"):
        fake_tools.add(tool, "")
    (tmp_path / "every-tool.yaml").write_text(EVERY_TOOL)
    done = doctor("--contract", str(tmp_path / "every-tool.yaml"),
                  nvml_recording("h100_sxm5_8gpu.json"),
                  path=os.environ["PATH"])
    assert done.returncode == 0, done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "all 10 present: every clause can be measured"
    assert f"  ok       all_reduce_perf            {fake_tools.bin_dir / 'all_reduce_perf'} (script (" in done.stdout
    assert "look twice: a script where a compiled binary is expected" in done.stdout
    assert f"  ok       libcuda.so.1               {DATA / 'nvml' / 'h100_sxm5_8gpu.json'} (simulated" in done.stdout


def test_on_a_clusters_login_node_doctor_checks_the_engine_not_the_gpus(fake_tools, tmp_path):
    """The login node needs Slurm's commands (or mpirun) and the MPI nccl-tests; the GPUs are the nodes'."""
    (tmp_path / "cluster.yaml").write_text(EVERY_TOOL + "cluster:\n  engine: slurm\n  nodes: ['gpu[01-04]']\n"
                                           "  pairs: {min_busbw: '360 GB/s'}\n")
    done = doctor("--contract", str(tmp_path / "cluster.yaml"), path=str(fake_tools.bin_dir))
    names = [line.split()[1] for line in done.stdout.splitlines() if line.startswith(("  ok", "  MISSING"))]
    assert names == ["scontrol", "srun", "all_reduce_perf"] and done.returncode == 1
    assert "for a cluster: MPI=1 MPI_HOME=<Open MPI>, at the same path on every node" in done.stdout
    (tmp_path / "mpirun.yaml").write_text((tmp_path / "cluster.yaml").read_text().replace("engine: slurm", "engine: mpirun"))
    done = doctor("--contract", str(tmp_path / "mpirun.yaml"), path=str(fake_tools.bin_dir))
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith(("  ok", "  MISSING"))] == [
        "mpirun", "all_reduce_perf"]


def test_a_run_says_what_is_missing_before_it_starts(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 8}\nnvlink: {every_pair: true}\n"
                 "allreduce: {min_busbw: '450 GB/s'}\n", nvml_recording("h100_sxm5_8gpu.json"))
    run.result.stdout.fnmatch_lines(["gpuaccept preflight: missing all_reduce_perf (allreduce): those clauses will be "
                                     "not measured. `python -m pytest_gpuaccept doctor --contract *` says how to get them"])
    assert run.checks("allreduce")[0]["outcome"] == "not_measured"  # the run still runs, and rejects


def test_long_work_says_what_runs_and_how_long_it_took(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    contract = "gpuaccept: 1\nvendor: V\ngpus: {count: 8}\nnvlink: {every_pair: true}\n"
    run = accept(contract, nvml_recording("h100_sxm5_8gpu.json"))
    run.result.stdout.fnmatch_lines(["gpuaccept: running nvidia-smi topo -m (at most 120 s)",
                                     "gpuaccept: nvidia-smi topo -m done in * s"])
    quiet = accept(contract, nvml_recording("h100_sxm5_8gpu.json"), "-q")
    assert "gpuaccept: running" not in quiet.result.stdout.str()
    assert quiet.result.outlines[-1].startswith("gpuaccept verdict: ACCEPTED")


def test_on_the_real_h200_doctor_found_everything_its_preset_needs():
    """Recorded on the device machine: the driver's libraries, NVML, a CUDA PyTorch and a readable dmesg."""
    h200 = (DATA / "h200" / "doctor-h200.txt").read_text().splitlines()
    assert h200[-2:] == ["all 5 present: every clause can be measured", "rc=0"]
    assert any(line.startswith("  ok       libcuda.so.1") for line in h200)
    h100 = (DATA / "h200" / "doctor-h100-preset.txt").read_text()
    assert "3 of 8 missing: a run now would reject allreduce, host_bandwidth, p2p, rdma as not measured" in h100
    run = (DATA / "h200" / "accepted-by-preset-pytest.txt").read_text()
    assert "gpuaccept: workload_builtin 40/50 s, lowest GPU 100 %" in run and "gpuaccept verdict: ACCEPTED" in run
