"""Many pairs, one page (issue 29): each pair is judged and listed in the results on its own; the report shows a
clause of pairs as one row (its counts and heat map) and gives a row of its own only to a pair that did not pass.
A 16-GPU host (480 pairs) and a 64-node cluster (2,016 node pairs; its 4,032 links grouped in process) make reports
under 1 MB that Chromium opens (benchmarks/many_pairs.py builds both, links too, and times them; benchmarks/README.md
has the figures)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_gpuaccept.clauses.cluster import LINKS, NODES, PAIRS
from pytest_gpuaccept.clauses.nvlink import PAIRS as NVLINK_PAIRS
from pytest_gpuaccept.clauses.p2p import BOTH_WAYS, ONE_WAY
from pytest_gpuaccept.report.pairs import MAP_ENDS, grouped, groups, pairs_html
from pytest_gpuaccept.verdict import Check, Outcome

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from many_pairs import CLUSTER, browser, cluster_run, host_run, open_in_chromium  # noqa: E402

PAIRS_ONLY = CLUSTER.splitlines(keepends=True)[0]  # cluster.pairs of every pair, budget 63; no links


def check(clause: str, subject: str, outcome: Outcome = Outcome.PASSED, measured: float | None = 390.0,
          node: str | None = None) -> Check:
    return Check(clause, f"{node}/{subject}" if node else subject, outcome, measured, "GB/s", ">= 350", "", node=node)


def test_a_clause_declares_its_subjects_pairs_and_splits_them_at_its_joint():
    assert ONE_WAY.ends("GPU3->GPU12") == ("GPU3", "GPU12") and BOTH_WAYS.ends("GPU0<->GPU1") == ("GPU0", "GPU1")
    assert NVLINK_PAIRS.ends("GPU0-GPU1") == ("GPU0", "GPU1") and PAIRS.ends("node-a+node-b") == ("node-a", "node-b")
    assert LINKS.ends("n1:eth0->n2:eth0") == ("n1:eth0", "n2:eth0")
    assert PAIRS.ends("cluster") is None and NODES.ends("n0001") is None  # not a pair; not a clause of pairs


def test_only_a_passing_pair_is_left_out_of_the_table():
    assert grouped(check("p2p", "GPU0->GPU1"))
    assert not grouped(check("p2p", "GPU0->GPU1", Outcome.FAILED))
    assert not grouped(check("p2p", "GPU0->GPU1", Outcome.NOT_MEASURED, None))
    assert not grouped(check("gpus.model", "GPU0"))


def test_a_clause_of_pairs_is_one_row_with_its_counts_and_heat_map():
    checks = [check("p2p", f"GPU{i}->GPU{j}", Outcome.FAILED if (i, j) == (2, 3) else Outcome.PASSED)
              for i in range(4) for j in range(4) if i != j]
    checks += [check("p2p.bidirectional", f"GPU{i}<->GPU{j}") for i in range(4) for j in range(i + 1, 4)]
    page = pairs_html(checks)
    assert "<b>p2p</b><td>12 pairs: 11 passed, 1 failed, 0 not measured; ends in pairs that did not pass: GPU2 (1), " \
           "GPU3 (1)" in page
    assert "p2p (GB/s; row: from, column: to)" in page and 'title="GPU2->GPU3: failed"' in page
    assert "<b>p2p.bidirectional</b><td>6 pairs: 6 passed, 0 failed, 0 not measured" in page
    # both ways: each pair in both its cells
    assert 'title="GPU0->GPU1: passed"' in page and 'title="GPU1->GPU0: passed"' in page.split("p2p.bidirectional")[-1]
    assert pairs_html([check("gpus.model", "GPU0")]) == ""


def test_past_the_map_size_the_row_names_the_ends_of_the_pairs_that_did_not_pass():
    nodes = [f"n{n:03d}" for n in range(MAP_ENDS + 1)]
    checks = [check("cluster.pairs", f"{a}+{b}", Outcome.FAILED if "n007" in (a, b) else Outcome.PASSED)
              for n, a in enumerate(nodes) for b in nodes[n + 1:]]
    page = pairs_html(checks)
    assert "<table class=gh>" not in page
    assert "528 pairs: 496 passed, 32 failed, 0 not measured; ends in pairs that did not pass: n007 (32), " in page


def test_a_clusters_nodes_pairs_are_one_row_a_clause_naming_the_nodes():
    checks = [check("p2p", f"GPU{i}->GPU{j}", Outcome.FAILED if node == "n2" and i == 1 else Outcome.PASSED, node=node)
              for node in ("n1", "n2", "n3") for i in range(3) for j in range(3) if i != j]
    [group] = groups(checks)
    assert group.nodes and len(group.checks) == 18
    page = pairs_html(checks)
    assert "18 pairs on every node: 16 passed, 2 failed, 0 not measured; nodes in pairs that did not pass: n2 (2)" in page
    assert "<table class=gh>" not in page  # each node's own report has its heat map


# ------------------------------------------------------------------ a 16-GPU host and a 64-node cluster, end to end


@pytest.fixture(scope="module")
def host16(tmp_path_factory):
    code, run, out = host_run(tmp_path_factory.mktemp("host16"), 16)
    assert code == 0, out[-3000:]
    return run


@pytest.fixture(scope="module")
def cluster64(tmp_path_factory):
    """The 64-node cluster's pairs end to end (15 s). Its 4,032 links are not run here: a link is iperf3 for at least
    the whole second the plugin asks and times, 126 rounds of them (330 s on this 2-core machine), and the time is
    not this test's point; the links are grouped in process below, and benchmarks/many_pairs.py runs both."""
    code, run, out = cluster_run(tmp_path_factory.mktemp("cluster64"), 64, PAIRS_ONLY)
    assert code == 0, out[-3000:]
    return run


