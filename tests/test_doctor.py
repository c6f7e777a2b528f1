"""Preflight: `python -m pytest_gpuaccept doctor` and the line a run prints at its start."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA, SYSTEM_PATH, nvml_recording
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.doctor import needs, slurm_answers

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
    assert names == ["scontrol", "srun", "slurmctld", "all_reduce_perf"] and done.returncode == 1
    assert "  MISSING  slurmctld                  needed by cluster (not asked: scontrol is missing)" in done.stdout
    assert "for a cluster: MPI=1 MPI_HOME=<Open MPI>, at the same path on every node" in done.stdout
    (tmp_path / "mpirun.yaml").write_text((tmp_path / "cluster.yaml").read_text().replace("engine: slurm", "engine: mpirun"))
    done = doctor("--contract", str(tmp_path / "mpirun.yaml"), path=str(fake_tools.bin_dir))
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith(("  ok", "  MISSING"))] == [
        "mpirun", "all_reduce_perf"]


SLURM_CLUSTER = EVERY_TOOL + "cluster:\n  engine: slurm\n  nodes: ['gpu[01-04]']\n  pairs: {min_busbw: '360 GB/s'}\n"
# What Debian's Slurm 22.05.8 (slurm-client 22.05.8-4+deb12u3) prints on this machine, 2026-12-01:
# `scontrol ping` with no slurm.conf and no DNS SRV record for the controller (exit 1, at once) ...
UNCONFIGURED = ("scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
                "scontrol: error: fetch_config: DNS SRV lookup failed\n"
                "scontrol: error: _establish_config_source: failed to fetch config\n"
                "scontrol: fatal: Could not establish a configuration source\n")
# ... and with a slurm.conf whose controller does not listen (exit 1; snap-slurm issue #24 shows the same line).
DOWN = ("Slurmctld(primary) at ctl is DOWN\n*****************************************\n"
        "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n*****************************************\n")


def slurm_login_node(fake_tools, tmp_path: Path, ping: str, rc: int, stderr: str = "") -> subprocess.CompletedProcess[str]:
    for tool in ("srun", "all_reduce_perf"):
        fake_tools.add(tool, "")
    fake_tools.add("scontrol", ping, when="ping", rc=rc, stderr=stderr)
    (tmp_path / "cluster.yaml").write_text(SLURM_CLUSTER)
    return doctor("--contract", str(tmp_path / "cluster.yaml"), path=str(fake_tools.bin_dir))


def test_doctor_asks_slurm_s_controller_and_an_unconfigured_slurm_is_not_ok(fake_tools, tmp_path):
    """srun and scontrol being there is not a scheduler: doctor runs `scontrol ping` and shows Slurm's own words."""
    done = slurm_login_node(fake_tools, tmp_path, "", 1, UNCONFIGURED)
    assert fake_tools.calls("scontrol") == [["scontrol", "ping"]]
    assert f"  ok       srun                       {fake_tools.bin_dir / 'srun'}" in done.stdout
    assert ("  MISSING  slurmctld                  needed by cluster (scontrol ping exit 1: scontrol: error: "
            "_establish_config_source: failed to fetch config; scontrol: fatal: Could not establish a configuration "
            "source)") in done.stdout
    assert "           get it: Slurm's controller must answer this login node: slurm.conf where Slurm looks" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "1 of 4 missing: a run now would reject cluster as not measured"
    assert done.returncode == 1


def test_doctor_says_the_controller_is_down_in_slurm_s_words(fake_tools, tmp_path):
    done = slurm_login_node(fake_tools, tmp_path, DOWN, 1)
    assert ("  MISSING  slurmctld                  needed by cluster (scontrol ping exit 1: Slurmctld(primary) at ctl "
            "is DOWN)") in done.stdout
    assert done.returncode == 1


def test_doctor_is_content_when_the_controller_answers(fake_tools, tmp_path):
    done = slurm_login_node(fake_tools, tmp_path, "Slurmctld(primary) at h0 is UP\n", 0)
    assert (f"  ok       slurmctld                  {fake_tools.bin_dir / 'scontrol'} (scontrol ping: Slurmctld(primary) "
            "at h0 is UP)  [cluster]") in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "all 4 present: every clause can be measured"
    assert done.returncode == 0


