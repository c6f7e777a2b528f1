"""A 1,000-node cluster on the login node: its memory and its time.

    python benchmarks/cluster_scale.py [--nodes 1000]              # merged, judged, written and rendered
    python benchmarks/cluster_scale.py --end-to-end [--nodes 1000]  # the whole run, through the launcher stand-in

The first merges the recorded 8-GPU per-node results (112 checks) of every node into one results file and the
report's page, as the login node does at the end of a run: each node's results parsed from their own bytes (as
each node's bundle is its own: an earlier version handed every node one parsed object, which understated the
memory 5.5 times), three nodes with a failing GPU; the cluster.nodes checks are made here. It prints the CPU and
wall time and this process's peak resident memory.

The second runs `pytest --contract=cluster.yaml` on this machine as the login node of N simulated nodes reached
through the mpirun engine's launcher stand-in (tests/fleet_fakes.py): every node's bundle made from one real
node-run of the cost benchmark's 8-GPU contract, pairs in their rounds, the whole-cluster all_reduce. It prints
the login node's peak resident memory (its own, from wait4) and the run's wall time.

tests/test_cluster_scale.py runs both, at sizes CI can wait for; benchmarks/README.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from pytest_gpuaccept.clauses.cluster import NODES
from pytest_gpuaccept.cluster.merge import merge_cluster
from pytest_gpuaccept.report import Results, banner
from pytest_gpuaccept.report.results import json_chunks, write_chunks
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Verdict, verdict_of

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "tests" / "data" / "cluster" / "node-results-h100-8gpu-112checks.json"


def bad_nodes(nodes: int) -> tuple[int, ...]:
    """The nodes whose GPU3 fails its utilisation check: 17, 503 and 998 of 1,000."""
    return tuple(sorted({17, nodes // 2 + 3, nodes - 2}))

HEAD = {"mode": "live", "started": "2026-11-30T18:00:00+00:00", "finished": "2026-11-30T18:20:00+00:00",
        "contract": {"path": "cluster.yaml", "sha256": "0" * 64, "vendor": "Benchmark cloud", "reference": "SLA-1000"},
        "host": {"hostname": "login01", "driver": None, "cuda": None, "gpus": []}, "not_in_contract": []}
# The end-to-end run's contract: the cost benchmark's 8-GPU per-node sections, and the cluster's pairs and all_reduce.
PAIRS = '  pairs: {min_busbw: "400 GB/s", max_bytes: "16 GiB"}\n  allreduce: {min_busbw: "400 GB/s", max_bytes: "16 GiB"}\n'


def names(nodes: int) -> list[str]:
    return [f"gpu{n:04d}" for n in range(1, nodes + 1)]


def node_results(nodes: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each node's results, parsed from the recorded bytes for that node alone, one node at a time."""
    raw, bad = NODE.read_bytes(), bad_nodes(nodes)
    for n, name in enumerate(names(nodes), start=1):
        results = json.loads(raw)
        if n in bad:
            results["verdict"] = "rejected"
            for check in results["checks"]:
                if check["clause"] == "utilisation" and check["subject"] == "GPU3":
                    check.update(outcome="failed", measured=41.0, message="lowest utilisation 41 % < 80 % (GPU3)")
        yield name, results


@dataclass(frozen=True)
class Figures:
    elapsed_s: float
    cpu_s: float
    peak_mb: float
    results_bytes: int
    page: str


def run(nodes: int, out: Path) -> Figures:
    """Merge, judge, write (out) and render a cluster of `nodes` nodes; the figures of this process."""
    start, cpu = time.perf_counter(), time.process_time()
    cluster = [Verdict(NODES.key, Subject.whole(name)).passed(
        "IDLE", "IDLE, 8 GPUs in Gres; results returned", {"state": "IDLE", "node_verdict": "accepted"})
        for name in names(nodes)]
    checks, hosts = merge_cluster(cluster, node_results(nodes), NODES.key)
    results = Results(verdict=verdict_of(checks, True), complete=True, checks=checks, hosts=hosts, **HEAD)  # type: ignore[arg-type]
    with out.open("w") as handle:
        write_chunks(json_chunks(results.document()), handle)
    page = banner(results, None, "")  # the report's page, as the login node's opens
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Figures(elapsed, used, peak, out.stat().st_size, page)


def end_to_end(nodes: int, folder: Path) -> tuple[int, dict[str, Any], str, float, float]:
    """The whole login-node run of `nodes` simulated nodes through the launcher stand-in: exit code, results,
    output, the login node's peak resident MB, and the run's wall time."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fleet_fakes import login_run, stand_in_cluster  # noqa: PLC0415 - the tests' stand-in, only for this mode
    from overhead import CONTRACT  # noqa: PLC0415

    contract = stand_in_cluster(folder, nodes, CONTRACT, PAIRS)
    start = time.perf_counter()
    code, results, output, peak = login_run(folder, contract)
    return code, results, output, peak, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--end-to-end", action="store_true")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    parser.add_argument("--out", type=Path, help="keep the results file and the report's page (page.html) there")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.end_to_end:
            code, results, output, peak, wall = end_to_end(args.nodes, Path(tmp))
            figures = {"nodes": args.nodes, "exit": code, "verdict": results["verdict"], "checks": len(results["checks"]),
                       "peak_mb": round(peak, 1), "wall_s": round(wall, 1)}
            line = (f"{args.nodes} nodes end to end: {figures['checks']} checks, {results['verdict']}, login node "
                    f"peak {peak:.0f} MB, {wall:.0f} s")
        else:
            out = args.out or Path(tmp)
            got = run(args.nodes, out / "gpuaccept-results.json")
            (out / "page.html").write_text(got.page)
            figures = {"nodes": args.nodes, "peak_mb": round(got.peak_mb, 1), "cpu_s": round(got.cpu_s, 2),
                       "wall_s": round(got.elapsed_s, 2), "results_bytes": got.results_bytes, "page_bytes": len(got.page)}
            line = (f"{args.nodes} nodes merged, judged, written and rendered in {got.elapsed_s:.2f} s ({got.cpu_s:.2f} s "
                    f"CPU); peak {got.peak_mb:.0f} MB; results {got.results_bytes / 1e6:.1f} MB, report summary "
                    f"{len(got.page) / 1e3:.0f} kB")
    print(json.dumps(figures) if args.json else line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
