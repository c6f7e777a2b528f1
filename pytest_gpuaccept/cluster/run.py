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
from ..probes import ParseError, ib_write_bw, iperf3, iproute, nccl_tests, strip_escapes
from ..probes._run import Command, ToolRun
from ..probes.counters import COUNTER_WORD, SAMPLE_S, busiest, counted
from ..probes.sysfs import parse_rate
from ..rates import Rated, rate_check  # the host rdma clause's second-source rule, the same here
from ..subjects import gpu_count
from ..units import human_bytes
from ..verdict import Outcome
from . import rdma_side
from .bundles import NODES_FOLDER, decode, members
from .engine import ClusterError, Engine, NodeState, launch, own_expansion
from .fabric import Endpoint, Measured, RdmaLink, RdmaRuns, blamed, directions, excluded_names, link_name, offsets, rail_loads
from .pairs import DEFAULT_BUDGET, blame, cross_halves, every_pair_fits, plan, second_pass
from .rerun import carried, halve, old_pairs, retest_pairs

if TYPE_CHECKING:
    from ..clauses.cluster import ClusterSection, Iperf3Links, Pairs, RdmaLinks
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


def node_sysfs(sys_root: Path, node: str) -> Path:
    """The sysfs tree a node's simulated run reads: `<root>.<node>` beside the login node's `--gpuaccept-sysfs` tree,
    where there is one (each node its own RDMA ports and counters), else the login node's own; /sys on a real node."""
    own = sys_root.with_name(f"{sys_root.name}.{node}")
    return own if str(sys_root) != "/sys" and own.is_dir() else sys_root


def node_argv(state: Session, node: str) -> list[str]:
    """The per-node run: this interpreter's path (the plugin must be installed at the same place on every
    node), the contract's bytes as judged here, and the options given on the login node."""
    args = [sys.executable, "-m", "pytest_gpuaccept", "node-run", "--node", node,
            "--contract-b64", base64.b64encode(state.contract.raw).decode(), "--"]
    if state.nvml_recording is not None:
        args.append(f"--gpuaccept-nvml={node_recording(state.nvml_recording, node)}")
    if str(state.sys_root) != "/sys":
        args.append(f"--gpuaccept-sysfs={node_sysfs(state.sys_root, node)}")
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


def run_pairs(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun, pairs_key: str) -> PairRuns:
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
    retested = _retested_pairs(state, engine, section, cluster, first, pairs_key)
    if retested is not None:  # --gpuaccept-rerun-failed: the old failures' suspects against known-good nodes only
        return retested
    results = _pair_rounds(state, cluster, first, 1, job, 2 * per_node)
    judged = _judged(results, pairs.min_busbw.gbyte_s)
    second: dict[tuple[str, str], PairResult] = {}
    if not every_pair_fits(len(nodes), pairs.budget):
        # The first pass met three random partners a node: its suspects meet known-good nodes before any blame.
        again = second_pass(nodes, judged, state.contract.sha256)
        second = _pair_rounds(state, cluster, again, len(first) + 1, job, 2 * per_node)
    return PairRuns(results, blame({**judged, **_judged(second, pairs.min_busbw.gbyte_s)}), second_pass=second)


RETEST_PAIRS, RETEST_ALLREDUCE = "retest-pairs.json", "retest-allreduce.json"  # each re-test's rounds, sealed


def _retested_pairs(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun,
                    first: list[list[tuple[str, str]]], pairs_key: str) -> PairRuns | None:
    """A re-test's cluster.pairs (None in a run that is no re-test, or one that carried no pair): the old pass's failed
    pairs as the carried ones leave them, their suspects against known-good nodes (rerun.retest_pairs), every round
    sealed; an old failed pair not run again is not measured, saying what the suspects' rounds found."""
    keys = section.pairs
    assert keys is not None
    kept_checks = carried(state.checks)
    passed = {subject for (clause, subject) in kept_checks if clause == pairs_key}
    if not passed:
        return None
    old = old_pairs(first, passed)
    kept: list[tuple[tuple[str, ...], PairResult]] = []
    found, now = retest_pairs(old, job_runner(state, engine, keys, cluster, kept))
    order = {n: i for i, n in enumerate(cluster.nodes)}
    results = {(a, b) if order.get(a, 0) <= order.get(b, 0) else (b, a): result for (a, b), result in kept}
    said = "; ".join(found.lines())
    for pair, ok in old.items():
        if not ok and pair not in results:
            results[pair] = PairResult(0, None, "", "not measured again: the re-test (--gpuaccept-rerun-failed) ran "
                                                    f"the old failures' suspects against known-good nodes: {said}")
    state.runner.evidence.write_json(RETEST_PAIRS, {"retest_of": sorted(set(kept_checks.values())), **found.record()})
    return PairRuns(results, now)


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
    return {pair: r.wrong is None and r.busbw is not None and r.busbw >= min_busbw for pair, r in results.items()
            if r.problem is None or r.busbw is not None}