def test_a_ping_that_hangs_is_cut_short_and_says_what_slurm_said_so_far(fake_tools):
    """SLURM_CONF naming a missing file: Slurm says so, then retries for 60 s; the doctor waits its timeout only."""
    retrying = ("scontrol: error: s_p_parse_file: cannot stat file /etc/slurm/slurm.conf: No such file or "
                "directory, retrying in 1sec up to 60sec\n")
    fake_tools.add("scontrol", "", when="ping", stderr=retrying, hang=30)
    answered, said = slurm_answers(str(fake_tools.bin_dir / "scontrol"), timeout_s=1)
    assert (answered, said) == (False, "scontrol ping: no answer in 1 s (scontrol: error: s_p_parse_file: cannot "
                                       "stat file /etc/slurm/slurm.conf: No such file or directory, retrying in 1sec "
                                       "up to 60sec)")


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's scontrol is not installed here")
def test_the_real_scontrol_without_a_controller_and_without_a_configuration(tmp_path, monkeypatch):
    """Slurm's own client, as it is installed: a slurm.conf whose controller's port is closed, then none at all."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=probe\nSlurmctldHost=ctl(127.0.0.1)\nSlurmctldPort={port}\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert slurm_answers("scontrol") == (False, "scontrol ping exit 1: Slurmctld(primary) at ctl is DOWN")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    assert slurm_answers("scontrol", timeout_s=1.5) == (
        False, f"scontrol ping: no answer in 1.5 s (scontrol: error: s_p_parse_file: cannot stat file "
               f"{tmp_path / 'missing.conf'}: No such file or directory, retrying in 1sec up to 60sec)")


def test_doctor_on_a_real_slurm_login_node_hears_the_controller_then_hears_it_is_down(tmp_path, fake_tools):
    """netns_cluster.py's real Slurm (a head node h0 and one node, under a second): doctor run on h0 with Slurm's
    own scontrol and srun reads `Slurmctld(primary) at h0 is UP`; with slurmctld stopped, Slurm's DOWN line."""
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"a real Slurm cluster in network namespaces needs root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    fake_tools.add("all_reduce_perf", "")
    (tmp_path / "cluster.yaml").write_text(SLURM_CLUSTER)
    cluster = Cluster(tmp_path / "slurm", 2, f"gd{os.getpid()}", 200 + os.getpid() % 50)  # test_cluster_engines: 100-199
    try:
        cluster.up()
        argv = [sys.executable, "-m", "pytest_gpuaccept", "doctor", "--contract", str(tmp_path / "cluster.yaml")]
        env = {**cluster.env(), "PATH": f"{fake_tools.bin_dir}:{SYSTEM_PATH}"}
        up = subprocess.run(cluster.inside(0, argv), env=env, capture_output=True, text=True, timeout=120)
        scontrol = shutil.which("scontrol", path=SYSTEM_PATH)
        assert (f"  ok       slurmctld                  {scontrol} (scontrol ping: Slurmctld(primary) at h0 is UP)  "
                "[cluster]") in up.stdout, up.stdout + up.stderr
        os.kill(int((cluster.base / "run" / "slurmctld.pid").read_text()), signal.SIGTERM)
        for _ in range(100):
            down = subprocess.run(cluster.inside(0, argv), env=env, capture_output=True, text=True, timeout=120)
            if "is DOWN" in down.stdout:
                break
            time.sleep(0.1)
        assert ("  MISSING  slurmctld                  needed by cluster (scontrol ping exit 1: Slurmctld(primary) at h0 "
                "is DOWN)") in down.stdout, down.stdout + down.stderr
        assert down.returncode == 1
    finally:
        cluster.down()


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


def test_doctor_names_what_the_sdc_clause_needs():
    # In process: the checked all_reduce's nccl-tests always, PyTorch for the seeded GEMM unless `gemm: false`
    def needed(extra: str) -> dict[str, list[str]]:
        contract = parse_contract(f"gpuaccept: 1\nvendor: V\ngpus: {{count: 8}}\nsdc: {{iterations: 20{extra}}}\n")
        return {need.name: need.clauses for need in needs(contract)}

    assert needed("")["all_reduce_perf"] == ["sdc"] and needed("")["torch"] == ["sdc"]
    assert "torch" not in needed(", gemm: false") and needed(", gemm: false")["all_reduce_perf"] == ["sdc"]
