"""The Kubernetes engine (`cluster.engine: kubernetes`): nodes read from real `kubectl get nodes -o json` documents,
the pods it writes validated against the API's schema (kubernetes-validate), the doctor on a login machine with a
kubeconfig, and the whole handover through a stand-in kubectl (kubectl_standin.py) that speaks exactly the engine's
protocol over the network-namespace nodes of netns_cluster.py: every pod's container runs in its node's namespaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
from builders import node_recordings
from conftest import DATA, ctrl_c_as_at_a_terminal, pci_tree
from kubectl_standin import StandIn, cordon, gpu_node, non_gpu_node, set_ready, write_image
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.clauses import cluster
from pytest_gpuaccept.cluster.kubernetes import GPU, HOST_SYS, LABEL, Kubernetes, KubernetesKeys, node_state, parse_nodes, pod_manifest
from pytest_gpuaccept.contract import ContractError, parse_contract

K8S = DATA / "kubernetes"
DIGEST = "5f0c3b6f1d2a8e4c9b7a6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a"
IMAGE = f"registry.example/gpuaccept:0.1@sha256:{DIGEST}"
IMAGE_ID = f"registry.example/gpuaccept@sha256:{DIGEST}"
SELECTOR = "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
LINE_RATE = "200mbit"
CONTRACT = f"""\
gpuaccept: 1
vendor: "Trial cluster on Kubernetes"
tools: {{timeout: "90 s"}}
cluster:
  engine: kubernetes
  nodes: {{selector: "{SELECTOR}"}}
  kubernetes: {{context: trial, namespace: gpuaccept, image: "{IMAGE}", port: 29511}}
  pairs: {{min_busbw: "200 GB/s", max_bytes: "16 GiB"}}
  allreduce: {{min_busbw: "200 GB/s", max_bytes: "16 GiB"}}
gpus:
  count: 8
  model: "H100"
"""
# Only what the node list is about, the nodes by name.
NODES_ONLY = CONTRACT.replace(f'{{selector: "{SELECTOR}"}}', '["h[1-4]"]').replace(
    '  pairs: {min_busbw: "200 GB/s", max_bytes: "16 GiB"}\n', "").replace(
    '  allreduce: {min_busbw: "200 GB/s", max_bytes: "16 GiB"}\n', "")
PROTOCOL = {("get", "nodes"), ("apply", "-f"), ("get", "pods"), ("logs",), ("delete", "pods,jobs")}


def section(text: str = CONTRACT) -> cluster.ClusterSection:
    return cluster.SECTION.of(parse_contract(text))


# ------------------------------------------------------------------ nodes, from the API's own documents


def test_the_real_node_documents_read_as_the_api_wrote_them():
    """RKE2 with the GPU Operator (one vGPU A16) and AKS without GPUs: Ready, schedulable, their allocatable GPUs, the
    GPU Operator's labels as facts, the InternalIP the all_reduce pods meet at."""
    rke2 = parse_nodes((K8S / "rke2_a16_vgpu_gpu_operator_nodes.json").read_text())
    state = node_state(rke2["nori"])
    assert (state.state, state.schedulable, state.gpus, state.reason) == ("Ready", True, 1, None)
    assert dict(state.facts) == {"gpu_product": "NVIDIA-A16-4Q", "gpu_count_label": "1", "gpu_memory_mib": "4096",
                                 "internal_ip": "0.202.61.70"}
    aks = parse_nodes((K8S / "aks_3node_no_gpu_nodes.json").read_text())
    assert sorted(aks) == [f"aks-agentpool-30520393-vmss00000{i}" for i in range(3)]
    assert {node_state(n).gpus for n in aks.values()} == {0}  # no device plugin: no nvidia.com/gpu at all


