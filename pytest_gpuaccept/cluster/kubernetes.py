"""Kubernetes as a cluster engine: the nodes from `kubectl get nodes -o json`, each node's run, each all_reduce, each
link step's tools (on the node's network, with the contract's RDMA resource) and the training job as pods pinned to
their nodes, through `python -m pytest_gpuaccept.cluster.pods` (pods.py), the one launcher that applies, watches,
reads and deletes them.

Only this protocol reaches the cluster (so that it can be tested and audited), each with `--context` and `-n` where
the contract gives them: `get nodes -o json`; `apply -f - -o json` (the manifests on stdin);
`get pods -l gpuaccept-run=ID -o json`; `logs POD -c gpuaccept`; `delete pods,jobs -l gpuaccept-run=ID
--wait=false`. A label selector in cluster.nodes is applied here, to the node list.

Pure functions over the API's JSON (nodes read, manifests written); the launcher is the only part that runs kubectl
for pods. `nodeName` bypasses the scheduler, so what it would have refused (NotReady, cordoned, tainted, short of
GPUs) is checked here, from the same node objects.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..probes import iperf3, option_value
from ..probes._run import find_tool
from ..workloads import torch_allreduce
from .base import ClusterError, NodeState, own_expansion

if TYPE_CHECKING:
    from ..clauses.cluster import ClusterSection

KUBECTL = "kubectl"
LABEL = "gpuaccept-run"  # every pod of a launch carries it: get pods and delete select by it, and nothing else
GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
CONTAINER = "gpuaccept"
HOST_SYS = "/host/sys"  # where the host's /sys is mounted, read-only, in every pod
PODS_MODULE = "pytest_gpuaccept.cluster.pods"
PYTHON = "python3"  # the image's interpreter, with pytest-gpuaccept installed
DEFAULT_PORT = 29500  # the rendezvous of the all_reduce pods, on the first pod's node (PyTorch's own default)
# The one taint the pods tolerate: GPU node pools' own (GKE puts nvidia.com/gpu=present:NoSchedule on every GPU node,
# EKS and kOps guides nvidia.com/gpu:NoSchedule). Any other NoSchedule or NoExecute taint is against the run.
TOLERATIONS: tuple[dict[str, str], ...] = ({"key": GPU, "operator": "Exists"},)
# The GPU Operator's (GPU Feature Discovery's) labels a node's check shows, as the details key each becomes.
OPERATOR_LABELS = {"nvidia.com/gpu.product": "gpu_product", "nvidia.com/gpu.count": "gpu_count_label",
                   "nvidia.com/gpu.memory": "gpu_memory_mib", "nvidia.com/gpu.clique": "gpu_clique"}
# Taints that only restate what the node's state already says (a cordon, a node that is not ready).
_FOLLOWS_STATE = {"node.kubernetes.io/unschedulable": "cordoned", "node.kubernetes.io/not-ready": "not ready",
                  "node.kubernetes.io/unreachable": "not ready"}
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# An extended resource's name, as the API takes it: a domain-prefixed name (`rdma/rdma_shared_device_a`,
# `openshift.io/mlnxnics`, `nvidia.com/rdma_vf`).
_RESOURCE = re.compile(rf"^[a-z0-9]([a-z0-9.-]{{0,251}}[a-z0-9])?/{_LABEL_NAME}$")
# A pod starts when its kubelet gets to it: a link's client pod may start before the pod of its server listens. A
# refused connection (nothing measured, nothing sent) is tried again for up to this long; anything else is the tool's.
RETRY_REFUSED_S = 60
RDMA_SIDE = "pytest_gpuaccept.cluster.rdma_side"  # a link step's node side (cluster.links.rdma), as `python -m` names it
# The pods of one link step start when their kubelets get to them, seconds apart, where srun or mpirun start a step's
# commands together: each link pod waits for one instant on the wall clock, this long after the login node made the
# step's commands, so that a node's clients do not call on a peer whose pod has not started its servers yet (perftest's
# client gives up at once) and the node side's counters are read around the step itself, not around a pod's wait.
START_GATE_S = 8.0
_GATE = "import os, sys, time; time.sleep(max(0.0, float(sys.argv[1]) - time.time())); os.execvp(sys.argv[2], sys.argv[2:])"
_RETRY_REFUSED = (f'end=$(( $(date +%s) + {RETRY_REFUSED_S} )); while :; do out=$("$@"); code=$?; case $out in '
                  '*"unable to connect to server: Connection refused"*) if [ "$(date +%s)" -lt "$end" ]; then sleep 0.5; '
                  'continue; fi;; esac; printf "%s\\n" "$out"; exit $code; done')

Requirement = tuple[str, str, str]  # (key, "=" or "!=", value)


@dataclass(frozen=True, slots=True)
class KubernetesKeys:
    """cluster.kubernetes: which cluster and namespace (kubeconfig context, namespace), the image the pods run, whether
    they may be privileged (RDMA, dmesg), the rendezvous port of the all_reduce pods, and the RDMA device plugin's
    resource each pod asks one of (the RDMA shared device plugin's `rdma/rdma_shared_device_a`, an SR-IOV VF's)."""

    context: str | None = None
    namespace: str | None = None
    image: str | None = None
    privileged: bool = False
    port: int = DEFAULT_PORT
    rdma_resource: str | None = None


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """`key=value,key2!=value2` (`==` is `=`), as kubectl's -l reads equality requirements; ValueError naming the
    part it cannot read."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", part)
        if match is None:
            raise ValueError(f"expected key=value or key!=value, got {part!r}")
        key, op, value = match.groups()
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise ValueError(f"not a label key and value: {part!r}")
        out.append((key, "!=" if op == "!=" else "=", value))
    return tuple(out)


