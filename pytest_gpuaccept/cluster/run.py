"""The login node's half of a cluster run: list the nodes through the engine, read their states, run the
per-node suite on every schedulable node at once (one launcher process per node, so that one node's
failure is its own), and bring each node's bundle into the evidence under nodes/<node>/, verified.

A node that is down or drained is never started or waited for; a node whose run times out, crashes or
returns no verifiable bundle has no results, and says why.
"""

from __future__ import annotations

import base64
import json
import resource
import sys
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..bundle import verify
from ..measurements import ClusterAllReduce, ClusterRun, LinkResult, LinkRuns, NodeOutcome, PairResult, PairRuns
from ..probes import ParseError, iperf3, iproute, nccl_tests, strip_escapes
from ..probes._run import Command, ToolRun
from ..subjects import gpu_count
from ..units import human_bytes
from ..verdict import Outcome
from .bundles import NODES_FOLDER, decode, members
from .engine import ClusterError, Engine, NodeState, launch, own_expansion
from .pairs import DEFAULT_BUDGET, blame, every_pair_fits, plan, second_pass

if TYPE_CHECKING:
    from ..clauses.cluster import ClusterSection, Iperf3Links
    from ..session import Session

RESULTS = "gpuaccept-results.json"

# What the login node keeps of a node's results while the other nodes' come back (cluster.nodes and the run read
# these); its checks are kept as their outcomes only, one shared object per outcome.
KEPT = ("gpuaccept", "verdict", "mode", "complete", "started", "finished", "contract", "host", "cluster_node")
_OUTCOMES = {outcome.value: {"outcome": outcome.value} for outcome in Outcome}


def kept_results(results: dict[str, Any]) -> dict[str, Any]:
    """A node's results as the login node keeps them until the end of the run: every fact the cluster's checks read
    (KEPT), and each check as its outcome alone. The checks themselves are in the node's bundle in the evidence,
    where the report reads them, one node at a time (summary.gather): parsed, a node's results were about 0.5 MB."""
    def outcome(check: Any) -> dict[str, Any]:
        value = check.get("outcome") if isinstance(check, dict) else None
        return (_OUTCOMES.get(value) if isinstance(value, str) else None) or {"outcome": str(value)}

    checks = results.get("checks")
    return {**{key: results[key] for key in KEPT if key in results},
            "checks": [outcome(c) for c in checks] if isinstance(checks, list) else []}


def node_folder(node: str) -> str:
    return f"{NODES_FOLDER}/{node}"


@dataclass(frozen=True, slots=True)
class Expansion:
    """cluster.nodes as the plugin expands it and as the scheduler does (None: the engine has no expansion of its
    own, mpirun): two readings of the contract's node list, compared node by node."""

    expressions: tuple[str, ...]
    ours: tuple[str, ...]
    theirs: tuple[str, ...] | None

    @property
    def names(self) -> list[str]:
        """Every node either list names, the contract's own first: a node only one of them lists is judged too."""
        return list(dict.fromkeys((*self.ours, *(self.theirs or ()))))

    def differs(self, node: str) -> str | None:
        """Why `node` is in one list and not the other, naming both (None: both list it, or there is one list)."""
        if self.theirs is None or (node in self.ours) == (node in self.theirs):
            return None
        given = ", ".join(self.expressions)
        ours = f"the plugin expands the contract's {given} to {_shown(self.ours)}"
        theirs = f"the scheduler's `scontrol show hostnames` printed {_shown(self.theirs)}"
        if node in self.ours:
            return f"{node} is missing from the scheduler's node list: {ours}; {theirs}"
        return f"{node} is in the scheduler's node list but not the contract's: {theirs}; {ours}"


def _shown(names: tuple[str, ...]) -> str:
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"{len(names)} node{'s' if len(names) != 1 else ''} ({listed or 'none'})"