def test_not_ready_cordoned_tainted_and_short_nodes_each_say_why():
    """Made from the real RKE2 node: each state the scheduler would refuse (nodeName bypasses it) is read here."""
    down = gpu_node("n1", "10.0.0.1")
    set_ready(down, False)
    assert node_state(down).state == "NotReady" and not node_state(down).schedulable
    assert node_state(down).reason == "Ready=False (KubeletNotReady: PLEG is not healthy: pleg was last seen active 3m0.5s ago)"
    cordoned = gpu_node("n2", "10.0.0.2")
    cordon(cordoned)
    assert (node_state(cordoned).state, node_state(cordoned).reason) == ("Ready,SchedulingDisabled",
                                                                         "cordoned (spec.unschedulable)")
    tainted = gpu_node("n3", "10.0.0.3")
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # GKE's own
                                 {"key": "nvidia.com/gpu-health", "value": "xid79", "effect": "NoExecute"}]
    assert not node_state(tainted).schedulable
    assert node_state(tainted).reason == ("tainted against the run: nvidia.com/gpu-health=xid79:NoExecute (its pods "
                                          "tolerate nvidia.com/gpu only)")
    gke = gpu_node("n4", "10.0.0.4")
    gke["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert node_state(gke).schedulable  # the GPU pool's taint is the one the pods tolerate
    seven = gpu_node("n5", "10.0.0.5")
    seven["status"]["allocatable"][GPU] = "7"  # the node came up with 7 GPUs
    assert node_state(seven).gpus == 7 and node_state(seven).schedulable
    assert node_state(seven).reason == "the GPU Operator counts 8 GPUs (nvidia.com/gpu.count), 7 are allocatable"


def test_a_selector_is_applied_by_the_plugin_to_the_node_list():
    nodes = [gpu_node("h1", "10.0.0.2"), non_gpu_node(), gpu_node("h2", "10.0.0.3")]
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})
    engine = Kubernetes.of(section())
    assert engine.expand_argv(()) == ["kubectl", "--context", "trial", "-n", "gpuaccept", "get", "nodes", "-o", "json"]
    assert engine.expand((), listing) == ["h1", "h2"]
    other = Kubernetes.of(section(CONTRACT.replace(SELECTOR, "nvidia.com/gpu.product=NVIDIA-B200")))
    with pytest.raises(ValueError, match=r"^no node matches the selector nvidia.com/gpu.product=NVIDIA-B200 \(of the 3"):
        other.expand((), listing)
    assert Kubernetes.of(section(NODES_ONLY)).expand_argv(("h[1-4]",)) is None  # names: expanded here, as mpirun's


@pytest.mark.parametrize("privileged", [False, True])
def test_every_pod_validates_against_the_api_schema_and_is_pinned_with_all_gpus_and_sys_read_only(privileged):
    keys = KubernetesKeys("trial", "gpuaccept", IMAGE, privileged, 29511)
    pod = pod_manifest(keys, "ga-0123456789ab", 0, "h1", 8, ["python3", "-m", "pytest_gpuaccept", "node-run"],
                       {"NCCL_ALGO": "Ring"}, 3600)
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert spec["nodeName"] == "h1" and spec["hostNetwork"] is True and spec["activeDeadlineSeconds"] == 3600
    assert container["resources"]["limits"] == {GPU: "8"}
    assert container["securityContext"] == {"privileged": privileged}
    assert {"name": "host-sys", "mountPath": HOST_SYS, "readOnly": True} in container["volumeMounts"]
    assert {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}} in spec["volumes"]
    assert pod["metadata"]["labels"] == {LABEL: "ga-0123456789ab"} and container["image"] == IMAGE
    bad = json.loads(json.dumps(pod))
    bad["spec"]["nodename"] = "h1"  # the schema is strict: a misspelt field is refused, not ignored
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kubernetes_validate.latest_version(), strict=True)


def test_a_nodes_run_reads_the_hosts_sys_where_its_pod_mounts_it():
    engine = Kubernetes.of(section())
    argv = engine.on_node("h1", [sys.executable, "-m", "pytest_gpuaccept", "node-run", "--node", "h1", "--contract-b64",
                                 "eA==", "--", "--gpuaccept-sysfs=/tmp/sys"])
    launcher, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    assert launcher[:3] == [sys.executable, "-m", "pytest_gpuaccept.cluster.pods"] and "--node=h1" in launcher
    assert command == ["python3", "-m", "pytest_gpuaccept", "node-run", "--node", "h1", "--contract-b64", "eA==", "--",
                       "--gpuaccept-sysfs=/host/sys"]
    pairs = engine.mpi_job(["h1", "h2"], 8, ["/opt/all_reduce_perf", "-g", "1", "-b", "8", "-e", "1024", "-f", "2", "-c",
                                             "1"], {"NCCL_ALGO": "Ring"})
    assert pairs[pairs.index("--") + 1:] == ["python3", "-m", "pytest_gpuaccept.workloads.torch_allreduce", "-g", "8",
                                             "-b", "8", "-e", "1024", "-f", "2"]
    assert "--rendezvous" in pairs and "--env=NCCL_ALGO=Ring" in pairs and "--node=h2" in pairs


