"""`cluster.links` through `engine: kubernetes`: node to node in pods on the nodes' own network (`hostNetwork`), through
the stand-in kubectl (kubectl_standin.py) whose pods run in the network namespaces of netns_cluster.py's nodes. A
healthy link passes, a degraded one (its node's egress shaped) fails, each direction its own check; every pod the
engine applied validates against the API's schema and asks for the contract's RDMA resource."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
from kubectl_standin import StandIn, gpu_node, write_image
from netns_cluster import Cluster, missing_tools
from netns_fabric import STANDIN, Fabric
from netns_fabric import missing_tools as fabric_missing

from pytest_gpuaccept import doctor
from pytest_gpuaccept.clauses import cluster
from pytest_gpuaccept.cluster.base import NodeState
from pytest_gpuaccept.cluster.kubernetes import GPU, START_GATE_S, Kubernetes, KubernetesKeys, in_pod, pod_manifest
from pytest_gpuaccept.cluster.run import run_links, run_rdma_links
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.measurements import ClusterRun, NodeOutcome
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.state import State
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Outcome

DIGEST = "5f0c3b6f1d2a8e4c9b7a6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a"
IMAGE = f"registry.example/gpuaccept:0.1@sha256:{DIGEST}"
RDMA = "rdma/rdma_shared_device_a"
LINE_RATE = "200mbit"
CONTRACT = f"""\
gpuaccept: 1
vendor: "Trial cluster on Kubernetes"
cluster:
  engine: kubernetes
  nodes: ["h[1-2]"]
  kubernetes: {{context: trial, namespace: gpuaccept, image: "{IMAGE}", rdma_resource: "{RDMA}"}}
  links: {{iperf3: {{min_throughput: "150 Mb/s", interfaces: [eth0], duration: "1 s", port: 5401}}}}
gpus: {{count: 8}}
"""


def test_links_through_kubernetes_are_in_the_format_and_rdma_needs_the_devices():
    section = cluster.SECTION.of(parse_contract(CONTRACT))
    assert section.links is not None and section.kubernetes is not None and section.kubernetes.rdma_resource == RDMA
    rdma = CONTRACT.replace("links: {iperf3", "links: {rdma: {devices: [mlx5_0]}, iperf3")
    parse_contract(rdma)  # the resource gives the pods the devices
    parse_contract(rdma.replace(f', rdma_resource: "{RDMA}"', ", privileged: true"))  # so does privileged
    with pytest.raises(ContractError) as caught:
        parse_contract(rdma.replace(f', rdma_resource: "{RDMA}"', ""))
    assert "cluster.links.rdma: through engine kubernetes the pods need the RDMA devices: name the device plugin's " \
           "resource (cluster.kubernetes.rdma_resource, e.g. rdma/rdma_shared_device_a) or allow " \
           "cluster.kubernetes.privileged" in caught.value.problems[0]
    with pytest.raises(ContractError) as caught:
        parse_contract(CONTRACT.replace(RDMA, "rdma shared"))
    assert "cluster.kubernetes.rdma_resource (line 6): expected an extended resource such as " \
           "'rdma/rdma_shared_device_a', got 'rdma shared'" in caught.value.problems[0]


def test_a_link_pod_asks_for_the_rdma_resource_validates_and_its_client_waits_for_a_refused_server():
    keys = KubernetesKeys("trial", "gpuaccept", IMAGE, False, 29500, RDMA)
    client = in_pod(["iperf3", "-c", "10.0.0.3", "-B", "10.0.0.2", "-p", "5401", "-J", "-t", "1"])
    assert client[:2] == ["sh", "-c"] and client[3:] == ["sh", "iperf3", "-c", "10.0.0.3", "-B", "10.0.0.2", "-p", "5401",
                                                         "-J", "-t", "1"]
    assert in_pod(["iperf3", "-s", "-1", "-B", "10.0.0.3", "-p", "5401"])[0] == "iperf3"  # a server as it is
    side = in_pod([sys.executable, "-m", "pytest_gpuaccept.cluster.rdma_side", "info", "--sysfs", "/sys"])
    assert side[side.index("--sysfs") + 1] == "/host/sys"  # the host's /sys, where the pod mounts it
    pod = pod_manifest(keys, "ga-0123456789ab", 0, "h1", 8, client, {}, 600)
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {GPU: "8", RDMA: "1"}
    before = time.time()
    launcher = Kubernetes.of(cluster.SECTION.of(parse_contract(CONTRACT))).on_node("h1", ["iperf3", "-s"])
    assert launcher[launcher.index("--rdma-resource") + 1] == RDMA
    # A link step's pods start at one instant on the wall clock, START_GATE_S after the step's commands were made.
    gated = launcher[launcher.index("--") + 1:]
    assert gated[:2] == ["python3", "-c"] and gated[4:] == ["iperf3", "-s"]
    assert before + START_GATE_S - 0.001 <= float(gated[3]) <= time.time() + START_GATE_S + 0.001  # to the ms


# ------------------------------------------------------------------ through the stand-in, in the nodes' namespaces


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two nodes (h1, h2) in network namespaces, each line-rate shaped; no Slurm."""
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the Kubernetes links tests run pods in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    net = 100 + (os.getpid() + 53) % 100
    network = Cluster(tmp_path_factory.mktemp("k8s-link-nodes"), 3, f"gl{os.getpid() % 10000}", net)
    try:
        network.network()
        for i in range(1, network.size):
            network.shape(i, LINE_RATE)
        yield network
    finally:
        network.down()


