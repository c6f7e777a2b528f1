"""sdc: wrong sums in nccl-tests' checked all_reduce (a real `-c` log that counted them), and our seeded GEMM whose
bits differ on one GPU; each rejected naming what refuted it, beside its honest twin, accepted. Judged in process."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import p5_log
from conftest import DATA, nccl_log, staged_recording
from judging import Output, judge, option_path

from pytest_gpuaccept.clauses.sdc import checked_size
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.nccl_tests import asked_checks, check_args, parse_all_reduce
from pytest_gpuaccept.probes.sdc_gemm import parse_sdc_gemm
from pytest_gpuaccept.workloads import sdc_gemm as workload

GH200 = DATA / "allreduce" / "gh200_2node_2rank_ncclt2.17.8_check_wrong_96_32_at_1MiB.txt"
CPU_RUN = DATA / "sdc_gemm" / "cpu_8workers_n128_x2_torch2.13.0.txt"
H100 = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())


def contract(count: int = 8, size: str = "16 GiB", iterations: int = 2, gemm: str | None = "false") -> str:
    """An sdc section; `gemm=None` leaves the key out (its default: where PyTorch is found)."""
    return (f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\n"
            f"sdc:\n  iterations: {iterations}\n  size: '{size}'\n" + (f"  gemm: {gemm}\n" if gemm else ""))


def gh200_host(tmp_path: Path) -> Path:
    """The H100 recording with its first two GPUs named as the GH200 log's rank lines name theirs."""
    def named(reading):
        for gpu in reading["gpus"][:2]:
            gpu["name"] = "NVIDIA GH200 120GB"
    return option_path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", named))


def honest(text: str) -> str:
    """The GH200 log as the same run would have printed it with every sum right (constructed from the real log)."""
    return (text.replace("      96   492.81    2.13    2.13      32", "       0   492.81    2.13    2.13       0")
            .replace("# Out of bounds values : 4 FAILED", "# Out of bounds values : 0 OK")
            .replace(" .. gpu-1-1 pid 662195: Test failure common.cu:1189\n", "")
            .replace(" .. gpu-1-7 pid 2448661: Test failure common.cu:1189\n", ""))


# ------------------------------------------------------------------ the checked all_reduce


def test_the_checked_sweep_asks_every_iteration_checked_and_lands_on_size():
    assert check_args(8, 2**30, 20) == ["-g", "8", "-b", "8", "-e", "1073741824", "-f", "2", "-n", "20", "-c", "20"]
    assert check_args(8, 3 * 2**30, 5)[2:6] == ["-b", "12", "-e", "3221225472"]  # 12 B doubles to 3 GiB exactly
    assert asked_checks(["all_reduce_perf", "-c", "20"]) == 20 and asked_checks(["all_reduce_perf"]) == 1


def test_the_real_check_log_reads_its_wrong_counts_per_row():
    result = parse_all_reduce(GH200.read_text())
    [row] = [r for r in result.rows if r.oop_wrong or r.ip_wrong]
    assert (row.size_bytes, row.oop_wrong, row.ip_wrong) == (1048576, 96, 32)
    assert all(r.oop_wrong == 0 for r in result.rows if r is not row)


def test_a_gpu_returning_wrong_sums_is_rejected_naming_the_size_and_the_gpus(tmp_path):
    log = nccl_log(GH200.read_bytes(), ranks=2)
    judged = judge(contract(2, "128 MiB", 20), {"all_reduce_perf": Output(log, returncode=7, seconds=1.5)}, tmp_path,
                   nvml=gh200_host(tmp_path))
    [check] = judged.of("sdc")
    assert (check.outcome.value, check.measured, check.unit) == ("failed", 128, "wrong values")
    assert check.message == (
        "all_reduce returned wrong sums: #wrong at 1 MiB (96 out-of-place, 32 in-place), over rank 0: GPU0 bus 0x18 on "
        "gpu-1-1, rank 1: GPU1 bus 0x28 on gpu-1-7 (nccl-tests counts wrong elements over all ranks together)")
    assert judged.recordings.asked == [["all_reduce_perf", "-g", "2", "-b", "8", "-e", "134217728", "-f", "2",
                                        "-n", "20", "-c", "20"]]


