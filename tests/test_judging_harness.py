"""The judge-level harness (tests/judging.py) judges as a whole pytest run does: the same checks, outcomes and
measured values for the same recorded outputs, in milliseconds instead of seconds."""

from __future__ import annotations

from conftest import DATA, nccl_log, nvml_recording
from judging import Output, judge

from pytest_gpuaccept.verdict import Outcome

CONTRACT = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
gpus: {count: 8, model: "H100", memory: "80 GB"}
nvlink: {every_pair: true, min_links: 18}
allreduce: {min_busbw: "450 GB/s", max_bytes: "16 GiB", args: ["-n", "1"]}
"""
TOPO = DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"


def _p5() -> bytes:
    return nccl_log(DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt")


def test_the_harness_makes_the_checks_a_pytest_run_makes(accept, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", TOPO)
    fake_tools.add_nccl(_p5(), iters=1)
    run = accept(CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    judged = judge(CONTRACT, {"nvidia-smi": Output(TOPO), "all_reduce_perf": Output(_p5())}, tmp_path)
    ours = [(c.clause, c.subject, c.outcome.value, c.measured) for c in judged.checks]
    theirs = [(c["clause"], c["subject"], c["outcome"], c["measured"]) for c in run.json["checks"]]
    assert ours == theirs and run.json["verdict"] == judged.verdict == "accepted"


def test_a_run_nobody_recorded_is_not_measured_never_passed(tmp_path):
    judged = judge(CONTRACT, {"nvidia-smi": Output(TOPO)}, tmp_path)
    [allreduce] = judged.of("allreduce")
    assert allreduce.outcome is Outcome.NOT_MEASURED and "no recorded output of `all_reduce_perf" in allreduce.message
    assert judged.verdict == "rejected"
