"""Cluster handover through a real cluster (netns_cluster.py: a head node and four nodes, each its own
network namespace, slurmd and sshd): the login node's run reaches every node through srun (engine: slurm)
or mpirun over ssh (engine: mpirun), each node's bundle comes back through the launcher's output, and one
report and one results file judge the cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from builders import node_recordings
from conftest import pci_tree
from fleet_fakes import write_fleet_bin
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.cluster.engine import Mpirun, Slurm, launch
from pytest_gpuaccept.probes._run import ToolRunner

LINKS = '  links: {iperf3: {min_throughput: "100 Mb/s", interfaces: [eth0], duration: "1 s"}}\n'
LINE_RATE = "200mbit"
CONTRACT = """\
gpuaccept: 1
vendor: "Trial cluster"
tools: {timeout: "90 s"}
cluster:
  engine: slurm
  nodes: ["h[1-4]"]
  pairs: {min_busbw: "200 GB/s", max_bytes: "16 GiB"}
  allreduce: {min_busbw: "200 GB/s", max_bytes: "16 GiB"}
gpus:
  count: 8
  model: "H100"
"""
# cluster.links where a test is about links (about 20 s more a run): the rest without.
WITH_LINKS = CONTRACT.replace("gpus:\n", LINKS + "gpus:\n")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the cluster tests run a real Slurm cluster in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    net = 100 + os.getpid() % 100
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), 5, f"ga{os.getpid()}", net)
    try:
        cluster.up()
        for i in range(1, cluster.size):
            cluster.shape(i, LINE_RATE)  # every node's line rate known: the fake all_reduce scales by it
        cluster.start_iperf3_servers()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def sysfs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sys")
    pci_tree(root)
    return root


@pytest.fixture(scope="module")
def recording(slurm, tmp_path_factory):
    return node_recordings(tmp_path_factory.mktemp("nvml"), [*slurm.nodes, *(slurm.address(i) for i in range(1, 5))])


@pytest.fixture(scope="module")
def fleet_bin(tmp_path_factory):
    return write_fleet_bin(tmp_path_factory.mktemp("fleet-bin"))


@pytest.fixture(scope="module")
def ssh_config(slurm):
    return slurm.start_sshd()


def mpirun_contract(cluster: Cluster) -> str:
    """The same cluster, reached with plain mpirun over ssh: nodes by address, as a host list gives them."""
    return CONTRACT.replace("engine: slurm", "engine: mpirun").replace(
        'nodes: ["h[1-4]"]', f'nodes: ["10.{cluster.net}.0.[2-5]"]')


def mpirun_env(ssh_config: Path) -> dict[str, str]:
    return {"OMPI_MCA_plm_rsh_agent": f"ssh -F {ssh_config}", "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def login_run(cluster: Cluster, folder: Path, contract: str, *args: str, path: Path | None = None,
              extra_env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """`pytest --contract=cluster.yaml` on the login node h0, as a user would start it there (the fake
    all_reduce_perf first on PATH, which srun gives every rank)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cluster.yaml").write_text(contract)
    argv = cluster.inside(0, [sys.executable, "-m", "pytest", "--contract=cluster.yaml", "-p", "no:cacheprovider",
                              "-q", *args])
    env = {**cluster.env(), **(extra_env or {})}
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env, timeout=240)
    results = json.loads((folder / "gpuaccept-results.json").read_text())
    return done.returncode, results, done.stdout + done.stderr


def by_clause(results: dict, clause: str) -> dict[str, dict]:
    return {c["subject"]: c for c in results["checks"] if c["clause"] == clause}