@pytest.mark.parametrize("change, problem", [
    (("engine: kubernetes", "engine: slurm"), "cluster.nodes: a selector is only for engine: kubernetes (Slurm and "
                                              "mpirun take node names)"),
    (("engine: kubernetes", "engine: slurm"), "cluster.kubernetes: only for engine: kubernetes"),
    ((SELECTOR, "nvidia.com/gpu.product"), "cluster.nodes: selector: expected key=value or key!=value, got "
                                           "'nvidia.com/gpu.product'"),
    (("namespace: gpuaccept", "namespace: GPU_Accept"), "cluster.kubernetes.namespace (line 7): expected a namespace "
                                                         "name (lower-case letters, digits and -), got 'GPU_Accept'"),
    (('max_bytes: "16 GiB"}\n  allreduce', 'max_bytes: "16 GiB", args: ["-d", "half"]}\n  allreduce'),
     "cluster.pairs.args: engine kubernetes runs the PyTorch all_reduce, which takes -n N, -w N only, got -d half"),
    (("gpus:\n", '  links: {rdma: {devices: [mlx5_0]}}\ngpus:\n'),
     "cluster.links.rdma: through engine kubernetes the pods need the RDMA devices: name the device plugin's resource "
     "(cluster.kubernetes.rdma_resource, e.g. rdma/rdma_shared_device_a) or allow cluster.kubernetes.privileged"),
])
def test_a_contract_mistake_in_the_kubernetes_keys_is_named(change, problem):
    with pytest.raises(ContractError) as caught:
        parse_contract(CONTRACT.replace(*change))
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def launcher(standin: StandIn, *args: str) -> subprocess.CompletedProcess[str]:
    """The engine's launcher as the tool runner starts it for a node's run (a clean environment but KUBECONFIG)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "KUBECONFIG": str(standin.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "pytest_gpuaccept.cluster.pods", "--kubectl", str(standin.bin / "kubectl"),
                           "--context", "trial", "--namespace", "gpuaccept", "--run", "ga-000000000001",
                           "--deadline-s", "60", "--port", "29511", "--node=h1", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_pod_whose_image_cannot_be_pulled_fails_its_node_at_once_and_is_deleted(tmp_path):
    standin = StandIn(tmp_path / "k8s")
    standin.set_nodes([gpu_node("h1", "10.0.0.2")])
    standin.set_runtime({"h1": {"netns": "/nonexistent", "hostname": "h1", "address": "10.0.0.2"}}, {})
    done = launcher(standin, "--image", IMAGE, "--", "python3", "-m", "pytest_gpuaccept", "node-run")
    assert done.returncode == 1 and done.stdout == ""  # nothing passed on
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"gpuaccept pods: pod gpuaccept-ga-000000000001-0 on h1: Pending (ErrImagePull): "
                                      f"failed to pull {IMAGE}: not found")
    assert standin.pods() == []
    verbs = [c["argv"][4] for c in standin.calls()]
    # Failed at once: the launcher's polls (one a second) saw ErrImagePull within a few, not at the 60 s deadline; a
    # loaded machine's stand-in may admit the pod a poll later. Then its log, the delete, and a look that it is gone.
    logs = verbs.index("logs")
    assert verbs[:2] == ["get", "apply"] and set(verbs[2:logs]) == {"get"} and logs - 2 <= 5, verbs
    assert verbs[logs:logs + 2] == ["logs", "delete"] and set(verbs[logs + 2:]) == {"get"}, verbs
    unset = launcher(standin, "--", "python3", "-m", "pytest_gpuaccept", "node-run")
    assert unset.returncode == 2 and unset.stderr.rstrip().endswith(
        "gpuaccept pods: nothing to launch: cluster.kubernetes.image is not set (the image the pods run, with "
        "pytest-gpuaccept and the tools)")


# ------------------------------------------------------------------ the doctor on a login machine with a kubeconfig


def test_the_doctor_lists_the_context_the_nodes_it_sees_and_their_gpus_and_the_image(tmp_path):
    standin = StandIn(tmp_path / "k8s")
    down = gpu_node("h2", "10.0.0.3")
    set_ready(down, False)
    standin.set_nodes([gpu_node("h1", "10.0.0.2"), down, non_gpu_node()])
    (tmp_path / "cluster.yaml").write_text(CONTRACT)
    env = {**os.environ, "PATH": f"{standin.bin}:{os.environ['PATH']}", "KUBECONFIG": str(standin.kubeconfig)}
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "doctor", "--contract", "cluster.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    lines = done.stdout.splitlines()
    assert f"  ok       kubectl                    {standin.bin / 'kubectl'}" in done.stdout
    assert ("  ok       kubernetes                 context trial, namespace gpuaccept (`kubectl get nodes`: 3 nodes, "
            "1 of the contract's schedulable)  [cluster]") in lines
    assert "             h1  Ready  8 nvidia.com/gpu x NVIDIA-H100-80GB-HBM3" in lines
    assert any(line.startswith("             h2  NotReady  8 nvidia.com/gpu x NVIDIA-H100-80GB-HBM3  (Ready=False") for line in lines)
    assert "             aks-agentpool-30520393-vmss000000  Ready  0 nvidia.com/gpu  (not in cluster.nodes)" in lines
    assert f"  ok       cluster.kubernetes.image   {IMAGE}  [cluster]" in lines
    assert [c["argv"] for c in standin.calls()] == [["--context", "trial", "-n", "gpuaccept", "get", "nodes", "-o", "json"]]
    (tmp_path / "cluster.yaml").write_text(CONTRACT.replace(f', image: "{IMAGE}"', ""))
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "doctor", "--contract", "cluster.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "  MISSING  cluster.kubernetes.image   needed by cluster" in done.stdout


# ------------------------------------------------------------------ the handover through the stand-in kubectl


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Four nodes (h1..h4) in network namespaces, each line-rate shaped with an iperf3 server; no Slurm."""
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the Kubernetes engine's handover tests run pods in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    net = 100 + (os.getpid() + 37) % 100
    network = Cluster(tmp_path_factory.mktemp("k8s-nodes"), 5, f"gk{os.getpid() % 10000}", net)
    try:
        network.network()
        for i in range(1, network.size):
            network.shape(i, LINE_RATE)
        network.start_iperf3_servers()
        yield network
    finally:
        network.down()