def expansion(state: Session, engine: Engine, section: ClusterSection) -> Expansion:
    """The node names as the plugin reads the contract's hostlists, and as the scheduler expands them (Slurm), its
    command run once per run (or replayed); ClusterError where either cannot be read. A label selector (Kubernetes)
    is applied by the plugin to the engine's node list: one list, nothing to compare."""
    ours = tuple(own_expansion(section.nodes))
    argv = engine.expand_argv(section.nodes)
    if argv is None:
        return Expansion(section.nodes, ours, None)
    run = state.runner.run(argv[0], argv[1:], key="cluster-hostnames")
    if run.failure:
        raise ClusterError(f"the node names could not be listed: {run.failure}")
    listed = tuple(engine.expand(section.nodes, strip_escapes(run.stdout)))
    if section.selector is not None:
        return Expansion((f"selector {section.selector}",), listed, None)
    return Expansion(section.nodes, ours, listed)


def expand(state: Session, engine: Engine, section: ClusterSection) -> list[str]:
    """The node names to judge: every node the plugin's or the scheduler's expansion of cluster.nodes names."""
    return expansion(state, engine, section).names


def node_recording(recording: Path, node: str) -> Path:
    """The NVML recording a node's simulated run reads: `<stem>.<node><suffix>` beside the login node's, where there
    is one (each node its own GPUs, with UUIDs of their own), else the login node's own, which every node then shares."""
    own = recording.with_name(f"{recording.stem}.{node}{recording.suffix}")
    return own if own.is_file() else recording


def node_argv(state: Session, node: str) -> list[str]:
    """The per-node run: this interpreter's path (the plugin must be installed at the same place on every
    node), the contract's bytes as judged here, and the options given on the login node."""
    args = [sys.executable, "-m", "pytest_gpuaccept", "node-run", "--node", node,
            "--contract-b64", base64.b64encode(state.contract.raw).decode(), "--"]
    if state.nvml_recording is not None:
        args.append(f"--gpuaccept-nvml={node_recording(state.nvml_recording, node)}")
    if str(state.sys_root) != "/sys":
        args.append(f"--gpuaccept-sysfs={state.sys_root}")
    return args


def run_cluster(state: Session, engine: Engine, section: ClusterSection) -> ClusterRun:
    """The node lists compared, the scheduler's inventory of the nodes both name, then the per-node suite on
    every schedulable one at once. A node only one list names is not run: its check fails naming both lists."""
    evidence: list[str] = []
    try:
        listed = expansion(state, engine, section)
    except ClusterError as exc:
        return ClusterRun(engine.name, {}, (), str(exc))
    differing = {n: why for n in listed.names if (why := listed.differs(n)) is not None}
    names = [n for n in listed.names if n not in differing]
    inventory_argv = engine.inventory_argv(names) if names else None
    inventory_output = None
    if inventory_argv is not None:
        run = state.runner.run(inventory_argv[0], inventory_argv[1:], key="cluster-inventory")
        evidence += list(run.evidence)
        if run.failure:
            return ClusterRun(engine.name, {}, tuple(evidence), f"the scheduler could not list the nodes: {run.failure}")
        inventory_output = strip_escapes(run.stdout)
    try:
        states = engine.inventory(names, inventory_output)
    except ClusterError as exc:
        return ClusterRun(engine.name, {}, tuple(evidence), f"the scheduler's node list is unreadable: {exc}")
    states.update({n: NodeState(n, False, False, "not in both node lists", None, why) for n, why in differing.items()})
    wanted = gpu_count(state.contract)
    # A node short of the contract's GPUs fails whatever its run says: it is not started, nor waited for.
    runnable = [n for n in names if states[n].present and states[n].schedulable and not _short(states[n], wanted)]
    commands = []
    for node in runnable:
        commands.append(launch(engine, engine.on_node(node, node_argv(state, node)), f"node-run-{node}"))
    nodes: dict[str, NodeOutcome] = {}

    def arrived(n: int, run: ToolRun) -> ToolRun:
        """A node's run is back: its bundle written, verified and read now, its output let go (parse, judge, write,
        drop: a thousand nodes' bundles are never held at once)."""
        node = runnable[n]
        # What the launcher said of how it ran the node (Kubernetes: the pod, its image's digest) joins its facts.
        said = replace(states[node], facts=states[node].facts + engine.launched(run.stderr))
        nodes[node] = _outcome(state, node, said, run)
        return replace(run, stdout="")

    if commands:
        _enough_files(len(commands))
        state.runner.run_together(commands, timeout_s=section.node_timeout.seconds, each=arrived)
    return ClusterRun(engine.name, {node: nodes.get(node) or _outcome(state, node, states[node], None)
                                    for node in listed.names}, tuple(evidence))