def test_an_all_good_cluster_is_accepted_with_every_node_and_pair_judged(slurm, recording, sysfs, fleet_bin, tmp_path):
    code, results, out = login_run(slurm, tmp_path / "run", WITH_LINKS, f"--gpuaccept-nvml={recording}",
                                   f"--gpuaccept-sysfs={sysfs}", path=fleet_bin)
    assert code == 0, out[-3000:]
    assert results["verdict"] == "accepted" and results["complete"]
    nodes = by_clause(results, "cluster.nodes")
    assert sorted(nodes) == ["h1", "h2", "h3", "h4"]  # the scheduler's names, expanded by Slurm
    assert nodes["h2"]["message"].startswith("IDLE, 8 GPUs in Gres; results returned: the node's own checks ACCEPTED")
    assert [h["name"] for h in results["hosts"]] == ["h1", "h2", "h3", "h4"]
    assert all(h["verdict"] == "accepted" and len(h["identity"]["gpus"]) == 8 for h in results["hosts"])
    # Each node read its own recording (h100.<node>.json beside the login node's): its GPUs' UUIDs are its own.
    assert all(g["uuid"].startswith(f"GPU-{h['name']}-") for h in results["hosts"] for g in h["identity"]["gpus"])
    per_node = [c for c in results["checks"] if c.get("node") == "h3"]
    assert {c["clause"] for c in per_node} >= {"gpus.count", "gpus.model", "gpus.identity"}
    assert "h3/GPU5" in {c["subject"] for c in per_node}
    # Each node's bundle came back through srun's output, and one manifest covers the cluster's bundle.
    evidence = tmp_path / "run" / "gpuaccept-evidence"
    own = json.loads((evidence / "nodes" / "h4" / "gpuaccept-results.json").read_text())
    assert own["cluster_node"] == "h4"  # a node's own results never pass for the cluster's verdict
    assert (evidence / "nodes" / "h4" / "pytest-output.txt").read_text().rstrip().endswith(
        "[NODE h4 of a cluster contract: its own sections only, not the cluster's verdict]")
    verified = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "verify", str(tmp_path / "run")],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout
    page = (tmp_path / "run" / "gpuaccept-report.html").read_text()
    assert "<h3>Nodes (4: 0 with checks that did not pass)</h3>" in page
    assert '<a href="gpuaccept-evidence/nodes/h2/gpuaccept-report.html">h2</a>' in page  # each node's own report
    assert "cluster.pairs (GB/s; each pair in both cells)" in page  # the pairs' heat map, a row of Pairs
    assert 'title="h1->h2: passed"' in page and "cluster.links (Gb/s; row: from, column: to)" in page
    assert 'title="h4:eth0->h3:eth0: passed"' in page
    # The cluster's bundle replays anywhere (no cluster needed): the same verdict from the same evidence.
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "cluster.yaml").write_text(WITH_LINKS)
    done = subprocess.run([sys.executable, "-m", "pytest", "--contract=cluster.yaml", f"--gpuaccept-replay={tmp_path / 'run'}",
                           "-p", "no:cacheprovider", "-q"], cwd=replay, capture_output=True, text=True, timeout=120)
    replayed = json.loads((replay / "gpuaccept-results.json").read_text())
    assert done.returncode == 0 and replayed["mode"] == "replay" and replayed["verdict"] == "accepted"
    assert len(replayed["checks"]) == len(results["checks"]) and len(replayed["hosts"]) == 4
    pairs = by_clause(results, "cluster.pairs")
    assert sorted(pairs) == ["h1+h2", "h1+h3", "h1+h4", "h2+h3", "h2+h4", "h3+h4"]
    assert sorted(p["details"]["round"] for p in pairs.values()) == [1, 1, 2, 2, 3, 3]  # 3 rounds of 2 pairs at once
    # 469 GB/s recorded, scaled by what a 1 s iperf3 carried of the 200 Mbit/s line rate (on a loaded 2-core
    # machine 60-95 % of it, slow start included): the threshold, 43 %, leaves room; a node at a tenth is far below.
    assert all(p["outcome"] == "passed" and 200 <= p["measured"] < 469.21 for p in pairs.values()), pairs
    assert "(round" in pairs["h1+h4"]["message"] and "NCCL_ALGO=Ring" in pairs["h1+h4"]["message"]
    whole = by_clause(results, "cluster.allreduce")["cluster"]
    assert whole["outcome"] == "passed" and whole["message"].endswith(" over 4 nodes x 8 GPUs"), whole
    links = by_clause(results, "cluster.links")
    assert len(links) == 12 and "h1:eth0->h2:eth0" in links and "h2:eth0->h1:eth0" in links  # 6 pairs, both ways
    assert all(c["outcome"] == "passed" and 0.1 <= c["measured"] <= 0.2 for c in links.values()), links
    assert f"({slurm.address(1)} -> {slurm.address(2)})" in links["h1:eth0->h2:eth0"]["message"]