@pytest.fixture(scope="module")
def world(nodes, tmp_path_factory):
    """The stand-in API over those nodes: h1..h4 made from the real RKE2 GPU node, the real AKS node beside them (no
    GPUs: the selector leaves it out), the image (this interpreter, the PyTorch all_reduce faked), each node's sysfs
    tree as its host's /sys, and an NVML recording per node."""
    base = tmp_path_factory.mktemp("k8s")
    standin = StandIn(base / "api")
    sysfs = base / "sys"
    pci_tree(sysfs)
    image = write_image(base / "image-bin")
    standin.set_runtime({f"h{i}": {"netns": f"/run/netns/{nodes.ns(i)}", "hostname": f"h{i}", "address": nodes.address(i),
                                   "host": {"/sys": str(sysfs)}} for i in range(1, 5)},
                        {IMAGE: {"bin": str(image), "image_id": IMAGE_ID}})
    recording = node_recordings(base / "nvml", [f"h{i}" for i in range(1, 5)])
    return standin, recording


def good_nodes(cluster_nodes: Cluster) -> list[dict]:
    return [gpu_node(f"h{i}", cluster_nodes.address(i)) for i in range(1, 5)] + [non_gpu_node()]


def login_run(standin: StandIn, folder: Path, contract: str, *args: str) -> subprocess.Popen[str]:
    """`pytest --contract=cluster.yaml` on the login machine: kubectl (the stand-in) first on PATH, KUBECONFIG set."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cluster.yaml").write_text(contract)
    env = {**os.environ, "PATH": f"{standin.bin}:{os.environ['PATH']}", "KUBECONFIG": str(standin.kubeconfig)}
    with ctrl_c_as_at_a_terminal():  # a test sends it Ctrl-C
        return subprocess.Popen([sys.executable, "-m", "pytest", "--contract=cluster.yaml", "-p", "no:cacheprovider",
                                 "-q", *args], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env)


def finished(standin: StandIn, folder: Path, contract: str, *args: str) -> tuple[int, dict, str]:
    proc = login_run(standin, folder, contract, *args)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, json.loads((folder / "gpuaccept-results.json").read_text()), out


def by_clause(results: dict, clause: str) -> dict[str, dict]:
    return {c["subject"]: c for c in results["checks"] if c["clause"] == clause}


def nothing_left(standin: StandIn, within_s: float = 20.0) -> bool:
    """No pod in the stand-in's state and no pod process running, within a while (the delete is --wait=false)."""
    deadline = time.monotonic() + within_s
    while standin.pods() or standin.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def only_the_protocol(standin: StandIn) -> None:
    """Every kubectl call was one of the five verbs, with the contract's context and namespace."""
    for call in standin.calls():
        argv = call["argv"]
        assert call["protocol"] and argv[:4] == ["--context", "trial", "-n", "gpuaccept"], argv
        assert tuple(argv[4:6]) in PROTOCOL or tuple(argv[4:5]) in PROTOCOL, argv


