"""Which sections a node check judges: the contract's `node_check: {quick: [...]}` key, read by node-check
(nodecheck.py) to choose and checked by every judging run (contract.py), so one contract file serves acceptance and
the scheduler's check alike (docs/node-check.md)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from .untrusted import escaped

KEY = "node_check"
NOT_PER_NODE = ("cluster",)  # judged from a login node over every node (cluster.*): never by one node's check
ALWAYS_KEPT = ("gpus",)  # other sections are judged over gpus.count: kept where the contract has it


class NodeCheckError(ValueError):
    """The check could not be run as asked (a contract or option problem): one line, naming where."""


# ------------------------------------------------------------------ which clauses: the contract's `node_check`

@dataclass(frozen=True, slots=True)
class Selection:
    """The contract text node-check judges (the buyer's, lines in place, its other sections blanked) and why."""

    text: str
    sections: tuple[str, ...]  # judged, in the contract's order
    left_out: tuple[str, ...]  # sections present but not quick
    not_per_node: tuple[str, ...]  # `cluster`, where present: judged by a cluster run, never here


def select(text: str, path: str = "<contract>") -> Selection:
    """The contract's per-node sections, only those `node_check: {quick: [...]}` names where it names any (and gpus,
    whose count the others are judged over); `cluster` never. Each left-out top-level entry's lines are blanked,
    so a problem in what is judged is reported at the buyer's own line numbers."""
    from .clauses.registry import SECTION_NAMES  # noqa: PLC0415 (every clause module: only for the check)

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return Selection(text, (), (), ())  # load_contract reports it, at its line
    if not isinstance(root, yaml.MappingNode):
        return Selection(text, (), (), ())
    entries = [(str(k.value), k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)]
    present = [name for name, _k, _v in entries if name in SECTION_NAMES]
    per_node = [name for name in present if name not in NOT_PER_NODE]
    quick = _quick(dict((n, v) for n, _k, v in entries).get(KEY), per_node, path)
    judged = [name for name in per_node if quick is None or name in quick or name in ALWAYS_KEPT]
    left_out = {KEY, *NOT_PER_NODE, *(name for name in per_node if name not in judged)}  # an unknown key stays: refused
    lines = text.splitlines(keepends=True)
    starts = [k.start_mark.line for _n, k, _v in entries] + [len(lines)]
    blank: set[int] = set()
    for n, (name, _key, _value) in enumerate(entries):
        if name not in left_out:
            continue
        first, end = starts[n], starts[n + 1]
        if any(starts[m] == first for m in range(len(entries)) if m != n):  # flow style: entries share a line
            raise NodeCheckError(f"{path}:{first + 1}: {KEY}: node-check needs each top-level key of the contract on "
                                 f"lines of its own (block style), to leave out {name!r}")
        blank.update(range(first, end))
    kept_text = "".join("\n" if i in blank else line for i, line in enumerate(lines))
    return Selection(kept_text, tuple(judged), tuple(n for n in per_node if n not in judged),
                     tuple(n for n in present if n in NOT_PER_NODE))


def check_key(node: yaml.Node, present: list[str], path: str) -> str | None:
    """A judging run's word on the contract's `node_check` key (node-check reads it; the run only checks it, so one
    file serves both): None where it is well formed, else the problem, at its line."""
    try:
        _quick(node, [name for name in present if name not in NOT_PER_NODE], path)
    except NodeCheckError as exc:
        return str(exc)
    return None


def _quick(node: yaml.Node | None, per_node: list[str], path: str) -> set[str] | None:
    """`node_check: {quick: [gpus, nvlink]}`: the per-node sections a node check runs; None: all of them."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode) or [str(k.value) for k, _v in node.value] != ["quick"]:
        raise NodeCheckError(f"{path}:{line}: {KEY}: expected a mapping with one key, quick: a list of the "
                             f"contract's per-node sections, e.g. {KEY}: {{quick: [gpus, nvlink]}}")
    value = node.value[0][1]
    if not isinstance(value, yaml.SequenceNode) or not value.value \
            or not all(isinstance(item, yaml.ScalarNode) for item in value.value):
        raise NodeCheckError(f"{path}:{line}: {KEY}.quick: expected a non-empty list of section names, "
                             f"e.g. [gpus, nvlink]")
    names = [str(item.value) for item in value.value]
    for name in names:
        if name in NOT_PER_NODE:
            raise NodeCheckError(f"{path}:{line}: {KEY}.quick: {name!r} is judged over the whole cluster from a login "
                                 "node, never by one node's check: remove it")
        if name not in per_node:
            raise NodeCheckError(f"{path}:{line}: {KEY}.quick: {escaped(name)!r} is not a section of this contract "
                                 f"(it has {', '.join(per_node) or 'none'})")
    return set(names)
