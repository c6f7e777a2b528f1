"""Pairs of nodes, to find a bad node or a bad link: rounds of disjoint pairs that cover every pair, and the
blame a set of pair results puts on nodes and on links.

Round-robin (the circle method) covers every pair of n nodes in n-1 rounds (n rounds when n is odd, one
node resting each round); the pairs of a round run at the same time. Blame: a node that fails with most
of its partners is the bad node; a failing pair that no bad node explains is a bad link between the two.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

Pair = tuple[str, str]


def rounds(nodes: list[str]) -> list[list[Pair]]:
    """Every unordered pair exactly once, in rounds of disjoint pairs."""
    ring: list[str | None] = list(dict.fromkeys(nodes))
    if len(ring) < 2:
        return []
    if len(ring) % 2:
        ring.append(None)  # the node paired with None rests this round
    out = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [(a, b) for a, b in zip(ring[:half], reversed(ring[half:])) if a is not None and b is not None]
        out.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]  # the first stays, the rest turn
    return out


@dataclass(frozen=True, slots=True)
class Blame:
    bad_nodes: tuple[str, ...]
    bad_links: tuple[Pair, ...]
    failing: tuple[Pair, ...]

    def of(self, pair: Pair) -> str:
        """Why a pair failed, in words: its bad node(s), or the link between the two."""
        nodes = [n for n in pair if n in self.bad_nodes]
        if nodes:
            return f"node {' and '.join(nodes)} fails with most partners"
        return f"the link between {pair[0]} and {pair[1]}: both nodes pass with every other partner"


def blame(passed: dict[Pair, bool]) -> Blame:
    """A node is bad when more than half of its pairs (and at least two) fail; a failing pair with no bad
    node in it is a bad link. Pairs are unordered; a pair measured twice fails if either measurement did."""
    results: dict[Pair, bool] = {}
    for (a, b), ok in passed.items():
        key = (a, b) if a <= b else (b, a)
        results[key] = results.get(key, True) and ok
    partners: dict[str, list[bool]] = {}
    for (a, b), ok in results.items():
        partners.setdefault(a, []).append(ok)
        partners.setdefault(b, []).append(ok)
    bad = sorted(n for n, oks in partners.items() if oks.count(False) >= 2 and oks.count(False) * 2 > len(oks))
    failing = sorted(pair for pair, ok in results.items() if not ok)
    links = [pair for pair in failing if pair[0] not in bad and pair[1] not in bad]
    return Blame(tuple(bad), tuple(links), tuple(failing))


EVERY_PAIR_UP_TO = 16  # nodes; above, RANDOM_ROUNDS rounds of random disjoint pairs
RANDOM_ROUNDS = 3  # each node meets three partners: a bad node fails with at least two of them


def plan(nodes: list[str], seed: str) -> list[list[Pair]]:
    """The rounds a cluster's pairs run in, each pair in the nodes' order: every pair up to 16 nodes (n-1
    rounds); above, three rounds of random pairings, reproducible from `seed` (the contract's SHA-256), none
    repeated, so that 1,000 nodes take three rounds, not 999."""
    order = {n: i for i, n in enumerate(dict.fromkeys(nodes))}
    if len(order) <= EVERY_PAIR_UP_TO:
        chosen = rounds(list(order))
    else:
        generator = random.Random(seed)
        seen: set[Pair] = set()
        chosen = []
        for _ in range(RANDOM_ROUNDS):
            for _attempt in range(20):
                shuffled = list(order)
                generator.shuffle(shuffled)
                pairing = [(shuffled[i], shuffled[i + 1]) for i in range(0, len(shuffled) - 1, 2)]
                if not any(tuple(sorted(p)) in seen for p in pairing):
                    break
            seen.update(tuple(sorted(p)) for p in pairing)  # type: ignore[misc]
            chosen.append(pairing)
    return [[(a, b) if order[a] < order[b] else (b, a) for a, b in pairing] for pairing in chosen]