def run_allreduce(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun,
                  pairs_key: str, checked: int = 1) -> ClusterAllReduce:
    """cluster.allreduce: one all_reduce over every GPU of every available node (one rank per GPU); with a
    node missing it still runs over the others, as information. `checked`: the iterations run, each one checked
    (the contract's `sdc` iterations: wrong sums over the whole cluster fail it)."""
    keys = section.allreduce
    assert keys is not None
    per_node = gpu_count(state.contract) or 1
    if cluster.error is not None:
        return ClusterAllReduce((), (), per_node, None, cluster.error)
    ready = cluster.available
    missing = tuple(f"{n} ({unavailable(o)})" for n, o in cluster.nodes.items() if n not in ready)
    if len(ready) < 2:
        return ClusterAllReduce(tuple(ready), missing, per_node, None, "fewer than two nodes available")
    halved = _halved(state, engine, section, cluster, pairs_key) if not missing else None
    if halved is not None:  # --gpuaccept-rerun-failed, the whole failed before and no pair explains it
        return halved
    args = nccl_tests.all_reduce_args(1, keys.min_bytes.nbytes, keys.max_bytes.nbytes, keys.args, checked)
    tool = state.runner.which(nccl_tests.TOOL) or nccl_tests.TOOL
    run = state.runner.run_together([launch(engine, engine.mpi_job(ready, per_node, [tool, *args], {}),
                                            "cluster-allreduce")])[0]
    return ClusterAllReduce(tuple(ready), missing, per_node, pair_result(0, run, len(ready) * per_node, human_bytes,
                                                                         len(ready)))


def _halved(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun,
           pairs_key: str) -> ClusterAllReduce | None:
    """A re-test's cluster.allreduce where the old whole failed and the old pairs (as the carried ones leave them) blame
    no node and no link: halving (rerun.halve), its first round the whole, judged as the first pass judged it; every
    round sealed. None in a run that is no re-test, or where the pairs explain the failure (the whole runs as before)."""
    keys = section.allreduce
    assert keys is not None
    kept_checks = carried(state.checks)
    if not kept_checks:
        return None
    if section.pairs is not None:
        planned = plan(list(cluster.nodes), state.contract.sha256, section.pairs.budget)
        old = blame(old_pairs(planned, {s for (clause, s) in kept_checks if clause == pairs_key}))
        if old.bad_nodes or old.bad_links:
            return None
    kept: list[tuple[tuple[str, ...], PairResult]] = []
    found = halve(cluster.available, job_runner(state, engine, keys, cluster, kept, ring=False, name="whole-cluster"))
    state.runner.evidence.write_json(RETEST_ALLREDUCE, {"retest_of": sorted(set(kept_checks.values())), **found.record()})
    return ClusterAllReduce(tuple(cluster.available), (), gpu_count(state.contract) or 1, kept[0][1])


