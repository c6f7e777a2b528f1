"""The `cluster` section: every node of a cluster, through the engine the cluster already has (Slurm, mpirun or
Kubernetes), judged from the login node.

The file's other sections are the per-node contract: the login node runs them on every node through the
engine (`python -m pytest_gpuaccept node-run`), brings each node's bundle back through the engine's own
output, and reports each node's checks as `<node>/<subject>`. Here: `cluster.nodes`, one check per node:
known to the scheduler, schedulable, the GPUs it offers, and a verified bundle with complete results.
`cluster.nodes` is node names (hostlist expressions) or, for Kubernetes, `{selector: "key=value,..."}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping

import yaml

from .. import schema
from ..cluster import summary
from ..cluster.engine import ENGINES, ClusterError, engine_for
from ..cluster.kubernetes import DEFAULT_PORT, KubernetesKeys, namespace_name, parse_selector
from ..cluster.pairs import DEFAULT_BUDGET, plan
from ..cluster.run import expand, pair_budget, run_allreduce, run_cluster, run_links, run_pairs
from ..measurements import gpu_uuids
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Bandwidth, Duration, Size, UnitError, parse_duration, parse_size
from ..verdict import Check
from . import allreduce, network
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
class Links:
    iperf3: Iperf3Links | None
    rdma: None = None


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


def image(value: Any, node: yaml.Node) -> str:
    """An image reference as a pod names it: no spaces; a digest (`@sha256:...`) pins it."""
    text = schema.text(value, node)
    if any(c.isspace() for c in text) or text.startswith(("-", "/")):
        raise ValueError(f"expected an image such as 'registry.example/gpuaccept:0.1@sha256:...', got {text!r}")
    return text


def not_yet(value: Any, node: yaml.Node) -> None:
    """cluster.links.rdma is in the format but not measured by this version: a clause that would run no test is
    refused before anything runs, never skipped."""
    raise ValueError("not measured by this version of pytest-gpuaccept yet: remove it from the contract "
                     "(a clause that runs no test would pass unmeasured)")


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
                      "test would pass unmeasured)") for key, given in (("cluster.links", section.links),
                                                                       ("cluster.nvlink_domain", section.nvlink_domain))
                if given is not None]
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
    if section.links is not None:
        if section.links.iperf3 is None:
            problems.append(("cluster.links", "expected iperf3 (rdma is not measured by this version yet)"))
        elif link_interfaces(section, sections) == ():
            problems.append(("cluster.links.iperf3.interfaces", "missing: name the interfaces (exact names), or give "
                                                                 "a nics section with exact names"))
    domain = section.nvlink_domain
    if domain is not None and not (domain.fabric or domain.imex or domain.min_busbw is not None):
        problems.append(("cluster.nvlink_domain", "asks for nothing: give min_busbw, or leave fabric or imex true (a "
                                                  "clause that runs no test would pass unmeasured)"))
    for name, keys in (("pairs", section.pairs), ("allreduce", section.allreduce), ("nvlink_domain", domain)):
        if keys is not None and keys.min_bytes.nbytes > keys.max_bytes.nbytes:
            problems.append((f"cluster.{name}.min_bytes", f"expected at most max_bytes ({keys.max_bytes}), "
                                                          f"got {keys.min_bytes}"))
    return problems


SECTION = Section(
    "cluster",
    {"engine": Key(schema.one_of(*ENGINES), required=True), "nodes": Key(hostlists, required=True),
     "partition": Key(schema.text), "node_timeout": Key(schema.duration, default=parse_duration("1 h")),
     "pairs": Key(nested("cluster.pairs", {**{k: v for k, v in allreduce.SECTION.keys.items() if k != "tool"},
                                           "budget": Key(schema.whole(1, 100_000), default=DEFAULT_BUDGET)}, Pairs)),
     "allreduce": Key(nested("cluster.allreduce", {k: v for k, v in allreduce.SECTION.keys.items() if k != "tool"},
                             Pairs)),
     "links": Key(nested("cluster.links", {
         "iperf3": Key(nested("cluster.links.iperf3", {
             "min_throughput": Key(schema.bandwidth, required=True), "interfaces": Key(schema.names),
             "duration": Key(schema.duration, default=parse_duration("5 s")),
             "port": Key(schema.whole(1, 65535), default=5301)}, Iperf3Links)),
         "rdma": Key(not_yet)}, Links)),
     "kubernetes": Key(nested("cluster.kubernetes", {
         "context": Key(schema.text), "namespace": Key(namespace), "image": Key(image),
         "privileged": Key(schema.boolean, default=False),
         "port": Key(schema.whole(1, 65535), default=DEFAULT_PORT)}, KubernetesKeys)),
     "nvlink_domain": Key(nested("cluster.nvlink_domain", {
         "fabric": Key(schema.boolean, default=True), "imex": Key(schema.boolean, default=True),
         "min_busbw": Key(schema.bandwidth), "min_bytes": Key(schema.size, default=parse_size("1 GiB")),
         "max_bytes": Key(schema.size, default=parse_size("8 GiB"))}, NvlinkDomain))},
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
    return run_pairs(gpuaccept_state, engine_for(section), section, gpuaccept_cluster)


def gpuaccept_cluster_allreduce(gpuaccept_state: Session, gpuaccept_contract: Contract,
                                gpuaccept_cluster: ClusterRun) -> ClusterAllReduce:
    """cluster.allreduce: one all_reduce over every GPU of every available node."""
    section = SECTION.of(gpuaccept_contract)
    return run_allreduce(gpuaccept_state, engine_for(section), section, gpuaccept_cluster)


def gpuaccept_cluster_links(gpuaccept_state: Session, gpuaccept_contract: Contract,
                            gpuaccept_cluster: ClusterRun) -> LinkRuns:
    """cluster.links: node to node per interface, both directions at once, in the pairs' rounds."""
    section = SECTION.of(gpuaccept_contract)
    return run_links(gpuaccept_state, engine_for(section), section, gpuaccept_cluster,
                     link_interfaces(section, gpuaccept_contract.by_section))


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
               lambda s: s.links is not None, pair_joint="->")
CLAUSES = (NODES, ALLREDUCE, PAIRS, LINKS)


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
# The cluster's part of the login node's report: every node's results merged in, and the node grid (cluster/summary.py).
REPORT = ReportPart(partial(summary.render, nodes_clause=NODES.key), partial(summary.gather, nodes_clause=NODES.key))
MEASUREMENTS = (gpuaccept_cluster, gpuaccept_cluster_pairs, gpuaccept_cluster_allreduce, gpuaccept_cluster_links)
