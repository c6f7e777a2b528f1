"""Pairs of nodes: rounds that cover every pair, and blame for a bad node or a bad link."""

from __future__ import annotations

import itertools
import re

import pytest
from conftest import DATA

from pytest_gpuaccept.cluster.pairs import blame, plan, rounds


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 17])
def test_rounds_cover_every_pair_once_in_disjoint_rounds(n):
    nodes = [f"gpu{i:02d}" for i in range(1, n + 1)]
    plan = rounds(nodes)
    assert len(plan) == (n - 1 if n % 2 == 0 else n)
    pairs = [frozenset(p) for r in plan for p in r]
    assert sorted(map(sorted, pairs)) == sorted(map(sorted, map(frozenset, itertools.combinations(nodes, 2))))
    for r in plan:
        busy = [node for pair in r for node in pair]
        assert len(busy) == len(set(busy))  # no node in two pairs of one round


def test_the_recorded_slow_node_is_blamed_and_nothing_else():
    """Recorded on a 4-node namespace cluster with h3's egress shaped to 500 Mbit/s."""
    text = (DATA / "fleet" / "pairwise_roundrobin_h3_egress_500mbit.txt").read_text()
    measured = {(a, b): float(v) for a, b, v in re.findall(r"(h\d)-(h\d)=([\d.]+)", text)}
    assert len(measured) == 6
    verdict = blame({pair: gbit >= 1.0 for pair, gbit in measured.items()})
    assert verdict.bad_nodes == ("h3",) and verdict.bad_links == ()
    assert verdict.failing == (("h1", "h3"), ("h2", "h3"), ("h3", "h4"))
    assert verdict.of(("h2", "h3")) == "node h3 fails with most partners"


def test_one_failing_pair_is_a_link_not_a_node():
    nodes = ["a", "b", "c", "d"]
    passed = {pair: pair != ("b", "d") for r in rounds(nodes) for pair in (tuple(sorted(p)) for p in r)}
    verdict = blame(passed)
    assert verdict.bad_nodes == () and verdict.bad_links == (("b", "d"),)
    assert verdict.of(("b", "d")) == "the link between b and d: both nodes pass with every other partner"


def test_a_pair_measured_both_ways_fails_when_one_direction_does():
    verdict = blame({("a", "b"): True, ("b", "a"): False, ("a", "c"): True, ("b", "c"): True})
    assert verdict.failing == (("a", "b"),) and verdict.bad_links == (("a", "b"),)


def test_above_sixteen_nodes_three_rounds_of_random_disjoint_pairs_reproducible_from_the_seed():
    nodes = [f"gpu{n:04d}" for n in range(1, 1001)]
    rounds_ = plan(nodes, "a" * 64)
    assert len(rounds_) == 3 and all(len(r) == 500 for r in rounds_)
    for pairing in rounds_:
        assert sorted(n for pair in pairing for n in pair) == nodes  # each node once a round
    every = [pair for pairing in rounds_ for pair in pairing]
    assert len(set(every)) == 1500 and all(nodes.index(a) < nodes.index(b) for a, b in every)
    assert plan(nodes, "a" * 64) == rounds_ and plan(nodes, "b" * 64) != rounds_
    assert [len(r) for r in plan(nodes[:16], "x")] == [8] * 15  # up to 16 nodes: every pair, 15 rounds
