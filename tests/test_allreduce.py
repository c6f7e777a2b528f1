"""all_reduce: the nccl-tests parser on every real log of the corpus; the clause judged in process from the logs
(tests/judging.py), and end to end where the run itself is the point (its report, a tool missing from PATH, a hang)."""

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import DATA, nccl_log, nvml_recording, staged_recording
from judging import Judged, Output, judge

from pytest_gpuaccept.clauses.allreduce import foreign_cuda, header_fields, not_this_run
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes._run import ToolRun
from pytest_gpuaccept.probes.nccl_tests import parse_all_reduce
from pytest_gpuaccept.probes.nvml import parse_host

EXPECTED = yaml.safe_load((DATA / "EXPECTED.yaml").read_text())["allreduce"]
FILES = sorted((DATA / "allreduce").iterdir())


def test_every_corpus_log_has_expectations():
    assert {f.name for f in FILES} == set(EXPECTED)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_real_logs_parse_to_the_expected_facts(path):
    expected = EXPECTED[path.name]
    result = parse_all_reduce(path.read_text())
    largest = result.largest
    assert result.ranks == expected["ranks"]
    assert result.nccl_tests_version == expected["nccl_tests_version"]
    assert result.nccl_version == expected["nccl_version"]
    assert (largest.size_bytes if largest else None) == expected["largest_size_bytes"]
    assert (largest.oop_busbw_gbyte_s if largest else None) == expected["oop_busbw_at_largest"]
    assert (largest.ip_busbw_gbyte_s if largest else None) == expected["ip_busbw_at_largest"]
    assert max((r.oop_busbw_gbyte_s for r in result.rows), default=None) == expected["max_oop_busbw"]
    assert result.avg_bus_bandwidth == expected["avg_bus_bandwidth"]
    assert (result.wrong_nonzero if result.rows else None) == expected["wrong_nonzero"]
    assert bool(result.error_lines) == expected["errors_present"]
    if result.collective is not None:
        assert result.collective == expected["collective"]


def test_the_ancient_failure_log_quotes_the_failure():
    result = parse_all_reduce((DATA / "allreduce" / "p100pcie_8gpu_nccl1_ancient_format_failure.txt").read_text())
    assert result.error_lines == ("NCCL failure all_reduce.cu:95 'unhandled cuda error'",)


def test_a_row_that_does_not_fit_the_header_is_refused():
    text = (DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt").read_text()
    broken = text.replace("   134217728      33554432     float     sum      -1  5355.16   25.06   43.86",
                          "   134217728      33554432     float     sum      -1  5355.16   25.06")
    with pytest.raises(ParseError, match="a row of 12 columns under a header of 13"):
        parse_all_reduce(broken)


@pytest.mark.parametrize("text", ["", "bash: all_reduce_perf: command not found\n", "<html>502</html>"])
def test_output_without_a_table_is_refused(text):
    with pytest.raises(ParseError, match="no result table"):
        parse_all_reduce(text)


# ------------------------------------------------------------------ the clause: judged, and end to end

P5 = DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt"
RTX = DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt"


def contract(min_busbw: str, max_bytes: str = "16 GiB", count: int = 8, extra: str = "", iters: int | None = 1) -> str:
    """One timed iteration per size by default: a replayed P5 log then takes 0.3 s of wall time, not 5."""
    args = f"  args: ['-n', '{iters}']\n" if iters else ""
    return (f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\nallreduce:\n  min_busbw: '{min_busbw}'\n"
            f"  max_bytes: '{max_bytes}'\n{args}{extra}")


def log_with_ranks(path: Path, ranks: int = 8) -> bytes:
    """The P5 table is printed without its device lines; add the rank lines nccl-tests prints before it."""
    return nccl_log(path, ranks=ranks)


def nccl(log: bytes | Path, **kwargs) -> dict[str, Output]:
    """all_reduce_perf printing `log`, for the harness (as long as the work its table reports, unless told)."""
    return {"all_reduce_perf": Output(log, **kwargs)}


def asked(judged: Judged, tool: str) -> list[list[str]]:
    """The runs of `tool` the session asked for."""
    return [argv for argv in judged.recordings.asked if argv[0] == tool]


@pytest.mark.parametrize("threshold, outcome", [("482.05 GB/s", "passed"), ("484.05 GB/s", "failed")])
def test_measured_is_the_out_of_place_busbw_at_the_largest_size(tmp_path, threshold, outcome):
    judged = judge(contract(threshold), nccl(log_with_ranks(P5)), tmp_path)
    check = judged.of("allreduce")[0]
    assert check.measured == pytest.approx(483.05, abs=0.01)
    assert (check.outcome.value, check.unit) == (outcome, "GB/s")
    sign = ">=" if outcome == "passed" else "<"
    assert check.message == (f"busbw 483.05 GB/s at 16 GiB {sign} {threshold} (nccl-tests; "
                             "107% of the published 450 GB/s (H100 SXM5 80GB NVLink, one direction))")
    assert asked(judged, "all_reduce_perf") == [
        ["all_reduce_perf", "-g", "8", "-b", "8388608", "-e", "17179869184", "-f", "2", "-c", "1", "-n", "1"]]
    assert "156.742" not in check.message  # never the sweep average


def test_the_report_shows_the_busbw_table_and_the_command(accept, fake_tools):
    fake_tools.add_nccl(log_with_ranks(P5), iters=1)
    run = accept(contract("450 GB/s"), nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "accepted" and run.result.ret == 0
    page = run.html
    assert "out-of-place busbw (GB/s)" in page and "480.43" in page
    assert "all_reduce_perf -g 8 -b 8388608 -e 17179869184 -f 2 -c 1 -n 1" in page


def test_repeats_run_each_time_and_the_best_counts(tmp_path):
    judged = judge(contract("450 GB/s", extra="  repeats: 3\n"), nccl(log_with_ranks(P5)), tmp_path)
    assert len(asked(judged, "all_reduce_perf")) == 3
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "passed" and "best of 3 runs" in check.message
    assert len([e for e in check.evidence if e.endswith(".txt") and "stderr" not in e]) == 3


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: t.replace(b"483.05      0    62200", b"483.05      3    62200"),
     "#wrong is nonzero at 16 GiB: results are corrupt"),
    (lambda t: t + b"p5:1234:1234 [0] NCCL WARN Cuda failure 'out of memory'\n",
     "errors in the output: \"p5:1234:1234 [0] NCCL WARN Cuda failure 'out of memory'\""),
    (lambda t: t.replace(b"# Out of bounds values : 0 OK", b"# Out of bounds values : 12 FAILED"),
     "errors in the output: '# Out of bounds values : 12 FAILED'"),
])
def test_a_corrupt_or_failing_run_never_passes(tmp_path, mutate, reason):
    judged = judge(contract("1 GB/s"), nccl(mutate(log_with_ranks(P5))), tmp_path)
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "failed"
    assert check.message == f"run: {reason}"
    assert judged.verdict == "rejected"