def test_its_honest_twin_is_accepted(tmp_path):
    log = nccl_log(honest(GH200.read_text()).encode(), ranks=2)
    judged = judge(contract(2, "128 MiB", 20), {"all_reduce_perf": Output(log, seconds=1.5)}, tmp_path,
                   nvml=gh200_host(tmp_path))
    [check] = judged.of("sdc")
    assert check.outcome.value == "passed", check.message
    assert check.message == ("no wrong value: all_reduce: #wrong 0 at every size up to 128 MiB, 20 checked iterations "
                             "each; GEMM not asked (sdc.gemm: false)")


def test_a_real_h100_check_table_is_accepted(tmp_path):
    judged = judge(contract(), {"all_reduce_perf": Output(p5_log(), seconds=2.0)}, tmp_path)
    assert judged.of("sdc")[0].outcome.value == "passed"


def test_rows_printed_without_the_work_are_refused_by_the_plugins_clock(tmp_path):
    """The honest log printed at once: its table claims 20 timed and 20 checked iterations of 0.59 s of work."""
    log = nccl_log(honest(GH200.read_text()).encode(), ranks=2)
    judged = judge(contract(2, "128 MiB", 20), {"all_reduce_perf": Output(log, seconds=0.7)}, tmp_path,
                   nvml=gh200_host(tmp_path))
    [check] = judged.of("sdc")
    assert check.outcome.value == "failed"
    assert check.message == ("all_reduce: the table reports 1.18 s of all_reduce work (20 timed and 20 checked "
                             "iterations per size), but the run took 0.75 s by the plugin's clock: the rows were "
                             "printed without the work")


def test_a_log_from_other_gpus_is_refused_by_nvml(tmp_path):
    """The real log's rank lines unchanged: GH200s at 0009:01:00 on two hosts, which NVML does not list here."""
    judged = judge(contract(2, "128 MiB", 20), {"all_reduce_perf": Output(honest(GH200.read_text()), seconds=1.5)},
                   tmp_path, nvml=gh200_host(tmp_path))
    [check] = judged.of("sdc")
    assert check.outcome.value == "failed"
    assert "ranks on GPUs NVML does not list here: rank 0 at 0009:01:00, rank 1 at 0009:01:00" in check.message


def unchecked(text: str) -> str:
    """The honest GH200 log as nccl-tests prints it with `-c 0`: `validation: 0` and #wrong N/A on every row (the
    form of the real `h100_2node_16rank_srun_validation0_wrong_NA.txt`; constructed from the real -c log)."""
    lines = []
    for line in text.replace("validation: 1", "validation: 0").splitlines():
        tokens = line.split()
        if len(tokens) == 13 and tokens[0].isdigit():
            tokens[8] = tokens[12] = "N/A"
            line = "  ".join(tokens)
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_an_unchecked_run_is_not_measured(tmp_path):
    log = nccl_log(unchecked(honest(GH200.read_text())).encode(), ranks=2)
    assert {r.oop_wrong for r in parse_all_reduce(log.decode()).rows} == {None}
    judged = judge(contract(2, "128 MiB", 20), {"all_reduce_perf": Output(log, seconds=1.5)}, tmp_path,
                   nvml=gh200_host(tmp_path))
    [check] = judged.of("sdc")
    assert check.outcome.value == "not_measured"
    assert check.message == ("not measured: all_reduce: the results were not checked (`validation: 0`, or #wrong N/A): "
                             "the run did not check what it summed")


def test_size_defaults_to_the_allreduce_max_bytes_else_1_gib():
    base = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nsdc:\n  iterations: 3\n"
    assert checked_size(parse_contract(base, "v.yaml")) == 2**30
    with_allreduce = base + "allreduce:\n  min_busbw: '1 GB/s'\n  max_bytes: '2 GiB'\n"
    assert checked_size(parse_contract(with_allreduce, "v.yaml")) == 2**31


def test_an_empty_or_tiny_size_is_a_contract_error():
    with pytest.raises(ContractError, match=r"sdc\.size: expected at least 8 B"):
        parse_contract(contract(size="4 B"), "v.yaml")


# ------------------------------------------------------------------ the GEMM


