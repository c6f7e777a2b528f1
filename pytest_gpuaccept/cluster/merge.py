"""One results file for a cluster: each node's own checks as `<node>/<subject>` rows, and `hosts`, one entry
per node (its name, its own verdict over its per-node checks only, its identity as read there).

Pure, and flat in the number of nodes: the report merges the nodes' checks in one node at a time, each node's held
packed (about 4 kB a node, MergedChecks) and unpacked whenever the report reads them (while the nodes' runs came
back, run.kept_results kept of each node's results its facts and its checks' outcomes only).
"""

from __future__ import annotations

import itertools
import marshal
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from ..verdict import Check, Outcome

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


def count(grid: dict[str, dict[str, dict[Outcome, int]]], check: Check, nodes_clause: str) -> None:
    """One check into the node grid, node -> clause -> count of each outcome, over `nodes_clause` (each node's own
    run, clauses/cluster.py) and every per-node check (a check of no node, and not of that clause, counts nowhere)."""
    node = check.node or (check.subject if check.clause == nodes_clause else None)
    if node is None:
        return
    row = grid.setdefault(node, {})
    counts = row.get(check.clause)
    if counts is None:
        counts = row[check.clause] = dict.fromkeys(Outcome, 0)
    counts[check.outcome] += 1


_BY_VALUE = {outcome.value: outcome for outcome in Outcome}


def _pack(checks: list[Check]) -> bytes:
    """A node's checks as one compressed block (marshal of plain fields: held in this process only, never written)."""
    rows = [(c.clause, c.subject, c.outcome.value, c.measured, c.unit, c.required, c.message, c.evidence, c.details,
             c.threshold, c.test, c.node) for c in checks]
    return zlib.compress(marshal.dumps(rows), 1)


def _unpack(packed: bytes) -> list[Check]:
    return [Check(clause, subject, _BY_VALUE[outcome], *rest)
            for clause, subject, outcome, *rest in marshal.loads(zlib.decompress(packed))]


class MergedChecks(Sequence[Check]):
    """The cluster's own checks, then every node's (`<node>/<subject>`), in that order: a Sequence the report and the
    results read like a list, holding each node's checks packed and unpacking one node at a time as it is read."""

    def __init__(self, own: Iterable[Check]) -> None:
        self.own = list(own)
        self._nodes: list[tuple[int, bytes]] = []
        self._count = len(self.own)

    def add(self, checks: list[Check]) -> None:
        """One node's checks, packed."""
        if checks:
            self._nodes.append((len(checks), _pack(checks)))
            self._count += len(checks)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Check]:
        yield from self.own
        for _count, packed in self._nodes:
            yield from _unpack(packed)

    @overload
    def __getitem__(self, index: int) -> Check: ...

    @overload
    def __getitem__(self, index: slice) -> list[Check]: ...

    def __getitem__(self, index: int | slice) -> Check | list[Check]:
        if isinstance(index, slice):
            return list(itertools.islice(self, *index.indices(self._count)))
        if not -self._count <= index < self._count:
            raise IndexError("check index out of range")
        return next(itertools.islice(self, index % self._count, None))


def merge_cluster(cluster_checks: Sequence[Check], node_results: Iterable[tuple[str, dict[str, Any] | None]],
                  nodes_clause: str) -> tuple[MergedChecks, list[dict[str, Any]]]:
    """(checks, hosts): the cluster's own checks, then every node's as <node>/<subject>, each node's results read
    (from the iterable), merged and let go before the next; a hosts entry per node (one that returned nothing
    too). The verdict is judged over these checks by the caller."""
    merged = MergedChecks(cluster_checks)
    hosts = []
    by_node = {c.subject: c for c in cluster_checks if c.clause == nodes_clause}
    for node, results in node_results:
        hosts.append(host_entry(node, by_node.get(node), results))
        if results is not None:
            merged.add(node_checks(node, results))
    return merged, hosts
