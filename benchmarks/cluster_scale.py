"""A 1,000-node cluster's results merged, judged and rendered: the login node's work once every node's
results came back. Each node is the recorded 8-GPU per-node results (112 checks), three of them with a
failing GPU; the cluster.nodes checks are made here.

    python benchmarks/cluster_scale.py [--nodes 1000]
The test tests/test_cluster_scale.py runs the same and holds its CPU time under 5 s (the wall time of a
test that shares two cores with a Slurm cluster under -n 2 once read 5.4 s; alone it is about 2 s).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

from pytest_gpuaccept.clauses.cluster import NODES
from pytest_gpuaccept.cluster.summary import merge_cluster
from pytest_gpuaccept.report import Results, banner, json_lines
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Verdict, verdict_of

NODE = Path(__file__).resolve().parent.parent / "tests" / "data" / "cluster" / "node-results-h100-8gpu-112checks.json"
BAD_NODES = (17, 503, 998)  # their GPU3 fails its utilisation check
HEAD = {"mode": "live", "started": "2026-11-30T18:00:00+00:00", "finished": "2026-11-30T18:20:00+00:00",
        "contract": {"path": "cluster.yaml", "sha256": "0" * 64, "vendor": "Benchmark cloud", "reference": "SLA-1000"},
        "host": {"hostname": "login01", "driver": None, "cuda": None, "gpus": []}, "not_in_contract": []}


def node_results(nodes: int) -> dict[str, dict[str, Any]]:
    recorded = json.loads(NODE.read_text())
    bad = copy.deepcopy(recorded)
    bad["verdict"] = "rejected"
    for check in bad["checks"]:
        if check["clause"] == "utilisation" and check["subject"] == "GPU3":
            check.update(outcome="failed", measured=41.0, message="lowest utilisation 41 % < 80 % (GPU3)")
    return {f"gpu{n:04d}": bad if n in BAD_NODES else recorded for n in range(1, nodes + 1)}


def run(nodes: int) -> tuple[float, float, dict[str, Any], str, str]:
    by_node = node_results(nodes)
    start, cpu = time.perf_counter(), time.process_time()
    cluster = [Verdict(NODES.key, Subject.whole(name)).passed(
        "IDLE", f"IDLE, 8 GPUs in Gres; results returned: the node's own checks {r['verdict'].upper()}",
        {"state": "IDLE", "node_verdict": r["verdict"]}) for name, r in by_node.items()]
    checks, hosts = merge_cluster(cluster, dict(by_node))
    results = Results(verdict=verdict_of(checks, True), complete=True, checks=checks, hosts=hosts, **HEAD)
    text = json_lines(results.document())
    page = banner(results, None, "")  # the report's page, as the login node's opens
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    return elapsed, used, json.loads(text), text, page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    elapsed, _cpu, results, text, page = run(args.nodes)
    print(f"{args.nodes} nodes, {len(results['checks'])} checks: merged, judged and rendered in {elapsed:.2f} s; "
          f"results {len(text) / 1e6:.1f} MB, report summary {len(page) / 1e3:.0f} kB; verdict {results['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
