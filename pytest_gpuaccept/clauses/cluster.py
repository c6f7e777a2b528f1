"""The `cluster` section: every node of a cluster, through the engine the cluster already has (Slurm, mpirun or
Kubernetes), judged from the login node.

The file's other sections are the per-node contract: the login node runs them on every node through the
engine (`python -m pytest_gpuaccept node-run`), brings each node's bundle back through the engine's own
output, and reports each node's checks as `<node>/<subject>`. Here: `cluster.nodes`, one check per node:
known to the scheduler, schedulable, the GPUs it offers, and a verified bundle with complete results.
`cluster.nodes` is node names (hostlist expressions) or, for Kubernetes, `{selector: "key=value,..."}`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import yaml

from .. import schema
from ..cluster import summary
from ..cluster.engine import ENGINES, ClusterError, engine_for
from ..cluster.fabric import RdmaRuns, directions, link_name, offsets
from ..cluster.kubernetes import DEFAULT_PORT, KubernetesKeys, namespace_name, parse_selector, resource_name
from ..cluster.pairs import DEFAULT_BUDGET, plan
from ..cluster.run import expand, pair_budget, run_allreduce, run_cluster, run_links, run_pairs, run_rdma_links
from ..i18n import DEFAULT, tr
from ..measurements import gpu_uuids
from ..probes.slurm import expand_hostlist
from ..probes.sysfs import SAFE_NAME
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Bandwidth, Duration, Size, UnitError, parse_duration, parse_size
from ..verdict import Check, fmt
from . import allreduce, network, plausible, sdc
from .base import Clause, HostNames, HostWide, ReportPart, Section

if TYPE_CHECKING:
    from ..contract import Contract
    from ..measurements import ClusterAllReduce, ClusterRun, LinkRuns, PairRuns
    from ..session import Session

LISTING = "cluster_nodes"  # the names the engine expanded cluster.nodes to (HostNames key)
@dataclass(frozen=True, slots=True)
class Iperf3Links:
    """cluster.links.iperf3: TCP between the nodes, per interface, each direction (the second with -R)."""

    min_throughput: Bandwidth
    interfaces: tuple[str, ...] | None  # default: the nics section's names (exact ones)
    duration: Duration
    port: int


@dataclass(frozen=True, slots=True)
class RdmaLinks:
    """cluster.links.rdma: ib_write_bw from each node's device to its peer's (rail: mlx5_i to mlx5_i; all: every device
    pair), each direction its own check, against `min_fraction_of_line_rate` of the line rate (the contract's, else the
    slower port's rate in its node's sysfs)."""

    devices: tuple[str, ...]  # exact names, ranges expanded (`mlx5_[0-3]`)
    min_fraction_of_line_rate: float
    line_rate: Bandwidth | None
    message_size: Size
    qps: int
    pairing: str
    duration: Duration


@dataclass(frozen=True, slots=True)
class Links:
    iperf3: Iperf3Links | None
    rdma: RdmaLinks | None = None


@dataclass(frozen=True, slots=True)
class Fabric:
    """cluster.fabric: each rail's rate with every rail of every node loaded at once (the cross-halves permutation)
    against its rate alone; below `min_fraction_under_load` fails naming the ratio, never a node."""

    min_fraction_under_load: float


@dataclass(frozen=True, slots=True)
class Pairs:
    """cluster.pairs and cluster.allreduce: the allreduce keys and defaults (a 2-node all_reduce between every
    pair of nodes; one all_reduce over every GPU of every node)."""

    min_busbw: Bandwidth
    min_bytes: Size
    max_bytes: Size
    repeats: int
    args: tuple[str, ...]
    budget: int = DEFAULT_BUDGET  # cluster.pairs only: rounds the first pass may take to test every pair


@dataclass(frozen=True, slots=True)
class NvlinkDomain:
    """cluster.nvlink_domain: the nodes are the trays of one multi-node NVLink domain (GB200/GB300 NVL72): every
    tray's GPUs joined the fabric (`fabric`), IMEX is up on every tray (`imex`), and an all_reduce over every GPU
    of every tray runs over NVLink at `min_busbw` or more (clauses/nvlink_domain.py)."""

    fabric: bool
    imex: bool
    min_busbw: Bandwidth | None
    min_bytes: Size
    max_bytes: Size


@dataclass(frozen=True, slots=True)
class ClusterUtilisation:
    """cluster.utilisation: the builtin training load as ONE data-parallel job over every GPU of every node, NVML
    sampled on every node; each GPU at least `min_percent` after `warmup` (clauses/cluster_utilisation.py)."""

    min_percent: float
    duration: Duration
    warmup: Duration
    workload: str


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """cluster.nodes as `{selector: "key=value,..."}`: the nodes whose labels match (Kubernetes)."""

    text: str


@dataclass(frozen=True, slots=True)
class ClusterSection:
    engine: str
    nodes: tuple[str, ...]  # the names or hostlist expressions; () where cluster.nodes is a selector
    partition: str | None
    node_timeout: Duration
    pairs: Pairs | None = None
    allreduce: Pairs | None = None
    links: Links | None = None
    kubernetes: KubernetesKeys | None = None
    nvlink_domain: NvlinkDomain | None = None
    utilisation: ClusterUtilisation | None = None
    fabric: Fabric | None = None
    selector: str | None = None  # cluster.nodes' label selector (`{selector: ...}`), never a key of its own

    def __post_init__(self) -> None:
        # The nodes key holds names or a selector: the selector is kept apart, so that `nodes` is always names.
        if isinstance(self.nodes, NodeSelector):
            object.__setattr__(self, "selector", self.nodes.text)
            object.__setattr__(self, "nodes", ())


def nested(name: str, keys: dict[str, Key], build: Callable[..., Any]) -> Callable[[Any, yaml.Node], Any]:
    """A mapping inside a section (cluster.pairs): its keys converted as a section's are; a problem names
    the dotted key and its line."""
    def convert(value: Any, node: yaml.Node) -> Any:
        if not isinstance(value, yaml.MappingNode):
            raise ValueError(f"expected a mapping, got {schema.shown(value)}")
        given: dict[str, yaml.Node] = {}
        for key_node, value_node in value.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else schema.describe(key_node)
            if key not in keys or key in given:
                why = "duplicate key" if key in given else f"unknown key; expected one of: {', '.join(keys)}"
                raise ValueError(f"{name}.{key} (line {key_node.start_mark.line + 1}): {why}")
            given[key] = value_node
        values = {}
        for key, spec in keys.items():
            if key not in given:
                if spec.required:
                    raise ValueError(f"{name}.{key}: missing: this key is required")
                values[key] = spec.default
                continue
            raw = given[key]
            try:
                values[key] = spec.convert(schema.scalar(raw) if isinstance(raw, yaml.ScalarNode) else raw, raw)
            except (ValueError, UnitError) as exc:
                raise ValueError(f"{name}.{key} (line {raw.start_mark.line + 1}): {exc}") from None
        return build(**values)
    return convert


def hostlists(value: Any, node: yaml.Node) -> tuple[str, ...] | NodeSelector:
    """Node names or hostlist expressions (`gpu[01-16]`, `gpu[01,03]`): letters, digits, . _ - [ ] , only; or
    `{selector: "key=value,..."}`, a label selector (Kubernetes)."""
    if isinstance(value, yaml.MappingNode):
        return selector(value)
    if not isinstance(value, yaml.SequenceNode) or not value.value:
        raise ValueError(f"expected a non-empty list of node names or hostlist expressions such as ['gpu[01-16]'], "
                         f"or {{selector: \"key=value\"}}, got {schema.shown(value)}")
    out = []
    for item in value.value:
        text = schema.scalar(item) if isinstance(item, yaml.ScalarNode) else None
        if not isinstance(text, str) or not text or any(not (c.isalnum() or c in "._-[],") for c in text) \
                or text.count("[") != text.count("]") or text[0] in "-[,":
            raise ValueError(f"expected node names or hostlist expressions, got {schema.describe(item)}")
        out.append(text)
    return tuple(out)


def selector(value: yaml.MappingNode) -> NodeSelector:
    """`{selector: "key=value,key2!=value2"}`: the one key, a label selector kubectl's -l would read."""
    keys = [k.value if isinstance(k, yaml.ScalarNode) else schema.describe(k) for k, _v in value.value]
    if keys != ["selector"]:
        raise ValueError(f"expected {{selector: \"key=value,...\"}} (node labels), got the keys {', '.join(map(str, keys))}")
    text = schema.text(schema.scalar(value.value[0][1]) if isinstance(value.value[0][1], yaml.ScalarNode) else None,
                       value.value[0][1])
    try:
        parse_selector(text)
    except ValueError as exc:
        raise ValueError(f"selector: {exc}") from None
    return NodeSelector(text)