def job_runner(state: Session, engine: Engine, keys: Pairs, cluster: ClusterRun,
               kept: list[tuple[tuple[str, ...], PairResult]], ring: bool = True,
               name: str = "pairs") -> Callable[[list[tuple[str, ...]]], list[bool]]:
    """A re-test's Runner (cluster/rerun.py, --gpuaccept-rerun-failed): each job one all_reduce over its nodes in the
    job's order (one rank per GPU; NCCL_ALGO=Ring where `ring`, as the pairs run), a round's jobs at once, each passing
    where busbw at the largest size meets `keys.min_busbw`; a job with a node that is not available fails, not run.
    Every job's result goes into `kept` (its evidence the runner's, under retest-<name>-<round>-<job>), for the bundle."""
    per_node = gpu_count(state.contract) or 1
    args = nccl_tests.all_reduce_args(1, keys.min_bytes.nbytes, keys.max_bytes.nbytes, keys.args)
    env = {"NCCL_ALGO": "Ring"} if ring and not any(a.startswith("NCCL_ALGO") for a in keys.args) else {}
    tool = state.runner.which(nccl_tests.TOOL) or nccl_tests.TOOL
    ready = set(cluster.available)
    rounds: list[int] = []

    def run(jobs: list[tuple[str, ...]]) -> list[bool]:
        rounds.append(len(rounds) + 1)
        number = rounds[-1]
        runnable = [job for job in jobs if set(job) <= ready]
        commands = [launch(engine, engine.mpi_job(list(job), per_node, [tool, *args], env), f"retest-{name}-{number}-{k}")
                    for k, job in enumerate(runnable, start=1)]
        done = dict(zip(runnable, state.runner.run_together(commands))) if commands else {}
        passed = []
        for job in jobs:
            down = [n for n in job if n not in ready]
            result = pair_result(number, done[job], len(job) * per_node, human_bytes, len(job)) if job in done else \
                PairResult(number, None, "", f"not run: {', '.join(down)} not available")
            kept.append((job, result))
            passed.append(result.wrong is None and result.busbw is not None and result.busbw >= keys.min_busbw.gbyte_s)
        return passed

    return run


def unavailable(node: NodeOutcome) -> str:
    if not node.state.present or not node.state.schedulable:
        return node.state.state
    return f"its own run: {node.problem or 'no results'}"[:200]


def pair_result(number: int, run: ToolRun, ranks: int, human: Callable[[float], str], hosts_wanted: int = 2) -> PairResult:
    evidence = tuple(run.evidence)
    finished = run.returncode is not None and not run.timed_out and not run.error
    try:
        parsed = nccl_tests.parse_all_reduce(strip_escapes(run.stdout)) if finished else None
    except ParseError as exc:
        return PairResult(number, None, "", run.failure or str(exc), evidence)
    largest = parsed.largest if parsed is not None else None
    if parsed is not None and largest is not None and largest.oop_busbw_gbyte_s is not None and parsed.wrong_nonzero:
        # A wrong answer is a finding, not a gap: nccl-tests exits non-zero with its `Out of bounds ... FAILED` line
        return PairResult(number, largest.oop_busbw_gbyte_s, human(largest.size_bytes), None, evidence,
                          wrong=wrong_sums(parsed, human))
    if run.failure or parsed is None:
        return PairResult(number, None, "", run.failure or "all_reduce_perf did not finish", evidence)
    if largest is None or largest.oop_busbw_gbyte_s is None:
        return PairResult(number, None, "", "all_reduce_perf printed no rows", evidence)
    if parsed.error_lines:
        return PairResult(number, None, "", f"all_reduce_perf reported: {parsed.error_lines[0]}", evidence)
    if parsed.ranks is not None and parsed.ranks != ranks:
        return PairResult(number, None, "", f"{parsed.ranks} ranks took part, {ranks} were started", evidence)
    hosts = {line.host for line in parsed.rank_lines}
    if parsed.rank_lines and len(hosts) != hosts_wanted:
        return PairResult(number, None, "", f"the ranks ran on {len(hosts)} hosts ({', '.join(sorted(hosts)[:8])}), "
                                            f"not on the {hosts_wanted} nodes started", evidence)
    return PairResult(number, largest.oop_busbw_gbyte_s, human(largest.size_bytes), None, evidence)


def wrong_sums(parsed: nccl_tests.NcclResult, human: Callable[[float], str]) -> str:
    """What a checked all_reduce found wrong (`-c`: every rank's result compared with the expected sum): the sizes with
    their #wrong, and the nodes its ranks ran on (nccl-tests counts wrong elements over all ranks together)."""
    sizes = parsed.wrong_sizes(human)
    hosts = sorted({line.host for line in parsed.rank_lines})
    where = f" over ranks on {', '.join(hosts[:8])}" if hosts else " (no rank lines: which nodes is not printed)"
    return f"all_reduce returned wrong sums: #wrong at {sizes}{where}"


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