def test_a_slow_node_is_blamed_and_every_pair_with_it_fails_while_the_others_pass(slurm, recording, sysfs, fleet_bin, tmp_path):
    slurm.shape(3, "20mbit")
    try:
        code, results, out = login_run(slurm, tmp_path / "run", WITH_LINKS, f"--gpuaccept-nvml={recording}",
                                       f"--gpuaccept-sysfs={sysfs}", path=fleet_bin)
    finally:
        slurm.shape(3, LINE_RATE)
    assert code == 1, out[-3000:]
    pairs = by_clause(results, "cluster.pairs")
    with_h3 = {name for name in pairs if "h3" in name.split("+")}
    assert {name for name, p in pairs.items() if p["outcome"] == "failed"} == with_h3, pairs
    for name in with_h3:
        assert pairs[name]["measured"] < 100 and pairs[name]["message"].endswith("; node h3 fails with most partners")
    assert all(p["outcome"] == "passed" for name, p in pairs.items() if name not in with_h3)
    assert by_clause(results, "cluster.allreduce")["cluster"]["outcome"] == "failed"  # the slowest link bounds it
    links = by_clause(results, "cluster.links")
    assert {n for n, c in links.items() if c["outcome"] != "passed"} == {n for n in links if n.startswith("h3:")}
    # The slow node's own checks (one host, no network) still pass: the pairs put the blame where it is.
    assert all(c["outcome"] == "passed" for c in by_clause(results, "cluster.nodes").values())


def test_a_one_way_link_fault_names_that_link_and_both_nodes_pass_their_own_checks(slurm, recording, sysfs, fleet_bin, tmp_path):
    """h1 sends to h2 at a tenth of the line rate; h2 to h1, and h1 to every other node, at the full rate."""
    slurm.shape_link(1, 2, "20mbit", LINE_RATE)
    try:
        code, results, out = login_run(slurm, tmp_path / "run", WITH_LINKS, f"--gpuaccept-nvml={recording}",
                                       f"--gpuaccept-sysfs={sysfs}", path=fleet_bin)
    finally:
        slurm.shape(1, LINE_RATE)
    assert code == 1, out[-3000:]
    pairs = by_clause(results, "cluster.pairs")
    assert [n for n, p in pairs.items() if p["outcome"] != "passed"] == ["h1+h2"], pairs
    assert pairs["h1+h2"]["message"].endswith(
        "; the link between h1 and h2: both nodes pass with every other partner")
    links = by_clause(results, "cluster.links")
    assert [n for n, c in links.items() if c["outcome"] != "passed"] == ["h1:eth0->h2:eth0"], links
    assert links["h1:eth0->h2:eth0"]["measured"] < 0.05 and links["h2:eth0->h1:eth0"]["measured"] >= 0.1
    nodes = by_clause(results, "cluster.nodes")
    assert nodes["h1"]["outcome"] == nodes["h2"]["outcome"] == "passed"
    assert all(c["outcome"] == "passed" for c in results["checks"] if c.get("node") in ("h1", "h2"))


def test_a_node_whose_slurmd_stopped_fails_and_the_run_still_ends_with_one_report(slurm, recording, sysfs, fleet_bin, tmp_path):
    slurm.stop_slurmd(3)
    try:
        code, results, out = login_run(slurm, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={recording}",
                                       f"--gpuaccept-sysfs={sysfs}", path=fleet_bin)
    finally:
        slurm.start_slurmd(3)
        slurm.wait_idle(120.0)  # the job that found h3's slurmd gone completes once it is back
    assert code == 1, out[-3000:]
    assert results["verdict"] == "rejected" and (tmp_path / "run" / "gpuaccept-report.html").is_file()
    nodes = by_clause(results, "cluster.nodes")
    assert nodes["h3"]["outcome"] == "failed", nodes["h3"]
    assert "returned no bundle" in nodes["h3"]["message"] or "not run" in nodes["h3"]["message"]
    assert all(nodes[n]["outcome"] == "passed" for n in ("h1", "h2", "h4"))
    assert next(h for h in results["hosts"] if h["name"] == "h3")["verdict"] == "rejected"
    pairs = by_clause(results, "cluster.pairs")
    assert {n for n, p in pairs.items() if p["outcome"] == "not_measured"} == {"h1+h3", "h2+h3", "h3+h4"}
    assert pairs["h1+h3"]["message"].startswith("not measured: not run: h3 (its own run: ")
    assert all(pairs[n]["outcome"] == "passed" for n in ("h1+h2", "h1+h4", "h2+h4"))
    whole = by_clause(results, "cluster.allreduce")["cluster"]
    assert whole["outcome"] == "failed" and whole["message"].startswith("not the whole cluster: h3 (its own run: ")
    assert whole["measured"] >= 200  # measured over the three others, as information


