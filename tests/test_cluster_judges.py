"""cluster.nodes against nodes that answer for each other, or with yesterday's bundle."""

from __future__ import annotations

import pytest

from pytest_gpuaccept.clauses import registry
from pytest_gpuaccept.clauses.cluster import NODES, SECTION, judge_node
from pytest_gpuaccept.cluster.engine import NodeState, own_expansion
from pytest_gpuaccept.cluster.run import Expansion, _fresh
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.measurements import ClusterRun, NodeOutcome
from pytest_gpuaccept.subjects import Subject

CONTRACT = parse_contract("gpuaccept: 1\nvendor: V\ncluster:\n  engine: slurm\n  nodes: ['gpu[01-03]']\ngpus: {count: 2}\n")


def node(name: str, uuids: list[str], mode: str = "live") -> NodeOutcome:
    results = {"verdict": "accepted", "complete": True, "mode": mode, "checks": [{"outcome": "passed"}],
               "host": {"gpus": [{"uuid": u} for u in uuids]}}
    return NodeOutcome(NodeState(name, True, True, "IDLE", 2), f"nodes/{name}", results, None)


def judged(run: ClusterRun, name: str):
    return judge_node(SECTION.of(CONTRACT), Subject.whole(name), run, CONTRACT)


def test_a_node_whose_bundle_names_another_nodes_gpus_fails_both():
    """A broken gpu02 hidden behind gpu01's bundle: the same GPU UUIDs come back twice."""
    run = ClusterRun("slurm", {"gpu01": node("gpu01", ["GPU-a", "GPU-b"]), "gpu02": node("gpu02", ["GPU-a", "GPU-b"]),
                               "gpu03": node("gpu03", ["GPU-c", "GPU-d"])}, ())
    assert judged(run, "gpu02").message == ("GPU UUIDs of gpu02 were also reported by gpu01 (2 shared, e.g. GPU-a): "
                                            "one bundle stands for two nodes")
    assert not judged(run, "gpu01").passed and judged(run, "gpu03").passed
    assert NODES.key == "cluster.nodes"


def test_two_simulated_nodes_with_one_gpus_uuid_fail_both():
    """UUIDs are unique across a cluster in a simulated run too: one GPU's UUID on two nodes is refused, and the
    message says how a simulated cluster gives each node GPUs of its own."""
    run = ClusterRun("slurm", {"gpu01": node("gpu01", ["GPU-a", "GPU-b"], "simulated"),
                               "gpu02": node("gpu02", ["GPU-c", "GPU-a"], "simulated"),
                               "gpu03": node("gpu03", ["GPU-d", "GPU-e"], "simulated")}, ())
    check = judged(run, "gpu02")
    assert (check.clause, check.outcome.value) == ("cluster.nodes", "failed")
    assert check.message == ("GPU UUIDs of gpu02 were also reported by gpu01 (1 shared, e.g. GPU-a): a simulated run: "
                             "the nodes read one NVML recording (give each node its own, docs/cluster.md)")
    assert not judged(run, "gpu01").passed and judged(run, "gpu03").passed


def test_a_scheduler_that_shrinks_the_node_list_fails_every_node_it_left_out_naming_both_lists():
    """`scontrol show hostnames gpu[01-16]` printing four names: the plugin's own expansion has sixteen. The
    twelve the scheduler left out are judged (failed, never silently dropped), the four both name are run."""
    listed = Expansion(("gpu[01-16]",), tuple(own_expansion(("gpu[01-16]",))), ("gpu01", "gpu02", "gpu03", "gpu04"))
    assert listed.names == [f"gpu{n:02d}" for n in range(1, 17)]
    assert listed.differs("gpu03") is None
    why = listed.differs("gpu07")
    assert why == ("gpu07 is missing from the scheduler's node list: the plugin expands the contract's gpu[01-16] to 16 "
                   "nodes (gpu01, gpu02, gpu03, gpu04, gpu05, gpu06, gpu07, gpu08 and 8 more); the scheduler's `scontrol "
                   "show hostnames` printed 4 nodes (gpu01, gpu02, gpu03, gpu04)")
    run = ClusterRun("slurm", {"gpu01": node("gpu01", ["GPU-a"]),
                               "gpu07": NodeOutcome(NodeState("gpu07", False, False, "not in both node lists", None, why),
                                                    "nodes/gpu07", None, "not run")}, ())
    check = judged(run, "gpu07")
    assert (check.outcome.value, check.measured, check.message) == ("failed", "not in both node lists", why)
    extra = Expansion(("gpu[01-02]",), ("gpu01", "gpu02"), ("gpu01", "gpu02", "gpu99"))
    assert extra.names == ["gpu01", "gpu02", "gpu99"]
    assert extra.differs("gpu99") == ("gpu99 is in the scheduler's node list but not the contract's: the scheduler's "
                                        "`scontrol show hostnames` printed 3 nodes (gpu01, gpu02, gpu99); the plugin "
                                        "expands the contract's gpu[01-02] to 2 nodes (gpu01, gpu02)")
    assert Expansion(("h[1-2]",), ("h1", "h2"), None).differs("h1") is None  # mpirun: the plugin's list alone


def test_results_started_before_this_run_are_not_this_runs():
    assert _fresh("2026-11-30T10:00:00+00:00", "2026-11-30T10:05:00+00:00")  # a node's clock 5 min behind
    assert not _fresh("2026-11-29T10:00:00+00:00", "2026-11-30T10:00:00+00:00")  # yesterday's bundle
    assert not _fresh("", "2026-11-30T10:00:00+00:00")


def test_links_name_their_interfaces_and_rdma_links_are_refused_before_anything_runs():
    base = "gpuaccept: 1\nvendor: V\ncluster:\n  engine: slurm\n  nodes: ['gpu[01-03]']\n"
    with_nics = parse_contract(base + "  links: {iperf3: {min_throughput: '90 Gb/s'}}\n"
                               "nics: {interfaces: [ens6f0, 'ib*'], min_speed: '100 Gb/s'}\n")
    subjects = [str(s) for s in registry.BY_KEY["cluster.links"].subjects(
        with_nics, lambda: {"cluster_nodes": ["gpu01", "gpu02"]})]
    assert subjects == ["gpu01:ens6f0->gpu02:ens6f0", "gpu02:ens6f0->gpu01:ens6f0"]  # the exact names, both ways
    with pytest.raises(ContractError) as refused:
        parse_contract(base + "  links: {iperf3: {min_throughput: '90 Gb/s'}}\n", "c.yaml")
    assert refused.value.problems == ["c.yaml:3: cluster.links.iperf3.interfaces: missing: name the interfaces (exact "
                                      "names), or give a nics section with exact names"]
    with pytest.raises(ContractError) as refused:  # cluster.links.rdma is measured: its devices are required
        parse_contract(base + "  links: {rdma: {min_fraction_of_line_rate: 0.9}}\n", "c.yaml")
    assert refused.value.problems == ["c.yaml:6: cluster.links: cluster.links.rdma (line 6): cluster.links.rdma.devices: "
                                      "missing: this key is required"]