def test_a_log_that_ends_in_an_nccl_failure_is_not_measured(tmp_path):
    judged = judge(contract("1 GB/s", max_bytes="128 MiB"),
                   nccl(DATA / "allreduce" / "p100pcie_8gpu_nccl1_ancient_format_failure.txt", returncode=1), tmp_path)
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "not_measured"
    assert "exited with code 1" in check.message


def test_a_sweep_that_stops_short_of_max_bytes_is_not_a_pass(tmp_path):
    judged = judge(contract("1 GB/s", max_bytes="8 GiB", count=4, iters=None),
                   nccl(nccl_log(RTX, "rtx5090_4gpu.json", ranks=4)), tmp_path, nvml="rtx5090_4gpu.json")
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "failed"
    assert check.message == ("run: the sweep stopped at 128 MiB, short of max_bytes 8 GiB: "
                             "the contracted size was not measured")


def test_a_rank_count_other_than_the_gpu_count_fails(tmp_path):
    judged = judge(contract("1 GB/s"), nccl(log_with_ranks(P5, ranks=4)), tmp_path)
    assert judged.of("allreduce")[0].message == (
        "run: ran on 4 ranks, the contract has 8 GPUs; run: at 16 GiB the row's time 62239 us gives busbw "
        "414.05 GB/s over 4 ranks, the row says 483.05: the table does not add up")


def test_a_missing_binary_is_not_measured(accept, fake_tools):
    run = accept(contract("1 GB/s"), nvml_recording("h100_sxm5_8gpu.json"))
    check = run.checks("allreduce")[0]
    assert (check["outcome"], check["measured"]) == ("not_measured", None)
    assert check["message"] == "not measured: run: all_reduce_perf not found on PATH"
    assert run.json["verdict"] == "rejected" and run.result.ret == 1


def test_a_hang_past_the_timeout_is_killed_and_not_measured(accept, fake_tools):
    fake_tools.add("all_reduce_perf", b"# nThread 1 nGpus 8 minBytes 8388608\n", hang=30)
    run = accept(contract("1 GB/s", extra="") + "tools:\n  timeout: '1 s'\n", nvml_recording("h100_sxm5_8gpu.json"))
    check = run.checks("allreduce")[0]
    assert check["outcome"] == "not_measured"
    assert check["message"].endswith("timed out after 1 s and was killed")
    assert run.result.duration < 20
    partial = next((run.path / "gpuaccept-evidence").glob("all_reduce_perf*.run1.txt")).read_text()
    assert partial == "# nThread 1 nGpus 8 minBytes 8388608\n"  # what it printed before hanging is kept


