"""Many pairs, one page: a clause whose subjects are pairs (base.Clause.pair_joint) is judged pair by pair, every pair
a check of the results, but the report shows its passing pairs as one row: the clause's counts and, up to MAP_ENDS
ends, its heat map. Each pair that did not pass keeps its row in the table below (table.py). A cluster's nodes'
pairs are one row per clause over every node, naming the nodes whose pairs did not pass (each node's own report
has its heat map). Its own words are said in the report's language (i18n.tr)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..charts import heat_map, safe_text
from ..clauses import registry
from ..clauses.base import Clause
from ..i18n import DEFAULT, tr
from ..verdict import Check, Outcome

MAP_ENDS = 32  # a heat map up to this many ends a side (32 x 32 cells); above, the ends of the pairs that did not pass
ENDS_NAMED = 20  # ends (or nodes) named in a row, those with the most pairs that did not pass first


def pair_clause(check: Check) -> Clause | None:
    """The check's clause where its subjects are pairs."""
    clause = registry.BY_KEY.get(check.clause)
    return clause if clause is not None and clause.pair_joint else None


def grouped(check: Check) -> bool:
    """Whether the report shows this check in its clause's row rather than in a row of its own: a passing pair."""
    return check.outcome is Outcome.PASSED and pair_clause(check) is not None


@dataclass
class Group:
    """A pair clause's checks on this host (node None), or on every node of a cluster (node True)."""

    clause: Clause
    nodes: bool
    checks: list[Check] = field(default_factory=list)

    def counts(self) -> dict[Outcome, int]:
        counts = dict.fromkeys(Outcome, 0)
        for check in self.checks:
            counts[check.outcome] += 1
        return counts

    def troubled(self) -> dict[str, int]:
        """The ends (a cluster's nodes: the nodes) in pairs that did not pass, and how many such pairs each is in."""
        found: dict[str, int] = {}
        for check in self.checks:
            if check.outcome is Outcome.PASSED:
                continue
            names = [check.node] if self.nodes and check.node else list(_ends(self.clause, check) or ())
            for name in names:
                found[name] = found.get(name, 0) + 1
        return dict(sorted(found.items(), key=lambda item: -item[1]))


def _local(check: Check) -> str:
    return check.subject.removeprefix(f"{check.node}/") if check.node else check.subject


def _ends(clause: Clause, check: Check) -> tuple[str, str] | None:
    return clause.ends(_local(check))


def groups(checks: Sequence[Check]) -> list[Group]:
    """Each pair clause's checks, in the order the checks come: this host's, then its nodes' (one pass: a cluster's
    checks are read one node at a time)."""
    found: dict[tuple[str, bool], Group] = {}
    for check in checks:
        clause = pair_clause(check)
        if clause is None or _ends(clause, check) is None:
            continue
        key = (clause.key, check.node is not None)
        group = found.get(key)
        if group is None:
            group = found[key] = Group(clause, check.node is not None)
        group.checks.append(check)
    return list(found.values())


def _map(group: Group, lang: str = DEFAULT) -> str:
    """The group's heat map: a row per end, a column per end; a pair both ways in both its cells."""
    ends = [_ends(group.clause, check) for check in group.checks]
    names = list(dict.fromkeys(name for pair in ends if pair for name in pair))
    if group.nodes or len(names) > MAP_ENDS:
        return ""
    index = {name: n for n, name in enumerate(names)}
    ordered = group.clause.pair_joint == "->"
    cells: dict[tuple[int, int], tuple[float | None, str]] = {}
    for check, pair in zip(group.checks, ends):
        if pair is None:
            continue
        value = check.measured if isinstance(check.measured, (int, float)) else None
        a, b = index[pair[0]], index[pair[1]]
        cells[(a, b)] = (value, check.outcome.value)
        if not ordered:
            cells[(b, a)] = cells[(a, b)]
    return heat_map(group.clause.key, cells, group.clause.unit or "", names,
                    tr(lang, "row: from, column: to") if ordered else tr(lang, "each pair in both cells"))


def _line(group: Group, lang: str = DEFAULT) -> str:
    """N pairs: P passed, F failed, M not measured; where some did not pass, the ends (or nodes) they name."""
    counts = group.counts()
    template = ("{pairs} pairs on every node: {passed} passed, {failed} failed, {not_measured} not measured"
                if group.nodes else "{pairs} pairs: {passed} passed, {failed} failed, {not_measured} not measured")
    text = tr(lang, template, pairs=len(group.checks), passed=counts[Outcome.PASSED], failed=counts[Outcome.FAILED],
              not_measured=counts[Outcome.NOT_MEASURED])
    troubled = group.troubled()
    if troubled:
        named = ", ".join(f"{name} ({n})" for name, n in list(troubled.items())[:ENDS_NAMED])
        more = tr(lang, ", … {n} more", n=len(troubled) - ENDS_NAMED) if len(troubled) > ENDS_NAMED else ""
        which = ("; nodes in pairs that did not pass: {named}{more}" if group.nodes
                 else "; ends in pairs that did not pass: {named}{more}")
        text += tr(lang, which, named=named, more=more)
    return safe_text(text)


def pairs_html(checks: Sequence[Check], lang: str = DEFAULT) -> str:
    """The pair clauses, a row each: its counts and its heat map. Every pair is a check of the results file; one
    that did not pass also has its own row in the table of every check."""
    found = groups(checks)
    if not found:
        return ""
    rows = "".join(f'<tr id="pairs-{safe_text(g.clause.key)}{"-nodes" if g.nodes else ""}"><td>'
                   f"<b>{safe_text(g.clause.key)}</b><td>{_line(g, lang)}{_map(g, lang)}" for g in found)
    said = tr(lang, "Each pair is judged on its own and is a check of the results file; here each clause of pairs is "
                    "one row, its heat map shaded by the measured value (failed red, not measured grey). A pair that "
                    "did not pass also has its own row in the table of every check.")
    return (f"<h3>{safe_text(tr(lang, 'Pairs'))}</h3><p>{safe_text(said)}</p>"
            f"<table class=gt><tr><th>{safe_text(tr(lang, 'clause'))}<th>{safe_text(tr(lang, 'pairs'))}{rows}</table>")