def namespace(value: Any, node: yaml.Node) -> str:
    return namespace_name(schema.text(value, node))


MAX_CLUSTER_LOAD_S = 1800.0  # cluster.utilisation: each node's samples come back in its output (8 GPUs: ~3 MB at 30 min)


def load_duration(value: Any, node: yaml.Node) -> Duration:
    """cluster.utilisation.duration: at most MAX_CLUSTER_LOAD_S, so that a node's NVML samples fit its output."""
    duration: Duration = schema.duration(value, node)
    if duration.seconds > MAX_CLUSTER_LOAD_S:
        raise ValueError(f"expected at most 30 min, got {duration}: each node's NVML samples come back through the "
                         f"engine's output (hours of load are the per-node burnin section)")
    return duration


def rdma_resource(value: Any, node: yaml.Node) -> str:
    return resource_name(schema.text(value, node))


def image(value: Any, node: yaml.Node) -> str:
    """An image reference as a pod names it: no spaces; a digest (`@sha256:...`) pins it."""
    text = schema.text(value, node)
    if any(c.isspace() for c in text) or text.startswith(("-", "/")):
        raise ValueError(f"expected an image such as 'registry.example/gpuaccept:0.1@sha256:...', got {text!r}")
    return text


def rails(value: Any, node: yaml.Node) -> tuple[str, ...]:
    """RDMA device names or ranges (`mlx5_[0-7]`, expanded as a hostlist is): the subjects are fixed before anything
    runs, so a `*` or `?` glob, which only a node's listing could expand, is refused."""
    found = []
    for item in schema.names(value, node):
        if any(c in item for c in "*?"):
            raise ValueError(f"expected device names or ranges such as 'mlx5_[0-7]', got the glob {item!r}: the "
                             "checks are named before anything runs")
        try:
            found += expand_hostlist(item)
        except ValueError as exc:
            raise ValueError(f"{item!r}: {exc}") from None
    bad = [d for d in found if not SAFE_NAME.match(d)]
    if bad:
        raise ValueError(f"not a device name: {bad[0]!r}")
    return tuple(dict.fromkeys(found))