def test_a_busbw_above_what_the_hardware_allows_is_implausible(tmp_path):
    # The real H100 log replayed on a host that NVML says has RTX 5090s on PCIe: 483 GB/s is impossible there.
    log = nccl_log(P5, "rtx5090_4gpu.json", ranks=4, table_ranks=8)  # 414 GB/s on 4 ranks
    judged = judge(contract("1 GB/s", count=4), nccl(log), tmp_path, nvml="rtx5090_4gpu.json")
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "failed"
    assert ("is implausible: above 69.3 GB/s (physically impossible: GPU0's PCIe Gen5 x16 (the GeForce RTX 5090's own), "
            "at most 63 GB/s + 10%)") in check.message
    assert check.details["physical_cap_source"].endswith("from the model table (pytest_gpuaccept/models/gpus.json)")


def test_a_real_log_replayed_unchanged_is_not_this_runs(tmp_path):
    """A canned copy of a real run, printed at once by a script: other PIDs, other GPUs, too fast for its table."""
    judged = judge(contract("1 GB/s", max_bytes="128 MiB", extra="  min_bytes: '8 B'\n", iters=None),
                   nccl(RTX, seconds=0.0), tmp_path)
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "failed"
    problems = check.message.split("; ")
    assert re.fullmatch(r"run: ranks ran as PID 27238, not as the process gpuaccept started \(PID \d+\): "
                        r"this output is not this run's", problems[0])
    assert problems[1] == ("run: ranks on GPUs NVML does not list here: rank 0 at 0000:01:00, rank 1 at 0000:11:00, "
                           "rank 2 at 0000:61:00, rank 3 at 0000:71:00 (NVML: GPU0 0000:18:00, GPU1 0000:28:00, "
                           "GPU2 0000:38:00, GPU3 0000:48:00, GPU4 0000:58:00, GPU5 0000:68:00, GPU6 0000:78:00, "
                           "GPU7 0000:88:00)")
    assert re.fullmatch(r"run: the table reports 0.44 s of timed all_reduce work \(20 iterations per size\), "
                        r"but the run took 0\.\d\d s: not a measurement", problems[2])


def test_all_ranks_on_one_gpu_fail(tmp_path):
    one_gpu = re.sub(rb"\[0x[0-9a-f]+\]", b"[0x18]", log_with_ranks(P5))
    judged = judge(contract("1 GB/s"), nccl(one_gpu), tmp_path)
    assert judged.of("allreduce")[0].message == "run: ranks share a GPU: ranks 0, 1, 2, 3, 4, 5, 6, 7 all on 0000:18:00 (GPU0)"


def test_a_busbw_edited_without_its_time_does_not_add_up(tmp_path):
    inflated = log_with_ranks(P5).replace(b"483.05      0    62200", b"983.05      0    62200")
    judged = judge(contract("450 GB/s"), nccl(inflated), tmp_path)
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "failed"
    assert check.message == ("run: at 16 GiB the row's time 62239 us gives busbw 483.05 GB/s over 8 ranks, "
                             "the row says 983.05: the table does not add up")


def test_a_busbw_above_the_nvlink_bound_fails_as_implausible(tmp_path):
    # time, algbw and busbw of the 16 GiB row edited together, so that the row adds up: 981.87 GB/s
    inflated = log_with_ranks(P5).replace(b"62239  276.03  483.05", b"30620  561.07  981.87")
    judged = judge(contract("450 GB/s"), nccl(inflated), tmp_path)
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "failed"
    assert check.message == ("busbw 981.87 GB/s at 16 GiB is implausible: above 866.25 GB/s (physically impossible: "
                             "GPU0's 18 NVLinks (NVML) x 25 GB/s per link (H100 SXM5 80GB), x 1.75 for reduction in the "
                             "NVSwitch, at most 787.5 GB/s + 10%) (nccl-tests; 218% of the published 450 GB/s "
                             "(H100 SXM5 80GB NVLink, one direction))")


def test_the_torch_alternative_is_chosen_by_the_contract_and_labelled(tmp_path):
    judged = judge(contract("1 GB/s", extra="  tool: torch\n"), {}, tmp_path)  # its workload: no output recorded
    check = judged.of("allreduce")[0]
    assert asked(judged, "all_reduce_perf") == []  # never nccl-tests when torch is chosen, and vice versa
    assert check.outcome.value == "not_measured"
    assert check.details["tool"] == "PyTorch distributed (NCCL backend), not nccl-tests"