@pytest.fixture
def standin(nodes, tmp_path, monkeypatch):
    """The stand-in API over h1 and h2 (made from the real RKE2 GPU node, each offering the RDMA resource), kubectl
    first on PATH and KUBECONFIG set, as on a buyer's machine."""
    api = StandIn(tmp_path / "api")
    image = write_image(tmp_path / "image-bin")
    listed = [gpu_node(f"h{i}", nodes.address(i)) for i in (1, 2)]
    for node in listed:
        node["status"]["allocatable"][RDMA] = node["status"]["capacity"][RDMA] = "1k"
    api.set_nodes(listed)
    api.set_runtime({f"h{i}": {"netns": f"/run/netns/{nodes.ns(i)}", "hostname": f"h{i}", "address": nodes.address(i)}
                     for i in (1, 2)}, {IMAGE: {"bin": str(image), "image_id": IMAGE.replace(":0.1@", "@")}})
    monkeypatch.setenv("PATH", f"{api.bin}:{os.environ['PATH']}")
    monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig))
    return api


def links_through_pods(folder: Path, nodes: Cluster) -> dict[str, object]:
    """cluster.links measured in process as the login node measures it: the engine's launchers, the pods, the tools."""
    contract = parse_contract(CONTRACT)
    state = State(contract, ToolRunner(folder / "evidence", shared=False), folder / "report.html",
                  folder / "results.json", folder / "evidence", None, is_controller=True)
    section = cluster.SECTION.of(contract)
    ready = ClusterRun("kubernetes", {f"h{i}": NodeOutcome(
        NodeState(f"h{i}", True, True, "Ready", 8, facts=(("internal_ip", nodes.address(i)),)), f"nodes/h{i}",
        {"verdict": "accepted", "complete": True, "checks": []}, None) for i in (1, 2)}, ())
    runs = run_links(state, Kubernetes.of(section), section, ready, ("eth0",))
    return {name: cluster.judge_link(section, Subject.whole(name), runs, contract)
            for name in ("h1:eth0->h2:eth0", "h2:eth0->h1:eth0")}


