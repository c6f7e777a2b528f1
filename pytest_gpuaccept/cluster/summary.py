"""The cluster's part of the login node's report (base.ReportPart): every node's results merged in from its
sealed bundle, and the node grid, the pairs' heat map and the links drawn. benchmarks/cluster_scale.py times
the same for 1,000 nodes.
"""

from __future__ import annotations

import html
import json
from typing import Any, Iterator, Sequence

from ..charts import heat_map, safe_text, table
from ..clauses.base import ReportPart
from ..clauses.cluster import LINKS, PAIRS
from ..evidence import Evidence, ForeignEvidence
from ..verdict import Check, Outcome
from .merge import NODES_CLAUSE, count, merge_cluster
from .run import RESULTS

MAP_NODES = 32  # a pair heat map up to this many nodes; above, the failing pairs are in the failure lines
LINK_ROWS = 200  # links listed in the links table; above, only those that did not pass
GRID_OPEN_ROWS = 50  # nodes shown in the open grid; the rest (all passing) fold into one line


def _node_results(checks: Sequence[Check], evidence: Evidence) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Each node of a cluster run with its results, read from its sealed bundle one node at a time (None where none
    came back): the caller merges each before the next is read."""
    for check in checks:
        if check.clause != NODES_CLAUSE or check.subject == "cluster":
            continue
        results = None
        if check.details.get("evidence_folder") and "node_verdict" in check.details:
            try:
                raw = evidence.read(f"{check.details['evidence_folder']}/{RESULTS}")
                results = json.loads(raw) if raw else None
            except (ForeignEvidence, ValueError):
                results = None
        yield check.subject, results if isinstance(results, dict) else None


def gather(checks: Sequence[Check], evidence: Evidence) -> tuple[Sequence[Check], list[dict[str, Any]] | None]:
    """On the login node (its cluster.nodes checks judged): every node's checks merged in, and `hosts`."""
    if not any(c.clause == NODES_CLAUSE for c in checks):
        return checks, None
    return merge_cluster(checks, _node_results(checks, evidence))


def _grid_cell(counts: dict[Outcome, int] | None) -> str:
    if counts is None:
        return "<td>—"
    css = "gf" if counts[Outcome.FAILED] else "gn" if counts[Outcome.NOT_MEASURED] else "gp"
    return f"<td class={css}>{counts[Outcome.PASSED]}/{sum(counts.values())}"


def node_grid_html(grid: dict[str, dict[str, dict[Outcome, int]]]) -> str:
    """A cluster run's node x clause grid: each cell passed/total, red where any check failed. Nodes with
    failures first; past GRID_OPEN_ROWS the all-passing nodes fold into a closed list of names. Each node's
    name links to its own report (its checks, charts and raw outputs) in the bundle."""
    if not grid:
        return ""
    clauses = list(dict.fromkeys(clause for row in grid.values() for clause in row))
    troubled = [n for n, row in grid.items()
                if any(c[Outcome.FAILED] or c[Outcome.NOT_MEASURED] for c in row.values())]
    fine = [n for n in grid if n not in troubled]
    room = max(0, GRID_OPEN_ROWS - len(troubled))
    shown, folded = troubled + fine[:room], fine[room:]
    head = "".join(f"<th>{safe_text(c)}" for c in clauses)
    rows = "".join(f'<tr><th><a href="gpuaccept-evidence/nodes/{html.escape(n)}/gpuaccept-report.html">{safe_text(n)}</a>'
                   + "".join(_grid_cell(grid[n].get(c)) for c in clauses) for n in shown)
    more = (f"<details><summary>{len(folded)} more nodes, every check passed</summary><p>"
            f"{safe_text(', '.join(folded))}</p></details>" if folded else "")
    return (f"<h3>Nodes ({len(grid)}: {len(troubled)} with checks that did not pass)</h3>"
            f"<table class=gt><tr><th>node{head}{rows}</table>{more}")


def _pair_map(pairs: list[Check]) -> str:
    """The pairs as a node x node heat map, each pair in both cells (up to MAP_NODES nodes)."""
    nodes = list(dict.fromkeys(n for c in pairs for n in c.subject.split("+")))
    if not pairs or len(nodes) > MAP_NODES:
        return ""
    index = {n: i for i, n in enumerate(nodes)}
    cells: dict[tuple[int, int], tuple[float | None, str]] = {}
    for check in pairs:
        a, b = check.subject.split("+")
        value = check.measured if isinstance(check.measured, (int, float)) else None
        cells[(index[a], index[b])] = cells[(index[b], index[a])] = (value, check.outcome.value)
    return heat_map("2-node all_reduce busbw between the nodes", cells, "GB/s", nodes, "each pair in both cells")


def _links_table(links: list[Check]) -> str:
    """The links as a table (past LINK_ROWS, only those that did not pass)."""
    if not links:
        return ""
    shown = links if len(links) <= LINK_ROWS else [c for c in links if c.outcome is not Outcome.PASSED]
    rows = [["link", "outcome", "measured (Gb/s)", "required", "message"]] + [
        [c.subject, c.outcome.value, "—" if c.measured is None else c.measured, c.required or "—", c.message]
        for c in shown]
    more = "" if shown is links else f" (the {len(shown)} of {len(links)} that did not pass)"
    return f"<h4>Links{more}</h4>{table(rows)}"


def render(checks: Sequence[Check]) -> str:
    """The cluster's part of the report: the node grid, the pairs' heat map, the links (one pass over the checks: a
    cluster's are read one node at a time)."""
    grid: dict[str, dict[str, dict[Outcome, int]]] = {}
    pairs, links = [], []
    for check in checks:
        count(grid, check)
        if check.clause == PAIRS.key and "+" in check.subject:
            pairs.append(check)
        elif check.clause == LINKS.key and "->" in check.subject:
            links.append(check)
    return node_grid_html(grid) + _pair_map(pairs) + _links_table(links)


REPORT = ReportPart(render, gather)