def test_a_drained_node_is_failed_with_the_schedulers_reason_and_never_waited_for(slurm, recording, sysfs, tmp_path):
    slurm.scontrol("update", "nodename=h2", "state=drain", "reason=bad_dimm")
    try:
        code, results, out = login_run(slurm, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={recording}",
                                       f"--gpuaccept-sysfs={sysfs}")
    finally:
        slurm.scontrol("update", "nodename=h2", "state=resume")
        slurm.wait_idle()
    nodes = by_clause(results, "cluster.nodes")
    assert code == 1 and nodes["h2"]["outcome"] == "failed"
    assert nodes["h2"]["measured"].startswith("IDLE+DRAIN") or "DRAIN" in nodes["h2"]["measured"]
    assert nodes["h2"]["message"].startswith("the scheduler has h2 IDLE+DRAIN (bad_dimm [root@")
    assert nodes["h2"]["message"].endswith("]; DRAIN: drained or draining: accepts no new jobs): not run, not waited for")
    assert not (tmp_path / "run" / "gpuaccept-evidence" / "nodes" / "h2").exists()
    assert [c for c in results["checks"] if c.get("node") == "h2"] == []


def test_a_node_offering_fewer_gpus_than_the_contract_fails(slurm, recording, sysfs, tmp_path):
    contract = CONTRACT.replace("count: 8", "count: 16")
    code, results, out = login_run(slurm, tmp_path / "run", contract, f"--gpuaccept-nvml={recording}",
                                   f"--gpuaccept-sysfs={sysfs}")
    nodes = by_clause(results, "cluster.nodes")
    assert code == 1
    assert nodes["h1"]["message"] == "the scheduler offers 8 GPUs on h1 (Gres), the contract 16"


# Only what the node list is about: no pairs, all_reduce or links (each about 20 s more).
NODES_ONLY = CONTRACT.replace('  pairs: {min_busbw: "200 GB/s", max_bytes: "16 GiB"}\n', "").replace(
    '  allreduce: {min_busbw: "200 GB/s", max_bytes: "16 GiB"}\n', "")


def test_a_scheduler_that_shrinks_the_node_list_fails_the_nodes_it_left_out_naming_both_lists(slurm, recording, sysfs,
                                                                                             tmp_path):
    """A scontrol whose `show hostnames` prints h1 and h2 for the contract's h[1-4] (the rest of Slurm is real):
    h3 and h4 are judged and fail, naming the plugin's expansion and the scheduler's; the two others run and pass."""
    fake = tmp_path / "fake-scontrol"
    fake.mkdir()
    real = shutil.which("scontrol")
    (fake / "scontrol").write_text('#!/bin/sh\nif [ "$1 $2" = "show hostnames" ]; then printf "h1\\nh2\\n"; exit 0; fi\n'
                                   f'exec {real} "$@"\n')
    (fake / "scontrol").chmod(0o755)
    code, results, out = login_run(slurm, tmp_path / "run", NODES_ONLY, f"--gpuaccept-nvml={recording}",
                                   f"--gpuaccept-sysfs={sysfs}", path=fake)
    assert code == 1, out[-3000:]
    nodes = by_clause(results, "cluster.nodes")
    assert sorted(nodes) == ["h1", "h2", "h3", "h4"]  # the contract's nodes, every one judged
    assert nodes["h1"]["outcome"] == nodes["h2"]["outcome"] == "passed"
    assert (nodes["h3"]["outcome"], nodes["h3"]["measured"]) == ("failed", "not in both node lists")
    assert nodes["h3"]["message"] == ("h3 is missing from the scheduler's node list: the plugin expands the contract's "
                                      "h[1-4] to 4 nodes (h1, h2, h3, h4); the scheduler's `scontrol show hostnames` "
                                      "printed 2 nodes (h1, h2)")
    assert nodes["h4"]["outcome"] == "failed"
    assert not (tmp_path / "run" / "gpuaccept-evidence" / "nodes" / "h3").exists()  # never run
    assert results["verdict"] == "rejected"


def test_two_nodes_with_one_gpus_uuids_are_both_refused(slurm, sysfs, tmp_path):
    """h3 reads h2's recording: two nodes report the same eight GPUs. UUIDs are unique across a cluster, in a
    simulated run too: both fail cluster.nodes, naming each other; h1 and h4 pass."""
    shared = node_recordings(tmp_path / "nvml", slurm.nodes, same={"h3": "h2"})
    code, results, out = login_run(slurm, tmp_path / "run", NODES_ONLY, f"--gpuaccept-nvml={shared}",
                                   f"--gpuaccept-sysfs={sysfs}")
    assert code == 1, out[-3000:]
    nodes = by_clause(results, "cluster.nodes")
    assert nodes["h1"]["outcome"] == nodes["h4"]["outcome"] == "passed"
    assert nodes["h3"]["outcome"] == nodes["h2"]["outcome"] == "failed"
    assert nodes["h3"]["message"] == ("GPU UUIDs of h3 were also reported by h2 (8 shared, e.g. "
                                      "GPU-h2-00aaaaaaa-0000-0000-0000-000000000000): a simulated run: the nodes read "
                                      "one NVML recording (give each node its own, docs/cluster.md)")
    assert nodes["h2"]["message"].startswith("GPU UUIDs of h2 were also reported by h3 (8 shared")