# What the PyTorch all_reduce the Kubernetes pods run takes of nccl-tests' options (pairs.args, allreduce.args).
TORCH_OPTIONS = ("-n", "-w")


def _kubernetes_problems(section: ClusterSection) -> list[tuple[str, str]]:
    """The keys only one engine reads, and what the Kubernetes engine does not measure (yet)."""
    if section.engine != "kubernetes":
        return [(key, why) for key, given, why in (
            ("cluster.kubernetes", section.kubernetes, "only for engine: kubernetes"),
            ("cluster.nodes", section.selector, "a selector is only for engine: kubernetes (Slurm and mpirun take node "
                                                "names)")) if given is not None]
    problems = [(key, "not measured through engine: kubernetes by this version yet: remove it (a clause that runs no "
                      "test would pass unmeasured)") for key, given in (("cluster.nvlink_domain", section.nvlink_domain),)
                if given is not None]
    pods = section.kubernetes or KubernetesKeys()
    if section.links is not None and section.links.rdma is not None and not (pods.privileged or pods.rdma_resource):
        # A pod sees no RDMA device (/dev/infiniband) unless a device plugin gives it one or it is privileged.
        problems.append(("cluster.links.rdma", "through engine kubernetes the pods need the RDMA devices: name the "
                                               "device plugin's resource (cluster.kubernetes.rdma_resource, e.g. "
                                               "rdma/rdma_shared_device_a) or allow cluster.kubernetes.privileged"))
    for name, keys in (("pairs", section.pairs), ("allreduce", section.allreduce)):
        args = keys.args if keys is not None else ()
        flags, values = args[0::2], args[1::2]
        if any(f not in TORCH_OPTIONS for f in flags) or len(flags) != len(values) or not all(v.isdigit() for v in values):
            problems.append((f"cluster.{name}.args", f"engine kubernetes runs the PyTorch all_reduce, which takes "
                                                     f"{' N, '.join(TORCH_OPTIONS)} N only, got {' '.join(args)}"))
    return problems


def _cross_check(section: ClusterSection, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems = _kubernetes_problems(section)
    if section.partition is not None and section.engine != "slurm":
        problems.append(("cluster.partition", "only for engine: slurm"))
    if section.fabric is not None and (section.links is None or section.links.rdma is None):
        problems.append(("cluster.fabric", "needs cluster.links.rdma (its devices and ib_write_bw's keys)"))
    if section.links is not None:
        if section.links.iperf3 is None and section.links.rdma is None:
            problems.append(("cluster.links", "expected iperf3 or rdma (a clause that runs no test would pass unmeasured)"))
        elif section.links.iperf3 is not None and link_interfaces(section, sections) == ():
            problems.append(("cluster.links.iperf3.interfaces", "missing: name the interfaces (exact names), or give "
                                                                 "a nics section with exact names"))
    load = section.utilisation
    if load is not None and load.warmup.seconds >= load.duration.seconds:
        problems.append(("cluster.utilisation.warmup", f"expected less than duration ({load.duration}), got {load.warmup}"))
    if load is not None and not getattr(sections.get("gpus"), "count", None):
        problems.append(("cluster.utilisation", "needs gpus.count: the GPUs of each node the job trains on, each judged"))
    domain = section.nvlink_domain
    if domain is not None and not (domain.fabric or domain.imex or domain.min_busbw is not None):
        problems.append(("cluster.nvlink_domain", "asks for nothing: give min_busbw, or leave fabric or imex true (a "
                                                  "clause that runs no test would pass unmeasured)"))
    for name, keys in (("pairs", section.pairs), ("allreduce", section.allreduce), ("nvlink_domain", domain)):
        if keys is not None and keys.min_bytes.nbytes > keys.max_bytes.nbytes:
            problems.append((f"cluster.{name}.min_bytes", f"expected at most max_bytes ({keys.max_bytes}), "
                                                          f"got {keys.min_bytes}"))
    return problems


# The allreduce keys a node's own section has and the cluster's all_reduce jobs do not: `tool` (nccl-tests over MPI),
# and `algo` (NCCL's INFO lines of a multi-node job are not read for NVLS yet: each node's `allreduce.algo` judges it).
NODE_ONLY = ("tool", "algo")

SECTION = Section(
    "cluster",
    {"engine": Key(schema.one_of(*ENGINES), required=True), "nodes": Key(hostlists, required=True),
     "partition": Key(schema.text), "node_timeout": Key(schema.duration, default=parse_duration("1 h")),
     "pairs": Key(nested("cluster.pairs", {**{k: v for k, v in allreduce.SECTION.keys.items() if k not in NODE_ONLY},
                                           "budget": Key(schema.whole(1, 100_000), default=DEFAULT_BUDGET)}, Pairs)),
     "allreduce": Key(nested("cluster.allreduce", {k: v for k, v in allreduce.SECTION.keys.items() if k not in NODE_ONLY},
                             Pairs)),
     "links": Key(nested("cluster.links", {
         "iperf3": Key(nested("cluster.links.iperf3", {
             "min_throughput": Key(schema.bandwidth, required=True), "interfaces": Key(schema.names),
             "duration": Key(schema.duration, default=parse_duration("5 s")),
             "port": Key(schema.whole(1, 65535), default=5301)}, Iperf3Links)),
         "rdma": Key(nested("cluster.links.rdma", {
             "devices": Key(rails, required=True),
             "min_fraction_of_line_rate": Key(schema.number(0.0, 1.0, low_open=True), default=0.9),
             "line_rate": Key(schema.bandwidth), "message_size": Key(schema.size, default=parse_size("64 KiB")),
             "qps": Key(schema.whole(1, 1024), default=1), "pairing": Key(schema.one_of("rail", "all"), default="rail"),
             "duration": Key(schema.duration, default=parse_duration("5 s"))}, RdmaLinks))}, Links)),
     "fabric": Key(nested("cluster.fabric", {
         "min_fraction_under_load": Key(schema.number(0.0, 1.0, low_open=True), default=0.9)}, Fabric)),
     "kubernetes": Key(nested("cluster.kubernetes", {
         "context": Key(schema.text), "namespace": Key(namespace), "image": Key(image),
         "privileged": Key(schema.boolean, default=False),
         "port": Key(schema.whole(1, 65535), default=DEFAULT_PORT), "rdma_resource": Key(rdma_resource)},
         KubernetesKeys)),
     "nvlink_domain": Key(nested("cluster.nvlink_domain", {
         "fabric": Key(schema.boolean, default=True), "imex": Key(schema.boolean, default=True),
         "min_busbw": Key(schema.bandwidth), "min_bytes": Key(schema.size, default=parse_size("1 GiB")),
         "max_bytes": Key(schema.size, default=parse_size("8 GiB"))}, NvlinkDomain)),
     "utilisation": Key(nested("cluster.utilisation", {
         "min_percent": Key(schema.number(0.0, 100.0, low_open=True), required=True),
         "duration": Key(load_duration, default=parse_duration("60 s")),
         "warmup": Key(schema.duration, default=parse_duration("10 s")),
         "workload": Key(schema.one_of("builtin"), default="builtin")}, ClusterUtilisation))},
    ClusterSection, "many nodes, through Slurm, mpirun or Kubernetes (the per-node sections judge every node)",
    cross_check=_cross_check)


@dataclass(frozen=True, slots=True)
class PerNode:
    """One subject per node the engine expanded `cluster.nodes` to (the scheduler's names)."""

    describe: str = "`<node>`, one per node"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.whole(name) for name in names().get(LISTING, [])] or [Subject.whole("cluster")]


