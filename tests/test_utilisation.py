"""utilisation and health under load: NVML sample series replayed through the NVML adapter.

No GPU machine was at hand: the series are built here, in the shape `nvml.sample_gpus` records (one
row per 200 ms: t, utilisation, SM clock, power, temperature, clock event reasons, PCIe gen, width).

The clauses are judged in process from the recordings (tests/judging.py); a whole pytest run stays where the run
itself is the point: the workload's argv and evidence, NVML without a driver, PyTorch missing, the report, the
samples file.
"""

import importlib.util
import json
import re
import time
from pathlib import Path

import pytest
from builders import LOAD_CONTRACT, UTILISATION_FIELDS, recording, series
from conftest import DATA
from judging import Output, judge

from pytest_gpuaccept import charts
from pytest_gpuaccept.probes import nvml
from pytest_gpuaccept.probes._run import Command, ToolRunner
from pytest_gpuaccept.report.details import measurements
from pytest_gpuaccept.verdict import Check


@pytest.fixture
def workload(fake_tools):
    fake_tools.add("train-job", "step 1 loss 10.4\n", sleep=30)
    return fake_tools


def load(stdout: str | Path = "step 1 loss 10.4\n", seconds: float = 1.5, **kwargs) -> dict[str, Output]:
    """The `train-job` workload, running as long as the load's duration (a fake that runs until gpuaccept stops it
    reads the same to the judges: the workload did not end before the duration)."""
    return {"train-job": Output(stdout, seconds=seconds, **kwargs)}


def judged_load(tmp_path, outputs: dict[str, Output] | None = None, **recorded):
    """LOAD_CONTRACT judged on builders.recording(tmp_path, **recorded), the workload `outputs` (load() unless given)."""
    flag = recording(tmp_path, **recorded)
    return judge(LOAD_CONTRACT, load() if outputs is None else outputs, tmp_path, nvml=Path(flag.split("=", 1)[1]))


def by_gpu(judged, clause: str) -> dict:
    return {c.subject: c for c in judged.of(clause)}


def test_a_steady_run_passes_every_gpu(accept, workload, tmp_path):
    run = accept(LOAD_CONTRACT, recording(tmp_path))
    util = run.checks("utilisation")
    assert [(c["subject"], c["outcome"], c["measured"], c["unit"]) for c in util] == [
        (f"GPU{i}", "passed", 99, "%") for i in range(4)]
    assert util[0]["message"] == ("GPU0 lowest 99 % >= 80 %; mean 99.0 %, 5th percentile 99.0 % over 57 samples "
                                  "from t=0.6 s, its first sample at 80 % or more (the warmup allows 1 s)")
    assert util[0]["details"]["startup"] == {"first_busy_s": 0.6}  # measured, not the contract's 1 s
    assert run.json["verdict"] == "accepted", [c["message"] for c in run.checks() if c["outcome"] != "passed"]
    assert workload.calls("train-job") == [["train-job", "--config", "small.yaml"]]
    evidence = run.path / "gpuaccept-evidence"
    assert json.loads((evidence / "workload.json").read_text())["stopped_after_s"] >= 1.0
    assert (evidence / "nvml-samples.json").is_file()


def test_a_dip_after_warmup_fails_naming_the_gpu_time_and_value(tmp_path):
    dip = series(util=lambda t: 0 if t < 0.6 else (42 if 7.3 < t < 7.5 else 99))
    judged = judged_load(tmp_path, overrides={2: dip})
    check = by_gpu(judged, "utilisation")["GPU2"]
    assert (check.outcome.value, check.measured) == ("failed", 42)
    assert check.message.startswith("GPU2 dropped to 42 % at t=7.4 s (below 80 %); mean ")
    assert judged.verdict == "rejected"


def test_the_warm_up_ends_at_the_first_busy_sample_so_a_dip_after_it_counts(tmp_path):
    """Busy at t=0.6 s, then a dip at 0.8 s: inside the contract's 1 s warmup, but after the measured warm-up."""
    dip = series(util=lambda t: 0 if t < 0.6 else (30 if 0.7 < t < 0.9 else 99))
    check = by_gpu(judged_load(tmp_path, overrides={3: dip}), "utilisation")["GPU3"]
    assert (check.outcome.value, check.measured) == ("failed", 30)
    assert check.message.startswith("GPU3 dropped to 30 % at t=0.8 s (below 80 %); mean ")


def test_the_loads_own_first_step_is_kept_beside_the_first_busy_sample(tmp_path):
    """The builtin load's real output on a CPU (tests/data/torch), printed by a fake workload: no PyTorch here."""
    judged = judged_load(tmp_path, load(DATA / "torch" / "train_cpu_2proc_first_step.txt"))
    startup = {c.subject: c.details["startup"] for c in judged.of("utilisation")}
    assert startup == {"GPU0": {"first_busy_s": 0.6, "first_step_s": 84.11}, "GPU1": {"first_busy_s": 0.6, "first_step_s": 72.51},
                       "GPU2": {"first_busy_s": 0.6}, "GPU3": {"first_busy_s": 0.6}}