def _every_pair_in_the_results(run: Path, expected: dict[str, int]) -> None:
    results = json.loads((run / "gpuaccept-results.json").read_text())
    subjects: dict[str, set[str]] = {}
    for entry in results["checks"]:
        subjects.setdefault(entry["clause"], set()).add(entry["subject"])
    assert {clause: len(subjects.get(clause, ())) for clause in expected} == expected
    assert results["verdict"] == "accepted"


def _small_and_quick(run: Path, tmp_path: Path, rows: int) -> None:
    report = run / "gpuaccept-report.html"
    assert report.stat().st_size < 1_000_000, report.stat().st_size
    chromium = browser()
    if chromium is None:
        pytest.skip("no Chromium here to open the report in (test.sh installs it)")
    opened = open_in_chromium(report, tmp_path, chromium)
    assert opened.rows == rows  # how long it takes to open is a figure: benchmarks/many_pairs.py


def test_a_16_gpu_hosts_480_pairs_are_each_a_check_on_a_page_under_1_mb(host16, tmp_path):
    """529 checks, 480 of them pairs: 672 KB, 2.45 s to its load event and 529 rows before; now 49 rows (the
    checks that are not pairs), the pairs in three rows of their own with a 16 x 16 heat map each."""
    _every_pair_in_the_results(host16, {"nvlink": 120, "p2p": 240, "p2p.bidirectional": 120})
    page = (host16 / "gpuaccept-report.html").read_text()
    assert "240 pairs: 240 passed, 0 failed, 0 not measured" in page and page.count("<table class=gh>") == 3
    _small_and_quick(host16, tmp_path, rows=49)


def test_a_64_node_clusters_pairs_are_each_a_check_on_a_page_under_1_mb(cluster64, tmp_path):
    """2,016 node pairs and 4,032 links (every pair, budget 63): 7.4 MB, 71 s to its load event and 6,112 rows before;
    2.6 MB, 5.4 s and 64 rows (the cluster.nodes checks) with the pairs grouped, 2 MB of it the schedule's row per
    tool run; the schedule now a row per kind of run (pair, link, node-run, ...)."""
    _every_pair_in_the_results(cluster64, {"cluster.pairs": 2016, "cluster.nodes": 64})
    page = (cluster64 / "gpuaccept-report.html").read_text()
    assert "2016 pairs: 2016 passed, 0 failed, 0 not measured" in page
    _small_and_quick(cluster64, tmp_path, rows=64)


def test_a_64_node_clusters_4032_links_are_one_row_naming_the_one_that_failed():
    nodes = [f"n{n:04d}" for n in range(1, 65)]
    checks = [check("cluster.links", f"{a}:eth0->{b}:eth0", Outcome.FAILED if (a, b) == ("n0007", "n0042")
                    else Outcome.PASSED, 9.41) for a in nodes for b in nodes if a != b]
    assert len(checks) == 4032 and len(groups(checks)) == 1
    page = pairs_html(checks)
    assert "4032 pairs: 4031 passed, 1 failed, 0 not measured; ends in pairs that did not pass: n0007:eth0 (1), " \
           "n0042:eth0 (1)" in page
    assert len(page.encode()) < 100_000, len(page.encode())