def _same_gpus(name: str, run: ClusterRun) -> dict[str, list[str]]:
    """Other nodes whose results name one of this node's GPU UUIDs, and the UUIDs they share (a node answering for
    another, or, in a simulated run, nodes that read one NVML recording): UUIDs are unique across a cluster."""
    shared: dict[str, list[str]] = {}
    for uuid in sorted(gpu_uuids(run.nodes[name].results)):
        for other in run.gpu_owners[uuid]:
            if other != name:
                shared.setdefault(other, []).append(uuid)
    return dict(sorted(shared.items()))


def _twins_message(node: str, twins: dict[str, list[str]], results: dict[str, Any]) -> str:
    uuids = sorted({u for both in twins.values() for u in both})
    mode = results.get("mode", "live")
    why = "one bundle stands for two nodes" if mode == "live" else \
        f"a {mode} run: the nodes read one NVML recording (give each node its own, docs/cluster.md)"
    return (f"GPU UUIDs of {node} were also reported by {', '.join(twins)} ({len(uuids)} shared, e.g. {uuids[0]}): "
            f"{why}")


def judge_node(section: ClusterSection, subject: Subject, run: ClusterRun, contract: Contract) -> Check:
    v = NODES.verdict(subject)
    if run.error is not None:
        return v.not_measured(run.error)
    node = run.nodes.get(subject.local)
    if node is None:
        return v.failed(None, f"not among the nodes the engine expanded {', '.join(section.nodes)} to")
    state = node.state
    details: dict[str, Any] = {"state": state.state, "engine": section.engine, "evidence_folder": node.folder,
                               **dict(state.facts)}
    if state.reason:
        details["reason"] = state.reason
    if node.results is not None:
        details["node_verdict"] = node.results.get("verdict")
        details["host"] = node.results.get("host", {})
    if not state.present:
        return v.failed(state.state, state.reason or f"{subject.local} is {state.state}", details)
    if not state.schedulable:
        reason = f" ({state.reason})" if state.reason else ""
        return v.failed(state.state, f"the scheduler has {subject.local} {state.state}{reason}: not run, not waited for",
                        details)
    wanted = gpu_count(contract)
    if wanted and state.gpus is not None and state.gpus < wanted:
        why = f" ({state.reason})" if state.reason else ""
        return v.failed(state.state, f"the scheduler offers {state.gpus} GPUs on {subject.local} ({state.gpus_source}), "
                        f"the contract {wanted}{why}", details)
    if node.problem is not None:
        return v.failed(state.state, node.problem, details)
    results = node.results or {}
    twins = _same_gpus(subject.local, run)
    if twins:
        return v.failed(state.state, _twins_message(subject.local, twins, results), details)
    checks = results.get("checks", [])
    not_passed = sum(c.get("outcome") != "passed" for c in checks)
    gres = f", {state.gpus} GPUs in {state.gpus_source}" if state.gpus is not None else ""
    return v.passed(state.state, f"{state.state}{gres}; results returned: the node's own checks {str(results.get('verdict')).upper()} "
                    f"({len(checks) - not_passed} of {len(checks)} passed)", details)


