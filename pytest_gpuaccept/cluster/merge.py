"""One results file for a cluster: each node's own checks as `<node>/<subject>` rows, and `hosts`, one entry
per node (its name, its own verdict over its per-node checks only, its identity as read there).

Pure: the login node's report reads each node's results from the sealed evidence and hands them here.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..clauses.cluster import NODES
from ..verdict import Check, Outcome

NODES_CLAUSE = NODES.key
HEAVY_DETAILS = ("timeline", "tables", "each")


def node_checks(node: str, results: dict[str, Any]) -> list[Check]:
    """A node's checks, each with `node` and its subject prefixed with the node's name (a check its results
    file holds without clause or subject is none)."""
    out = []
    for entry in results.get("checks", []):
        if not isinstance(entry, dict) or "clause" not in entry or "subject" not in entry:
            continue
        # Its `evidence` names stay the node's own: they are in nodes/<node>/gpuaccept-evidence/ of this
        # run's evidence, with the node's own report (results.md). Series and tables stay in the node's bundle:
        # 1,000 nodes' would be 150 MB.
        kept = entry.get("details")
        if isinstance(kept, dict) and any(key in kept for key in HEAVY_DETAILS):
            kept = {k: v for k, v in kept.items() if k not in HEAVY_DETAILS}
        out.append(Check.from_dict({**entry, "subject": f"{node}/{entry['subject']}", "node": node, "test": None,
                                    "details": kept}))
    return out


def host_entry(node: str, cluster_check: Check | None, results: dict[str, Any] | None) -> dict[str, Any]:
    """`hosts[]`: a node that returned nothing is there too, rejected, with the reason its check gives."""
    if results is None:
        return {"name": node, "verdict": "rejected", "complete": False, "identity": {},
                "reason": "" if cluster_check is None else cluster_check.message}
    host = results.get("host") or {}
    return {"name": node, "verdict": results.get("verdict", "rejected"), "complete": bool(results.get("complete")),
            "identity": {"hostname": host.get("hostname"), "driver": host.get("driver"), "cuda": host.get("cuda"),
                         "gpus": host.get("gpus", [])}}


def node_grid(checks: Sequence[Check]) -> dict[str, dict[str, dict[Outcome, int]]]:
    """node -> clause -> count of each outcome, over cluster.nodes and every per-node check."""
    grid: dict[str, dict[str, dict[Outcome, int]]] = {}
    for check in checks:
        node = check.node or (check.subject if check.clause == NODES_CLAUSE else None)
        if node is None:
            continue
        row = grid.setdefault(node, {})
        counts = row.get(check.clause)
        if counts is None:
            counts = row[check.clause] = dict.fromkeys(Outcome, 0)
        counts[check.outcome] += 1
    return grid
