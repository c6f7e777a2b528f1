"""A stand-in `kubectl` for the Kubernetes engine's tests (a test helper, not part of the package): exactly the protocol
the engine speaks, over the network-namespace nodes of netns_cluster.py, and nothing else.

- `get nodes -o json`: the node objects the test wrote (built from real `kubectl get nodes -o json` documents,
  tests/data/kubernetes/), as a List.
- `apply -f - -o json`: Pods only; each is recorded, admitted as a kubelet would (its node known and Ready, its
  nvidia.com/gpu not above what the node's other running pods leave, the image known), then its container runs in
  its node's namespaces: the node's network (hostNetwork only) and hostname, a mount namespace whose root holds the
  machine's folders plus the pod's volumes (hostPath from the node's "host" folders, e.g. a sysfs tree for /sys;
  emptyDir as tmpfs; readOnly enforced) and a PID namespace, so that killing it kills every process of the pod.
  A supervisor process watches it: Running, then Succeeded or Failed (exit code), or DeadlineExceeded.
- `get pods -l gpuaccept-run=ID -o json`, `logs POD [-c C]`, `delete pods,jobs -l gpuaccept-run=ID --wait=false`.

Every call is logged (calls.jsonl), every applied manifest kept (applied.jsonl), every process started recorded
(started.jsonl), so that a test can say what the engine did and that nothing is left. The state folder is named in
the kubeconfig (KUBECONFIG): `server: standin://<folder>`.

As a program: `kubectl_standin.py ARGS...` (the kubectl shim execs it), `--supervise STATE KEY` (a pod's supervisor),
`--fake-allreduce ARGS` (the image's `python3 -m pytest_gpuaccept.workloads.torch_allreduce`, see fake_allreduce).
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import yaml

LABEL = "gpuaccept-run"
GPU = "nvidia.com/gpu"
DATA = Path(__file__).parent / "data"
REAL_NODES = DATA / "kubernetes" / "rke2_a16_vgpu_gpu_operator_nodes.json"
NON_GPU_NODES = DATA / "kubernetes" / "aks_3node_no_gpu_nodes.json"
# The recorded 2-node H100 log the Slurm tests' fake all_reduce scales too (fleet_fakes.LOG; not imported: a kubectl
# call must start fast, and fleet_fakes brings the package in).
LOG = DATA / "fleet" / "nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The pod's root: the machine's top-level folders bound into a tmpfs, then the pod's volumes, then chroot. Arguments:
# ROOT HOSTNAME (KIND SOURCE TARGET ro|rw)... -- COMMAND...
POD_ROOT = r'''
set -e
root=$1; host=$2; shift 2
hostname "$host"
mount -t tmpfs -o size=16m,mode=755 gpuaccept-pod "$root"
for d in /*; do
  n=${d#/}
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$root/$n"
  elif [ -d "$d" ]; then mkdir "$root/$n" && mount --rbind "$d" "$root/$n"
  fi
done
while [ "$1" != "--" ]; do
  kind=$1; src=$2; dst=$3; mode=$4; shift 4
  mkdir -p "$root$dst"
  if [ "$kind" = tmpfs ]; then mount -t tmpfs -o size=64m gpuaccept-shm "$root$dst"; else mount --bind "$src" "$root$dst"; fi
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$root$dst"; fi
done
shift
exec chroot "$root" "$@"
'''


# ------------------------------------------------------------------ what a test sets up and reads


def gpu_node(name: str, address: str, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3") -> dict[str, Any]:
    """A node object made from the real RKE2 GPU node (tests/data/kubernetes/SOURCES.md): renamed, its addresses the
    namespace node's, `gpus` allocatable and counted by the GPU Operator's label, an H100's product and memory."""
    real = json.loads(REAL_NODES.read_text())["items"][0]
    node = copy.deepcopy(real)
    node["metadata"]["name"] = name
    node["metadata"]["uid"] = f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}"
    labels = node["metadata"]["labels"]
    for key in [k for k in labels if k.startswith("node-role.kubernetes.io/")]:
        del labels[key]  # a worker, not the real document's control-plane node
    labels.update({"kubernetes.io/hostname": name, "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.product": product,
                   "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper"})
    annotations = node["metadata"]["annotations"]
    for key in ("alpha.kubernetes.io/provided-node-ip", "flannel.alpha.coreos.com/public-ip", "rke2.io/internal-ip"):
        if key in annotations:
            annotations[key] = address
    annotations["rke2.io/hostname"] = name
    node["spec"]["providerID"] = f"rke2://{name}"
    status = node["status"]
    status["addresses"] = [{"address": address, "type": "InternalIP"}, {"address": name, "type": "Hostname"}]
    for key in ("allocatable", "capacity"):
        status[key][GPU] = str(gpus)
    return node


