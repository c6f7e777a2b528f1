"""Pairs of nodes: rounds that cover every pair, and blame for a bad node or a bad link."""

from __future__ import annotations

import itertools
import re

import pytest
from conftest import DATA
from fleet_fakes import login_run, stand_in_cluster

from pytest_gpuaccept.clauses.cluster import SECTION
from pytest_gpuaccept.cluster.pairs import SECOND_PASS_PARTNERS, blame, every_pair_fits, plan, rounds, second_pass
from pytest_gpuaccept.contract import ContractError, parse_contract


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


def test_above_the_default_budget_three_rounds_of_random_disjoint_pairs_reproducible_from_the_seed():
    nodes = [f"gpu{n:04d}" for n in range(1, 1001)]
    rounds_ = plan(nodes, "a" * 64)
    assert len(rounds_) == 3 and all(len(r) == 500 for r in rounds_)
    for pairing in rounds_:
        assert sorted(n for pair in pairing for n in pair) == nodes  # each node once a round
    every = [pair for pairing in rounds_ for pair in pairing]
    assert len(set(every)) == 1500 and all(nodes.index(a) < nodes.index(b) for a, b in every)
    assert plan(nodes, "a" * 64) == rounds_ and plan(nodes, "b" * 64) != rounds_
    assert [len(r) for r in plan(nodes[:16], "x")] == [8] * 15  # up to 16 nodes: every pair, 15 rounds


def test_every_pair_up_to_64_nodes_where_the_budget_allows_its_rounds():
    nodes = [f"n{i:03d}" for i in range(1, 66)]
    assert len(plan(nodes[:64], "s", budget=63)) == 63 and sum(map(len, plan(nodes[:64], "s", budget=63))) == 2016
    assert len(plan(nodes[:63], "s", budget=63)) == 63  # odd: one node rests each round
    assert len(plan(nodes[:64], "s", budget=62)) == 3  # 63 rounds do not fit: random rounds
    assert len(plan(nodes, "s", budget=100_000)) == 3  # 65 nodes: never every pair, whatever the budget
    assert every_pair_fits(16, 15) and not every_pair_fits(17, 15)  # the default budget: every pair up to 16


def _disjoint(rounds_: list[list[tuple[str, str]]]) -> bool:
    return all(len({n for pair in r for n in pair}) == 2 * len(r) for r in rounds_)


def test_the_second_pass_pairs_each_suspect_with_three_known_good_nodes_it_has_not_met():
    nodes = [f"n{i:03d}" for i in range(1, 301)]
    first = {pair: "n007" not in pair for r in plan(nodes, "s") for pair in r}
    suspects = {n for pair, ok in first.items() if not ok for n in pair}
    assert len(suspects) == 4  # n007 and the three random partners it failed with
    again = second_pass(nodes, first, "s")
    assert _disjoint(again) and len(again) == SECOND_PASS_PARTNERS
    for suspect in suspects:
        partners = [a if b == suspect else b for r in again for a, b in r if suspect in (a, b)]
        assert len(set(partners)) == 3 and not suspects & set(partners)  # known-good, each once
        assert all((a, b) not in first and (b, a) not in first for a, b in ((suspect, p) for p in partners))
    assert second_pass(nodes, {pair: True for pair in first}, "s") == []  # nothing failed: no second pass
    assert second_pass(nodes, first, "s") == again  # reproducible


def _blamed(nodes: list[str], passes, seed: str, budget: int):
    """The blame the plugin's plan gives: the first pass, then (past the budget) the second."""
    judged = {pair: passes(pair) for r in plan(nodes, seed, budget) for pair in r}
    if not every_pair_fits(len(nodes), budget):
        judged.update({pair: passes(pair) for r in second_pass(nodes, judged, seed) for pair in r})
    return blame(judged), judged


@pytest.mark.parametrize("count", [64, 300])
@pytest.mark.parametrize("seed", [f"{n:064x}" for n in range(8)])
def test_a_bad_node_is_named_as_surely_as_with_every_pair(count, seed):
    """One node whose every pair fails (a slow NIC): random rounds and the second pass name it, and only it, as
    every pair does; it failed with every known-good node it met, each of which passed with all its partners."""
    nodes = [f"n{i:03d}" for i in range(1, count + 1)]
    bad = nodes[int(seed, 16) * 37 % count]
    every = blame({pair: bad not in pair for r in rounds(nodes) for pair in r})
    found, judged = _blamed(nodes, lambda pair: bad not in pair, seed, budget=15)
    assert found.bad_nodes == every.bad_nodes == (bad,)
    assert found.bad_links == every.bad_links == ()
    assert all(bad in pair for pair in found.failing)
    met = [b if a == bad else a for a, b in judged if bad in (a, b)]
    assert len(met) == 3 + SECOND_PASS_PARTNERS  # three random partners, then three known-good ones
    known_good = met[3:]
    assert all(judged[pair] for pair in judged if set(pair) & set(known_good) and bad not in pair)


