"""Cluster handover through a real Slurm cluster (netns_cluster.py: a head node and four nodes, each its own
network namespace and slurmd): the login node's run reaches every node through srun, each node's bundle
comes back through srun's output, and one report and one results file judge the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, pci_tree
from netns_cluster import Cluster, missing_tools

RECORDING = DATA / "nvml" / "h100_sxm5_8gpu.json"
CONTRACT = """\
gpuaccept: 1
vendor: "Trial cluster"
cluster:
  engine: slurm
  nodes: ["h[1-4]"]
gpus:
  count: 8
  model: "H100"
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the cluster tests run a real Slurm cluster in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    net = 100 + os.getpid() % 100
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), 5, f"ga{os.getpid()}", net)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def sysfs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sys")
    pci_tree(root)
    return root


def login_run(cluster: Cluster, folder: Path, contract: str, *args: str) -> tuple[int, dict, str]:
    """`pytest --contract=cluster.yaml` on the login node h0, as a user would start it there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cluster.yaml").write_text(contract)
    argv = cluster.inside(0, [sys.executable, "-m", "pytest", "--contract=cluster.yaml", "-p", "no:cacheprovider",
                              "-q", *args])
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=cluster.env(), timeout=300)
    results = json.loads((folder / "gpuaccept-results.json").read_text())
    return done.returncode, results, done.stdout + done.stderr


def by_clause(results: dict, clause: str) -> dict[str, dict]:
    return {c["subject"]: c for c in results["checks"] if c["clause"] == clause}


def test_an_all_good_cluster_is_accepted_with_every_node_judged(slurm, sysfs, tmp_path):
    code, results, out = login_run(slurm, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={RECORDING}",
                                   f"--gpuaccept-sysfs={sysfs}")
    assert code == 0, out[-3000:]
    assert results["verdict"] == "accepted" and results["complete"]
    nodes = by_clause(results, "cluster.nodes")
    assert sorted(nodes) == ["h1", "h2", "h3", "h4"]  # the scheduler's names, expanded by Slurm
    assert nodes["h2"]["message"].startswith("IDLE, 8 GPUs in Gres; results returned: the node's own checks ACCEPTED")
    assert [h["name"] for h in results["hosts"]] == ["h1", "h2", "h3", "h4"]
    assert all(h["verdict"] == "accepted" and len(h["identity"]["gpus"]) == 8 for h in results["hosts"])
    per_node = [c for c in results["checks"] if c.get("node") == "h3"]
    assert {c["clause"] for c in per_node} >= {"gpus.count", "gpus.model", "gpus.identity"}
    assert "h3/GPU5" in {c["subject"] for c in per_node}
    # Each node's bundle came back through srun's output, and one manifest covers the cluster's bundle.
    evidence = tmp_path / "run" / "gpuaccept-evidence"
    assert (evidence / "nodes" / "h4" / "gpuaccept-results.json").is_file()
    verified = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "verify", str(tmp_path / "run")],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout
    page = (tmp_path / "run" / "gpuaccept-report.html").read_text()
    assert "<h3>Nodes (4: 0 with checks that did not pass)</h3>" in page


def test_a_node_whose_slurmd_stopped_fails_and_the_run_still_ends_with_one_report(slurm, sysfs, tmp_path):
    slurm.stop_slurmd(3)
    try:
        code, results, out = login_run(slurm, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={RECORDING}",
                                       f"--gpuaccept-sysfs={sysfs}")
    finally:
        slurm.start_slurmd(3)
        slurm.wait_idle()
    assert code == 1, out[-3000:]
    assert results["verdict"] == "rejected" and (tmp_path / "run" / "gpuaccept-report.html").is_file()
    nodes = by_clause(results, "cluster.nodes")
    assert nodes["h3"]["outcome"] == "failed", nodes["h3"]
    assert "returned no bundle" in nodes["h3"]["message"] or "not run" in nodes["h3"]["message"]
    assert all(nodes[n]["outcome"] == "passed" for n in ("h1", "h2", "h4"))
    assert next(h for h in results["hosts"] if h["name"] == "h3")["verdict"] == "rejected"


def test_a_drained_node_is_failed_with_the_schedulers_reason_and_never_waited_for(slurm, sysfs, tmp_path):
    slurm.scontrol("update", "nodename=h2", "state=drain", "reason=bad_dimm")
    try:
        code, results, out = login_run(slurm, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={RECORDING}",
                                       f"--gpuaccept-sysfs={sysfs}")
    finally:
        slurm.scontrol("update", "nodename=h2", "state=resume")
        slurm.wait_idle()
    nodes = by_clause(results, "cluster.nodes")
    assert code == 1 and nodes["h2"]["outcome"] == "failed"
    assert nodes["h2"]["measured"].startswith("IDLE+DRAIN") or "DRAIN" in nodes["h2"]["measured"]
    assert nodes["h2"]["message"].startswith("the scheduler has h2 IDLE+DRAIN (bad_dimm [root@")
    assert nodes["h2"]["message"].endswith("]): not run, not waited for")
    assert not (tmp_path / "run" / "gpuaccept-evidence" / "nodes" / "h2").exists()
    assert [c for c in results["checks"] if c.get("node") == "h2"] == []


def test_a_node_offering_fewer_gpus_than_the_contract_fails(slurm, sysfs, tmp_path):
    contract = CONTRACT.replace("count: 8", "count: 16")
    code, results, out = login_run(slurm, tmp_path / "run", contract, f"--gpuaccept-nvml={RECORDING}",
                                   f"--gpuaccept-sysfs={sysfs}")
    nodes = by_clause(results, "cluster.nodes")
    assert code == 1
    assert nodes["h1"]["message"] == "the scheduler offers 8 GPUs on h1 (Gres), the contract 16"