def non_gpu_node() -> dict[str, Any]:
    """The first node of the real AKS document: Ready, no nvidia.com/gpu at all, no runtime here."""
    return json.loads(NON_GPU_NODES.read_text())["items"][0]


def set_ready(node: dict[str, Any], ready: bool, reason: str = "KubeletNotReady",
              message: str = "PLEG is not healthy: pleg was last seen active 3m0.5s ago") -> None:
    for condition in node["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update({"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
                             if ready else {"status": "False", "reason": reason, "message": message})


def cordon(node: dict[str, Any]) -> None:
    """As `kubectl cordon` leaves it: spec.unschedulable and the node controller's taint."""
    node["spec"]["unschedulable"] = True
    node["spec"]["taints"] = [*node["spec"].get("taints", []), {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable",
                                                                "timeAdded": "2026-01-05T10:00:00Z"}]


class StandIn:
    """The stand-in's state folder and the kubectl shim beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        for sub in ("pods", "logs", "roots"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        self.bin = folder / "bin"
        self.bin.mkdir(exist_ok=True)
        shim = self.bin / "kubectl"
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} "$@"\n')
        shim.chmod(0o755)
        self.kubeconfig = folder / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "trial",
            "clusters": [{"name": "standin", "cluster": {"server": f"standin://{folder}"}}],
            "contexts": [{"name": "trial", "context": {"cluster": "standin", "user": "buyer", "namespace": "gpuaccept"}},
                         {"name": "other", "context": {"cluster": "standin", "user": "buyer"}}],
            "users": [{"name": "buyer", "user": {"token": "not-a-secret"}}]}))

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        (self.folder / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes,
                                                            "metadata": {"resourceVersion": ""}}, indent=1))

    def set_runtime(self, nodes: dict[str, dict[str, Any]], images: dict[str, dict[str, str]]) -> None:
        """nodes: name -> {netns, hostname, host: {"/sys": folder}}; images: reference -> {bin, image_id}."""
        (self.folder / "runtime.json").write_text(json.dumps({"nodes": nodes, "images": images}, indent=1))

    def pods(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted((self.folder / "pods").glob("*.json"))]

    def _lines(self, name: str) -> list[dict[str, Any]]:
        path = self.folder / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def calls(self) -> list[dict[str, Any]]:
        return self._lines("calls.jsonl")

    def applied(self) -> list[dict[str, Any]]:
        return self._lines("applied.jsonl")

    def alive(self) -> list[int]:
        """The pids of pod processes (container and supervisor) started and still running."""
        pids = [p for entry in self._lines("started.jsonl") for p in (entry["container"], entry["supervisor"])]
        return [pid for pid in pids if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"]

    def reset(self) -> None:
        for name in ("calls.jsonl", "applied.jsonl", "started.jsonl"):
            (self.folder / name).unlink(missing_ok=True)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


# ------------------------------------------------------------------ kubectl itself


class Refused(Exception):
    """kubectl's own error: the message and exit code kubectl gives."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _state_folder() -> tuple[Path, dict[str, Any]]:
    path = os.environ.get("KUBECONFIG") or os.path.join(os.environ.get("HOME", "/"), ".kube", "config")
    try:
        config = yaml.safe_load(Path(path.split(":")[0]).read_text())
    except OSError:
        raise Refused("error: no configuration has been provided, try setting KUBERNETES_MASTER environment variable") \
            from None
    server = config["clusters"][0]["cluster"]["server"]
    return Path(server.removeprefix("standin://")), config