def on_gpus(text: str, change=None) -> str:
    """Our workload's real CPU run (8 workers) as the same program prints it on the H100 recording's 8 GPUs: device
    cuda, each worker's NVML name and bus ID (constructed: the program and its format are ours)."""
    lines = [json.loads(line) for line in text.splitlines()]
    for data in lines:
        if data.get("sdc_gemm"):
            data["device"] = "cuda"
        if "gpu" in data:
            gpu = H100["gpus"][data["gpu"]]
            data["name"], data["bus_id"] = gpu["name"], gpu["pci_bus_id"]
    if change:
        lines = change(lines)
    return "".join(json.dumps(data) + "\n" for data in lines)


def one_gpu_differs(gpu: int, count: int = 3):
    """GPU `gpu` computed other bits: its digests differ, one sampled element is off, and the program's comparison
    lines say so (against GPU0, the lowest GPU of the other digest, and GPU0's against it)."""
    def change(lines):
        for data in lines:
            if data.get("gpu") == gpu:
                data["digests"] = ["f" * 64] * len(data["digests"])
                row, col, value = data["sample"][0]
                data["sample"][0] = [row, col, value + 4.0]
                bad = [row, col, value + 4.0, value]
        done = lines.pop()
        return lines + [{"compare": [0, gpu], "differ": count, "first": [bad[0], bad[1], bad[3], bad[2]]}] + \
            [{"compare": [g, gpu], "differ": count, "first": [bad[0], bad[1], bad[3], bad[2]]}
             for g in range(1, 8) if g != gpu] + [{"compare": [gpu, 0], "differ": count, "first": bad}, done]
    return change


def gemm_contract(gemm: str = "true") -> str:
    return contract(iterations=2, gemm=gemm)


def sweep() -> dict[str, Output]:
    return {"all_reduce_perf": Output(p5_log(), seconds=2.0)}


def test_the_real_cpu_run_of_the_workload_parses_and_agrees_with_the_cpu_reference():
    result = parse_sdc_gemm(CPU_RUN.read_text())
    assert (result.device, result.n, result.repeats, len(result.gpus), result.done) == ("cpu", 128, 2, 8, True)
    assert len({g.digests[0] for g in result.gpus.values()}) == 1 and not result.compared
    worst = max(abs(v - result.reference[(r, c)]) / result.reference[(r, c)]
                for g in result.gpus.values() for r, c, v in g.sample)
    assert worst < 1e-6


def test_a_gemm_differing_on_one_gpu_is_rejected_with_the_count_and_first_element(tmp_path):
    text = on_gpus(CPU_RUN.read_text(), one_gpu_differs(5))
    judged = judge(gemm_contract(), {**sweep(), "python": Output(text)}, tmp_path)
    [check] = judged.of("sdc")
    assert check.outcome.value == "failed"
    first = json.loads(CPU_RUN.read_text().splitlines()[6])["sample"][0]
    reference = dict(((r, c), v) for r, c, v in json.loads(CPU_RUN.read_text().splitlines()[9])["cpu_reference"])
    off = abs(first[2] + 4.0 - reference[(first[0], first[1])]) / reference[(first[0], first[1])]
    assert check.message == (
        f"GEMM: GPU5: 1 of 64 sampled elements are off the CPU's float64 reference; first [{first[0]}, {first[1]}]: "
        f"{first[2] + 4.0!r}, expected {reference[(first[0], first[1])]!r} (relative {off:.1e} > 0.0001); "
        f"GEMM: GPU5: 3 of 16384 elements differ bitwise from GPU0's (NVIDIA H100 80GB HBM3, 7 of 8 GPUs agree); "
        f"first [{first[0]}, {first[1]}]: {first[2] + 4.0!r}, expected {first[2]!r}")
    assert check.measured == 3
    assert judged.recordings.asked[-1] == ["python", "-m", "pytest_gpuaccept.workloads.sdc_gemm", "--gpus", "8",
                                           "--repeats", "2"]


