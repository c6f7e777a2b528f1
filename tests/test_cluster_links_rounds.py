"""cluster.links at 150 nodes through the mpirun engine's launcher stand-in (tests/fleet_fakes.py): the links of a
round, 75 pairs, start at once, every server first and then every client, under one deadline; every healthy link
passes. Before, each client started a second after the one before it, inside one 65 s deadline: at 150 nodes 30 of
450 healthy links timed out and the run was rejected."""

from __future__ import annotations

import pytest
from fleet_fakes import login_run, stand_in_cluster

PER_NODE = 'gpuaccept: 1\nvendor: "Trial cluster"\ngpus: {count: 8, model: "H100"}\n'
LINKS = '  links: {iperf3: {min_throughput: "10 Gb/s", interfaces: [eth0], duration: "1 s"}}\n'


@pytest.fixture(scope="module")
def cluster150(tmp_path_factory):
    folder = tmp_path_factory.mktemp("links150")
    return folder, stand_in_cluster(folder, 150, PER_NODE, LINKS)


def test_at_150_nodes_every_healthy_link_passes_in_three_rounds_of_75_pairs_at_once(cluster150):
    folder, contract = cluster150
    code, results, out, _peak = login_run(folder, contract, timeout=600)
    assert code == 0, out[-3000:]
    links = {c["subject"]: c for c in results["checks"] if c["clause"] == "cluster.links"}
    assert len(links) == 450  # 3 rounds of 75 pairs, each both ways
    assert all(c["outcome"] == "passed" and c["measured"] == 13.089 for c in links.values()), \
        [c["message"] for c in links.values() if c["outcome"] != "passed"][:5]
    rounds = sorted(c["details"]["round"] for c in links.values())
    assert rounds == [1] * 150 + [2] * 150 + [3] * 150
    assert results["verdict"] == "accepted"