def _namespace(config: dict[str, Any], context: str | None, namespace: str | None) -> str:
    name = context or config.get("current-context")
    contexts = {c["name"]: c["context"] for c in config.get("contexts", [])}
    if name not in contexts:
        raise Refused(f'error: context "{name}" does not exist')
    return namespace or contexts[name].get("namespace") or "default"


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _append(folder: Path, name: str, entry: dict[str, Any]) -> None:
    with open(folder / name, "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a reader (the test, without the lock) never sees a record half written."""
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def _key(namespace: str, name: str) -> str:
    return f"{namespace}__{name}"


def _globals(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """--context and -n before the verb (the engine puts them there); the rest."""
    context = namespace = None
    rest = list(argv)
    while rest[:1] and rest[0] in ("--context", "-n", "--namespace") and len(rest) > 1:
        if rest[0] == "--context":
            context = rest[1]
        else:
            namespace = rest[1]
        rest = rest[2:]
    return context, namespace, rest


def kubectl(argv: list[str], stdin: str) -> tuple[str, str, int]:
    """One kubectl call: (stdout, stderr, exit code)."""
    context, namespace, verb = _globals(argv)
    folder, config = _state_folder()
    in_protocol = _verb(verb) is not None
    _append(folder, "calls.jsonl", {"argv": argv, "protocol": in_protocol, "time": time.time()})
    if not in_protocol:
        return "", f"error: the stand-in kubectl implements gpuaccept's protocol only, not: kubectl {' '.join(argv)}\n", 1
    try:
        ns = _namespace(config, context, namespace)
        with _locked(folder):
            return _dispatch(folder, ns, verb, stdin)
    except Refused as exc:
        return "", f"{exc}\n", exc.code


def _verb(words: list[str]) -> str | None:
    """Which verb of the protocol `words` is, exactly as the engine writes it; None for anything else."""
    if words == ["get", "nodes", "-o", "json"]:
        return "nodes"
    if words == ["apply", "-f", "-", "-o", "json"]:
        return "apply"
    if len(words) == 6 and words[:3] == ["get", "pods", "-l"] and words[3].startswith(f"{LABEL}=") and words[4:] == ["-o", "json"]:
        return "pods"
    if words[:1] == ["logs"] and (len(words) == 2 or (len(words) == 4 and words[2] == "-c")):
        return "logs"
    if len(words) == 5 and words[:3] == ["delete", "pods,jobs", "-l"] and words[3].startswith(f"{LABEL}=") \
            and words[4] == "--wait=false":
        return "delete"
    return None


def _dispatch(folder: Path, ns: str, words: list[str], stdin: str) -> tuple[str, str, int]:
    verb = _verb(words)
    if verb == "nodes":
        return (folder / "nodes.json").read_text(), "", 0
    if verb == "apply":
        return _apply(folder, ns, stdin)
    if verb == "pods":
        run_id = words[3].split("=", 1)[1]
        items = [p for p in _pod_records(folder, ns) if p["metadata"].get("labels", {}).get(LABEL) == run_id]
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}), "", 0
    if verb == "logs":
        return _logs(folder, ns, words[1], words[3] if len(words) == 4 else None)
    return _delete(folder, ns, words[3].split("=", 1)[1])


def _pod_records(folder: Path, ns: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((folder / "pods").glob(f"{ns}__*.json"))]


def _apply(folder: Path, ns: str, stdin: str) -> tuple[str, str, int]:
    document = yaml.safe_load(stdin)
    items = document.get("items", []) if document.get("kind") == "List" else [document]
    created = []
    for item in items:
        if item.get("apiVersion") != "v1" or item.get("kind") != "Pod":
            raise Refused(f"error: the stand-in applies v1 Pods only, got {item.get('apiVersion')} {item.get('kind')}")
        name = item["metadata"]["name"]
        if item["metadata"].get("namespace", ns) != ns:
            raise Refused("error: the namespace from the provided object does not match the namespace sent on the request")
        path = folder / "pods" / f"{_key(ns, name)}.json"
        if path.exists():
            raise Refused(f'Error from server (AlreadyExists): pods "{name}" already exists')
        _append(folder, "applied.jsonl", item)
        pod = copy.deepcopy(item)
        pod["metadata"].update({"namespace": ns, "uid": f"pod-{time.time_ns()}", "creationTimestamp": _now()})
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        _write(path, json.dumps(pod))
        created.append(pod)
        supervisor = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--supervise", str(folder),
                                       _key(ns, name)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        pod["metadata"].setdefault("annotations", {})["standin/supervisor"] = str(supervisor.pid)
        _write(path, json.dumps(pod))
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": created, "metadata": {"resourceVersion": ""}}), "", 0