def test_a_dip_inside_warmup_does_not_count(tmp_path):
    dip = series(util=lambda t: 0 if t < 0.6 else (10 if t < 0.9 else 99))
    judged = judged_load(tmp_path, overrides={1: dip})
    assert {c.outcome.value for c in judged.of("utilisation")} == {"passed"}


HOT = series(reasons=lambda t: (0x4 | 0x40) if 8.0 <= t < 9.0 else (0x4 if t >= 0.6 else 0x1))  # GPU3's, 8-9 s


def test_throttle_reasons_fail(tmp_path):
    """(The report naming them: test_the_report_draws_the_timeline_and_names_throttle_reasons.)"""
    checks = by_gpu(judged_load(tmp_path, overrides={3: HOT}), "health.throttle")
    assert checks["GPU3"].outcome.value == "failed"
    assert checks["GPU3"].message == ("5 of 60 samples throttled, first at t=8.0 s: hw_thermal_slowdown; "
                                      "all reasons seen: gpu_idle, hw_thermal_slowdown, sw_power_cap")
    assert checks["GPU0"].outcome.value == "passed"


def test_pending_row_remapping_and_ecc_errors_fail(tmp_path):
    bad = {1: {"ecc_volatile_uncorrected": 3, "remapped_rows": [1, 0, 1, 0], "retired_pages_pending": None},
           2: {"ecc_volatile_uncorrected": None, "remapped_rows": None, "retired_pages_pending": None}}
    judged = judged_load(tmp_path, health=bad)
    ecc, remap = by_gpu(judged, "health.ecc"), by_gpu(judged, "health.row_remapping")
    assert (ecc["GPU1"].outcome.value, ecc["GPU1"].measured) == ("failed", 3)
    assert remap["GPU1"].message == "remapped rows: 1 correctable, 0 uncorrectable, pending yes, failure no"
    assert ecc["GPU2"].outcome.value == "not_measured"  # unsupported is reported as such, never passed
    assert remap["GPU2"].message.startswith("not measured: neither row remapping nor page retirement")


def test_a_pcie_link_below_the_contract_under_load_fails(tmp_path):
    narrow = series(pcie=lambda t: (5, 8) if t >= 0.6 else (1, 8))
    check = judged_load(tmp_path, overrides={0: narrow}).of("health.pcie")[0]
    assert check.outcome.value == "failed"
    assert check.message == "PCIe gen 5 x8 under load (lowest of 55 samples): x8 < x16"


def test_a_workload_crash_is_not_passed_and_shows_its_output(tmp_path):
    crashed = load("", seconds=0.0, returncode=1,
                   stderr="RuntimeError: CUDA error: an illegal memory access was encountered\n")
    judged = judged_load(tmp_path, crashed)
    util = judged.of("utilisation")[0]
    assert util.outcome.value == "failed"
    assert "exited with code 1" in util.message
    assert "CUDA error: an illegal memory access was encountered" in util.message
    assert judged.of("health.throttle")[0].outcome.value == "not_measured"


def test_a_host_with_fewer_gpus_fails_the_missing_ones(tmp_path):
    missing = by_gpu(judged_load(tmp_path, gpus=3), "utilisation")["GPU3"]
    assert missing.outcome.value == "not_measured"
    assert missing.message == "not measured: GPU3 not sampled: the host has 3 GPUs"


def test_without_a_driver_every_utilisation_and_health_check_is_not_measured(accept, workload):
    run = accept(LOAD_CONTRACT)  # no recording: the real NVML, and this machine has no driver
    checks = [c for c in run.checks() if c["clause"] == "utilisation" or c["clause"].startswith("health.")]
    assert len(checks) == 4 * 5
    assert {c["outcome"] for c in checks} == {"not_measured"}
    assert all("NVML" in c["message"] for c in checks)
    assert workload.calls("train-job") == []  # nothing to judge it with: the load is not started
    assert run.json["verdict"] == "rejected"


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="this machine has PyTorch")
def test_without_pytorch_the_builtin_workload_is_not_measured_with_the_install_hint(accept, tmp_path):
    run = accept(LOAD_CONTRACT.replace('workload: ["train-job", "--config", "small.yaml"]', "workload: builtin"),
                 recording(tmp_path))
    checks = [c for c in run.checks() if c["clause"] == "utilisation" or c["clause"].startswith("health.")]
    assert {c["outcome"] for c in checks} == {"not_measured"}
    assert all("pip install 'torch>=2.1'" in c["message"] for c in checks)


def test_the_report_draws_the_timeline_and_names_throttle_reasons(accept, workload, tmp_path):
    run = accept(LOAD_CONTRACT, recording(tmp_path, overrides={3: HOT}))
    page = run.html
    assert "<svg" in page and "threshold 80 %" in page and "warmup 1 s" in page
    assert "hw_thermal_slowdown" in page  # GPU3's throttle reason (test_throttle_reasons_fail), in the report


