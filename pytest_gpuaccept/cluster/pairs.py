"""Pairs of nodes, to find a bad node or a bad link: rounds of disjoint pairs, and the blame a set of pair
results puts on nodes and on links.

Round-robin (the circle method) covers every pair of n nodes in n-1 rounds (n rounds when n is odd, one
node resting each round); the pairs of a round run at the same time. Every pair is tested where the cluster
has at most 64 nodes and its rounds fit the contract's budget (`cluster.pairs.budget`, in rounds); otherwise
three rounds of random disjoint pairs, then a second pass that pairs every suspect (a node of a failing pair)
with known-good nodes (each of whose pairs passed), as Google's cluster-health-scanner does, so that a bad
node is told from its unlucky partners on the word of nodes known to be good. Blame: a node that fails with
most of its partners is the bad node; a failing pair that no bad node explains is a bad link between the two.
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


def cross_halves(nodes: list[str]) -> list[Pair]:
    """The permutation that crosses a cluster's halves: node i with node i + n/2 (of an odd count, the last rests).
    Every pair's traffic crosses whatever joins the halves (a fat tree's spine, where nodes are cabled in order)."""
    half = len(nodes) // 2
    return [(nodes[i], nodes[i + half]) for i in range(half)]


EVERY_PAIR_UP_TO = 64  # nodes: at most this many are tested every pair with every other (2,016 pairs, 63 rounds)
DEFAULT_BUDGET = 15  # rounds: every pair up to 16 nodes
RANDOM_ROUNDS = 3  # above the budget, each node meets three random partners: a bad node fails with all three
SECOND_PASS_PARTNERS = 3  # known-good partners each suspect meets in the second pass


def every_pair_rounds(count: int) -> int:
    """The rounds that test every pair of `count` nodes (the circle method)."""
    return 0 if count < 2 else count - 1 if count % 2 == 0 else count


def every_pair_fits(count: int, budget: int) -> bool:
    """Whether `count` nodes are tested every pair: at most EVERY_PAIR_UP_TO of them, in rounds the budget allows."""
    return count <= EVERY_PAIR_UP_TO and every_pair_rounds(count) <= budget


def plan(nodes: list[str], seed: str, budget: int = DEFAULT_BUDGET) -> list[list[Pair]]:
    """The rounds a cluster's pairs run in, each pair in the nodes' order: every pair where every_pair_fits;
    else three rounds of random pairings, reproducible from `seed` (the contract's SHA-256), none repeated, so
    that 1,000 nodes take three rounds, not 999 (and a second pass for the suspects: second_pass)."""
    order = {n: i for i, n in enumerate(dict.fromkeys(nodes))}
    if every_pair_fits(len(order), budget):
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
                if not any(_key(p) in seen for p in pairing):
                    break
            seen.update(_key(p) for p in pairing)
            chosen.append(pairing)
    return [[(a, b) if order[a] < order[b] else (b, a) for a, b in pairing] for pairing in chosen]


def _key(pair: Pair) -> Pair:
    return (pair[0], pair[1]) if pair[0] <= pair[1] else (pair[1], pair[0])


def second_pass(nodes: list[str], first: dict[Pair, bool], seed: str) -> list[list[Pair]]:
    """Rounds that pair every suspect (a node of a failing pair of `first`) with SECOND_PASS_PARTNERS known-good
    nodes (measured in `first`, every pair of theirs passed), each a node it has not met, no node twice in a
    round; fewer where there are not as many known-good nodes. Empty when nothing failed or nothing passed.
    Reproducible from `seed`; each pair in the nodes' order."""
    order = {n: i for i, n in enumerate(dict.fromkeys(nodes))}
    met: dict[str, set[str]] = {}
    failed: set[str] = set()
    for (a, b), ok in first.items():
        met.setdefault(a, set()).add(b)
        met.setdefault(b, set()).add(a)
        if not ok:
            failed.update((a, b))
    suspects = sorted(failed, key=order.__getitem__)
    good = [n for n in order if n in met and n not in failed]
    random.Random(f"{seed} second pass").shuffle(good)
    wanted = {s: SECOND_PASS_PARTNERS for s in suspects}
    out: list[list[Pair]] = []
    while good and any(wanted.values()):
        free, pairing = list(good), []
        for suspect in suspects:
            partner = next((g for g in free if g not in met[suspect]), None) if wanted[suspect] else None
            if partner is None:
                continue
            free.remove(partner)
            met[suspect].add(partner)
            wanted[suspect] -= 1
            pairing.append((suspect, partner) if order[suspect] < order[partner] else (partner, suspect))
        if not pairing:
            break  # no suspect has a known-good node left that it has not met
        out.append(pairing)
        good = good[1:] + good[:1]  # the next round starts with another known-good node
    return out
