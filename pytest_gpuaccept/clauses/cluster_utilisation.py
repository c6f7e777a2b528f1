"""`cluster.utilisation`: the builtin training load as ONE data-parallel job over every GPU of every node (PyTorch
DistributedDataParallel: NCCL on GPUs, gloo on a CPU build), NVML sampled on every node while it trains; each GPU at
least `min_percent` after the warm-up. A weak network leaves GPUs waiting for the gradients' all_reduce: a failure
names the nodes whose GPUs waited.

The same command runs on every available node at once through the engine (`on_node`: srun, mpirun, a pod), each with
its place in the job (--nnodes, --node-rank) and the first node's address to meet at, the rendezvous the Kubernetes
all_reduce pods use (workloads/train.py). Each node samples its own GPUs (live NVML, or in a simulated run the node's
own recording, `<stem>.<node><suffix>` beside the login node's: cluster/run.py node_recording) and prints the samples
as the last line of its output.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from ..cluster.engine import engine_for, launch
from ..cluster.kubernetes import DEFAULT_PORT
from ..cluster.run import node_recording, unavailable
from ..probes import nvml, strip_escapes
from ..probes.nvml import GpuSeries
from ..subjects import Subject, gpu_count
from ..verdict import Check, Outcome, fmt
from . import cluster
from .base import Clause, HostNames
from .sources import with_sources
from .utilisation import TRAIN  # the builtin load, the single host's too

if TYPE_CHECKING:
    from ..cluster.engine import Engine
    from ..contract import Contract
    from ..measurements import ClusterRun
    from ..probes._run import ToolRun
    from ..session import Session

SAMPLES_LINE = "gpuaccept-nvml-samples "  # workloads/train.py's last line (not imported: the plugin never imports it)
START_SLACK_S = 300.0  # past the load's duration, for the launchers (a pod to start, an image to pull) and torch
_DONE = re.compile(r"^rank (\d+): done, (\d+) steps in [\d.]+ s", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One node's part of the job: its run, its GPUs' NVML series, and why they cannot be judged where they cannot."""

    run: ToolRun | None
    series: dict[int, GpuSeries]
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterLoad:
    """The one training job over the nodes: each node's part, the nodes that could not take part, and the nodes whose
    GPUs waited (a GPU's mean after the warm-up under min_percent), with each one's lowest GPU mean."""

    nodes: dict[str, NodeLoad]
    missing: dict[str, str] = field(default_factory=dict)  # node -> why it did not take part
    waited: dict[str, float] = field(default_factory=dict)  # node -> its lowest GPU's mean utilisation, %
    error: str | None = None
    slow_links: tuple[str, ...] = ()  # the links this run judged slow before the load (cluster.links, .rdma)


def steady(series: GpuSeries, warmup_s: float) -> list[tuple[float, float]]:
    """(t_s, util_percent) of every sample after the warm-up."""
    return [(s.t_s, float(s.util_percent)) for s in series.samples if s.t_s >= warmup_s and s.util_percent is not None]


def node_part(run: ToolRun, node: str, first_rank: int, gpus: int) -> NodeLoad:
    """A node's output read: its samples (the last line), and every one of its ranks done."""
    text = strip_escapes(run.stdout)
    lines = [line for line in text.splitlines() if line.startswith(SAMPLES_LINE)]
    try:
        recording = json.loads(lines[-1][len(SAMPLES_LINE):]) if lines else None
        series = {s.index: s for s in nvml.parse_samples(recording)} if isinstance(recording, dict) else {}
        sampled = None if isinstance(recording, dict) else f"{node} printed no NVML samples (`{SAMPLES_LINE.strip()}`)"
    except ValueError as exc:
        series, sampled = {}, f"{node}'s NVML samples: {exc}"
    if run.failure:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])[-600:]
        return NodeLoad(run, series, f"the training on {node} failed: {run.failure}" + (f"; its last output: {tail}"
                                                                                         if tail else ""))
    done = {int(rank) for rank, _steps in _DONE.findall(text)}
    absent = [r for r in range(first_rank, first_rank + gpus) if r not in done]
    if absent:
        return NodeLoad(run, series, f"ranks {', '.join(map(str, absent))} on {node} did not finish the training")
    return NodeLoad(run, series, sampled)