def test_an_all_good_cluster_is_accepted_with_every_node_pair_and_the_whole_cluster(nodes, world, tmp_path):
    standin, recording = world
    standin.reset()
    standin.set_nodes(good_nodes(nodes))
    code, results, out = finished(standin, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={recording}")
    assert code == 0, out[-4000:]
    assert results["verdict"] == "accepted" and results["complete"]
    checked = by_clause(results, "cluster.nodes")
    assert sorted(checked) == ["h1", "h2", "h3", "h4"]  # the selector left the AKS node out
    assert checked["h2"]["message"].startswith("Ready, 8 GPUs in the node's allocatable nvidia.com/gpu; results "
                                               "returned: the node's own checks ACCEPTED")
    details = checked["h2"]["details"]
    assert details["image_id"] == IMAGE_ID and details["pod_node"] == "h2"  # the digest the pod ran, recorded
    assert details["gpu_product"] == "NVIDIA-H100-80GB-HBM3" and details["internal_ip"] == nodes.address(2)
    assert all(h["verdict"] == "accepted" and len(h["identity"]["gpus"]) == 8 for h in results["hosts"])
    assert (tmp_path / "run" / "gpuaccept-evidence" / "nodes" / "h3" / "gpuaccept-results.json").is_file()
    pairs = by_clause(results, "cluster.pairs")
    assert sorted(pairs) == ["h1+h2", "h1+h3", "h1+h4", "h2+h3", "h2+h4", "h3+h4"]
    assert all(p["outcome"] == "passed" and 200 <= p["measured"] < 469.21 for p in pairs.values()), pairs
    whole = by_clause(results, "cluster.allreduce")["cluster"]
    assert whole["outcome"] == "passed" and whole["message"].endswith(" over 4 nodes x 8 GPUs"), whole
    # Every manifest the engine applied validates against the API's schema, pinned, with every GPU and /sys read-only.
    applied = standin.applied()
    assert len(applied) == 4 + 6 * 2 + 4  # a pod per node's run, two per pair, four for the whole cluster
    for pod in applied:
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
        container = pod["spec"]["containers"][0]
        assert pod["spec"]["nodeName"] in ("h1", "h2", "h3", "h4") and container["resources"]["limits"] == {GPU: "8"}
        assert {"name": "host-sys", "mountPath": HOST_SYS, "readOnly": True} in container["volumeMounts"]
        assert container["securityContext"] == {"privileged": False} and container["image"] == IMAGE
    only_the_protocol(standin)
    assert nothing_left(standin)
    verified = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "verify", str(tmp_path / "run")],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout
    # The cluster's bundle replays without the cluster (no kubectl called): the same verdict from the same evidence.
    calls = len(standin.calls())
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "cluster.yaml").write_text(CONTRACT)
    done = subprocess.run([sys.executable, "-m", "pytest", "--contract=cluster.yaml", f"--gpuaccept-replay={tmp_path / 'run'}",
                           "-p", "no:cacheprovider", "-q"], cwd=replay, capture_output=True, text=True, timeout=180)
    replayed = json.loads((replay / "gpuaccept-results.json").read_text())
    assert done.returncode == 0 and replayed["mode"] == "replay" and replayed["verdict"] == "accepted", done.stdout[-3000:]
    assert len(replayed["checks"]) == len(results["checks"]) and len(standin.calls()) == calls


