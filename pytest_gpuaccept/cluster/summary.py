"""The cluster's part of the login node's report (clauses/cluster.py declares it a ReportPart): every node's results merged in from its
sealed bundle, and the node grid drawn (its pairs and links are rows of the report's "Pairs": report/pairs.py).
benchmarks/cluster_scale.py times the same for 1,000 nodes.
"""

from __future__ import annotations

import html
import json
from typing import Any, Iterator, Sequence

from ..charts import safe_text
from ..evidence import Evidence, ForeignEvidence
from ..verdict import Check, Outcome
from .merge import count, merge_cluster
from .run import RESULTS

GRID_OPEN_ROWS = 50  # nodes shown in the open grid; the rest (all passing) fold into one line


def _node_results(checks: Sequence[Check], evidence: Evidence, nodes_clause: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Each node of a cluster run with its results, read from its sealed bundle one node at a time (None where none
    came back): the caller merges each before the next is read."""
    for check in checks:
        if check.clause != nodes_clause or check.subject == "cluster":
            continue
        results = None
        if check.details.get("evidence_folder") and "node_verdict" in check.details:
            try:
                raw = evidence.read(f"{check.details['evidence_folder']}/{RESULTS}")
                results = json.loads(raw) if raw else None
            except (ForeignEvidence, ValueError):
                results = None
        yield check.subject, results if isinstance(results, dict) else None


def gather(checks: Sequence[Check], evidence: Evidence, nodes_clause: str) -> tuple[Sequence[Check], list[dict[str, Any]] | None]:
    """On the login node (its cluster.nodes checks judged): every node's checks merged in, and `hosts`."""
    if not any(c.clause == nodes_clause for c in checks):
        return checks, None
    return merge_cluster(checks, _node_results(checks, evidence, nodes_clause), nodes_clause)


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


def render(checks: Sequence[Check], nodes_clause: str) -> str:
    """The cluster's part of the report: the node grid (one pass over the checks: a cluster's are read one node at a
    time). Its pairs and links are clauses of pairs, each one row of the report's "Pairs" (report/pairs.py)."""
    grid: dict[str, dict[str, dict[Outcome, int]]] = {}
    for check in checks:
        count(grid, check, nodes_clause)
    return node_grid_html(grid)

