"""cluster.fabric judged in process on recorded figures: each rail's median link with every rail of every node loaded
at once over its median link alone; a 2:1 spine fails near 0.5 naming the fabric, never a node; a blamed port is no
measure of the fabric; a rail with nothing believed is not measured. (The real fabric: test_cluster_rdma_links.py.)"""

from __future__ import annotations

import re

from pytest_gpuaccept.clauses.cluster import FABRIC, SECTION, judge_fabric
from pytest_gpuaccept.cluster.fabric import Measured, RailLoad, RdmaRuns, excluded_names, rail_loads
from pytest_gpuaccept.cluster.pairs import blame, cross_halves
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.subjects import Subject

CONTRACT = """\
gpuaccept: 1
vendor: V
cluster:
  engine: mpirun
  nodes: ["h[1-8]"]
  links:
    rdma: {devices: ["mlx5_[0-1]"], line_rate: "400 Gb/s"}
  fabric: {min_fraction_under_load: 0.9}
"""
CROSSING = (("h1", "h5"), ("h2", "h6"), ("h3", "h7"), ("h4", "h8"))


def figures(device: str, pairs: tuple[tuple[str, str], ...], gbit_s: float) -> dict[str, Measured]:
    return {f"{a}:{device}->{b}:{device}": Measured(gbit_s) for x, y in pairs for a, b in ((x, y), (y, x))}


def judged(rails: dict[str, RailLoad], subject: str = "cluster:mlx5_0"):
    contract = parse_contract(CONTRACT, "vendor.yaml")
    runs = RdmaRuns({}, rails=rails, cross_halves=CROSSING)
    return judge_fabric(SECTION.of(contract), Subject.whole(subject), runs, contract)


def test_the_cross_halves_permutation_pairs_node_i_with_node_i_plus_half():
    assert cross_halves([f"h{i}" for i in range(1, 9)]) == list(CROSSING)
    assert cross_halves(["a", "b", "c"]) == [("a", "b")]  # of an odd count the last rests
    assert cross_halves(["a"]) == []


def test_a_2_to_1_spine_fails_each_rail_near_one_half_naming_the_fabric_not_a_node():
    alone = figures("mlx5_0", (("h1", "h5"),), 392.0)
    loaded = figures("mlx5_0", CROSSING, 196.5)
    rails = rail_loads(["mlx5_0", "mlx5_1"], alone, loaded, set())
    check = judged(rails)
    assert check.outcome.value == "failed" and check.measured == 0.501 and check.required == ">= 0.9"
    assert check.message == (
        "mlx5_0 under full load carries 0.50 of its rate alone (median 196.5 Gb/s over 8 links with every rail of every "
        "node loaded at once, cross-halves h1<->h5, h2<->h6, h3<->h7, h4<->h8; 392 Gb/s over 2 links alone) < 0.9: "
        "the fabric, not a node (an effective oversubscription of 2.0:1)")
    assert not re.search(r"h\d's", check.message)


def test_its_honest_twin_a_non_blocking_fabric_passes_at_about_one():
    rails = rail_loads(["mlx5_0"], figures("mlx5_0", (("h1", "h5"),), 392.0), figures("mlx5_0", CROSSING, 389.0), set())
    check = judged(rails)
    assert check.outcome.value == "passed" and check.measured == 0.992


def test_a_blamed_port_is_left_out_of_both_figures():
    """h3's mlx5_0 is bad (blamed by the links): its slow links loaded would drag the median; left out, the rail passes."""
    loaded = figures("mlx5_0", CROSSING, 390.0)
    loaded.update(figures("mlx5_0", (("h3", "h7"),), 150.0))
    found = blame({("h3:mlx5_0", "h1:mlx5_0"): False, ("h3:mlx5_0", "h2:mlx5_0"): False, ("h3:mlx5_0", "h4:mlx5_0"): False,
                   ("h1:mlx5_0", "h2:mlx5_0"): True})
    assert found.bad_nodes == ("h3:mlx5_0",)
    names = [*loaded]
    rails = rail_loads(["mlx5_0"], figures("mlx5_0", (("h1", "h5"),), 392.0), loaded, excluded_names(names, found))
    assert len(rails["mlx5_0"].loaded) == 6 and judged(rails).outcome.value == "passed"


def test_a_rail_whose_loaded_round_ran_nothing_is_not_measured_never_passed():
    loaded = {name: Measured(None, "ib_write_bw's client on h1 (mlx5_0) exited with code 1: Couldn't connect")
              for name in figures("mlx5_0", CROSSING, 0.0)}
    rails = rail_loads(["mlx5_0"], figures("mlx5_0", (("h1", "h5"),), 392.0), loaded, set())
    check = judged(rails)
    assert check.outcome.value == "not_measured"
    assert check.message.startswith("not measured: mlx5_0: 8 links of the loaded round have no figure, e.g. "
                                    "h1:mlx5_0->h5:mlx5_0: ib_write_bw's client on h1 (mlx5_0) exited with code 1")


def test_a_rail_with_no_figure_alone_is_not_measured():
    rails = rail_loads(["mlx5_0"], {}, figures("mlx5_0", CROSSING, 390.0), set())
    check = judged(rails)
    assert check.outcome.value == "not_measured" and "no link alone has a believed figure" in check.message


def test_a_refuted_figure_is_no_figure_for_the_fabric():
    """A link whose counters refuted its client's figure says nothing of the rail: it is left out, never averaged in."""
    alone = figures("mlx5_0", (("h1", "h5"),), 392.0)
    alone["h1:mlx5_0->h5:mlx5_0"] = Measured(900.0, refuted="h1's mlx5_0 port_xmit_data counted 10 bytes")
    rails = rail_loads(["mlx5_0"], alone, figures("mlx5_0", CROSSING, 390.0), set())
    assert rails["mlx5_0"].alone == (("h5:mlx5_0->h1:mlx5_0", 392.0),)


def test_one_check_per_rail_and_the_clause_is_unitless():
    contract = parse_contract(CONTRACT, "vendor.yaml")
    assert [str(s) for s in FABRIC.subjects(contract, lambda: {"cluster_nodes": []})] == ["cluster:mlx5_0",
                                                                                       "cluster:mlx5_1"]
