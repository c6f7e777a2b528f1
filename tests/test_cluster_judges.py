"""cluster.nodes against nodes that answer for each other, or with yesterday's bundle."""

from __future__ import annotations

from pytest_gpuaccept.clauses.cluster import NODES, judge_node
from pytest_gpuaccept.cluster.engine import NodeState
from pytest_gpuaccept.cluster.run import _fresh
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.measurements import ClusterRun, NodeOutcome
from pytest_gpuaccept.subjects import Subject

CONTRACT = parse_contract("gpuaccept: 1\nvendor: V\ncluster:\n  engine: slurm\n  nodes: ['gpu[01-03]']\ngpus: {count: 2}\n")


def node(name: str, uuids: list[str], mode: str = "live") -> NodeOutcome:
    results = {"verdict": "accepted", "complete": True, "mode": mode, "checks": [{"outcome": "passed"}],
               "host": {"gpus": [{"uuid": u} for u in uuids]}}
    return NodeOutcome(NodeState(name, True, True, "IDLE", 2), f"nodes/{name}", results, None)


def judged(run: ClusterRun, name: str):
    return judge_node(CONTRACT.cluster, Subject.whole(name), run, CONTRACT)


def test_a_node_whose_bundle_names_another_nodes_gpus_fails_both():
    """A broken gpu02 hidden behind gpu01's bundle: the same GPU UUIDs come back twice."""
    run = ClusterRun("slurm", {"gpu01": node("gpu01", ["GPU-a", "GPU-b"]), "gpu02": node("gpu02", ["GPU-a", "GPU-b"]),
                               "gpu03": node("gpu03", ["GPU-c", "GPU-d"])}, ())
    assert judged(run, "gpu02").message == ("GPU UUIDs of gpu02 were also reported by gpu01: one bundle stands for "
                                            "two nodes")
    assert not judged(run, "gpu01").passed and judged(run, "gpu03").passed
    assert NODES.key == "cluster.nodes"


def test_recorded_or_replayed_nodes_are_not_compared_by_uuid():
    """A simulated run (one NVML recording for every node) says so in its mode; its UUIDs prove nothing."""
    run = ClusterRun("slurm", {"gpu01": node("gpu01", ["GPU-a"], "simulated"),
                               "gpu02": node("gpu02", ["GPU-a"], "simulated")}, ())
    assert judged(run, "gpu01").passed and judged(run, "gpu02").passed


def test_results_started_before_this_run_are_not_this_runs():
    assert _fresh("2026-11-30T10:00:00+00:00", "2026-11-30T10:05:00+00:00")  # a node's clock 5 min behind
    assert not _fresh("2026-11-29T10:00:00+00:00", "2026-11-30T10:00:00+00:00")  # yesterday's bundle
    assert not _fresh("", "2026-11-30T10:00:00+00:00")