def _logs(folder: Path, ns: str, name: str, container: str | None) -> tuple[str, str, int]:
    path = folder / "pods" / f"{_key(ns, name)}.json"
    if not path.exists():
        raise Refused(f'Error from server (NotFound): pods "{name}" not found')
    pod = json.loads(path.read_text())
    names = [c["name"] for c in pod["spec"]["containers"]]
    if container is not None and container not in names:
        raise Refused(f"error: container {container} is not valid for pod {name}")
    log = folder / "logs" / f"{_key(ns, name)}.log"
    if not log.exists():
        raise Refused(f'Error from server (BadRequest): container "{names[0]}" in pod "{name}" is waiting to start: '
                      "ContainerCreating")
    return log.read_text(errors="replace"), "", 0


def _delete(folder: Path, ns: str, run_id: str) -> tuple[str, str, int]:
    out = []
    for pod in _pod_records(folder, ns):
        if pod["metadata"].get("labels", {}).get(LABEL) != run_id:
            continue
        annotations = pod["metadata"].get("annotations", {})
        for key in ("standin/container", "standin/supervisor"):
            if key in annotations:
                try:
                    os.kill(int(annotations[key]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        key = _key(ns, pod["metadata"]["name"])
        (folder / "pods" / f"{key}.json").unlink()
        (folder / "logs" / f"{key}.log").unlink(missing_ok=True)
        out.append(f'pod "{pod["metadata"]["name"]}" deleted')
    if not out:
        return "", "No resources found\n", 0
    return "\n".join(out) + "\n", "", 0


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------ a pod's supervisor (its kubelet)


def _update(folder: Path, key: str, change: dict[str, Any]) -> dict[str, Any] | None:
    """Merge `change` into the pod's status (and annotations) under the lock; None where the pod was deleted."""
    with _locked(folder):
        path = folder / "pods" / f"{key}.json"
        if not path.exists():
            return None
        pod = json.loads(path.read_text())
        pod["metadata"].setdefault("annotations", {}).update(change.pop("annotations", {}))
        pod["status"].update(change)
        _write(path, json.dumps(pod))
        return pod


def _admit(folder: Path, pod: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """(the node's runtime, the image, None) where the kubelet would run the pod; else why it would not (a status)."""
    runtime = json.loads((folder / "runtime.json").read_text())
    node_name = pod["spec"]["nodeName"]
    nodes = {n["metadata"]["name"]: n for n in json.loads((folder / "nodes.json").read_text())["items"]}
    node = nodes.get(node_name)
    ready = node is not None and any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    if not ready or node_name not in runtime["nodes"]:
        return None, None, None  # no kubelet there to take it: Pending for ever, as on a node that is down
    container = pod["spec"]["containers"][0]
    # Every extended resource the pod asks for (nvidia.com/gpu, an RDMA device plugin's), as the kubelet admits it:
    # what the node's other running pods leave of its allocatable ("1k": a shared device plugin's thousand).
    for resource, asked in container.get("resources", {}).get("limits", {}).items():
        wanted = _quantity(asked)
        with _locked(folder):
            used = sum(_quantity(p["spec"]["containers"][0].get("resources", {}).get("limits", {}).get(resource, "0"))
                       for p in _pod_records(folder, pod["metadata"]["namespace"])
                       if p["spec"]["nodeName"] == node_name and p["metadata"]["name"] != pod["metadata"]["name"]
                       and p["status"].get("phase") == "Running")
        capacity = _quantity(node["status"]["allocatable"].get(resource, "0"))
        if wanted + used > capacity:
            return None, None, (f"OutOf{resource}|Node didn't have enough resource: {resource}, requested: {wanted}, "
                                f"used: {used}, capacity: {capacity}")
    if not pod["spec"].get("hostNetwork"):
        return None, None, "StandIn|the stand-in runs hostNetwork pods only"
    image = runtime["images"].get(container["image"])
    if image is None:
        return runtime["nodes"][node_name], None, None
    return runtime["nodes"][node_name], image, None


def _quantity(text: str) -> int:
    """A count as the API writes it: `8`, `1k` (a thousand)."""
    return int(text[:-1]) * 1000 if text.endswith("k") else int(text)


def _mounts(pod: dict[str, Any], node: dict[str, Any]) -> list[str]:
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    words: list[str] = []
    for mount in pod["spec"]["containers"][0].get("volumeMounts", []):
        volume = volumes[mount["name"]]
        mode = "ro" if mount.get("readOnly") else "rw"
        if "hostPath" in volume:
            path = volume["hostPath"]["path"]
            words += ["bind", node.get("host", {}).get(path, path), mount["mountPath"], mode]
        elif "emptyDir" in volume:
            words += ["tmpfs", "-", mount["mountPath"], mode]
    return words


def supervise(folder: Path, key: str) -> None:
    pod = json.loads((folder / "pods" / f"{key}.json").read_text())
    node, image, refused = _admit(folder, pod)
    container = pod["spec"]["containers"][0]
    if refused is not None:
        reason, message = refused.split("|", 1)
        _update(folder, key, {"phase": "Failed", "reason": reason, "message": message})
        return
    if node is None:
        return
    if image is None:
        _update(folder, key, {"phase": "Pending", "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": False, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": f"failed to pull {container['image']}: not found"}}}]})
        return
    env = [f"{e['name']}={e['value']}" for e in container.get("env", [])]
    command = [*container.get("command", []), *container.get("args", [])]
    root = folder / "roots" / key
    root.mkdir(parents=True, exist_ok=True)
    argv = ["nsenter", f"--net={node['netns']}", "unshare", "--uts", "--mount", "--pid", "--fork", "--kill-child",
            "--mount-proc", "sh", "-c", POD_ROOT, "sh", str(root), node["hostname"], *_mounts(pod, node), "--",
            "/usr/bin/env", "-i", f"PATH={image['bin']}:{SYSTEM_PATH}", "HOME=/root", f"HOSTNAME={node['hostname']}",
            *env, *command]
    log = open(folder / "logs" / f"{key}.log", "wb")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _append(folder, "started.jsonl", {"pod": key, "container": proc.pid, "supervisor": os.getpid()})
    address = node.get("address")
    running = _update(folder, key, {
        "phase": "Running", "startTime": _now(), "hostIP": address, "podIP": address,
        "annotations": {"standin/container": str(proc.pid)},
        "containerStatuses": [{"name": container["name"], "image": container["image"], "imageID": image["image_id"],
                               "ready": True, "restartCount": 0, "started": True,
                               "state": {"running": {"startedAt": _now()}}}]})
    if running is None:  # deleted while starting
        proc.kill()
        return
    _finish(folder, key, proc, pod["spec"].get("activeDeadlineSeconds"), container, image)


def _finish(folder: Path, key: str, proc: subprocess.Popen[bytes], deadline: int | None, container: dict[str, Any],
            image: dict[str, str]) -> None:
    try:
        code = proc.wait(timeout=deadline)
        change: dict[str, Any] = {"phase": "Succeeded" if code == 0 else "Failed"}
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
        change = {"phase": "Failed", "reason": "DeadlineExceeded",
                  "message": "Pod was active on the node longer than the specified deadline"}
    change["containerStatuses"] = [{
        "name": container["name"], "image": container["image"], "imageID": image["image_id"], "ready": False,
        "restartCount": 0, "started": False,
        "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": _now()}}}]
    _update(folder, key, change)


# ------------------------------------------------------------------ the image's PyTorch all_reduce, faked


def write_image(folder: Path) -> Path:
    """The stand-in image's bin folder: a python3 that is this interpreter (with pytest-gpuaccept installed), except
    for the PyTorch all_reduce, which fake_allreduce answers (no GPUs, no torch here)."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python3"
    shim.write_text("#!/bin/sh\n"
                    'if [ "$1" = -m ] && [ "$2" = pytest_gpuaccept.workloads.torch_allreduce ]; then\n'
                    f'  shift 2; exec {sys.executable} {Path(__file__).resolve()} --fake-allreduce "$@"\nfi\n'
                    f'exec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    return folder


def _option(argv: list[str], name: str, default: str | None = None) -> str:
    value = argv[argv.index(name) + 1] if name in argv else default
    if value is None:
        raise SystemExit(f"fake all_reduce: {name} missing")
    return value


def _address() -> str:
    words = subprocess.run(["ip", "-4", "-o", "addr", "show", "eth0"], capture_output=True, text=True).stdout.split()
    return words[3].split("/")[0] if len(words) > 3 else "127.0.0.1"


def fake_allreduce(argv: list[str]) -> int:
    """What the shipped PyTorch all_reduce prints across --nnodes pods, without GPUs: rank 0's pod listens at
    --master-addr:--master-port (a real rendezvous over the nodes' own network), the other pods tell it their host
    and address; it then measures each peer with the real iperf3 (both directions, 1 s, against the iperf3 server
    the test runs on every node) and prints the recorded 2-node H100 log (fleet_fakes.LOG) with every bandwidth
    scaled by the slowest peer's share of the line rate, one `# Rank` line per rank on its node. Constructed, not
    recorded: a test fixture."""
    nodes, rank, per_node = int(_option(argv, "--nnodes")), int(_option(argv, "--node-rank")), int(_option(argv, "-g"))
    master, port = _option(argv, "--master-addr"), int(_option(argv, "--master-port"))
    me = f"{socket.gethostname()} {_address()}"
    if rank != 0:
        deadline = time.time() + 60
        while True:
            try:
                with socket.create_connection((master, port), timeout=5) as conn:
                    conn.sendall(f"{rank} {me}\n".encode())
                    conn.settimeout(120)
                    return 0 if conn.recv(16).startswith(b"done") else 1
            except OSError:
                if time.time() > deadline:
                    print(f"fake all_reduce: rank {rank} could not reach {master}:{port}", file=sys.stderr)
                    return 1
                time.sleep(0.2)
    peers: dict[int, tuple[str, str]] = {0: tuple(me.split())}  # type: ignore[dict-item]
    conns = []
    with socket.create_server((master, port), reuse_port=False) as server:
        server.settimeout(60)
        while len(peers) < nodes:
            conn, _ = server.accept()
            words = conn.makefile().readline().split()
            peers[int(words[0])] = (words[1], words[2])
            conns.append(conn)
        factor = 1.0
        for _host, address in (peers[r] for r in sorted(peers) if r != 0):
            done = subprocess.run(["iperf3", "-c", address, "-t", "1", "--bidir", "-J"], capture_output=True, text=True,
                                  timeout=60)
            end = json.loads(done.stdout)["end"]
            rates = [end[k]["bits_per_second"] for k in ("sum_sent", "sum_received", "sum_sent_bidir_reverse",
                                                         "sum_received_bidir_reverse") if k in end]
            factor = min(factor, min(rates) / 200e6)
        print(_scaled(LOG.read_text(), factor, [peers[r][0] for r in sorted(peers)], per_node), flush=True)
        for conn in conns:
            conn.sendall(b"done\n")
            conn.close()
    return 0


def _scaled(log: str, factor: float, hosts: list[str], per_node: int) -> str:
    out: list[str] = []
    template = None
    for line in log.splitlines():
        tokens = line.split()
        if line.startswith("#  Rank"):
            if template is None:
                template = line
                for r in range(len(hosts) * per_node):
                    out.append(template.replace("Rank  0 ", f"Rank {r:2d} ").replace(
                        f" on {tokens[8]} ", f" on {hosts[r // per_node]} ").replace("device  0 ", f"device {r % per_node:2d} "))
            continue
        if len(tokens) == 13 and tokens[0].isdigit():
            tokens[5], tokens[9] = f"{float(tokens[5]) / factor:.1f}", f"{float(tokens[9]) / factor:.1f}"
            for k in (6, 7, 10, 11):
                tokens[k] = f"{float(tokens[k]) * factor:.2f}"
            line = "  " + "  ".join(f"{x:>10}" for x in tokens)
        out.append(line)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--supervise"]:
        supervise(Path(argv[1]), argv[2])
        return 0
    if argv[:1] == ["--fake-allreduce"]:
        return fake_allreduce(argv[1:])
    stdin = sys.stdin.read() if argv[-4:] == ["-f", "-", "-o", "json"] else ""
    out, err, code = kubectl(argv, stdin)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