def test_mpirun_over_ssh_an_all_good_cluster_is_accepted(slurm, recording, sysfs, fleet_bin, ssh_config, tmp_path):
    code, results, out = login_run(slurm, tmp_path / "run", mpirun_contract(slurm), f"--gpuaccept-nvml={recording}",
                                   f"--gpuaccept-sysfs={sysfs}", path=fleet_bin, extra_env=mpirun_env(ssh_config))
    assert code == 0, out[-3000:]
    nodes = by_clause(results, "cluster.nodes")
    addresses = [slurm.address(i) for i in range(1, 5)]
    assert sorted(nodes) == addresses  # the host names as given (expanded here: no scheduler)
    assert nodes[addresses[0]]["message"].startswith("listed (no scheduler: reached over ssh); results returned")
    assert all(h["verdict"] == "accepted" for h in results["hosts"])
    pairs = by_clause(results, "cluster.pairs")
    assert len(pairs) == 6 and all(p["outcome"] == "passed" for p in pairs.values()), pairs
    assert any("mpirun" in str(t.get("tool")) for t in results["tools"])


def test_mpirun_over_ssh_a_slow_node_is_blamed(slurm, recording, sysfs, fleet_bin, ssh_config, tmp_path):
    slurm.shape(3, "20mbit")
    try:
        code, results, out = login_run(slurm, tmp_path / "run", mpirun_contract(slurm),
                                       f"--gpuaccept-nvml={recording}", f"--gpuaccept-sysfs={sysfs}", path=fleet_bin,
                                       extra_env=mpirun_env(ssh_config))
    finally:
        slurm.shape(3, LINE_RATE)
    slow = slurm.address(3)
    pairs = by_clause(results, "cluster.pairs")
    assert code == 1
    # Every node's own run came back (a launcher that failed leaves its pairs not measured, blamed on no one).
    assert {n: c["outcome"] for n, c in by_clause(results, "cluster.nodes").items()} == \
        {slurm.address(i): "passed" for i in range(1, 5)}
    assert {n for n, p in pairs.items() if p["outcome"] == "failed"} == {n for n in pairs if slow in n.split("+")}
    assert all(p["message"].endswith(f"; node {slow} fails with most partners") for p in pairs.values()
               if p["outcome"] == "failed")


def test_each_mpirun_the_engine_starts_keeps_its_session_in_a_tmpdir_of_its_own(tmp_path, monkeypatch):
    """Open MPI 4's mpirun keeps its session under $TMPDIR/ompi.<host>.<uid>; of several started at once on one
    login node, one exiting removed that folder while another made it ("orte_session_dir failed", a node's run
    lost in CI). Each mpirun the engine starts now has a TMPDIR of its own, gone once it has exited; a local rank
    inherits mpirun's environment, so the real mpirun shows here where its session was."""
    if shutil.which("mpirun") is None:
        pytest.fail("this test runs the real mpirun (Open MPI): ./test.sh installs it", pytrace=False)
    for name in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        monkeypatch.setenv(name, "1")
    engine = Mpirun()
    runner = ToolRunner(tmp_path / "evidence", shared=False)
    look = ["sh", "-c", 'echo "$TMPDIR"; ls "$TMPDIR"']
    runs = runner.run_together([launch(engine, engine.on_node("localhost", look), f"look-{n}") for n in range(4)],
                               timeout_s=60)
    assert all(r.failure is None for r in runs), [r.stderr[-500:] for r in runs]
    folders = [r.stdout.splitlines()[0] for r in runs]
    assert len(set(folders)) == 4
    assert all(Path(f).parent == Path(tempfile.gettempdir()) and Path(f).name.startswith("gpuaccept-tmp-")
               for f in folders)
    assert all(r.stdout.splitlines()[1:] == [f"ompi.{os.uname().nodename}.{os.getuid()}"] for r in runs), \
        [r.stdout for r in runs]
    assert not any(Path(f).exists() for f in folders)
    # srun hands its whole environment to the job: a login node's folder must not be named on the nodes.
    assert not launch(Slurm(), Slurm().on_node("h1", look), "look").own_tmpdir