def test_the_torch_workload_output_reads_with_the_same_parser():
    result = parse_all_reduce((DATA / "torch" / "allreduce_gloo_cpu_2rank.txt").read_text())
    assert result.ranks == 2 and result.n_gpus == 2
    assert result.largest.size_bytes == 16777216
    assert result.wrong_nonzero is False
    assert result.largest.oop_busbw_gbyte_s > 0


@pytest.mark.parametrize("name, max_bytes", [
    ("rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt", "128 MiB"),
    ("v100sxm2_1node_8gpu_old_error_column.txt", "128 MiB"),
])
@pytest.mark.parametrize("delta, outcome", [(-1.0, "passed"), (1.0, "failed")])
def test_real_8_gpu_logs_judged_as_this_host_prints_them(tmp_path, name, max_bytes, delta, outcome):
    """The real log with its rank lines on this recording's GPUs and the run's own PID; the table unchanged; NVML's
    GPUs named as the log's rank lines name them (the host the log came from)."""
    expected = EXPECTED[name]["oop_busbw_at_largest"]
    (model,) = {r.name for r in parse_all_reduce((DATA / "allreduce" / name).read_text()).rank_lines}
    nvml = staged_recording(tmp_path, "h100_sxm5_8gpu.json", lambda r: [g.update(name=model) for g in r["gpus"]])
    judged = judge(contract(f"{expected + delta:.2f} GB/s", max_bytes=max_bytes, extra="  min_bytes: '8 B'\n", iters=None),
                   nccl(nccl_log(DATA / "allreduce" / name)), tmp_path, nvml=Path(nvml.split("=", 1)[1]))
    check = judged.of("allreduce")[0]
    assert check.measured == pytest.approx(expected, abs=0.01)
    assert check.outcome.value == outcome, check.message


def test_the_real_h200_torch_rank_line_is_placed_on_its_gpu_by_bus_and_device():
    """Recorded on the H200 VM: every GPU of a VM sits on bus 0, so the device number tells them apart."""
    text = (DATA / "h200" / "torch-allreduce-1gpu.txt").read_text()
    result = parse_all_reduce(text)
    (rank,) = result.rank_lines
    assert (rank.pid, rank.bus, rank.slot, rank.name) == (615, 0x00, 0x06, "NVIDIA H200")
    host = parse_host(json.loads((DATA / "h200" / "nvml-h200.json").read_text()))
    run = ToolRun("k", ("python", "-m", "x", "-n", "5"), 0, 4.2, text, "", pid=615)
    assert not_this_run(result, run, host, 1) == []
    moved = json.loads((DATA / "h200" / "nvml-h200.json").read_text())
    moved["gpus"][0]["pci_bus_id"] = "00000000:00:07.0"  # another slot on the same bus: not this GPU
    assert not_this_run(result, run, parse_host(moved), 1) == [
        "ranks on GPUs NVML does not list here: rank 0 at 0000:00:06 (NVML: GPU0 0000:00:07)"]


SCATTER = DATA / "allreduce" / "scatter_aws_a100_2node_srun_prefixed_nccl_info_interleaved.txt"


def test_nccls_own_cuda_driver_version_is_read_from_its_info_lines():
    """The real AWS A100 log (NCCL_DEBUG=INFO): each of its 16 ranks logs `NCCL INFO cudaDriverVersion 12020`."""
    assert parse_all_reduce(SCATTER.read_text()).cuda_driver_versions == (12020,)


@pytest.mark.parametrize("cuda, problems", [
    ("12.2", []),
    ("12.6", ["NCCL's log says cudaDriverVersion 12020 (CUDA 12.2), but NVML here says CUDA 12.6: not this host's "
              "output"]),
])
def test_nccls_cuda_driver_version_is_set_beside_nvmls(cuda, problems):
    reading = json.loads((DATA / "nvml" / "a100_sxm4_40gb_8gpu.json").read_text())
    assert reading["cuda"] == "12.2"  # the recording's own, as NVML read it
    reading["cuda"] = cuda
    assert foreign_cuda(parse_all_reduce(SCATTER.read_text()), parse_host(reading)) == problems


def test_a_log_without_nccls_driver_line_leaves_it_unconfirmed_never_failed():
    log = nccl_log(DATA / "allreduce" / "v100sxm2_1node_8gpu_old_error_column.txt").decode()
    result = parse_all_reduce(log.replace("@PID@", "4242"))
    host = parse_host(json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text()))
    assert foreign_cuda(result, host) == []
    assert header_fields(result, host) == {
        "header_confirmed": ["GPU names and PCI buses of the rank lines"],
        "header_unconfirmed": ["CUDA: NCCL's cudaDriverVersion is not in the output (NCCL_DEBUG=INFO prints it)",
                               "driver: nccl-tests does not print it"]}