def test_its_honest_twin_is_accepted_on_two_sources(tmp_path):
    judged = judge(gemm_contract(), {**sweep(), "python": Output(on_gpus(CPU_RUN.read_text()))}, tmp_path)
    [check] = judged.of("sdc")
    assert check.outcome.value == "passed", check.message
    assert check.message.endswith("GEMM fp32 n=128 x2 on 8 GPUs: bitwise identical per model (NVIDIA H100 80GB HBM3) "
                                  "and every time, sample within 0.0001 of the CPU's float64")
    assert check.details["sources"] == ["nccl-tests' own check (-c) timed by the plugin's clock",
                                        "our seeded GEMM against the CPU"]


def test_a_gpu_whose_repeats_differ_is_rejected(tmp_path):
    def flaky(lines):
        for data in lines:
            if data.get("gpu") == 2:
                data["digests"][1] = "0" * 64
        lines.insert(-1, {"repeat_mismatch": 2, "repeat": 1, "differ": 1, "first": [7, 9, 1.5, 1.25]})
        return lines
    judged = judge(gemm_contract(), {**sweep(), "python": Output(on_gpus(CPU_RUN.read_text(), flaky))}, tmp_path)
    [check] = judged.of("sdc")
    assert check.outcome.value == "failed"
    assert check.message.startswith("GEMM: GPU2's repeat 1 differs from its first result in 1 of 16384 elements; "
                                    "first [7, 9]: 1.5, expected 1.25")


def test_a_gemm_output_naming_gpus_nvml_does_not_list_is_refused(tmp_path):
    def elsewhere(lines):
        for data in lines:
            if data.get("gpu") == 3:
                data["bus_id"] = "00000000:99:00.0"
        return lines
    judged = judge(gemm_contract(), {**sweep(), "python": Output(on_gpus(CPU_RUN.read_text(), elsewhere))}, tmp_path)
    assert judged.of("sdc")[0].message == ("GEMM: GPU3 at 00000000:99:00.0: NVML lists no GPU there: not this host's "
                                           "output")


MISSING = Output("", returncode=3, stderr="gpuaccept: PyTorch is not installed in this Python (python -m pytest_gpuaccept doctor says how to get it)\n")


def test_without_pytorch_the_default_runs_the_sweep_alone_and_says_so(tmp_path):
    judged = judge(contract(gemm=None), {**sweep(), "python": MISSING}, tmp_path)
    [check] = judged.of("sdc")
    assert check.outcome.value == "passed"
    assert "GEMM not run: PyTorch is not installed where the workload runs" in check.message
    assert check.details["unconfirmed"] == "nccl-tests' check alone: the GEMM was not run"


def test_without_pytorch_a_contract_asking_for_the_gemm_is_not_measured(tmp_path):
    judged = judge(gemm_contract("true"), {**sweep(), "python": MISSING}, tmp_path)
    [check] = judged.of("sdc")
    assert check.outcome.value == "not_measured"
    assert check.message == ("not measured: GEMM: sdc.gemm is true, but PyTorch is not installed where the workload "
                             "runs: pip install 'torch>=2.1' (a CUDA build: https://pytorch.org/get-started/locally/)")


def test_a_gemm_run_on_the_cpu_is_not_a_gpu_result(tmp_path):
    judged = judge(gemm_contract(), {**sweep(), "python": Output(CPU_RUN.read_text())}, tmp_path)
    assert judged.of("sdc")[0].message == "not measured: GEMM: ran on the cpu, not on the GPUs"


def test_a_line_the_program_does_not_print_is_refused():
    with pytest.raises(ParseError, match="a line that is not one of the program's"):
        parse_sdc_gemm(CPU_RUN.read_text().replace('{"done": true}', '{"gpu": "x"}'))


def test_the_workload_runs_for_real_on_this_cpu_or_says_pytorch_is_missing():
    """Our program, run for real on the CPU (two workers, a small n), in a process of its own as gpuaccept starts it:
    what the judge reads on the GPUs, or the exit code 3 and line that say PyTorch is missing."""
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", workload.__name__, "--gpus", "2", "--n", "32",
                           "--repeats", "2", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    if importlib.util.find_spec("torch") is None:
        assert done.returncode == 3 and "PyTorch is not installed" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        result = parse_sdc_gemm(done.stdout)
        assert result.gpus[0].digests == result.gpus[1].digests and result.done and result.seed == workload.SEED