def resource_name(value: str) -> str:
    """An extended resource's name (`rdma/rdma_shared_device_a`); ValueError otherwise."""
    if not _RESOURCE.match(value):
        raise ValueError(f"expected an extended resource such as 'rdma/rdma_shared_device_a', got {value!r}")
    return value


def namespace_name(value: str) -> str:
    """A namespace's name as the API takes it (a DNS label); ValueError otherwise."""
    if not _NAMESPACE.match(value):
        raise ValueError(f"expected a namespace name (lower-case letters, digits and -), got {value!r}")
    return value


def matches(labels: dict[str, str], selector: tuple[Requirement, ...]) -> bool:
    """The node's labels meet every requirement (`!=` holds where the label is absent, as in Kubernetes)."""
    return all((labels.get(key) == value) == (op == "=") for key, op, value in selector)


def parse_nodes(output: str) -> dict[str, dict[str, Any]]:
    """The node objects of `kubectl get nodes -o json` (a List or NodeList) by name; ClusterError if it is not one."""
    try:
        document = json.loads(output)
    except ValueError as exc:
        raise ClusterError(f"`kubectl get nodes -o json` printed no JSON: {exc}") from None
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(items, list) or document.get("kind") not in ("List", "NodeList"):
        raise ClusterError("`kubectl get nodes -o json` printed no list of nodes")
    nodes = {}
    for item in items:
        name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or item.get("kind", "Node") != "Node":
            raise ClusterError("`kubectl get nodes -o json` listed an item that is not a named Node")
        nodes[name] = item
    return nodes


def allocatable_gpus(node: dict[str, Any]) -> int:
    """The node's allocatable nvidia.com/gpu (0 where the device plugin offers none); ClusterError if unreadable."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0")
    if not str(value).isdigit():
        raise ClusterError(f"node {node['metadata']['name']}: allocatable {GPU} is {value!r}, not a count")
    return int(value)


def internal_ip(node: dict[str, Any]) -> str | None:
    addresses = (node.get("status") or {}).get("addresses") or []
    return next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), None)


def _tolerated(taint: dict[str, Any]) -> bool:
    return taint.get("effect") not in ("NoSchedule", "NoExecute") or any(
        t["key"] == taint.get("key") for t in TOLERATIONS)


def _ready(node: dict[str, Any]) -> tuple[str, str | None]:
    """("True" | "False" | "Unknown", why) from the node's Ready condition."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            status = str(condition.get("status"))
            why = ": ".join(str(condition[k]) for k in ("reason", "message") if condition.get(k))
            return status, why or None
    return "Unknown", "the node reports no Ready condition"