def link_interfaces(section: ClusterSection, sections: Mapping[str, Any]) -> tuple[str, ...]:
    """The interfaces each link is measured on: links.iperf3.interfaces, else the nics section's exact names."""
    links = section.links.iperf3 if section.links else None
    if links is None:
        return ()
    if links.interfaces is not None:
        return links.interfaces
    nics = sections.get(network.NICS.name)
    names = getattr(nics, "interfaces", ()) or ()
    return tuple(n for n in names if not any(c in n for c in "*?["))


@dataclass(frozen=True, slots=True)
class NodeLinks:
    """`<node>:<device>-><node>:<device>`: each pair of the pairs' rounds, each interface, both directions."""

    describe: str = "`<node>:<device>-><node>:<device>`, per pair of nodes, interface and direction"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        devices = link_interfaces(section, contract.by_section)
        pairs = [pair for pairing in plan(names().get(LISTING, []), contract.sha256, pair_budget(section))
                 for pair in pairing]
        return [Subject.whole(f"{x}:{d}->{y}:{d}") for a, b in sorted(pairs) for d in devices
                for x, y in ((a, b), (b, a))] or [Subject.whole("cluster")]


def judge_link(section: ClusterSection, subject: Subject, links: LinkRuns, contract: Contract) -> Check:
    assert section.links is not None and section.links.iperf3 is not None
    v = LINKS.verdict(subject)
    if links.error is not None:
        return v.not_measured(links.error)
    result = links.results.get(subject.local)
    if result is None:
        return v.not_measured(f"{subject.local} is not a link of the cluster's pairs")
    details: dict[str, Any] = {"round": result.round, "evidence": list(result.evidence)}
    if result.problem is not None or result.gbit_s is None:
        return v.not_measured(result.problem or "not measured", details)
    return v.at_least(result.gbit_s, section.links.iperf3.min_throughput.gbit_s, "iperf3", details,
                      where=f" ({result.route})", suffix=f" (round {result.round}, one direction at a time)")


def _rdma_pairs(contract: Contract, section: ClusterSection, names: Callable[[], HostNames]) -> list[tuple[str, str]]:
    return [pair for pairing in plan(names().get(LISTING, []), contract.sha256, pair_budget(section)) for pair in pairing]


@dataclass(frozen=True, slots=True)
class RdmaNodeLinks:
    """`<node>:<device>-><node>:<device>`: each pair of the pairs' rounds, each rail (pairing all: each device pair),
    both directions."""

    describe: str = "`<node>:<device>-><node>:<device>`, per pair of nodes, rail (`all`: device pair) and direction"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        keys = section.links.rdma
        return [Subject.whole(link_name(s, r)) for a, b in sorted(_rdma_pairs(contract, section, names))
                for k in offsets(keys.devices, keys.pairing) for s, r in directions(a, b, keys.devices, k)] \
            or [Subject.whole("cluster")]


def judge_rdma_link(section: ClusterSection, subject: Subject, runs: RdmaRuns, contract: Contract) -> Check:
    """A link's ib_write_bw figure (alone where its round was slow), believed where the sender's port_xmit_data over
    the plugin's clock confirms it and the receiver's port_rcv_data counted what was sent, against the fraction of the
    line rate; a failing link names what the blame puts it on (cluster/fabric.py)."""
    keys = section.links.rdma if section.links else None
    assert keys is not None
    v = RDMA_LINKS.verdict(subject)
    if runs.error is not None:
        return v.not_measured(runs.error)
    link = runs.links.get(subject.local)
    if link is None:
        return v.not_measured(f"{subject.local} is not a link of the cluster's pairs")
    m = link.judged
    details: dict[str, Any] = {"round": link.round, "alone": link.alone is not None, **m.details,
                               "line_rate_gbit_s": link.line_rate_gbit_s, "line_rate_source": link.line_rate_source}
    if link.alone is not None:
        details["loaded_gbit_s"] = link.loaded.gbit_s
    v = v.but(evidence=tuple(m.evidence) + (tuple(link.loaded.evidence) if link.alone is not None else ()))
    if m.problem is not None:
        return v.not_measured(m.problem, details)
    minimum, line = runs.minimum.get(link.name), link.line_rate_gbit_s
    if minimum is None or line is None:
        return v.not_measured(f"no line rate for {link.name} ({link.line_rate_source}): give cluster.links.rdma.line_rate",
                              details)
    if m.refuted is not None:
        return v.but(required=f">= {fmt(minimum)}", threshold=minimum).failed(m.counted_gbit_s, m.refuted, details)
    assert m.gbit_s is not None
    word = "" if m.passes(minimum) else f"; {runs.word(link)}"
    alone = "" if link.alone is None or link.loaded.gbit_s is None else \
        f"; alone: {fmt(link.loaded.gbit_s)} Gb/s with its round loaded (the fabric's share: cluster.fabric)"
    share = f" ({m.gbit_s / line:.1%} of {fmt(line)} Gb/s line rate, {link.line_rate_source}; round {link.round}{alone})"
    what = "ib_write_bw BW average"  # no port carries more than its line rate: sanity, then the threshold
    return plausible.over_ceiling(v, m.gbit_s, minimum, line, f"the line rate, {link.line_rate_source}", what, details,
                                  where=m.shown, suffix=share) \
        or v.at_least(m.gbit_s, minimum, what, details, where=m.shown, suffix=share + word)