@pytest.mark.parametrize("count", [64, 300])
@pytest.mark.parametrize("seed", [f"{n:064x}" for n in range(8)])
def test_two_bad_nodes_that_meet_and_a_bad_link_are_told_apart_as_with_every_pair(count, seed):
    """Two bad nodes paired with each other in the first round, and a bad link between two good nodes of the first
    round: the same bad nodes and the same link as every pair names."""
    nodes = [f"n{i:03d}" for i in range(1, count + 1)]
    first_round = plan(nodes, seed, budget=15)[0]
    (x, y), link = first_round[0], first_round[1]

    def passes(pair):
        return x not in pair and y not in pair and set(pair) != set(link)

    every = blame({pair: passes(pair) for r in rounds(nodes) for pair in r})
    found, _judged = _blamed(nodes, passes, seed, budget=15)
    assert found.bad_nodes == every.bad_nodes == tuple(sorted((x, y)))
    assert found.bad_links == every.bad_links == (tuple(sorted(link)),)
    assert found.of(link) == f"the link between {link[0]} and {link[1]}: both nodes pass with every other partner"


def test_the_budget_is_a_whole_number_of_rounds_in_the_contract():
    base = "gpuaccept: 1\nvendor: V\ncluster:\n  engine: slurm\n  nodes: ['gpu[01-64]']\n"
    section = SECTION.of(parse_contract(base + "  pairs: {min_busbw: '360 GB/s', budget: 63}\n"))
    assert section.pairs.budget == 63
    assert SECTION.of(parse_contract(base + "  pairs: {min_busbw: '360 GB/s'}\n")).pairs.budget == 15
    with pytest.raises(ContractError, match=r"cluster.pairs.budget \(line 7\): expected a whole number from 1 to 100000, got '1 h'"):
        parse_contract(base + "  pairs: {min_busbw: '360 GB/s',\n          budget: '1 h'}\n", "c.yaml")


PER_NODE = 'gpuaccept: 1\nvendor: "Trial cluster"\ngpus: {count: 8, model: "H100"}\n'
PAIRS = '  pairs: {min_busbw: "400 GB/s", max_bytes: "16 GiB"}\n'


@pytest.mark.parametrize("count", [64, 300])
def test_a_slow_node_among_many_is_named_through_the_mpirun_launcher_stand_in(count, tmp_path):
    """The recorded 2-node H100 log (469 GB/s) on every pair, at a tenth where n0023 is in the job: its three random
    pairs fail naming it, and the second pass says it failed with each of its known-good partners while the
    partners it had in the first pass passed with theirs."""
    contract = stand_in_cluster(tmp_path, count, PER_NODE, PAIRS)
    (tmp_path / "launcher" / "slow" / "n0023").touch()
    code, results, out, _peak = login_run(tmp_path, contract, timeout=600)
    assert code == 1, out[-3000:]
    pairs = {c["subject"]: c for c in results["checks"] if c["clause"] == "cluster.pairs"}
    assert len(pairs) == count // 2 * 3
    failing = {name for name, c in pairs.items() if c["outcome"] != "passed"}
    assert failing == {name for name in pairs if "n0023" in name.split("+")} and len(failing) == 3
    for name in failing:
        message, again = pairs[name]["message"], pairs[name]["details"]["second_pass"]
        partner = next(n for n in name.split("+") if n != "n0023")
        assert "; node n0023 fails with most partners (second pass, with known-good nodes: " in message
        assert "n0023 failed with 3 of 3 (" in message and f"{partner} failed with 0 of 3 (" in message
        assert len(again["n0023"]) == 3 and not any(r["passed"] for r in again["n0023"].values())
        assert all(r["passed"] and r["round"] >= 4 for r in again[partner].values())
    assert all(c["outcome"] == "passed" for name, c in pairs.items() if name not in failing)