def node_state(node: dict[str, Any]) -> NodeState:
    """What the node object says before anything runs: Ready, cordoned (spec.unschedulable), tainted against the run,
    its allocatable GPUs, and the GPU Operator's labels as facts."""
    name = node["metadata"]["name"]
    spec, labels = node.get("spec") or {}, (node.get("metadata") or {}).get("labels") or {}
    ready, why = _ready(node)
    cordoned = spec.get("unschedulable") is True
    state = ("Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown") + \
        (",SchedulingDisabled" if cordoned else "")
    reasons = [] if ready == "True" else [f"Ready={ready}" + (f" ({why})" if why else "")]
    if cordoned:
        reasons.append("cordoned (spec.unschedulable)")
    against = [t for t in spec.get("taints") or [] if not _tolerated(t) and t.get("key") not in _FOLLOWS_STATE]
    if against:
        shown = ", ".join(f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}" for t in against)
        reasons.append(f"tainted against the run: {shown} (its pods tolerate {GPU} only)")
    gpus = allocatable_gpus(node)
    counted = labels.get("nvidia.com/gpu.count")
    if counted is not None and counted != str(gpus):
        reasons.append(f"the GPU Operator counts {counted} GPUs (nvidia.com/gpu.count), {gpus} are allocatable")
    facts = tuple((key, str(labels[label])) for label, key in OPERATOR_LABELS.items() if label in labels)
    address = internal_ip(node)
    facts += (("internal_ip", address),) if address else ()
    return NodeState(name, True, ready == "True" and not cordoned and not against, state, gpus,
                     "; ".join(reasons) or None, f"the node's allocatable {GPU}", facts)


