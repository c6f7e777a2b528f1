"""A cluster's results and report summary from its nodes' results, in one place: what the login node's
report does after the nodes came back, and what the 1,000-node benchmark times (benchmarks/cluster_scale.py).
"""

from __future__ import annotations

from typing import Any

from .merge import NODES_CLAUSE, host_entry, node_checks


def merge_cluster(cluster_checks: list[dict[str, Any]],
                  node_results: dict[str, dict[str, Any] | None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(checks, hosts): the cluster's own checks, then every node's as <node>/<subject>; a hosts entry per node
    (one that returned nothing too). The verdict is judged over these checks by the caller."""
    checks = list(cluster_checks)
    hosts = []
    by_node = {str(c["subject"]): c for c in cluster_checks if c["clause"] == NODES_CLAUSE}
    for node, results in node_results.items():
        hosts.append(host_entry(node, by_node.get(node, {}), results))
        if results is not None:
            checks += node_checks(node, results)
    return checks, hosts


def summary_html(results: dict[str, Any]) -> str:
    """The report's own page for these results (verdict, failures, node grid, per clause, ...), as the login
    node's report opens; pytest-html's table below it holds the cluster's own rows."""
    from ..report import banner

    return banner(results, None, results.get("evidence_digest", ""))