def test_a_slow_node_fails_its_pairs_and_is_named(nodes, world, tmp_path):
    standin, recording = world
    standin.reset()
    standin.set_nodes(good_nodes(nodes))
    nodes.shape(3, "20mbit")
    try:
        code, results, out = finished(standin, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={recording}")
    finally:
        nodes.shape(3, LINE_RATE)
    assert code == 1, out[-4000:]
    pairs = by_clause(results, "cluster.pairs")
    with_h3 = {name for name in pairs if "h3" in name.split("+")}
    assert {name for name, p in pairs.items() if p["outcome"] == "failed"} == with_h3, pairs
    assert all(pairs[n]["message"].endswith("; node h3 fails with most partners") for n in with_h3)
    assert all(c["outcome"] == "passed" for c in by_clause(results, "cluster.nodes").values())
    assert nothing_left(standin)


def test_not_ready_cordoned_and_short_nodes_fail_with_their_reasons_and_the_rest_are_judged(nodes, world, tmp_path):
    standin, recording = world
    standin.reset()
    listed = good_nodes(nodes)
    set_ready(listed[1], False)
    cordon(listed[2])
    listed[3]["status"]["allocatable"][GPU] = "7"  # h4 came up with 7 of its 8 GPUs
    standin.set_nodes(listed)
    code, results, out = finished(standin, tmp_path / "run", NODES_ONLY, f"--gpuaccept-nvml={recording}")
    assert code == 1, out[-4000:]
    checked = by_clause(results, "cluster.nodes")
    assert checked["h1"]["outcome"] == "passed", checked["h1"]
    assert checked["h2"]["message"] == ("the scheduler has h2 NotReady (Ready=False (KubeletNotReady: PLEG is not "
                                        "healthy: pleg was last seen active 3m0.5s ago)): not run, not waited for")
    assert checked["h3"]["message"] == ("the scheduler has h3 Ready,SchedulingDisabled (cordoned "
                                        "(spec.unschedulable)): not run, not waited for")
    assert checked["h4"]["message"] == ("the scheduler offers 7 GPUs on h4 (the node's allocatable nvidia.com/gpu), "
                                        "the contract 8 (the GPU Operator counts 8 GPUs (nvidia.com/gpu.count), 7 are "
                                        "allocatable)")
    assert {c["outcome"] for c in checked.values()} == {"passed", "failed"}
    assert [pod["spec"]["nodeName"] for pod in standin.applied()] == ["h1"]  # the others never started
    assert [h["name"] for h in results["hosts"] if h["verdict"] == "accepted"] == ["h1"]
    only_the_protocol(standin)
    assert nothing_left(standin)


def test_ctrl_c_in_the_middle_leaves_no_pod(nodes, world, tmp_path):
    standin, recording = world
    standin.reset()
    standin.set_nodes(good_nodes(nodes))
    proc = login_run(standin, tmp_path / "run", CONTRACT, f"--gpuaccept-nvml={recording}")
    deadline = time.monotonic() + 120
    while not [p for p in standin.pods() if p["status"].get("phase") == "Running"]:
        assert proc.poll() is None and time.monotonic() < deadline, "no pod ever ran"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-3000:]
    assert nothing_left(standin), (standin.pods(), standin.alive())
    deleted = [c["argv"][4:] for c in standin.calls() if c["argv"][4:5] == ["delete"]]
    assert deleted and all(argv[:3] == ["delete", "pods,jobs", "-l"] and argv[4] == "--wait=false" for argv in deleted)
    only_the_protocol(standin)
