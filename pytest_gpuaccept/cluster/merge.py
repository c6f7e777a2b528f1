"""One results file for a cluster: each node's own checks as `<node>/<subject>` rows, and `hosts`, one entry
per node (its name, its own verdict over its per-node checks only, its identity as read there).

Pure: the login node's report reads each node's results from the sealed evidence and hands them here.
"""

from __future__ import annotations

from typing import Any

from ..clauses.cluster import NODES

NODES_CLAUSE = NODES.key
HEAVY_DETAILS = ("timeline", "tables", "each")


def node_checks(node: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    """A node's checks, each with `node` and its subject prefixed with the node's name."""
    out = []
    for check in results.get("checks", []):
        if not isinstance(check, dict) or "clause" not in check or "subject" not in check:
            continue
        # Its `evidence` names stay the node's own: they are in nodes/<node>/gpuaccept-evidence/ of this
        # run's evidence, with the node's own report (results.md).
        merged = {**check, "subject": f"{node}/{check['subject']}", "node": node}
        merged.pop("test", None)
        details = check.get("details")
        if isinstance(details, dict):  # series and tables stay in the node's bundle: 1,000 nodes' would be 150 MB
            kept = {k: v for k, v in details.items() if k not in HEAVY_DETAILS}
            if kept:
                merged["details"] = kept
            else:
                merged.pop("details", None)
        out.append(merged)
    return out


def host_entry(node: str, cluster_check: dict[str, Any], results: dict[str, Any] | None) -> dict[str, Any]:
    """`hosts[]`: a node that returned nothing is there too, rejected, with the reason its check gives."""
    if results is None:
        return {"name": node, "verdict": "rejected", "complete": False, "identity": {},
                "reason": cluster_check.get("message", "")}
    host = results.get("host") or {}
    return {"name": node, "verdict": results.get("verdict", "rejected"), "complete": bool(results.get("complete")),
            "identity": {"hostname": host.get("hostname"), "driver": host.get("driver"), "cuda": host.get("cuda"),
                         "gpus": host.get("gpus", [])}}


def node_grid(checks: list[dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
    """node -> clause -> [passed, failed, not measured], over cluster.nodes and every per-node check."""
    grid: dict[str, dict[str, list[int]]] = {}
    index = {"passed": 0, "failed": 1, "not_measured": 2}
    for check in checks:
        node = check.get("node") or (check["subject"] if check["clause"] == NODES_CLAUSE else None)
        if node is None:
            continue
        counts = grid.setdefault(str(node), {}).setdefault(check["clause"], [0, 0, 0])
        counts[index.get(check["outcome"], 2)] += 1
    return grid
