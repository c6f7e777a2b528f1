"""compute: our GEMM workload's windows read back (TFLOPS recomputed from matmuls, n and seconds), judged
on the sustained figure with the burst beside it; a CPU run, a run that stopped early or a product that is
not finite never passes."""

import importlib.util
import json
import statistics
import subprocess
import sys

import pytest
from builders import GEMM_CPU_RUN, as_gpus, compute_run, recording

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.gemm import parse_gemm


def _expected(gpu: int) -> tuple[float, float]:
    """(burst, sustained) of one GPU, worked out here from the recorded windows: 2 n^3 flops a matmul."""
    lines = [json.loads(line) for line in GEMM_CPU_RUN.splitlines()[1:]]
    windows = [(w["t_s"], 2 * 256**3 * w["matmuls"] / w["seconds"] / 1e12) for w in lines if "t_s" in w and w["gpu"] == gpu]
    return max(v for _t, v in windows), statistics.median([v for t, v in windows if t > 1.5])


def test_the_recorded_run_reads_back_per_gpu():
    result = parse_gemm(GEMM_CPU_RUN)
    assert (result.device, result.dtype, result.n, result.duration_s) == ("cpu", "fp32", 256, 3.0)
    for gpu in (0, 1):
        run = result.runs[gpu]
        burst, sustained = _expected(gpu)
        assert run.done and run.finite
        assert run.burst == pytest.approx(burst) and run.sustained(3.0) == pytest.approx(sustained)


def test_a_window_of_another_size_than_the_header_is_refused():
    with pytest.raises(ParseError):
        parse_gemm(GEMM_CPU_RUN.replace('"n": 256}', '"n": 8192}', 1))


def test_each_gpu_is_judged_on_its_sustained_figure_with_burst_and_samples_beside(accept, fake_tools, tmp_path):
    run = compute_run(accept, fake_tools, tmp_path, as_gpus(GEMM_CPU_RUN))
    checks = {c["subject"]: c for c in run.checks("compute")}
    for gpu in (0, 1):
        burst, sustained = _expected(gpu)
        check = checks[f"GPU{gpu}"]
        assert (check["outcome"], check["unit"]) == ("passed", "TFLOPS")
        assert check["measured"] == round(sustained, 3)
        assert check["details"]["burst_tflops"] == round(burst, 2) and "timeline" in check["details"]
    assert fake_tools.calls("python") == [["python", "-m", "pytest_gpuaccept.workloads.gemm", "--gpus", "2", "--dtype",
                                           "fp32", "--n", "256", "--duration", "3"]]


def test_a_fraction_of_the_published_tf32_figure_of_an_h100_sxm5(accept, fake_tools, tmp_path):
    run = compute_run(accept, fake_tools, tmp_path, as_gpus(GEMM_CPU_RUN, "tf32"), "tf32", "min_fraction_of_peak: 0.7")
    check = run.checks("compute")[0]
    assert (check["outcome"], check["required"]) == ("failed", ">= 346.15")
    assert "of the published 494.5 (H100 SXM5 80GB)" in check["message"]


def test_a_dtype_the_model_has_no_figure_for_is_not_measured(accept, fake_tools, tmp_path):
    run = compute_run(accept, fake_tools, tmp_path, as_gpus(GEMM_CPU_RUN), "fp32", "min_fraction_of_peak: 0.7")
    assert run.checks("compute")[0]["message"] == (
        "not measured: H100 SXM5 80GB has no published fp32 figure: no figure to take 0.7 of")


def test_a_run_on_the_cpu_is_never_a_gpu_figure(accept, fake_tools, tmp_path):
    run = compute_run(accept, fake_tools, tmp_path, GEMM_CPU_RUN)
    assert {c["message"] for c in run.checks("compute")} == {
        "not measured: the GEMM ran on the cpu, not on the GPUs: not a GPU figure"}


def test_a_gpu_that_stopped_early_or_computed_garbage_fails(accept, fake_tools, tmp_path):
    lines = as_gpus(GEMM_CPU_RUN).splitlines()
    early = [line for line in lines if not (('"gpu": 1' in line) and ('"t_s": 2' in line or '"t_s": 3' in line
                                                                      or '"done"' in line))]
    garbage = "\n".join(early).replace('"gpu": 0, "done": true, "finite": true', '"gpu": 0, "done": true, "finite": false')
    run = compute_run(accept, fake_tools, tmp_path, garbage + "\n")
    checks = {c["subject"]: c for c in run.checks("compute")}
    assert checks["GPU0"]["outcome"] == "failed" and "is not finite" in checks["GPU0"]["message"]
    assert checks["GPU1"]["outcome"] == "failed" and checks["GPU1"]["message"].startswith("GPU1 stopped after 1.")


def test_without_pytorch_or_a_gpu_the_workload_says_so_and_is_not_measured(accept, tmp_path):
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 2}\ncompute: {dtype: bf16, min_tflops: 100, duration: '1 s'}\n",
                 recording(tmp_path, gpus=2))
    assert {c["outcome"] for c in run.checks("compute")} == {"not_measured"}


def test_the_workload_runs_for_real_on_this_cpu_or_says_pytorch_is_missing():
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "pytest_gpuaccept.workloads.gemm", "--gpus", "1",
                           "--dtype", "fp32", "--n", "64", "--duration", "1", "--window", "0.25", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    if importlib.util.find_spec("torch") is None:
        assert done.returncode == 3 and "PyTorch is not installed" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        result = parse_gemm(done.stdout)
        assert result.runs[0].done and result.runs[0].finite and result.runs[0].burst > 0