def test_each_sample_is_kept_once_the_checks_name_where(accept, workload, tmp_path):
    """The timeline of a check is where its GPU's samples are, in the sealed samples file: not a copy of every
    sample in the results and in each JUnit testcase (a megabyte for a ten-minute 8-GPU load)."""
    run = accept(LOAD_CONTRACT, recording(tmp_path), "--junitxml=junit.xml")
    timelines = {c["subject"]: c["details"]["timeline"] for c in run.checks("utilisation")}
    assert timelines["GPU1"] == {"samples": "nvml-samples.json", "gpu": 1, "threshold": 80.0, "warmup_s": 1.0}
    assert '"rows"' not in (run.path / "gpuaccept-results.json").read_text()
    assert '"samples": "nvml-samples.json"' in (run.path / "junit.xml").read_text().replace("&quot;", '"')
    assert (run.path / "gpuaccept-evidence" / "nvml-samples.json").is_file()
    assert run.html.count("<polyline") >= 4 * len(timelines)  # utilisation, SM clock, power, temperature


def test_a_chart_whose_samples_file_is_gone_says_so_and_draws_the_others():
    check = Check.from_dict({"clause": "utilisation", "subject": "GPU0", "outcome": "passed", "details": {
        "timeline": {"samples": "nvml-samples.json", "gpu": 0, "threshold": 80.0, "warmup_s": 1.0}}})
    page = measurements([check], None)
    assert "GPU0: no timeline drawn: nvml-samples.json is not in the evidence" in page and "<svg" not in page


def test_a_sample_row_is_read_by_the_recording_format_s_field_names():
    assert nvml.Sample._fields == nvml.SAMPLE_FIELDS  # the recording's "fields" and the row's names are one list
    with pytest.raises(nvml.ParseError, match="samples malformed"):
        nvml.parse_samples({"fields": list(nvml.SAMPLE_FIELDS), "gpus": [{"index": 0, "samples": [[0.0, 99]]}]})


def test_the_samples_sampled_during_the_window_are_kept_as_evidence_once(tmp_path):
    """What `during` returns (the NVML samples) is sealed as evidence once, after the window, under its name."""
    runner = ToolRunner(tmp_path / "evidence")
    samples = {"interval_s": 0.2, "fields": UTILISATION_FIELDS, "gpus": [{"index": 0, "samples": series(1.0)}]}
    written = []
    write_json = runner.evidence.write_json
    runner.evidence.write_json = lambda name, data: (written.append(name), write_json(name, data))[1]

    def during(stop):
        ends = time.monotonic() + 0.3
        stop.wait(max(0.0, ends - time.monotonic()))
        return samples

    run = runner.run_during(Command("sleep", ("30",), key="workload"), 0.3, during, "nvml-samples.json")
    assert written.count("nvml-samples.json") == 1
    assert json.loads((tmp_path / "evidence" / "nvml-samples.json").read_text()) == samples
    assert run.stopped_after_s is not None and 0.3 <= run.stopped_after_s < 30  # stopped after the window, not at its end


def test_a_thinned_timeline_still_draws_a_one_sample_dip_and_stays_small():
    """A ten-minute load is 4,000 samples a GPU: each line keeps at most MAX_POINTS points, each bucket its lowest
    and highest, so a GPU that dropped to 3 % for one sample is still seen to (a mean would hide it); and a level
    stretch is drawn as one segment (its inner points would draw the same line)."""
    times = [n * 0.15 for n in range(4000)]
    steady = [99.0] * 4000
    dipped = [99.0] * 4000
    dipped[2345] = 3.0
    missing = [None if n % 7 == 0 else 97.0 for n in range(4000)]  # NVML did not answer some samples
    svg = charts.multi_chart("GPU utilisation", [("GPU0", times, steady, "#000"), ("GPU1", times, dipped, "#111"),
                                                 ("GPU2", times, missing, "#222")], "%", 80.0, "threshold 80 %")
    lines = [[tuple(map(int, p.split(","))) for p in points.split()] for points in re.findall(r'points="([^"]*)"', svg)]
    assert all(0 < len(line) <= charts.MAX_POINTS for line in lines)
    floor = max(y for line in lines for _x, y in line)  # SVG y grows downwards: the lowest value drawn
    assert [max(y for _x, y in line) for line in lines].index(floor) == 1  # GPU1's dip, and only GPU1's
    bottom, top = charts.HEIGHT - charts.PAD / 2, charts.PAD / 2
    assert floor > bottom - (bottom - top) * 0.1  # near 0 % on the axis, not near 99 %
    assert lines[1][0][0] == lines[0][0][0] and lines[1][-1][0] == lines[0][-1][0]  # same span of time
    # A level stretch is one segment: the steady GPU's 4,000 samples are drawn by their two ends, the dip by the
    # level run to it, down, up, and the level run after it.
    assert len(lines[0]) == 2 and len({y for _x, y in lines[0]}) == 1
    assert len(lines[1]) <= 6 and [y for _x, y in lines[1]].count(floor) >= 1