def _enough_files(tools: int) -> None:
    """Each tool run at once holds two pipes: a thousand nodes' launchers need more open files than the 1,024 a
    login shell often allows. The soft limit is raised toward the hard one (never past it); a launcher that still
    cannot start says why in its node's check."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 3 * tools + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard),
                                                        hard))
        except (ValueError, OSError):
            pass  # as it was: the launchers past the limit say so


def _short(node: NodeState, wanted: int) -> bool:
    """The scheduler offers the node fewer GPUs than the contract's count (where it says how many)."""
    return bool(wanted) and node.gpus is not None and node.gpus < wanted


def _outcome(state: Session, node: str, node_state: NodeState, run: ToolRun | None) -> NodeOutcome:
    folder = node_folder(node)
    if run is None:
        return NodeOutcome(node_state, folder, None, "not run")
    evidence = tuple(run.evidence)
    try:
        files = members(decode(node, run.stdout))
    except ClusterError as exc:
        why = run.failure or "it exited with code 0"
        return NodeOutcome(node_state, folder, None, f"{exc}; the launcher: {why}", evidence)
    for name, data in files.items():
        state.runner.evidence.write(f"{folder}/{name}", data)
    checked = verify(state.runner.evidence.folder / folder)
    if not checked.ok:
        return NodeOutcome(node_state, folder, None,
                           f"its bundle does not verify: {'; '.join(checked.problems[:3])}", evidence)
    try:
        results: dict[str, Any] = json.loads(files[RESULTS])
    except (KeyError, ValueError) as exc:
        return NodeOutcome(node_state, folder, None, f"its bundle has no readable {RESULTS}: {exc}", evidence)
    if not results.get("complete"):
        return NodeOutcome(node_state, folder, kept_results(results), "its run was incomplete (interrupted or crashed)",
                           evidence)
    if results.get("contract", {}).get("sha256") != state.contract.sha256:
        return NodeOutcome(node_state, folder, None, "its results judged another contract", evidence)
    started = str(results.get("started") or "")
    if state.runner.replay is None and not _fresh(started, state.started):
        return NodeOutcome(node_state, folder, None, f"its results were started at {started or 'an unknown time'}, "
                                                     f"before this run ({state.started}): not this run's", evidence)
    return NodeOutcome(node_state, folder, kept_results(results), None, evidence)


CLOCK_SLACK_S = 600.0  # nodes' clocks may differ from the login node's by this much


def _fresh(started: str, run_started: str) -> bool:
    """A node's results were started during this run (a canned bundle from an earlier day is not)."""
    try:
        return (datetime.fromisoformat(started) - datetime.fromisoformat(run_started)).total_seconds() > -CLOCK_SLACK_S
    except ValueError:
        return False


def pair_budget(section: ClusterSection) -> int:
    """cluster.pairs.budget, the rounds the first pass may take (links follow the pairs' rounds): its default
    where there are no pairs."""
    return section.pairs.budget if section.pairs is not None else DEFAULT_BUDGET


