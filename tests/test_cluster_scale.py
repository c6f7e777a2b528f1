"""1,000 nodes of 8 GPUs: merged, judged and rendered into one report in under 5 s, and still readable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from cluster_scale import BAD_NODES, run  # noqa: E402


def test_a_thousand_nodes_merge_judge_and_render_in_under_five_seconds():
    elapsed, cpu, results, text, page = run(1000)
    assert cpu < 5.0, f"{cpu:.2f} s of CPU ({elapsed:.2f} s on the clock)"
    assert len(results["checks"]) == 1000 + 1000 * 112 and len(results["hosts"]) == 1000
    assert results["verdict"] == "rejected"  # three nodes' GPU3 failed its utilisation
    failing = sorted({c["node"] for c in results["checks"] if c["outcome"] != "passed"})
    assert failing == [f"gpu{n:04d}" for n in BAD_NODES]
    # Readable: the grid opens the troubled nodes and folds the rest; no series or tables of 1,000 nodes.
    assert "<h3>Nodes (1000: 3 with checks that did not pass)</h3>" in page
    assert page.count("<tr><th><a href=") == 50 and "950 more nodes, every check passed" in page
    assert "<svg" not in page and len(page) < 200_000
    assert len(text) < 80_000_000 and '"timeline"' not in text