@dataclass(frozen=True, slots=True)
class Rails:
    """`cluster:<device>`, one per rail."""

    describe: str = "`cluster:<device>`, one per rail (cluster.links.rdma's devices)"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.whole(f"cluster:{d}") for d in section.links.rdma.devices]


def judge_fabric(section: ClusterSection, subject: Subject, runs: RdmaRuns, contract: Contract) -> Check:
    """A rail's median link loaded (every rail of every node at once, cross-halves) over its median link alone:
    below min_fraction_under_load fails naming the ratio; the fabric is blamed, never a node."""
    assert section.fabric is not None
    fraction = section.fabric.min_fraction_under_load
    v = FABRIC.verdict(subject, required=f">= {fmt(fraction)}", threshold=fraction, evidence=runs.evidence)
    if runs.error is not None:
        return v.not_measured(runs.error)
    device = subject.local.partition(":")[2]
    rail = runs.rails.get(device)
    if rail is None:
        return v.not_measured(f"{device}: the cluster has no two available nodes to load it across its halves")
    crossing = ", ".join(f"{a}<->{b}" for a, b in runs.cross_halves[:4]) + (" ..." if len(runs.cross_halves) > 4 else "")
    details: dict[str, Any] = {"alone": dict(rail.alone), "loaded": dict(rail.loaded), "cross_halves": crossing,
                               "problems": list(rail.problems)}
    ratio, alone, loaded = rail.ratio, rail.alone_gbit_s, rail.loaded_gbit_s
    if rail.problems and len(rail.problems) * 2 >= len(rail.problems) + len(rail.loaded):
        return v.not_measured(f"{device}: {len(rail.problems)} links of the loaded round have no figure, e.g. "
                              f"{rail.problems[0]}", details)
    if ratio is None or alone is None or loaded is None:
        return v.not_measured(f"{device}: no link {'alone' if alone is None else 'loaded'} has a believed figure "
                              "(the links a blamed device or link takes part in are left out)", details)
    shown = round(ratio, 3)
    return v.judged(shown >= fraction, shown,
                    f"{device} under full load carries {shown:.2f} of its rate alone (median {fmt(loaded)} Gb/s over "
                    f"{len(rail.loaded)} links with every rail of every node loaded at once, cross-halves {crossing}; "
                    f"{fmt(alone)} Gb/s over {len(rail.alone)} links alone) {'>=' if shown >= fraction else '<'} "
                    f"{fmt(fraction)}" + ("" if shown >= fraction else
                                          f": the fabric, not a node (an effective oversubscription of {1 / max(shown, 1e-3):.1f}:1)"),
                    details)


@dataclass(frozen=True, slots=True)
class NodePairs:
    """Every unordered pair of the expanded nodes, `a+b` in the nodes' order."""

    describe: str = ("`<node>+<node>`, one per pair of nodes (every pair up to 64 nodes as `budget` allows; above, 3 "
                     "random pairings)")

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        pairs = [pair for pairing in plan(names().get(LISTING, []), contract.sha256, pair_budget(section))
                 for pair in pairing]
        return [Subject.whole(f"{a}+{b}") for a, b in sorted(pairs, key=lambda p: (p[0], p[1]))] or \
            [Subject.whole("cluster")]


def judge_pair(section: ClusterSection, subject: Subject, runs: PairRuns, contract: Contract) -> Check:
    pairs = section.pairs
    assert pairs is not None
    v = PAIRS.verdict(subject)
    if runs.error is not None:
        return v.not_measured(runs.error)
    a, _, b = subject.local.partition("+")
    result = runs.results.get((a, b))
    if result is None:
        return v.not_measured(f"{subject.local} is not a pair of the cluster's nodes")
    details: dict[str, Any] = {"round": result.round, "evidence": list(result.evidence)}
    if result.problem is not None:
        return v.not_measured(result.problem, details)
    assert result.busbw is not None
    if result.wrong is not None:  # silent data corruption: whatever the busbw, a pair that sums wrong fails
        return v.but(required=f">= {pairs.min_busbw.gbyte_s:g}", threshold=pairs.min_busbw.gbyte_s).failed(
            result.busbw, f"{result.wrong} (round {result.round})", details)
    # The fixture judged every pair against the same threshold to blame nodes and links: its word is added.
    blamed = ""
    if (a, b) in runs.blame.failing:
        again = {n: _met_again(runs, n, pairs.min_busbw.gbyte_s) for n in (a, b)}
        blamed = f"; {runs.blame.of((a, b))}" + _second_word(again)
        if any(again.values()):
            details["second_pass"] = {n: met for n, met in again.items() if met}
    return v.at_least(result.busbw, pairs.min_busbw.gbyte_s, "2-node all_reduce busbw", details,
                      where=f" at {result.size}", suffix=f" (round {result.round}, NCCL_ALGO=Ring){blamed}")