def meeting_address(run: ClusterRun, node: str) -> str:
    """Where the job's ranks meet: the first node's InternalIP where the engine read one (Kubernetes), else its name."""
    facts = dict(run.nodes[node].state.facts)
    return facts.get("internal_ip") or node


def run_training(state: Session, engine: Engine, section: cluster.ClusterSection, run: ClusterRun) -> ClusterLoad:
    """The builtin load on every available node at once, as one job; each node's GPUs sampled on that node."""
    keys = section.utilisation
    assert keys is not None
    if run.error is not None:
        return ClusterLoad({}, error=run.error)
    ready = run.available
    missing = {n: unavailable(o) for n, o in run.nodes.items() if n not in ready}
    if len(ready) < 2:
        return ClusterLoad({}, missing, error=f"fewer than two nodes available ({len(ready)}): no job across nodes")
    gpus = gpu_count(state.contract) or 1
    port = section.kubernetes.port if section.kubernetes else DEFAULT_PORT
    master = meeting_address(run, ready[0])
    commands = []
    for rank, node in enumerate(ready):
        sampled = "live" if state.nvml_recording is None else str(node_recording(state.nvml_recording, node))
        argv = [sys.executable, "-m", TRAIN, "--gpus", str(gpus), "--duration", f"{keys.duration.seconds:g}",
                "--nnodes", str(len(ready)), "--node-rank", str(rank), "--master-addr", master, "--master-port",
                str(port), "--nvml", sampled]
        commands.append(launch(engine, engine.on_node(node, argv), f"cluster-train-{node}"))
    runs = state.runner.run_together(commands, timeout_s=keys.duration.seconds + START_SLACK_S)
    nodes = {node: node_part(done, node, rank * gpus, gpus) for rank, (node, done) in enumerate(zip(ready, runs))}
    waited = {}
    for node, part in nodes.items():
        means = [sum(u for _t, u in rows) / len(rows) for s in part.series.values()
                 if (rows := steady(s, keys.warmup.seconds))]
        if means and min(means) < keys.min_percent:
            waited[node] = round(min(means), 1)
    return ClusterLoad(nodes, missing, waited)


