"""Preflight: for every clause a contract asks for, what it needs on this host, whether it is there
(path and provenance), and how to get what is missing. `python -m pytest_gpuaccept doctor --contract X`
says it in one screen before a 30-minute run; a run says the same in one line at its start. Missing
things are never skipped by a run: their clauses are not measured and the run is rejected, as always.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path
from typing import Any

import yaml

from .clauses import (
    allreduce,
    cluster,
    compute,
    gpus,
    host_bandwidth,
    memory_bandwidth,
    network,
    nvlink,
    p2p,
    sdc,
    utilisation,
)
from .cluster.base import ClusterError
from .cluster.kubernetes import GPU, Kubernetes, node_state, parse_nodes
from .contract import Contract
from .i18n import DEFAULT, tr
from .probes._run import find_tool
from .probes.provenance import flags, read_provenance

TOOL_IPERF3 = "iperf3"  # the tool, named as the contract's `tools:` key
SCHEDULER = "scheduler"  # the kind of a need that is a daemon answering, not a file: Slurm's controller
KUBERNETES = "kubernetes"  # the kind of the Kubernetes API answering kubectl: the nodes it sees and their GPUs
SETTING = "setting"  # the kind of a contract key that must be set (cluster.kubernetes.image)
IMAGE = "cluster.kubernetes.image"
PING_TIMEOUT_S = 15.0  # Slurm whose SLURM_CONF names no file retries for 60 s before it says so
_UP = re.compile(r"^Slurmctld\((primary|backup)\) at \S+ is UP$")


@dataclass
class Need:
    name: str  # a tool on PATH, a Python module, or a library
    kind: str  # tool | python | library | scheduler
    hint: str  # how to get it on this host
    clauses: list[str] = field(default_factory=list)
    found: str | None = None  # where it is; None: missing
    detail: str = ""  # version, provenance, or why it is not usable
    lines: list[str] = field(default_factory=list)  # shown under it, one a line (the Kubernetes nodes)


def _cuda_home() -> str:
    for candidate in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if candidate and Path(candidate, "bin", "nvcc").exists():
            return candidate
    return "<CUDA toolkit, e.g. /usr/local/cuda>"


def _nccl_home() -> str:
    found = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libnccl.so*") + glob.glob("/usr/local/nccl*/lib/libnccl.so*"))
    if found:
        return str(Path(found[-1]).parent.parent) if "/usr/local/" in found[-1] else "/usr"
    return "<NCCL, e.g. /usr (Debian/Ubuntu: apt install libnccl2 libnccl-dev)>"


DISTRIBUTION = "pytest-gpuaccept"


def project_source() -> str:
    """Where this copy of pytest-gpuaccept was installed from (its folder or wheel), as pip takes it again: no index
    has the project (and a name on an index is anyone's to register), so `pip install pytest-gpuaccept[...]` would
    fetch nothing, or someone else's code."""
    try:
        direct = distribution(DISTRIBUTION).read_text("direct_url.json")
        url = str(json.loads(direct).get("url", "")) if direct else ""
    except (PackageNotFoundError, ValueError, AttributeError):
        url = ""
    if url.startswith("file://"):
        return url.removeprefix("file://")
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return str(checkout)
    return "<this project's folder or wheel, as you installed it>"


def torch_requirement() -> str:
    """The PyTorch the project's `torch` extra asks for (`torch>=2.1`), read from this install's metadata."""
    try:
        required = distribution(DISTRIBUTION).requires or []
    except PackageNotFoundError:
        required = []
    for line in required:
        spec, _, marker = line.partition(";")
        if spec.strip().startswith("torch") and "torch" in marker:
            return spec.strip().replace(" ", "")
    return "torch"


# How to get each need, as templates (i18n): {cuda}, {nccl}, {torch} and {project} are this host's (_hints).
HINTS = {
    "nvidia-smi": "the NVIDIA driver (Debian/Ubuntu: nvidia-driver / nvidia-utils-<version>; RHEL: nvidia-driver "
                  "from NVIDIA's CUDA repository)",
    "libnvidia-ml.so.1": "the NVIDIA driver's NVML library (installed with the driver)",
    "libcuda.so.1": "the NVIDIA driver's CUDA library (installed with the driver)",
    "pynvml": "pip install nvidia-ml-py (a dependency of pytest-gpuaccept: reinstall it)",
    "all_reduce_perf": "git clone https://github.com/NVIDIA/nccl-tests && make -C nccl-tests CUDA_HOME={cuda} "
                       "NCCL_HOME={nccl} (for a cluster: MPI=1 MPI_HOME=<Open MPI>, at the same path on every "
                       "node); then put nccl-tests/build on PATH or set tools.all_reduce_perf",
    "nvbandwidth": "git clone https://github.com/NVIDIA/nvbandwidth && cd nvbandwidth && cmake . && make "
                   "(needs libboost-program-options-dev / boost-devel and CUDA); or DCGM 4, which ships it",
    "p2pBandwidthLatencyTest": "git clone https://github.com/NVIDIA/cuda-samples and build "
                               "Samples/5_Domain_Specific/p2pBandwidthLatencyTest with cmake",
    "torch": "pip install '{torch}' (a CUDA build of PyTorch: https://pytorch.org/get-started/locally/), or this "
             "project's extra from where it was installed: pip install '{project}[torch]'",
    "ib_write_bw": "Debian/Ubuntu: apt install perftest; RHEL: dnf install perftest",
    "ethtool": "Debian/Ubuntu: apt install ethtool; RHEL: dnf install ethtool",
    TOOL_IPERF3: "Debian/Ubuntu: apt install iperf3; RHEL: dnf install iperf3 (3.16 or newer is multi-threaded)",
    "ip": "Debian/Ubuntu: apt install iproute2; RHEL: dnf install iproute",
    "dmesg": "Debian/Ubuntu/RHEL: util-linux; reading the kernel log needs root or kernel.dmesg_restrict=0 "
             "(else `journalctl -k` is read: the systemd-journal or adm group)",
    "scontrol": "Slurm's client commands (Debian/Ubuntu: apt install slurm-client; RHEL: dnf install slurm), "
                "on the login node",
    "srun": "Slurm's client commands (Debian/Ubuntu: apt install slurm-client; RHEL: dnf install slurm)",
    "slurmctld": "Slurm's controller must answer this login node: slurm.conf where Slurm looks for it (or SLURM_CONF "
                 "naming it), munge running with the cluster's key, slurmctld up (systemctl status slurmctld)",
    "mpirun": "Open MPI (Debian/Ubuntu: apt install openmpi-bin; RHEL: dnf install openmpi) on every node, "
              "and ssh from the login node to each",
    "kubectl": "kubectl (https://kubernetes.io/docs/tasks/tools/, or your cloud's CLI: gcloud components install "
               "kubectl, az aks install-cli) with a kubeconfig for the cluster (KUBECONFIG or ~/.kube/config)",
    KUBERNETES: "a kubeconfig context that reaches the cluster and may list nodes (RBAC: docs/cluster.md); "
                "`kubectl get nodes` must answer from this machine",
    IMAGE: "set cluster.kubernetes.image: an image with python3, this version of pytest-gpuaccept and the per-node "
           "tools (docs/cluster.md), by digest (@sha256:...)",
}


# Under ib_write_bw where the rdma section has no peer: what its figure measures, and what measures the fabric.
LOOPBACK_NOTE = ("rdma without a peer measures the HCA only (loopback to localhost: no cable or switch); the fabric "
                 "between nodes: cluster.links.rdma (a cluster section, run from the login node)")


def _hints(lang: str = DEFAULT) -> dict[str, str]:
    fields = {"cuda": _cuda_home(), "nccl": _nccl_home(), "torch": torch_requirement(), "project": project_source()}
    return {name: tr(lang, template, **fields) for name, template in HINTS.items()}


@dataclass
class _Needs:
    """The needs found so far: one per thing, each with the clauses that need it."""

    hints: dict[str, str] = field(default_factory=_hints)
    found: dict[str, Need] = field(default_factory=dict)

    def add(self, name: str, kind: str, clause: str) -> None:
        hint = self.hints.get(name) or tr(DEFAULT, "install {name}", name=name)
        need = self.found.setdefault(name, Need(name, kind, hint))
        if clause not in need.clauses:
            need.clauses.append(clause)


def needs(contract: Contract) -> list[Need]:
    """What each clause of the contract needs, one entry per thing, with the clauses that need it."""
    table = _Needs()
    site = cluster.SECTION.get(contract)
    if site is not None and contract.node is None:
        _login_node(site, table)
    else:
        _gpu_host(contract, table)
        _network_and_load(contract, table)
    return list(table.found.values())


def _login_node(site: cluster.ClusterSection, table: _Needs) -> None:
    """The login node of a cluster needs the engine (and nccl-tests at the same path as on the nodes); what each
    node needs is the per-node sections' list, on that node: run doctor there."""
    if site.engine == "kubernetes":
        for name, kind in (("kubectl", "tool"), (KUBERNETES, KUBERNETES), (IMAGE, SETTING)):
            table.add(name, kind, cluster.SECTION.name)
        table.found[IMAGE].found = (site.kubernetes.image if site.kubernetes else None)
        return
    engine = ("scontrol", "srun") if site.engine == "slurm" else ("mpirun",)
    for command in engine:
        table.add(command, "tool", cluster.SECTION.name)
    if site.engine == "slurm":
        table.add("slurmctld", SCHEDULER, cluster.SECTION.name)
    if site.pairs is not None or site.allreduce is not None:
        table.add("all_reduce_perf", "tool", cluster.SECTION.name)


def _gpu_host(contract: Contract, table: _Needs) -> None:
    """The driver, and the tools that measure the GPUs and their links."""
    sections = contract.by_section
    if gpus.SECTION.name in sections:
        for name, kind in (("pynvml", "python"), ("libnvidia-ml.so.1", "library"), ("libcuda.so.1", "library")):
            table.add(name, kind, gpus.SECTION.name)
    if nvlink.SECTION.name in sections:
        table.add("nvidia-smi", "tool", nvlink.SECTION.name)
    tools = {
        p2p.SECTION.name: getattr(sections.get(p2p.SECTION.name), "tool", None),
        host_bandwidth.SECTION.name: getattr(sections.get(host_bandwidth.SECTION.name), "tool", None),
        allreduce.SECTION.name: getattr(sections.get(allreduce.SECTION.name), "tool", None),
    }
    for section_name, tool in tools.items():
        if section_name in sections:
            wanted = "torch" if tool == "torch" else "all_reduce_perf" if section_name == allreduce.SECTION.name else tool
            table.add(str(wanted), "python" if wanted == "torch" else "tool", section_name)
    local = memory_bandwidth.SECTION.get(contract)
    if local is not None:  # no tool named: nvbandwidth where the run finds it, else PyTorch
        copier = local.tool or ("nvbandwidth" if find_tool("nvbandwidth", contract.tools.paths) else "torch")
        table.add(copier, "python" if copier == "torch" else "tool", memory_bandwidth.SECTION.name)
    if compute.SECTION.name in sections:
        table.add("torch", "python", compute.SECTION.name)
    checked = sdc.SECTION.get(contract)
    if checked is not None:  # the checked all_reduce always; the seeded GEMM unless `gemm: false`
        table.add("all_reduce_perf", "tool", sdc.SECTION.name)
        if checked.gemm is not False:
            table.add("torch", "python", sdc.SECTION.name)


def _network_and_load(contract: Contract, table: _Needs) -> None:
    """The network tools, the training load and the kernel log."""
    sections = contract.by_section
    if network.NICS.name in sections:
        table.add("ethtool", "tool", network.NICS.name)
    if network.RDMA.name in sections:
        table.add("ib_write_bw", "tool", network.RDMA.name)
        if getattr(sections[network.RDMA.name], "peer", None) is None:
            table.found["ib_write_bw"].lines.append(LOOPBACK_NOTE)
    if network.IPERF3.name in sections:
        table.add(TOOL_IPERF3, "tool", network.IPERF3.name)
        table.add("ip", "tool", network.IPERF3.name)
    load = utilisation.UTILISATION.get(contract)
    if load is not None:
        table.add("pynvml", "python", utilisation.UTILISATION.name)
        if load.workload == "builtin":
            table.add("torch", "python", utilisation.UTILISATION.name)
        else:
            table.add(load.workload[0], "tool", utilisation.UTILISATION.name)
    health = utilisation.HEALTH.get(contract)
    if health is not None and health.xid:
        table.add("dmesg", "tool", utilisation.HEALTH.name)


def look(need: Need, paths: dict[str, str], nvml_recording: Path | None = None, provenance: bool = True) -> Need:
    """Find one need on this host; fills `found` and `detail`."""
    if need.kind == "tool":
        found = need.found = find_tool(need.name, paths)  # as the run will look for it
        if found and provenance:
            origin = read_provenance(found)
            package = origin.get("package") or origin.get("package_note") or "no package"
            need.detail = f"{origin.get('kind', '?')}, {package}" + "".join(
                f"; look twice: {flag}" for flag in flags(origin, expects_binary=True))
    elif need.kind in (KUBERNETES, SETTING):
        pass  # asked with the contract's context (kubernetes_answers), or set in the contract
    elif need.kind == SCHEDULER:
        scontrol = find_tool("scontrol", paths)
        if scontrol is None:
            need.detail = "not asked: scontrol is missing"
        else:
            answered, need.detail = slurm_answers(scontrol)
            need.found = scontrol if answered else None
    elif need.kind == "python":
        spec = importlib.util.find_spec(need.name)
        need.found = spec.origin if spec is not None and spec.origin else None
        if need.found:
            try:
                need.detail = "version " + version("nvidia-ml-py" if need.name == "pynvml" else need.name)
            except PackageNotFoundError:
                need.detail = ""
            if need.name == "torch" and need.detail.endswith("+cpu"):
                need.found, need.detail = None, f"{need.detail}: a CPU-only build, it cannot load a GPU"
    else:
        if nvml_recording is not None:
            need.found, need.detail = str(nvml_recording), "simulated: NVML readings from this recording"
        else:
            try:
                ctypes.CDLL(need.name)
                need.found = ctypes.util.find_library(need.name.split(".so")[0].removeprefix("lib")) or need.name
            except OSError as exc:
                need.found, need.detail = None, str(exc)[:160]
    return need


def slurm_answers(scontrol: str, timeout_s: float = PING_TIMEOUT_S) -> tuple[bool, str]:
    """Whether Slurm's controller answers `scontrol ping`, and what Slurm said, in its own words.

    Slurm 22.05 prints one line per controller, `Slurmctld(primary) at ctl is UP` (exit 0) or `... is DOWN` (exit 1,
    then a banner of asterisks). With no slurm.conf and no DNS SRV record it exits 1 after `scontrol: fatal: Could
    not establish a configuration source`; with SLURM_CONF naming a missing file it retries for 60 s
    (`scontrol: error: s_p_parse_file: cannot stat file ...`): the timeout cuts that short.
    """
    try:
        done = subprocess.run([scontrol, "ping"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        said = _decoded(exc.stderr).strip().splitlines() or _decoded(exc.stdout).strip().splitlines()
        return False, f"scontrol ping: no answer in {timeout_s:g} s" + (f" ({said[-1].strip()})" if said else "")
    except OSError as exc:
        return False, f"scontrol ping could not start: {exc}"
    lines = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines()
             if line.strip() and not line.startswith("*")]
    if any(_UP.match(line) for line in lines):
        return True, "scontrol ping: " + "; ".join(lines)
    return False, f"scontrol ping exit {done.returncode}: " + ("; ".join(lines[-2:]) or "no output")


def _decoded(output: str | bytes | None) -> str:
    """What a timed-out run printed so far: bytes even when text was asked for."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def kubernetes_answers(need: Need, contract: Contract, timeout_s: float = PING_TIMEOUT_S) -> Need:
    """The Kubernetes API, asked as the run will (`kubectl [--context C] [-n NS] get nodes -o json`): the context, each
    node it lists with its state and GPUs, and which of them the contract's cluster.nodes names."""
    section = cluster.SECTION.of(contract)
    engine = Kubernetes.of(section)
    kubectl = find_tool("kubectl", {})
    if kubectl is None:
        need.detail = "not asked: kubectl is missing"
        return need
    context = engine.keys.context or current_context() or "(none: kubectl has no current context)"
    where = f"context {context}, namespace {engine.keys.namespace or '(the context says)'}"
    try:
        done = subprocess.run(engine.kubectl("get", "nodes", "-o", "json", executable=kubectl), capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        nodes = parse_nodes(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ClusterError) as exc:
        need.detail = f"{where}: `kubectl get nodes` gave no list of nodes: {exc}"
        return need
    if nodes is None:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        need.detail = f"{where}: `kubectl get nodes` exit {done.returncode}: {said}"
        return need
    try:
        wanted = set(engine.expand(section.nodes, done.stdout))
    except ClusterError as exc:
        wanted, need.detail = set(), f"{exc}; "
    usable = 0
    for name, node in nodes.items():
        line, runnable = _node_line(name, node, name in wanted)
        need.lines.append(line)
        usable += runnable
    need.found = where if usable else None
    need.detail += f"`kubectl get nodes`: {len(nodes)} nodes, {usable} of the contract's schedulable"
    return need


def _node_line(name: str, node: dict[str, Any], wanted: bool) -> tuple[str, bool]:
    """One node as the doctor shows it (state, GPUs, the GPU Operator's product) and whether a run would start it."""
    try:
        state = node_state(node)
    except ClusterError as exc:
        return f"{name}  {exc}", False
    product = dict(state.facts).get("gpu_product")
    return (f"{name}  {state.state}  {state.gpus} {GPU}" + (f" x {product}" if product else "")
            + ("" if wanted else "  (not in cluster.nodes)") + (f"  ({state.reason})" if state.reason else ""),
            wanted and state.schedulable)


def current_context() -> str | None:
    """kubectl's current context, read from the kubeconfig files as kubectl merges them (the first file to set it)."""
    files = os.environ.get("KUBECONFIG") or os.path.join(os.path.expanduser("~"), ".kube", "config")
    for path in files.split(os.pathsep):
        try:
            config = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(config, dict) and config.get("current-context"):
            return str(config["current-context"])
    return None


def diagnose(contract: Contract, nvml_recording: Path | None = None, provenance: bool = True) -> list[Need]:
    found = [look(need, contract.tools.paths, nvml_recording, provenance) for need in needs(contract)]
    return [kubernetes_answers(need, contract) if need.kind == KUBERNETES else need for need in found]


def render(found: list[Need], contract: Contract, lang: str = DEFAULT) -> str:
    """The doctor's screen, in the language asked (the names, paths and the tools' own words as they are)."""
    missing = [n for n in found if n.found is None]
    hints = _hints(lang) if lang != DEFAULT else {}
    ok, absent = tr(lang, "ok"), tr(lang, "MISSING")
    lines = [tr(lang, "pytest-gpuaccept doctor: {path}", path=contract.path), ""]
    for need in found:
        clauses = ", ".join(need.clauses)
        if need.found is not None:
            lines.append(f"  {ok:8} {need.name:26} {need.found}" + (f" ({need.detail})" if need.detail else "")
                         + f"  [{clauses}]")
        else:
            lines.append(f"  {absent:8} {need.name:26} " + tr(lang, "needed by {clauses}", clauses=clauses)
                         + (f" ({need.detail})" if need.detail else ""))
        lines += [f"             {line}" for line in need.lines]
        if need.found is None:
            hint = hints.get(need.name, tr(lang, "install {name}", name=need.name)) if hints else need.hint
            lines.append("           " + tr(lang, "get it: {hint}", hint=hint))
    lines.append("")
    lines.append(tr(lang, "{missing} of {total} missing: a run now would reject {clauses} as not measured",
                    missing=len(missing), total=len(found),
                    clauses=", ".join(sorted({c for n in missing for c in n.clauses}))) if missing
                 else tr(lang, "all {total} present: every clause can be measured", total=len(found)))
    return "\n".join(lines)


def summary(contract: Contract, nvml_recording: Path | None, lang: str = DEFAULT) -> str | None:
    """The one line a run prints at its start (lookups only, no package queries, the scheduler not asked: the run
    asks it at once): None when nothing is missing."""
    looked = [look(n, contract.tools.paths, nvml_recording, provenance=False) for n in needs(contract)
              if n.kind not in (SCHEDULER, KUBERNETES)]
    missing = [n for n in looked if n.found is None]
    if not missing:
        return None
    shown = "; ".join(f"{n.name} ({', '.join(n.clauses)})" for n in missing)
    return tr(lang, "gpuaccept preflight: missing {missing}: those clauses will be not measured. "
                    "`python -m pytest_gpuaccept doctor --contract {path}` says how to get them",
              missing=shown, path=contract.path)


def as_dict(found: list[Need]) -> list[dict[str, Any]]:
    return [{"name": n.name, "kind": n.kind, "clauses": n.clauses, "found": n.found, "detail": n.detail,
             "lines": n.lines, "hint": None if n.found else n.hint} for n in found]