def _met_again(runs: PairRuns, node: str, min_busbw: float) -> dict[str, Any]:
    """The known-good partners `node` met in the second pass: partner -> busbw, passed, round, evidence."""
    met = {}
    for (x, y), result in runs.second_pass.items():
        if node in (x, y):
            met[y if x == node else x] = {"busbw": result.busbw, "passed": result.busbw is not None
                                          and result.busbw >= min_busbw, "round": result.round,
                                          "problem": result.problem, "evidence": list(result.evidence)}
    return met


def _second_word(again: dict[str, dict[str, Any]]) -> str:
    """What the second pass said of a failing pair's nodes: with how many known-good partners each failed."""
    said = []
    for node, met in again.items():
        if met:
            failed = [p for p, r in met.items() if not r["passed"]]
            said.append(f"{node} failed with {len(failed)} of {len(met)} ({', '.join(sorted(met)[:5])})")
    return f" (second pass, with known-good nodes: {'; '.join(said)})" if said else ""


def judge_allreduce(section: ClusterSection, subject: Subject, run: ClusterAllReduce, contract: Contract) -> Check:
    keys = section.allreduce
    assert keys is not None
    v = ALLREDUCE.verdict(subject)
    result = run.result
    details: dict[str, Any] = {"nodes": list(run.nodes), "evidence": list(result.evidence) if result else []}
    if run.error is not None or result is None:
        return v.not_measured(run.error or "not run", details)
    if run.missing:
        # Measured over the nodes that are there, as information: a cluster with a node missing is not passed.
        shown = "" if result.busbw is None else f" (over the {len(run.nodes)} others: {result.busbw:g} GB/s)"
        return v.but(required=f">= {keys.min_busbw.gbyte_s:g}", threshold=keys.min_busbw.gbyte_s).failed(
            result.busbw, f"not the whole cluster: {', '.join(run.missing)} not available{shown}", details)
    if result.problem is not None:
        return v.not_measured(result.problem, details)
    assert result.busbw is not None
    if result.wrong is not None:  # silent data corruption over the whole cluster: a failure, never a busbw
        return v.but(required=f">= {keys.min_busbw.gbyte_s:g}", threshold=keys.min_busbw.gbyte_s).failed(
            result.busbw, f"{result.wrong}, over {len(run.nodes)} nodes x {run.ranks_per_node} GPUs", details)
    return v.at_least(result.busbw, keys.min_busbw.gbyte_s, "all_reduce busbw", details, where=f" at {result.size}",
                      suffix=f" over {len(run.nodes)} nodes x {run.ranks_per_node} GPUs")


def gpuaccept_cluster(gpuaccept_state: Session, gpuaccept_contract: Contract) -> ClusterRun:
    """Every node of the cluster: inventory through the engine, then the per-node suite on each schedulable
    node at once, each node's bundle brought back into the evidence (nodes/<node>/) and verified."""
    section = SECTION.of(gpuaccept_contract)
    return run_cluster(gpuaccept_state, engine_for(section), section)


def gpuaccept_cluster_pairs(gpuaccept_state: Session, gpuaccept_contract: Contract,
                            gpuaccept_cluster: ClusterRun) -> PairRuns:
    """cluster.pairs: a 2-node all_reduce between every pair of nodes, in rounds of disjoint pairs at once."""
    section = SECTION.of(gpuaccept_contract)
    return run_pairs(gpuaccept_state, engine_for(section), section, gpuaccept_cluster, PAIRS.key)


def gpuaccept_cluster_allreduce(gpuaccept_state: Session, gpuaccept_contract: Contract,
                                gpuaccept_cluster: ClusterRun) -> ClusterAllReduce:
    """cluster.allreduce: one all_reduce over every GPU of every available node."""
    section = SECTION.of(gpuaccept_contract)
    checked = sdc.SECTION.get(gpuaccept_contract)  # every iteration of the whole cluster's all_reduce checked too
    return run_allreduce(gpuaccept_state, engine_for(section), section, gpuaccept_cluster, PAIRS.key,
                         checked.iterations if checked is not None else 1)


def gpuaccept_cluster_links(gpuaccept_state: Session, gpuaccept_contract: Contract,
                            gpuaccept_cluster: ClusterRun) -> LinkRuns:
    """cluster.links: node to node per interface, both directions at once, in the pairs' rounds."""
    section = SECTION.of(gpuaccept_contract)
    return run_links(gpuaccept_state, engine_for(section), section, gpuaccept_cluster,
                     link_interfaces(section, gpuaccept_contract.by_section))


def gpuaccept_cluster_rdma(gpuaccept_state: Session, gpuaccept_contract: Contract,
                           gpuaccept_cluster: ClusterRun) -> RdmaRuns:
    """cluster.links.rdma and cluster.fabric: ib_write_bw device to device in the pairs' rounds (every rail of every
    pair of a round at once), slow links again alone, then (cluster.fabric) every rail of every node loaded at once."""
    section = SECTION.of(gpuaccept_contract)
    fabric = section.fabric.min_fraction_under_load if section.fabric is not None else None
    return run_rdma_links(gpuaccept_state, engine_for(section), section, gpuaccept_cluster, fabric)


