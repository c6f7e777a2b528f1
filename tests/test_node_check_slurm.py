"""node-check as a real Slurm runs it (netns_cluster.py: a head node and two nodes, each its own network namespace and
slurmd): `Prolog=` in slurm.conf runs node-check on the node a job lands on, against that node's simulated GPUs
(an NVML recording, a sysfs tree, a fake `nvidia-smi` printing real outputs). A node whose GPU lost an NVLink is
drained with the `[gpuaccept]` reason and its job does not run; once the link is back, `--undrain-if-pass`
resumes it; a node drained by someone else is never touched, whatever its GPUs say."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from builders import NODE_CHECK_CONTRACT, node_check_node, node_check_smi
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.probes.slurm import parse_scontrol_nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the cluster tests run a real Slurm cluster in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    base = tmp_path_factory.mktemp("prolog")
    nodes = base / "nodes"
    smi = node_check_smi(base / "bin" / "nvidia-smi", str(nodes))
    (base / "contract.yaml").write_text(NODE_CHECK_CONTRACT.format(smi=smi))
    for name in ("h1", "h2"):
        node_check_node(nodes / name)
    wrapper = base / "prolog.sh"
    # What an operator's Prolog wrapper does: the node's own sources (here its recording and sysfs tree), its name
    # from slurmd, a bundle per job; the line goes to a log (slurmd keeps a Prolog's output nowhere).
    wrapper.write_text(f"""#!/bin/sh
n="$SLURMD_NODENAME"
exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF="{base}/etc/slurm.conf" \\
  {sys.executable} -m pytest_gpuaccept node-check --contract {base}/contract.yaml --profile slurm-prolog --drain \\
  --node "$n" --gpuaccept-nvml "{nodes}/$n/nvml.json" --gpuaccept-sysfs "{nodes}/$n/sys" \\
  --out "{base}/bundles/$n-$SLURM_JOB_ID" >> "{base}/prolog-$n.log" 2>&1
""")
    wrapper.chmod(0o755)
    slurm = Cluster(base, 3, f"gn{os.getpid()}", 150 + os.getpid() % 50)
    try:
        slurm.up()
        with slurm.conf.open("a") as conf:
            conf.write(f"Prolog={wrapper}\n")
        slurm.scontrol("reconfigure")
        yield slurm
    finally:
        slurm.down()


def node(cluster: Cluster, name: str) -> tuple[tuple[str, ...], str | None]:
    found = parse_scontrol_nodes(cluster.scontrol("show", "node", name))[0]
    return found.states, found.reason


def until_drained(cluster: Cluster, name: str, timeout: float = 30.0) -> tuple[tuple[str, ...], str | None]:
    deadline = time.monotonic() + timeout
    while True:
        states, reason = node(cluster, name)
        if "DRAIN" in states or time.monotonic() > deadline:
            return states, reason
        time.sleep(0.2)


def job(cluster: Cluster, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cluster.inside(0, ["srun", "-w", name, "-N", "1", "-t", "1", "hostname"]),
                          capture_output=True, text=True, env=cluster.env(), timeout=90)


def node_check(cluster: Cluster, i: int, *flags: str) -> subprocess.CompletedProcess[str]:
    """node-check on h<i> itself (its namespace, its host name), as a HealthCheckProgram or an operator runs it."""
    nodes = cluster.base / "nodes" / f"h{i}"
    argv = [sys.executable, "-m", "pytest_gpuaccept", "node-check", "--contract", str(cluster.base / "contract.yaml"),
            "--profile", "slurm-healthcheck", "--node", f"h{i}", "--gpuaccept-nvml", str(nodes / "nvml.json"),
            "--gpuaccept-sysfs", str(nodes / "sys"), "--out", str(cluster.base / "bundles" / f"h{i}-{time.time_ns()}"),
            *flags]
    return subprocess.run(cluster.inside(i, argv), capture_output=True, text=True, env=cluster.env(), timeout=120)


def test_a_prolog_drains_the_node_whose_gpu_lost_a_link_and_resumes_it_once_the_link_is_back(cluster):
    nodes = cluster.base / "nodes"
    node_check_node(nodes / "h1", down={(3, 5)})  # GPU3's link 5 down, as NVML and `nvlink -s` both see it
    ran = job(cluster, "h1")
    assert ran.returncode != 0 and "h1" not in ran.stdout.split()  # the job never ran on the bad node
    states, reason = until_drained(cluster, "h1")
    assert "DRAIN" in states
    assert reason is not None and reason.startswith("[gpuaccept] nvlink GPU0-GPU3"), reason
    line = (cluster.base / "prolog-h1.log").read_text().splitlines()[-1]
    assert line.startswith("gpuaccept node-check h1: FAIL nvlink GPU0-GPU3: `topo -m` says NV18 between GPU0 and GPU3, "
                           "NVML says GPU0 has 18 and GPU3 17 active links (into an NVSwitch); bundle sha256:"), line
    assert "; drained h1: [gpuaccept] nvlink GPU0-GPU3" in line

    healthy = job(cluster, "h2")  # the Prolog passes on a good node: its job runs, the node stays in service
    assert healthy.returncode == 0 and healthy.stdout.split() == ["h2"], healthy.stderr
    assert "DRAIN" not in node(cluster, "h2")[0]
    assert (cluster.base / "prolog-h2.log").read_text().startswith("gpuaccept node-check h2: PASS ")

    still = node_check(cluster, 1, "--undrain-if-pass")  # the fault is still there: nothing resumed
    assert still.returncode == 1 and "DRAIN" in node(cluster, "h1")[0]

    node_check_node(nodes / "h1")  # the link is back
    back = node_check(cluster, 1, "--undrain-if-pass")
    assert back.returncode == 0, back.stdout + back.stderr
    assert back.stdout.rstrip().endswith("; resumed h1 (was drained by gpuaccept)"), back.stdout
    cluster.wait_idle()  # h1 idle again: Slurm schedules on it
    assert node(cluster, "h1") == (("IDLE",), None)


def test_a_node_drained_by_someone_else_is_never_touched(cluster):
    nodes = cluster.base / "nodes"
    cluster.scontrol("update", "nodename=h2", "state=drain", "reason=disk swap, ticket 4711")
    try:
        node_check_node(nodes / "h2", down={(0, 1)})
        failing = node_check(cluster, 2, "--drain")
        assert failing.returncode == 1
        assert "; not drained: already drained by someone else (reason 'disk swap, ticket 4711 [root@" in failing.stdout
        node_check_node(nodes / "h2")
        passing = node_check(cluster, 2, "--undrain-if-pass")
        assert passing.returncode == 0
        assert "; not resumed: drained by someone else (reason 'disk swap, ticket 4711 [root@" in passing.stdout
        states, reason = node(cluster, "h2")
        assert "DRAIN" in states and reason is not None and reason.startswith("disk swap, ticket 4711")
    finally:
        cluster.scontrol("update", "nodename=h2", "state=resume")