@pytest.mark.xdist_group("fabric")  # one namespace fabric at a time (test.sh: --dist loadgroup)
def test_a_healthy_and_a_degraded_link_through_kubernetes_pods(nodes, standin, tmp_path):
    """h2 sends at a quarter of the line rate: h1->h2 (h1 sends) passes, h2->h1 (h2 sends, as the -R server) fails."""
    nodes.shape(2, "50mbit")
    try:
        links = links_through_pods(tmp_path, nodes)
    finally:
        nodes.shape(2, LINE_RATE)
    healthy, slow = links["h1:eth0->h2:eth0"], links["h2:eth0->h1:eth0"]
    assert healthy.outcome is Outcome.PASSED and 0.15 <= healthy.measured <= 0.2, healthy.message
    assert slow.outcome is Outcome.FAILED and slow.measured < 0.06, slow.message
    assert re.fullmatch(rf"iperf3 0\.0\d+ Gb/s \({nodes.address(2)} -> {nodes.address(1)}\) < 0\.15 Gb/s \(round 1, one "
                        r"direction at a time\)", slow.message), slow.message
    applied = standin.applied()
    assert len(applied) == 2 + 2 * 2  # each node's addresses, then a server and a client a direction
    for pod in applied:
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
        container = pod["spec"]["containers"][0]
        assert pod["spec"]["hostNetwork"] is True and container["resources"]["limits"] == {GPU: "8", RDMA: "1"}
        assert container["securityContext"] == {"privileged": False}
    assert not standin.pods()


# ------------------------------------------------------------------ cluster.links.rdma through pods: the namespace fabric

RDMA_CONTRACT = f"""\
gpuaccept: 1
vendor: "Trial cluster on Kubernetes"
cluster:
  engine: kubernetes
  nodes: ["h[1-3]"]
  kubernetes: {{context: trial, namespace: gpuaccept, image: "{IMAGE}", rdma_resource: "{RDMA}"}}
  links: {{rdma: {{devices: ["mlx5_[0-1]"], line_rate: "40 Mb/s", min_fraction_of_line_rate: 0.75, duration: "3 s"}}}}
gpus: {{count: 8}}
"""


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    """Three nodes, two rails (tests/netns_fabric.py): each rail's leaves joined by an unshaped spine."""
    if os.geteuid() != 0 or fabric_missing():
        pytest.fail(f"the Kubernetes fabric test runs pods in network namespaces: it needs root and "
                    f"{', '.join(fabric_missing()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    made = Fabric(tmp_path_factory.mktemp("k8s-fabric"), 3, 2, f"gf{os.getpid() % 10000}", 150 + os.getpid() % 50,
                  "40mbit")
    try:
        made.up()
        yield made
    finally:
        made.down()


def fabric_api(api: StandIn, fabric: Fabric, image: Path, tools: Path, monkeypatch: pytest.MonkeyPatch,
               without_rdma: tuple[str, ...] = ()) -> None:
    """The stand-in API over the fabric's nodes (each offering the RDMA resource but those `without_rdma`), kubectl and
    the image's ib_write_bw (the fabric's stand-in, told where the nodes' sysfs trees are) first on PATH."""
    (tools / "ib_write_bw").write_text(f"#!/bin/sh\nFABRIC_SYSFS={fabric.sysfs} exec {sys.executable} -S -I "
                                       f"{STANDIN} \"$@\"\n")
    (tools / "ib_write_bw").chmod(0o755)
    listed = [gpu_node(node, fabric.address(node, 0)) for node in fabric.nodes]
    for node in listed:
        if node["metadata"]["name"] not in without_rdma:
            node["status"]["allocatable"][RDMA] = node["status"]["capacity"][RDMA] = "1k"
    api.set_nodes(listed)
    api.set_runtime({node: {"netns": f"/run/netns/{fabric.ns(node)}", "hostname": node,
                            "address": fabric.address(node, 0)} for node in fabric.nodes},
                    {IMAGE: {"bin": str(image), "image_id": IMAGE.replace(":0.1@", "@")}})
    monkeypatch.setenv("PATH", f"{api.bin}:{tools}:{os.environ['PATH']}")
    monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig))