def run_pairs(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun) -> PairRuns:
    """cluster.pairs: a 2-node all_reduce (one rank per GPU, NCCL_ALGO=Ring) between every pair of nodes (or, past
    the budget, in random rounds), the pairs of a round at once; a pair with a node that is not available is not
    run. Past the budget, a second pass pairs every suspect with known-good nodes. Then the blame."""
    pairs = section.pairs
    assert pairs is not None
    if cluster.error is not None:
        return PairRuns({}, blame({}), cluster.error)
    nodes = list(cluster.nodes)
    per_node = gpu_count(state.contract) or 1
    args = nccl_tests.all_reduce_args(1, pairs.min_bytes.nbytes, pairs.max_bytes.nbytes, pairs.args)
    env = {"NCCL_ALGO": "Ring"} if not any(a.startswith("NCCL_ALGO") for a in pairs.args) else {}
    tool = state.runner.which(nccl_tests.TOOL) or nccl_tests.TOOL

    def job(pair: tuple[str, str]) -> Command:
        return launch(engine, engine.mpi_job(list(pair), per_node, [tool, *args], env), f"pair-{pair[0]}+{pair[1]}")

    first = plan(nodes, state.contract.sha256, pairs.budget)
    results = _pair_rounds(state, cluster, first, 1, job, 2 * per_node)
    judged = _judged(results, pairs.min_busbw.gbyte_s)
    second: dict[tuple[str, str], PairResult] = {}
    if not every_pair_fits(len(nodes), pairs.budget):
        # The first pass met three random partners a node: its suspects meet known-good nodes before any blame.
        again = second_pass(nodes, judged, state.contract.sha256)
        second = _pair_rounds(state, cluster, again, len(first) + 1, job, 2 * per_node)
    return PairRuns(results, blame({**judged, **_judged(second, pairs.min_busbw.gbyte_s)}), second_pass=second)


def _pair_rounds(state: Session, cluster: ClusterRun, planned: list[list[tuple[str, str]]], first_round: int,
                 job: Callable[[tuple[str, str]], Command], ranks: int) -> dict[tuple[str, str], PairResult]:
    """Each round's pairs at once (numbered from `first_round`); a pair with a node that is not available is not run."""
    ready = set(cluster.available)
    results: dict[tuple[str, str], PairResult] = {}
    for number, ordered in enumerate(planned, start=first_round):
        for a, b in ordered:
            if a not in ready or b not in ready:
                down = ", ".join(f"{n} ({unavailable(cluster.nodes[n])})" for n in (a, b) if n not in ready)
                results[(a, b)] = PairResult(number, None, "", f"not run: {down} not available")
        runnable = [(a, b) for a, b in ordered if a in ready and b in ready]
        for pair, run in zip(runnable, state.runner.run_together([job(p) for p in runnable]) if runnable else []):
            results[pair] = pair_result(number, run, ranks, human_bytes)
    return results


def _judged(results: dict[tuple[str, str], PairResult], min_busbw: float) -> dict[tuple[str, str], bool]:
    """Each measured pair against the threshold (a pair that was not measured blames no one)."""
    return {pair: r.busbw is not None and r.busbw >= min_busbw for pair, r in results.items()
            if r.problem is None or r.busbw is not None}


def run_allreduce(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun) -> ClusterAllReduce:
    """cluster.allreduce: one all_reduce over every GPU of every available node (one rank per GPU); with a
    node missing it still runs over the others, as information."""
    keys = section.allreduce
    assert keys is not None
    per_node = gpu_count(state.contract) or 1
    if cluster.error is not None:
        return ClusterAllReduce((), (), per_node, None, cluster.error)
    ready = cluster.available
    missing = tuple(f"{n} ({unavailable(o)})" for n, o in cluster.nodes.items() if n not in ready)
    if len(ready) < 2:
        return ClusterAllReduce(tuple(ready), missing, per_node, None, "fewer than two nodes available")
    args = nccl_tests.all_reduce_args(1, keys.min_bytes.nbytes, keys.max_bytes.nbytes, keys.args)
    tool = state.runner.which(nccl_tests.TOOL) or nccl_tests.TOOL
    run = state.runner.run_together([launch(engine, engine.mpi_job(ready, per_node, [tool, *args], {}),
                                            "cluster-allreduce")])[0]
    return ClusterAllReduce(tuple(ready), missing, per_node, pair_result(0, run, len(ready) * per_node, human_bytes,
                                                                         len(ready)))