# ------------------------------------------------------------------------------------------ cluster.links.rdma

BASE_PORT = 18515  # perftest's default port; a node's k-th device serves on BASE_PORT + k (one server a device a step)
RECEIVED_FRACTION = 0.9  # of the bytes the sender's port counted, the receiver's port must have counted
# Each node's clients start this long after the step's launchers (its servers first): perftest's client gives up at
# once where its server is not listening yet, and its wait would count in its time.
RDMA_HEAD_START_S = 1.0


def run_rdma_links(state: Session, engine: Engine, section: ClusterSection, cluster: ClusterRun,
                   fabric: float | None = None) -> RdmaRuns:
    """cluster.links.rdma (and, with `fabric`, cluster.fabric's loaded round): each node's devices read on the node
    first (rdma_side info); then in the pairs' rounds, every rail of every pair of the round at once, both directions,
    ib_write_bw from each device to its peer's (`all`: every device pair, one device offset a step), each node's servers
    and clients started by one launcher that reads its ports' counters around them (rdma_side run). A link slow in its
    round is measured again alone (its pair's slow links, no other pair running) and judged on that. Then the blame;
    with `fabric`, a sample pair alone and the cross-halves permutation (node i with node i + n/2, every rail, both
    directions) all at once, each rail's loaded figure against its figure alone."""
    keys = section.links.rdma if section.links else None
    assert keys is not None
    if cluster.error is not None:
        return RdmaRuns({}, error=cluster.error)
    ready = cluster.available
    info, evidence = _rdma_info(state, engine, ready, keys.devices)
    devices = list(keys.devices)
    links: dict[str, RdmaLink] = {}
    step = _RdmaStep(state, engine, keys, info, ready, devices)
    for number, pairing in enumerate(plan(list(cluster.nodes), state.contract.sha256, pair_budget(section)), start=1):
        for k in offsets(devices, keys.pairing):
            directed = [(s, r) for a, b in pairing for s, r in directions(a, b, devices, k)]
            for (sender, receiver), measured in step.run(f"round{number}-{k}", directed).items():
                line, source = step.line_rate(sender, receiver)
                links[link_name(sender, receiver)] = RdmaLink(sender, receiver, number, line, source, measured)
    minimum = {name: keys.min_fraction_of_line_rate * link.line_rate_gbit_s for name, link in links.items()
               if link.line_rate_gbit_s is not None}
    slow: dict[tuple[str, str], list[RdmaLink]] = {}
    for link in links.values():
        m = link.loaded
        if m.problem is None and m.refuted is None and m.gbit_s is not None and m.gbit_s < minimum.get(link.name, 0.0):
            ends = sorted((link.sender[0], link.receiver[0]))
            slow.setdefault((ends[0], ends[1]), []).append(link)
    for (a, b), again in sorted(slow.items()):
        measured_alone = step.run(f"alone-{a}+{b}", [(link.sender, link.receiver) for link in again])
        for link in again:
            links[link.name] = replace(link, alone=measured_alone[(link.sender, link.receiver)])
    found, partners = blamed(links, minimum)
    rails = {}
    crossing = cross_halves([n for n in cluster.nodes if n in ready])
    if fabric is not None and crossing:
        alone = {name: link.alone for name, link in links.items() if link.alone is not None}
        sample = [(s, r) for s, r in directions(*crossing[0], devices, 0)]
        alone.update({link_name(s, r): m for (s, r), m in step.run("fabric-alone", sample).items()})
        loaded_directed = [(s, r) for a, b in crossing for s, r in directions(a, b, devices, 0)]
        loaded = {link_name(s, r): m for (s, r), m in step.run("fabric-loaded", loaded_directed).items()}
        names = [*alone, *loaded]
        rails = rail_loads(devices, alone, loaded, excluded_names(names, found))
    return RdmaRuns(links, minimum, found, rails, tuple(crossing), None, tuple(evidence) + tuple(step.evidence), partners)