def rdma_through_pods(folder: Path, fabric: Fabric, nodes: list[str]):
    """cluster.links.rdma over `nodes` measured in process as the login node measures it, through the engine's pods."""
    contract = parse_contract(RDMA_CONTRACT)
    state = State(contract, ToolRunner(folder / "evidence", shared=False), folder / "report.html",
                  folder / "results.json", folder / "evidence", None, is_controller=True, sys_root=fabric.sysfs)
    section = cluster.SECTION.of(contract)
    ready = ClusterRun("kubernetes", {node: NodeOutcome(
        NodeState(node, True, True, "Ready", 8, facts=(("internal_ip", fabric.address(node, 0)),)), f"nodes/{node}",
        {"verdict": "accepted", "complete": True, "checks": []}, None) for node in nodes}, ())
    return run_rdma_links(state, Kubernetes.of(section), section, ready), section, contract


def test_a_node_whose_device_plugin_offers_no_rdma_resource_leaves_its_links_not_measured_saying_why(
        fabric, tmp_path, monkeypatch):
    api = StandIn(tmp_path / "api")
    fabric_api(api, fabric, write_image(tmp_path / "image-bin"), tmp_path, monkeypatch, without_rdma=("h2",))
    runs, section, contract = rdma_through_pods(tmp_path, fabric, ["h1", "h2"])
    check = cluster.judge_rdma_link(section, Subject.whole("h1:mlx5_0->h2:mlx5_0"), runs, contract)
    assert check.outcome is Outcome.NOT_MEASURED
    assert check.message.startswith("not measured: not run: h2's devices could not be read: "), check.message
    assert check.message.endswith(f" on h2: Failed (OutOf{RDMA}; Node didn't have enough resource: {RDMA}, requested: 1, "
                                  "used: 0, capacity: 0)"), check.message
    assert not api.pods()


@pytest.mark.xdist_group("fabric")  # one namespace fabric at a time (test.sh: --dist loadgroup)
def test_a_fabric_through_kubernetes_pods_blames_the_degraded_rail_on_its_node(fabric, tmp_path, monkeypatch):
    """h2's rail 1 (its mlx5_1) at a quarter of the line rate: every rail-0 link and every rail-1 link without h2 passes;
    h2's rail-1 links fail, each blamed on h2's mlx5_1. Each node's side (rdma_side) runs in a pod on its node's
    network, with the RDMA resource, reading the node's own sysfs tree."""
    api = StandIn(tmp_path / "api")
    image = write_image(tmp_path / "image-bin")
    tools = tmp_path / "tools"
    tools.mkdir()
    fabric_api(api, fabric, image, tools, monkeypatch)
    fabric.slow_port("h2", 1, "10mbit")
    try:
        runs, section, contract = rdma_through_pods(tmp_path, fabric, fabric.nodes)
    finally:
        fabric.reshape()
    assert runs.error is None
    checks = {name: cluster.judge_rdma_link(section, Subject.whole(name), runs, contract) for name in runs.links}
    assert len(checks) == 3 * 2 * 2  # every pair of 3 nodes, every rail, each direction
    failed = {name for name, c in checks.items() if c.outcome is not Outcome.PASSED}
    assert failed == {name for name in checks if "h2:mlx5_1" in name}, {n: checks[n].message for n in sorted(checks)}
    for name in failed:
        assert checks[name].outcome is Outcome.FAILED
        assert "h2's mlx5_1 fails with 2 of 2 partners (that node's NIC, cable or switch port)" in checks[name].message
    for pod in api.applied():
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
        assert pod["spec"]["hostNetwork"] is True
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {GPU: "8", RDMA: "1"}
    assert not api.pods()


def test_the_doctor_says_a_hosts_rdma_without_a_peer_measures_the_hca_only_and_names_cluster_links_rdma():
    host = "gpuaccept: 1\nvendor: V\nrdma: {devices: [mlx5_0], min_fraction_of_line_rate: 0.9}\n"
    [need] = [n for n in doctor.needs(parse_contract(host)) if n.name == "ib_write_bw"]
    assert need.lines == ["rdma without a peer measures the HCA only (loopback to localhost: no cable or switch); the "
                          "fabric between nodes: cluster.links.rdma (a cluster section, run from the login node)"]
    peered = host.replace("0.9}", "0.9, peer: 10.0.0.2}")
    assert [n.lines for n in doctor.needs(parse_contract(peered)) if n.name == "ib_write_bw"] == [[]]