NODES = Clause("cluster.nodes", SECTION, "test_cluster_node", PerNode(), gpuaccept_cluster, judge_node,
               "every node known to the scheduler, schedulable, with the contracted GPUs in its Gres (Kubernetes: Ready, "
               "not cordoned or tainted against the run, allocatable nvidia.com/gpu), and its per-node run's bundle "
               "returned through the engine, verified and complete")
PAIRS = Clause("cluster.pairs", SECTION, "test_cluster_pair", NodePairs(), gpuaccept_cluster_pairs, judge_pair,
               "a 2-node all_reduce (nccl-tests, MPI, one rank per GPU, NCCL_ALGO=Ring; Kubernetes: the PyTorch all_reduce, "
               "a pod per node) between every pair of nodes (past `budget`: random rounds, then each suspect with known-good "
               "nodes), in rounds of disjoint pairs at once; a failing pair names the bad node or the bad link", "GB/s",
               lambda s: s.pairs is not None, pair_joint="+")
ALLREDUCE = Clause("cluster.allreduce", SECTION, "test_cluster_allreduce", HostWide("cluster", "`cluster`"),
                   gpuaccept_cluster_allreduce, judge_allreduce,
                   "one all_reduce (nccl-tests, MPI, one rank per GPU; Kubernetes: the PyTorch all_reduce, a pod per "
                   "node) over every GPU of every node; any node missing and it is not passed", "GB/s",
                   lambda s: s.allreduce is not None)
LINKS = Clause("cluster.links", SECTION, "test_cluster_link", NodeLinks(), gpuaccept_cluster_links, judge_link,
               "node to node per interface, each direction its own check, measured one at a time (iperf3, then "
               "iperf3 -R, bound to each side's address on that interface), in the pairs' rounds", "Gb/s",
               lambda s: s.links is not None and s.links.iperf3 is not None, pair_joint="->")
RDMA_LINKS = Clause("cluster.links.rdma", SECTION, "test_cluster_rdma_link", RdmaNodeLinks(), gpuaccept_cluster_rdma,
                    judge_rdma_link,
                    "ib_write_bw device to device (rail: mlx5_i to mlx5_i; all: every device pair), each direction its "
                    "own check, every rail of every pair of a round at once, slow links again alone; the sender's "
                    "port_xmit_data and the receiver's port_rcv_data, each read on its node, confirm it; a failing "
                    "link names the bad device (that node's NIC, cable or port) or the link", "Gb/s",
                    lambda s: s.links is not None and s.links.rdma is not None, pair_joint="->")
FABRIC = Clause("cluster.fabric", SECTION, "test_cluster_fabric", Rails(), gpuaccept_cluster_rdma, judge_fabric,
                "per rail, the median link with every rail of every node loaded at once (node i with node i + n/2, "
                "both directions) over the median link alone: the fabric's effective oversubscription, never a node's",
                None, lambda s: s.fabric is not None)
CLAUSES = (NODES, ALLREDUCE, PAIRS, LINKS, RDMA_LINKS, FABRIC)


def login_listing(state: Session) -> dict[str, list[str]]:
    """What a cluster's login node lists: the cluster's nodes, expanded by its engine (the scheduler's command runs
    once per run, or is replayed); none where they cannot be listed (one subject, "cluster", whose check says why)."""
    section = SECTION.of(state.contract)
    try:
        return {LISTING: expand(state, engine_for(section), section)}
    except ClusterError:
        return {LISTING: []}


def listing_for(contract: Contract) -> Callable[[Session], dict[str, list[str]]] | None:
    """The session's listing where the contract makes this host a cluster's login node; None elsewhere."""
    return login_listing if SECTION.get(contract) is not None and contract.node is None else None
_GRID_WORDS = re.compile(r"<h3>Nodes \((\d+): (\d+) with checks that did not pass\)</h3>|<th>node(?=<)|"
                         r"<summary>(\d+) more nodes, every check passed</summary>")


def _grid(checks: Sequence[Check], lang: str) -> str:
    """The node grid (cluster/summary.py draws it in English), its own words said in the report's language."""
    drawn = summary.render(checks, NODES.key)
    if lang == DEFAULT:
        return drawn

    def said(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            words = tr(lang, "Nodes ({nodes}: {troubled} with checks that did not pass)", nodes=m.group(1),
                       troubled=m.group(2))
            return f"<h3>{html.escape(words, quote=False)}</h3>"
        if m.group(3) is not None:
            return f"<summary>{html.escape(tr(lang, '{n} more nodes, every check passed', n=m.group(3)))}</summary>"
        return f"<th>{html.escape(tr(lang, 'node'))}"
    return _GRID_WORDS.sub(said, drawn)


# The cluster's part of the login node's report: every node's results merged in, and the node grid (cluster/summary.py).
REPORT = ReportPart(_grid, partial(summary.gather, nodes_clause=NODES.key))
MEASUREMENTS = (gpuaccept_cluster, gpuaccept_cluster_pairs, gpuaccept_cluster_allreduce, gpuaccept_cluster_links,
                gpuaccept_cluster_rdma)