def _rdma_info(state: Session, engine: Engine, nodes: list[str],
               devices: tuple[str, ...]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each node's devices as its own sysfs gives them (rdma_side info), or `error` per device saying why not."""
    commands = [launch(engine, engine.on_node(n, [sys.executable, "-m", rdma_side.MODULE, "info", "--sysfs",
                                                   str(node_sysfs(state.sys_root, n)), "--devices", ",".join(devices)]),
                       f"rdma-info-{n}") for n in nodes]
    runs = state.runner.run_together(commands) if commands else []
    info: dict[str, dict[str, Any]] = {}
    evidence: list[str] = []
    for node, run in zip(nodes, runs):
        evidence += run.evidence
        try:
            said = _last_json(run) if run.failure is None else None
        except ValueError as exc:
            said = None
            problem = str(exc)
        else:
            problem = run.failure or ""
        info[node] = {d: (said or {}).get(d) or {"error": f"{node}'s devices could not be read: {problem}"}
                      for d in devices}
    return info, evidence


def _last_json(run: ToolRun) -> dict[str, Any]:
    """The JSON object the node's side printed (its last line): a node that printed anything else said nothing."""
    lines = [line for line in strip_escapes(run.stdout).splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ValueError(f"`{run.command[:120]}` printed no JSON object on its last line")
    return value


class _RdmaStep:
    """Runs steps of links: each node's servers and clients of the step by one launcher (rdma_side run), every node at
    once, under one deadline; each link's Measured from its client, its server and both ports' counters."""

    def __init__(self, state: Session, engine: Engine, keys: RdmaLinks, info: dict[str, dict[str, Any]],
                 ready: list[str], devices: list[str]) -> None:
        self.state, self.engine, self.keys, self.info, self.ready, self.devices = state, engine, keys, info, ready, devices
        self.evidence: list[str] = []
        self.tool = state.runner.which(ib_write_bw.TOOL) or ib_write_bw.TOOL

    def line_rate(self, sender: Endpoint, receiver: Endpoint) -> tuple[float | None, str]:
        """The contract's line_rate, else the slower of the two ports' rates in their nodes' sysfs."""
        if self.keys.line_rate is not None:
            return self.keys.line_rate.gbit_s, "the contract's line_rate"
        rates = [parse_rate(self.info.get(n, {}).get(d, {}).get("rate")) for n, d in (sender, receiver)]
        if any(r is None for r in rates):
            return None, "no rate in sysfs"
        return min(r for r in rates if r is not None), (f"sysfs rate of {sender[0]}:{sender[1]} and "
                                                         f"{receiver[0]}:{receiver[1]}")

    def _end(self, end: Endpoint) -> tuple[dict[str, Any], str | None]:
        node, device = end
        if node not in self.ready:
            return {}, f"{node} not available"
        found = self.info.get(node, {}).get(device) or {}
        if found.get("error"):
            return found, str(found["error"])
        if "ACTIVE" not in str(found.get("state")):
            return found, f"{node}:{device} is not active ({found.get('state') or 'no state'} in its sysfs)"
        if found.get("link_layer") == "Ethernet" and found.get("gid_index") is None:
            return found, f"{node}:{device} has no RoCE v2 GID of an IPv4 address in its sysfs"
        return found, None

    def _host(self, end: Endpoint, found: dict[str, Any]) -> str:
        """Where a client reaches the server's side: RoCE, the IPv4 of the rail's GID; IB, the node's name."""
        return ib_write_bw.gid_ipv4(found.get("gid")) or end[0]

    def run(self, label: str, directed: list[tuple[Endpoint, Endpoint]]) -> dict[tuple[Endpoint, Endpoint], Measured]:
        keys = self.keys
        seconds = max(1, round(keys.duration.seconds))
        out: dict[tuple[Endpoint, Endpoint], Measured] = {}
        per_node: dict[str, list[dict[str, Any]]] = {}
        for sender, receiver in directed:
            (s_info, s_problem), (r_info, r_problem) = self._end(sender), self._end(receiver)
            if s_problem or r_problem:
                out[(sender, receiver)] = Measured(None, f"not run: {s_problem or r_problem}")
                continue
            port = BASE_PORT + self.devices.index(receiver[1])
            common = ["-i", "1", "-s", str(keys.message_size.nbytes), "-p", str(port), "--report_gbits", "-F", "-D",
                      str(seconds), *(["-q", str(keys.qps)] if keys.qps != 1 else [])]
            name = link_name(sender, receiver)
            per_node.setdefault(receiver[0], []).append(
                {"name": name, "role": "server", "device": receiver[1],
                 "argv": [self.tool, "-d", receiver[1], *common, *_gid_flag(r_info)]})
            per_node.setdefault(sender[0], []).append(
                {"name": name, "role": "client", "device": sender[1],
                 "argv": [self.tool, "-d", sender[1], *common, *_gid_flag(s_info),
                          self._host(receiver, r_info)]})
        nodes = sorted(per_node)
        timeout = RDMA_HEAD_START_S + seconds + 30
        commands = []
        for node in nodes:
            spec = {"head_start_s": RDMA_HEAD_START_S, "timeout_s": timeout, "tools": per_node[node]}
            argv = [sys.executable, "-m", rdma_side.MODULE, "run", "--sysfs", str(node_sysfs(self.state.sys_root, node)),
                    "--spec", base64.b64encode(json.dumps(spec).encode()).decode()]
            commands.append(launch(self.engine, self.engine.on_node(node, argv), f"rdma-{label}-{node}"))
        runs = self.state.runner.run_together(commands, timeout_s=timeout + 30) if commands else []
        said: dict[str, dict[str, Any] | str] = {}
        evidence: dict[str, tuple[str, ...]] = {}
        for node, run in zip(nodes, runs):
            self.evidence += run.evidence
            evidence[node] = tuple(run.evidence)
            try:
                said[node] = _last_json(run) if run.failure is None else f"the launcher on {node}: {run.failure}"
            except ValueError as exc:
                said[node] = f"the launcher on {node}: {exc}"
        for sender, receiver in directed:
            if (sender, receiver) not in out:
                out[(sender, receiver)] = self._measured(sender, receiver, said, evidence, seconds)
        return out

    def _measured(self, sender: Endpoint, receiver: Endpoint, said: dict[str, dict[str, Any] | str],
                  evidence: dict[str, tuple[str, ...]], seconds: int) -> Measured:
        name = link_name(sender, receiver)
        files = evidence.get(sender[0], ()) + evidence.get(receiver[0], ())
        sides = said.get(sender[0]), said.get(receiver[0])
        for side in sides:
            if not isinstance(side, dict):
                return Measured(None, str(side), evidence=files)
        s_side, r_side = sides
        assert isinstance(s_side, dict) and isinstance(r_side, dict)
        client = next((t for t in s_side.get("tools", []) if t.get("name") == name and t.get("role") == "client"), None)
        server = next((t for t in r_side.get("tools", []) if t.get("name") == name and t.get("role") == "server"), None)
        if client is None or server is None:
            return Measured(None, f"the node's side did not report {'the client' if client is None else 'the server'}",
                            evidence=files)
        for tool, where in ((client, sender), (server, receiver)):
            failure = _tool_failure(tool, where)
            if failure is not None:
                return Measured(None, failure, evidence=files)
        try:
            asked = ib_write_bw.parse_ib_write_bw(strip_escapes(str(client.get("stdout", ""))))
            served = ib_write_bw.parse_ib_write_bw(strip_escapes(str(server.get("stdout", ""))), rows_needed=False)
        except ParseError as exc:
            return Measured(None, str(exc), evidence=files)
        wrong = _wrong_peer(asked, self.info[receiver[0]][receiver[1]], receiver, "the client") or \
            _wrong_peer(served, self.info[sender[0]][sender[1]], sender, "the server")
        if wrong is not None:
            return Measured(None, wrong, evidence=files)
        claimed = asked.last[2]
        sent = counted(s_side["before"].get(sender[1]), s_side["after"].get(sender[1]), "port_xmit_data", COUNTER_WORD)
        got = counted(r_side["before"].get(receiver[1]), r_side["after"].get(receiver[1]), "port_rcv_data", COUNTER_WORD)
        source = f"{sender[0]}'s {sender[1]} port_xmit_data (its sysfs, 4-byte words)"
        wall = float(client.get("seconds") or 0.0)
        busy = busiest(s_side.get("samples", {}).get(sender[1]) or [], "port_xmit_data", COUNTER_WORD, float(seconds))
        if wall >= seconds and busy is not None and busy.monotonic_s:
            # Read while the tools ran: the figure is held to the most the port moved in any `seconds` of the run
            # (counters.busiest), whatever the connect took (start-up is no transfer, on a loaded node or a fabric)
            second = rate_check(claimed, Rated(ib_write_bw.TOOL, float(seconds), float(seconds)), busy,
                                ("port_xmit_data", f"{source}, the most it moved in any {seconds} s of the run (read "
                                                   f"every {SAMPLE_S:g} s: {busy.monotonic_s:.2f} s between readings)"))
        else:
            second = rate_check(claimed, Rated(ib_write_bw.TOOL, float(seconds), wall), sent, ("port_xmit_data", source))
        details = {**second.details, "client": " ".join(map(str, client.get("argv", []))), "round_seconds": seconds}
        if got.counted_bytes is not None:
            details["received_bytes"] = got.counted_bytes
        refuted = second.refuted
        if refuted is None and sent.counted_bytes and got.counted_bytes is not None \
                and got.counted_bytes < RECEIVED_FRACTION * sent.counted_bytes:
            refuted = (f"{sender[0]}'s {sender[1]} port_xmit_data counted {sent.counted_bytes} bytes sent, but "
                       f"{receiver[0]}'s {receiver[1]} port_rcv_data (its sysfs) only {got.counted_bytes}: the bytes did "
                       f"not arrive through {receiver[0]}:{receiver[1]}")
        elif refuted is None and got.unread and sent.counted_bytes is not None:
            details["receiver_unconfirmed"] = got.unread
        counted_rate = details.get("counted_gbit_s")
        return Measured(claimed, None, refuted, counted_rate if isinstance(counted_rate, float) else None,
                        second.shown if refuted is None else "", details, files)


def _gid_flag(found: dict[str, Any]) -> list[str]:
    """`-x <index>`: the GID index of the port's IPv4 (RoCE v2), as its own node's sysfs gives it; none on IB."""
    return ["-x", str(found["gid_index"])] if found.get("gid_index") is not None else []


def _tool_failure(tool: dict[str, Any], where: Endpoint) -> str | None:
    role = f"ib_write_bw's {tool.get('role')} on {where[0]} ({where[1]})"
    if tool.get("error"):
        return f"{role} did not start: {tool['error']}"
    if tool.get("timed_out"):
        return f"{role} timed out after {tool.get('seconds')} s and was killed"
    if tool.get("returncode") != 0:
        lines = [line.strip() for line in f"{tool.get('stderr', '')}\n{tool.get('stdout', '')}".splitlines() if line.strip()]
        tail = next((line for line in lines if ib_write_bw._FAILURE.search(line)), lines[-1] if lines else "")
        return f"{role} exited with code {tool.get('returncode')}" + (f": {tail[:200]}" if tail else "")
    return None


def _wrong_peer(run: ib_write_bw.WriteBw, peer: dict[str, Any], end: Endpoint, who: str) -> str | None:
    """Whether the tool's `remote address` is the peer's device as the peer's own sysfs gives it (RoCE: the IPv4 of
    its GID; IB: its LID): a run that reached another port measured another link."""
    remote = run.remote
    if remote is None:
        return f"{who}'s ib_write_bw printed no remote address: nothing says it reached {end[0]}:{end[1]}"
    lid, gid = remote
    want_ip = ib_write_bw.gid_ipv4(peer.get("gid"))
    if want_ip is not None:
        got = ib_write_bw.gid_ipv4(gid)
        if got != want_ip:
            return (f"{who}'s ib_write_bw reached GID {gid or 'none'} ({got or 'no IPv4'}), but {end[0]}:{end[1]}'s own "
                    f"sysfs gives {want_ip}: it measured another port")
        return None
    want_lid = peer.get("lid")
    if want_lid and lid and int(lid, 16) != int(str(want_lid), 16):
        return f"{who}'s ib_write_bw reached LID {lid}, but {end[0]}:{end[1]}'s own sysfs gives LID {want_lid}"
    return None