def pod_manifest(keys: KubernetesKeys, run_id: str, index: int, node: str, gpus: int, command: list[str],
                 env: dict[str, str], deadline_s: int) -> dict[str, Any]:
    """One pod: pinned to `node` (nodeName), every GPU it has (`gpus`, its allocatable nvidia.com/gpu) and one of the
    contract's RDMA resource, the node's own network, the host's /sys read-only at /host/sys, privileged only where
    the contract allows, labelled with the launch's ID and bounded by activeDeadlineSeconds."""
    limits = {GPU: str(gpus), **({keys.rdma_resource: "1"} if keys.rdma_resource else {})}
    container: dict[str, Any] = {
        "name": CONTAINER, "image": keys.image, "command": command[:1], "args": command[1:],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": {"limits": limits},
        "securityContext": {"privileged": keys.privileged},
        "volumeMounts": [{"name": "host-sys", "mountPath": HOST_SYS, "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    metadata: dict[str, Any] = {"name": f"gpuaccept-{run_id}-{index}", "labels": {LABEL: run_id}}
    if keys.namespace:
        metadata["namespace"] = keys.namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {
        "nodeName": node, "restartPolicy": "Never", "activeDeadlineSeconds": deadline_s,
        "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", "enableServiceLinks": False,
        "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 10,
        "tolerations": [dict(t) for t in TOLERATIONS], "containers": [container],
        "volumes": [{"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
                    # NCCL's shared memory between the ranks of a node: a container's own /dev/shm is 64 MiB
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}


def _link_step(words: list[str]) -> bool:
    """A command of a link step (started with its peers' at once): iperf3, or the node side of cluster.links.rdma."""
    return iperf3.TOOL in words[:5] or (RDMA_SIDE in words[:3] and "run" in words[:4])


def in_pod(argv: list[str]) -> list[str]:
    """A command as the pod runs it: the image's python3 for this interpreter; a node's run (and a link's node side)
    reads the host's /sys where the pod mounts it; an iperf3 client tries a refused connection again (_RETRY_REFUSED)."""
    words = [PYTHON, *argv[1:]] if argv and argv[0] == sys.executable else list(argv)
    if "node-run" in words[:4]:
        words = [w for w in words if not w.startswith("--gpuaccept-sysfs=")] + [f"--gpuaccept-sysfs={HOST_SYS}"]
    if words[:1] == [PYTHON] and "--sysfs" in words[:-1] and words[words.index("--sysfs") + 1] == "/sys":
        words[words.index("--sysfs") + 1] = HOST_SYS
    if words[:1] == [iperf3.TOOL] and "-c" in words:
        words = ["sh", "-c", _RETRY_REFUSED, "sh", *words]
    return words


def launch_id() -> str:
    """A fresh value of the gpuaccept-run label for one launch (one node's run, one all_reduce)."""
    return f"ga-{secrets.token_hex(6)}"


@dataclass(frozen=True, slots=True)
class Kubernetes:
    """Kubernetes through kubectl: nodes from the API, one pod per node and launch (pods.py), no MPI or sshd."""

    keys: KubernetesKeys
    selector: tuple[Requirement, ...] | None
    deadline_s: int
    name: str = "kubernetes"
    own_tmpdir: bool = False

    @classmethod
    def of(cls, section: ClusterSection) -> Kubernetes:
        return cls(section.kubernetes or KubernetesKeys(), parse_selector(section.selector) if section.selector else None,
                   max(1, round(section.node_timeout.seconds)))

    def kubectl(self, *verb: str, executable: str = KUBECTL) -> list[str]:
        """kubectl with the contract's context and namespace, then the verb."""
        return [executable, *(["--context", self.keys.context] if self.keys.context else []),
                *(["-n", self.keys.namespace] if self.keys.namespace else []), *verb]

    def expand_argv(self, expressions: tuple[str, ...]) -> list[str] | None:
        return self.kubectl("get", "nodes", "-o", "json") if self.selector is not None else None

    def expand(self, expressions: tuple[str, ...], output: str | None) -> list[str]:
        if self.selector is None:
            return own_expansion(expressions)
        nodes = parse_nodes(output or "")
        names = [name for name, node in nodes.items() if matches((node.get("metadata") or {}).get("labels") or {},
                                                                 self.selector)]
        if not names:
            shown = ",".join(f"{k}{op}{v}" for k, op, v in self.selector)
            raise ClusterError(f"no node matches the selector {shown} (of the {len(nodes)} `kubectl get nodes` lists)")
        return names

    def inventory_argv(self, nodes: list[str]) -> list[str] | None:
        return self.kubectl("get", "nodes", "-o", "json")

    def inventory(self, nodes: list[str], output: str | None) -> dict[str, NodeState]:
        known = parse_nodes(output or "")
        return {name: node_state(known[name]) if name in known else
                NodeState(name, False, False, "not in the cluster", None,
                          f"`kubectl get nodes` lists no node {name}", f"the node's allocatable {GPU}")
                for name in nodes}

    def _launcher(self, nodes: list[str]) -> list[str]:
        executable = find_tool(KUBECTL, {}) or KUBECTL  # as the tool runner finds it for the inventory: on PATH
        return [sys.executable, "-m", PODS_MODULE, "--kubectl", executable,
                *(["--context", self.keys.context] if self.keys.context else []),
                *(["--namespace", self.keys.namespace] if self.keys.namespace else []),
                *(["--image", self.keys.image] if self.keys.image else []),
                *(["--privileged"] if self.keys.privileged else []),
                *(["--rdma-resource", self.keys.rdma_resource] if self.keys.rdma_resource else []),
                "--run", launch_id(), "--deadline-s", str(self.deadline_s), "--port", str(self.keys.port),
                *(f"--node={n}" for n in nodes)]

    def on_node(self, node: str, argv: list[str]) -> list[str]:
        words = in_pod(argv)
        if _link_step(words):
            words = [PYTHON, "-c", _GATE, f"{time.time() + START_GATE_S:.3f}", *words]
        return [*self._launcher([node]), "--", *words]

    def mpi_job(self, nodes: list[str], ranks_per_node: int, argv: list[str], env: dict[str, str]) -> list[str]:
        """No MPI: a pod on every node runs the shipped PyTorch all_reduce (nccl-tests' sizes and iterations, its
        output format), meeting at the first pod's node (the launcher adds each pod's rank and the address)."""
        asked = [word for flag in ("-b", "-e", "-f", "-n", "-w")
                 if (value := option_value(argv[1:], flag)) is not None for word in (flag, value)]
        workload = [PYTHON, "-m", torch_allreduce.__name__, "-g", str(ranks_per_node), *asked]
        return [*self._launcher(nodes), "--rendezvous", *(f"--env={k}={v}" for k, v in sorted(env.items())), "--",
                *workload]

    def launched(self, stderr: str) -> tuple[tuple[str, str], ...]:
        """The launcher's `gpuaccept-pod key=value ...` lines (its own stream): the pod, its node, its image and the
        digest the kubelet ran (imageID)."""
        facts: list[tuple[str, str]] = []
        for line in stderr.splitlines():
            words = line.split("] ", 1)[-1].split()  # after the launcher's `[   1.2 s] ` time
            if words[:1] == ["gpuaccept-pod"]:
                facts += [tuple(word.split("=", 1)) for word in words[1:] if "=" in word]  # type: ignore[misc]
        return tuple(facts)