def unavailable(node: NodeOutcome) -> str:
    if not node.state.present or not node.state.schedulable:
        return node.state.state
    return f"its own run: {node.problem or 'no results'}"[:200]


def pair_result(number: int, run: ToolRun, ranks: int, human: Callable[[float], str], hosts_wanted: int = 2) -> PairResult:
    evidence = tuple(run.evidence)
    if run.failure:
        return PairResult(number, None, "", run.failure, evidence)
    try:
        parsed = nccl_tests.parse_all_reduce(strip_escapes(run.stdout))
    except ParseError as exc:
        return PairResult(number, None, "", str(exc), evidence)
    largest = parsed.largest
    if largest is None or largest.oop_busbw_gbyte_s is None:
        return PairResult(number, None, "", "all_reduce_perf printed no rows", evidence)
    if parsed.error_lines:
        return PairResult(number, None, "", f"all_reduce_perf reported: {parsed.error_lines[0]}", evidence)
    if parsed.wrong_nonzero:
        return PairResult(number, None, "", "all_reduce_perf found wrong results (#wrong > 0)", evidence)
    if parsed.ranks is not None and parsed.ranks != ranks:
        return PairResult(number, None, "", f"{parsed.ranks} ranks took part, {ranks} were started", evidence)
    hosts = {line.host for line in parsed.rank_lines}
    if parsed.rank_lines and len(hosts) != hosts_wanted:
        return PairResult(number, None, "", f"the ranks ran on {len(hosts)} hosts ({', '.join(sorted(hosts)[:8])}), "
                                            f"not on the {hosts_wanted} nodes started", evidence)
    return PairResult(number, largest.oop_busbw_gbyte_s, human(largest.size_bytes), None, evidence)


def run_links(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun,
              devices: tuple[str, ...]) -> LinkRuns:
    """cluster.links: in the pairs' rounds, for each pair and interface (`devices`), iperf3 from the first node to
    a one-off server on the second, each bound to its node's address on that interface, then the same reversed
    (-R): each direction its own result, as its receiver counted it. Every node's addresses are read first."""
    links = section.links.iperf3 if section.links else None
    assert links is not None
    if cluster.error is not None:
        return LinkRuns({}, cluster.error)
    ready = cluster.available
    addresses = _addresses(state, engine, ready, devices)
    results: dict[str, LinkResult] = {}
    for number, pairing in enumerate(plan(list(cluster.nodes), state.contract.sha256, pair_budget(section)), start=1):
        for k, device in enumerate(devices):  # one interface at a time: a node is exclusive to one step
            measured = _link_ends(number, pairing, device, ready, addresses, results)
            # One direction at a time (the second with -R, the server sending): both at once, a direction that
            # is slow starves the other's acknowledgements, and a one-way fault would look two-way.
            for reverse in (False, True):
                _iperf3_step(state, engine, links, number, (k, device), measured, reverse, results)
    return LinkRuns(results)


# A link measured in a step: (client node, server node, client address, server address, name there, name back)
LinkEnds = tuple[str, str, str, str, str, str]


def _addresses(state: Session, engine: Engine, ready: list[str],
               devices: tuple[str, ...]) -> dict[tuple[str, str], str | None]:
    """Every available node's IPv4 address on each interface, None where it has none or it could not be read."""
    addresses: dict[tuple[str, str], str | None] = {}
    for n, run in zip(ready, node_addresses(state, engine, ready)):
        for d in devices:
            try:
                addresses[(n, d)] = None if run.failure else iproute.parse_addresses(strip_escapes(run.stdout), d)[0]
            except ParseError:
                addresses[(n, d)] = None
    return addresses


