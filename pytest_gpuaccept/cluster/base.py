"""What every engine says of a cluster's nodes before anything runs on them, and the error for what a cluster run
cannot read with certainty; apart from engine.py so that an engine module and the table of engines can both use
them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..probes.slurm import expand_hostlist


class ClusterError(ValueError):
    """What a cluster run cannot read with certainty (node names, a node's bundle): said, never guessed."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the engine says of a node before anything runs on it."""

    name: str
    present: bool  # the scheduler knows it (mpirun: listed)
    schedulable: bool
    state: str  # the scheduler's words, e.g. IDLE, DOWN+NOT_RESPONDING; Kubernetes: Ready, NotReady; mpirun: "listed"
    gpus: int | None  # what the scheduler offers (Gres, allocatable nvidia.com/gpu), None where it says nothing
    reason: str | None = None
    gpus_source: str = "Gres"  # where `gpus` was read, in the scheduler's words
    # What the engine read of the node and of its run (Kubernetes: GPU Operator labels, the pod's image digest),
    # as (key, value) pairs for the check's details: information, judged only where the engine says so.
    facts: tuple[tuple[str, str], ...] = ()


NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def own_expansion(expressions: tuple[str, ...]) -> list[str]:
    """The node names the plugin itself reads in cluster.nodes (hostlist expressions, `gpu[01-16]`), each once: what
    mpirun is given, and what a scheduler's own expansion is compared with."""
    try:
        names = [name for expression in expressions for name in expand_hostlist(expression)]
    except ValueError as exc:
        raise ClusterError(str(exc)) from None
    bad = [n for n in names if not NODE_NAME.match(n)]
    if bad:
        raise ClusterError(f"not a host name: {bad[0]!r}")
    return list(dict.fromkeys(names))
