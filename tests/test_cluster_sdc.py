"""Silent data corruption across the nodes (issue 41): a checked all_reduce that returns wrong sums between two nodes,
or over the whole cluster, fails naming the nodes and the sizes, whatever its busbw; it is never a gap (not
measured) and never a pass. With an `sdc` section, the whole cluster's all_reduce checks every iteration."""

from __future__ import annotations

from pathlib import Path

from pytest_gpuaccept.clauses.cluster import ALLREDUCE, PAIRS, SECTION, judge_allreduce, judge_pair
from pytest_gpuaccept.cluster.pairs import blame
from pytest_gpuaccept.cluster.run import _judged, pair_result
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.measurements import ClusterAllReduce, PairRuns
from pytest_gpuaccept.probes import nccl_tests
from pytest_gpuaccept.probes._run import ToolRun
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.units import human_bytes

DATA = Path(__file__).parent / "data" / "allreduce"
# REAL: nccl-tests 2.17.8 between two GH200 nodes, #wrong 96/32 at 1 MiB (NVIDIA/nccl-tests#369; SOURCES.md)
WRONG = (DATA / "gh200_2node_2rank_ncclt2.17.8_check_wrong_96_32_at_1MiB.txt").read_text()
# Its honest twin: the same log with those two counts 0 and the failure lines gone (as tests/test_sdc.py builds it)
HONEST = (WRONG.replace("   2.20      96   492.81    2.13    2.13      32", "   2.20       0   492.81    2.13    2.13       0")
          .replace("# Out of bounds values : 4 FAILED", "# Out of bounds values : 0 OK"))
HONEST = "\n".join(line for line in HONEST.splitlines() if "Test failure" not in line) + "\n"
CONTRACT = parse_contract("gpuaccept: 1\nvendor: V\ncluster:\n  engine: slurm\n  nodes: ['gpu-1-[1-7]']\n"
                          "  pairs: {min_busbw: '5 GB/s', min_bytes: '8 B', max_bytes: '2 MiB'}\n  allreduce: {min_busbw: '5 GB/s', min_bytes: '8 B', max_bytes: '2 MiB'}\n"
                          "gpus: {count: 1}\n")


def run_of(stdout: str, returncode: int = 0) -> ToolRun:
    return ToolRun("pair-gpu-1-1+gpu-1-7", ("all_reduce_perf",), returncode, 2.0, stdout, "",
                   evidence=("pair-gpu-1-1+gpu-1-7.stdout",))


def test_a_pair_that_sums_wrong_fails_naming_its_nodes_and_the_size_and_is_blamed():
    result = pair_result(1, run_of(WRONG, returncode=1), 2, human_bytes)
    assert result.problem is None and result.wrong == (
        "all_reduce returned wrong sums: #wrong at 1 MiB (96 out-of-place, 32 in-place) over ranks on gpu-1-1, gpu-1-7")
    runs = PairRuns({("gpu-1-1", "gpu-1-7"): result}, blame(_judged({("gpu-1-1", "gpu-1-7"): result}, 5.0)))
    check = judge_pair(SECTION.of(CONTRACT), Subject.whole("gpu-1-1+gpu-1-7"), runs, CONTRACT)
    assert (check.clause, check.outcome.value) == (PAIRS.key, "failed")
    assert check.message.startswith("all_reduce returned wrong sums: #wrong at 1 MiB (96 out-of-place, 32 in-place) "
                                    "over ranks on gpu-1-1, gpu-1-7 (round 1)")
    assert runs.blame.failing == (("gpu-1-1", "gpu-1-7"),)  # busbw 22.87 GB/s meets 5: the wrong sums alone fail it


def test_a_run_that_did_not_finish_is_not_measured_however_its_table_reads():
    timed_out = ToolRun("pair", ("all_reduce_perf",), None, 60.0, WRONG, "", timed_out=True, timeout_s=60.0)
    assert pair_result(1, timed_out, 2, human_bytes).problem == "`all_reduce_perf` timed out after 60 s and was killed"
    crashed = pair_result(1, run_of(HONEST.split("# Out of bounds")[0], returncode=134), 2, human_bytes)
    assert crashed.wrong is None and crashed.problem.startswith("`all_reduce_perf` exited with code 134")


def test_its_honest_twin_passes_on_its_busbw():
    result = pair_result(1, run_of(HONEST), 2, human_bytes)
    assert result.wrong is None and result.busbw == 22.87  # at 128 MiB, its largest size
    runs = PairRuns({("gpu-1-1", "gpu-1-7"): result}, blame(_judged({("gpu-1-1", "gpu-1-7"): result}, 5.0)))
    assert judge_pair(SECTION.of(CONTRACT), Subject.whole("gpu-1-1+gpu-1-7"), runs, CONTRACT).passed


def test_the_whole_clusters_all_reduce_that_sums_wrong_fails():
    run = ClusterAllReduce(("gpu-1-1", "gpu-1-7"), (), 1, pair_result(0, run_of(WRONG, 1), 2, human_bytes, 2))
    check = judge_allreduce(SECTION.of(CONTRACT), Subject.whole(), run, CONTRACT)
    assert (check.clause, check.outcome.value) == (ALLREDUCE.key, "failed")
    assert "wrong sums: #wrong at 1 MiB (96 out-of-place, 32 in-place) over ranks on gpu-1-1, gpu-1-7, over 2 nodes" \
        in check.message
    honest = ClusterAllReduce(("gpu-1-1", "gpu-1-7"), (), 1, pair_result(0, run_of(HONEST), 2, human_bytes, 2))
    assert judge_allreduce(SECTION.of(CONTRACT), Subject.whole(), honest, CONTRACT).passed


def test_with_an_sdc_section_every_iteration_of_the_whole_all_reduce_is_checked():
    assert nccl_tests.all_reduce_args(1, 8, 1024, ()) == ["-g", "1", "-b", "8", "-e", "1024", "-f", "2", "-c", "1"]
    assert nccl_tests.all_reduce_args(1, 8, 1024, (), checked=20)[-4:] == ["-n", "20", "-c", "20"]