def node_addresses(state: Session, engine: Engine, nodes: list[str]) -> list[ToolRun]:
    """Each node's `ip -j -4 addr show` (every interface), on all the nodes at once; run once a session (the links'
    addresses and the trays' in nvlink_domain read the same runs). One launcher a node: two Open MPI 4 orteds
    started together on one node can race on their session folder there (open-mpi/ompi#8510)."""
    argv = [iproute.TOOL, "-j", "-4", "addr", "show"]
    return state.runner.run_together([launch(engine, engine.on_node(n, argv), f"addresses-{n}")
                                      for n in nodes]) if nodes else []


def _link_ends(number: int, pairing: list[tuple[str, str]], device: str, ready: list[str],
               addresses: dict[tuple[str, str], str | None], results: dict[str, LinkResult]) -> list[LinkEnds]:
    """The pairs of this round that can be measured on `device`; the others' two directions go into `results`
    as not run, saying which node is not available or has no address."""
    measured: list[LinkEnds] = []
    for a, b in pairing:
        there, back = f"{a}:{device}->{b}:{device}", f"{b}:{device}->{a}:{device}"
        ends = (addresses.get((a, device)), addresses.get((b, device)))
        missing = [n for n in (a, b) if n not in ready] or \
            [f"{n} (no IPv4 address on {device})" for n, e in zip((a, b), ends) if e is None]
        if missing:
            for name in (there, back):
                results[name] = LinkResult(number, None, "", f"not run: {', '.join(missing)} not available")
            continue
        measured.append((a, b, str(ends[0]), str(ends[1]), there, back))
    return measured


# The clients of a round start this long after the last of its servers: one wait a round, not one a pair (a second
# before each client made a round of 75 pairs start its last client 75 s late, past the round's deadline).
SERVER_HEAD_START_S = 1.0


def _iperf3_step(state: Session, engine: Engine, links: Iperf3Links, number: int, interface: tuple[int, str],
                 measured: list[LinkEnds], reverse: bool, results: dict[str, LinkResult]) -> None:
    """One direction of every measured link on one interface (the k-th, whose servers listen on port + k), at
    once and under one deadline: a one-off server on each second node, all started first, then every client on
    the first nodes; each result as its receiver counted it."""
    k, device = interface
    seconds = str(max(1, round(links.duration.seconds)))
    way = "back" if reverse else "there"
    servers: list[Command] = []
    clients: list[Command] = []
    for a, b, source, target, _there, _back in measured:
        port = str(links.port + k)
        server = engine.on_node(b, [iperf3.TOOL, "-s", "-1", "-B", target, "-p", port])
        client = engine.on_node(a, [iperf3.TOOL, "-c", target, "-B", source, "-p", port, "-J", "-t", seconds,
                                    *(["-R"] if reverse else [])])
        servers.append(launch(engine, server, f"link-server-{a}-{b}-{device}-{way}"))
        clients.append(launch(engine, client, f"link-{a}-{b}-{device}-{way}",
                              start_after_s=0.0 if clients else SERVER_HEAD_START_S))
    if not measured:
        return
    runs = state.runner.run_together(servers + clients, timeout_s=SERVER_HEAD_START_S + links.duration.seconds + 60)
    for (_a, _b, source, target, there, back), served, asked in zip(measured, runs[:len(servers)], runs[len(servers):]):
        name, route = (back, f"{target} -> {source}") if reverse else (there, f"{source} -> {target}")
        evidence = (*asked.evidence, *served.evidence)
        problem = asked.failure
        try:
            rate = iperf3.parse_iperf3_json(strip_escapes(asked.stdout)).received_bits_per_s if problem is None else 0.0
        except ParseError as exc:
            problem = str(exc)
        results[name] = LinkResult(number, None if problem else round(rate / 1e9, 3), route, problem, evidence)