def _waited(load: ClusterLoad, node: str) -> str:
    """`; ` and the nodes whose GPUs waited, this one first, each with its lowest GPU mean, and the links judged slow;
    "" where there are neither."""
    def listed(names: list[str], shown: list[str]) -> str:
        return ", ".join(shown[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")

    nodes = sorted(load.waited, key=lambda n: (n != node, n))
    said = [f"the nodes whose GPUs waited: {listed(nodes, [f'{n} ({fmt(load.waited[n])} %)' for n in nodes])}"] \
        if nodes else []
    said += [f"the links that were slow: {listed(list(load.slow_links), list(load.slow_links))}"] if load.slow_links else []
    return "".join(f"; {part}" for part in said)


def slow_links(state: Session) -> tuple[str, ...]:
    """The links this run judged slow (cluster.links, cluster.links.rdma), beside the GPUs that waited: their tests
    come before this clause's in the run, so they are judged by the time its load is measured."""
    keys = {cluster.LINKS.key, cluster.RDMA_LINKS.key}
    return tuple(sorted(subject for (clause, subject), check in state.checks.items()
                        if clause in keys and check.outcome is Outcome.FAILED))


def judge_gpu(section: cluster.ClusterSection, subject: Subject, load: ClusterLoad, contract: Contract) -> Check:
    keys = section.utilisation
    assert keys is not None
    minimum, warmup_s = keys.min_percent, keys.warmup.seconds
    node, _, gpu = subject.local.rpartition(":")
    v = UTILISATION.verdict(subject, f">= {fmt(minimum)}", threshold=minimum)
    if load.error is not None:
        return v.not_measured(load.error, {"missing": load.missing})
    if node in load.missing:
        return v.failed(None, f"{node} did not take part in the job: {load.missing[node]}")
    part = load.nodes.get(node)
    if part is None:
        return v.not_measured(f"{node} is not a node of the cluster")
    details: dict[str, Any] = {"node": node, "evidence": list(part.run.evidence) if part.run else [],
                               "job_nodes": list(load.nodes), "waited": load.waited}
    index = int(gpu.removeprefix("GPU"))
    series = part.series.get(index)
    if part.problem is not None and (series is None or part.run is None or part.run.failure):
        return v.failed(None, part.problem, details) if part.run is not None and part.run.failure else \
            v.not_measured(part.problem, details)
    if series is None:
        return v.not_measured(f"{node} GPU{index} was not sampled (its NVML samples name {len(part.series)} GPUs)",
                              details)
    rows = steady(series, warmup_s)
    if not rows:
        return v.not_measured(f"{node} GPU{index}: no utilisation sample after the {fmt(warmup_s)} s warmup", details)
    low_t, lowest = min(rows, key=lambda row: row[1])
    mean = sum(u for _t, u in rows) / len(rows)
    details["stats"] = {"min": lowest, "mean": round(mean, 2), "samples": len(rows)}
    stats = (f"mean {mean:.1f} % over {len(rows)} samples after the {fmt(warmup_s)} s warmup, in one job over "
             f"{len(load.nodes)} nodes x {gpu_count(contract) or 1} GPUs")
    if part.problem is not None:
        return v.failed(lowest, f"{part.problem}; {stats}", details)
    if lowest < minimum:
        return with_sources(v.failed(lowest, f"{node} GPU{index} dropped to {fmt(lowest)} % at t={low_t:.1f} s (below "
                                             f"{fmt(minimum)} %); {stats}{_waited(load, node)}", details),
                            "NVML utilisation")
    return with_sources(v.passed(lowest, f"{node} GPU{index} lowest {fmt(lowest)} % >= {fmt(minimum)} %; {stats}",
                                 details), "NVML utilisation")


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """`<node>:GPU<i>`: every GPU (gpus.count) of every node the engine expanded cluster.nodes to."""

    describe: str = "`<node>:GPU<i>`, one per GPU of every node"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.whole(f"{node}:GPU{i}") for node in names().get(cluster.LISTING, [])
                for i in range(gpu_count(contract))] or [Subject.whole("cluster")]


def gpuaccept_cluster_utilisation(gpuaccept_state: Session, gpuaccept_contract: Contract,
                                  gpuaccept_cluster: ClusterRun) -> ClusterLoad:
    """cluster.utilisation: one data-parallel training job over every GPU of every available node, NVML sampled on
    every node."""
    section = cluster.SECTION.of(gpuaccept_contract)
    load = run_training(gpuaccept_state, engine_for(section), section, gpuaccept_cluster)
    return replace(load, slow_links=slow_links(gpuaccept_state))


UTILISATION = Clause("cluster.utilisation", cluster.SECTION, "test_cluster_utilisation", NodeGpus(),
                     gpuaccept_cluster_utilisation, judge_gpu,
                     "the builtin training load as ONE data-parallel job (PyTorch DDP: NCCL, gloo on a CPU build) over "
                     "every GPU of every node, NVML sampled on each node: each GPU's lowest utilisation after the "
                     "warmup at least `min_percent`; a failure names the nodes whose GPUs waited", "%",
                     lambda s: s.utilisation is not None)
CLAUSES = (UTILISATION,)
MEASUREMENTS = (gpuaccept_cluster_utilisation,)
