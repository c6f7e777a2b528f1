"""The login node's half of a cluster run: list the nodes through the engine, read their states, run the
per-node suite on every schedulable node at once (one launcher process per node, so that one node's
failure is its own), and bring each node's bundle into the evidence under nodes/<node>/, verified.

A node that is down or drained is never started or waited for; a node whose run times out, crashes or
returns no verifiable bundle has no results, and says why.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import TYPE_CHECKING, Any

from ..bundle import verify
from ..probes._run import Command, ToolRun
from .bundles import decode, members
from .engine import ClusterError, Engine, NodeState

if TYPE_CHECKING:
    from ..clauses.cluster import ClusterSection
    from ..measurements import ClusterRun, NodeOutcome
    from ..state import State

NODES_FOLDER = "nodes"
RESULTS = "gpuaccept-results.json"


def node_folder(node: str) -> str:
    return f"{NODES_FOLDER}/{node}"


def expand(state: State, engine: Engine, section: ClusterSection) -> list[str]:
    """The node names: from the scheduler (Slurm expands its own hostlists) or here (mpirun)."""
    argv = engine.expand_argv(section.nodes)
    output = None
    if argv is not None:
        run = state.runner.run(argv[0], argv[1:], key="cluster-hostnames")
        if run.failure:
            raise ClusterError(f"the node names could not be listed: {run.failure}")
        output = run.stdout
    return engine.expand(section.nodes, output)


def node_argv(state: State, node: str) -> list[str]:
    """The per-node run: this interpreter's path (the plugin must be installed at the same place on every
    node), the contract's bytes as judged here, and the options given on the login node."""
    args = [sys.executable, "-m", "pytest_gpuaccept", "node-run", "--node", node,
            "--contract-b64", base64.b64encode(state.contract.raw).decode(), "--"]
    if state.nvml_recording is not None:
        args.append(f"--gpuaccept-nvml={state.nvml_recording}")
    if str(state.sys_root) != "/sys":
        args.append(f"--gpuaccept-sysfs={state.sys_root}")
    return args


def run_cluster(state: State, engine: Engine, section: ClusterSection) -> ClusterRun:
    from ..measurements import ClusterRun

    evidence: list[str] = []
    try:
        names = state.cluster_nodes()
    except ClusterError as exc:
        return ClusterRun(engine.name, {}, (), str(exc))
    inventory_argv = engine.inventory_argv(names)
    inventory_output = None
    if inventory_argv is not None:
        run = state.runner.run(inventory_argv[0], inventory_argv[1:], key="cluster-inventory")
        evidence += list(run.evidence)
        if run.failure:
            return ClusterRun(engine.name, {}, tuple(evidence), f"the scheduler could not list the nodes: {run.failure}")
        inventory_output = run.stdout
    try:
        states = engine.inventory(names, inventory_output)
    except ClusterError as exc:
        return ClusterRun(engine.name, {}, tuple(evidence), f"the scheduler's node list is unreadable: {exc}")
    runnable = [n for n in names if states[n].present and states[n].schedulable]
    commands = []
    for node in runnable:
        argv = engine.on_node(node, node_argv(state, node))
        commands.append(Command(argv[0], tuple(argv[1:]), key=f"node-run-{node}"))
    runs = dict(zip(runnable, state.runner.run_together(commands, timeout_s=section.node_timeout.seconds))) \
        if commands else {}
    nodes = {}
    for node in names:
        nodes[node] = _outcome(state, node, states[node], runs.get(node))
    return ClusterRun(engine.name, nodes, tuple(evidence))


def _outcome(state: State, node: str, node_state: NodeState, run: ToolRun | None) -> NodeOutcome:
    from ..measurements import NodeOutcome

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
        return NodeOutcome(node_state, folder, results, "its run was incomplete (interrupted or crashed)", evidence)
    if results.get("contract", {}).get("sha256") != state.contract.sha256:
        return NodeOutcome(node_state, folder, None, "its results judged another contract", evidence)
    return NodeOutcome(node_state, folder, results, None, evidence)
