"""What the terminal ends with: the counts, the one cause, the report's path and the verdict as the last lines;
pytest's per-test FAILED lines folded to one line per clause (a user's own test keeps its own); "deselected" only
where the user deselected (-k), never for the clauses the contract does not have."""

from __future__ import annotations

import re

import pytest
from conftest import nvml_recording

from pytest_gpuaccept.report.hooks import MESSAGE_CHARS, folded
from pytest_gpuaccept.verdict import Check, Outcome

WRONG_MODEL = "gpuaccept: 1\nvendor: V\ngpus: {count: 8, model: A100}\n"
H100 = "GPU0 is 'NVIDIA H100 80GB HBM3', which does not contain 'A100', nor does its PCI device 0x2330 (H100 SXM5 80GB)"
SIMULATED = "[SIMULATED: NVML readings from a recording, not from this host's driver]"


def test_a_rejected_run_ends_with_its_counts_cause_report_and_verdict(accept):
    run = accept(WRONG_MODEL, nvml_recording("h100_sxm5_8gpu.json"))
    lines = run.result.outlines
    assert lines[-4:] == ["gpuaccept: REJECTED: 9 passed, 8 failed, 0 not measured",
                          f"gpuaccept first failure: gpus.model GPU0: {H100}",
                          f"gpuaccept report: {run.path / 'gpuaccept-report.html'}",
                          f"gpuaccept verdict: REJECTED {SIMULATED}"]
    # 8 failed tests, one line for their clause; none of pytest's per-test FAILED lines
    assert [line for line in lines if line.startswith(("FAILED", "NOT MEASURED", "ERROR"))] == [
        f"FAILED gpus.model: 8 of 8 subjects (first: GPU0: {H100})"]
    assert "short test summary info" not in run.result.stdout.str()


def test_an_accepted_run_ends_with_its_counts_and_report(accept):
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 8, model: H100}\n", nvml_recording("h100_sxm5_8gpu.json"))
    assert run.result.outlines[-3:] == ["gpuaccept: ACCEPTED: 17 passed, 0 failed, 0 not measured",
                                        f"gpuaccept report: {run.path / 'gpuaccept-report.html'}",
                                        f"gpuaccept verdict: ACCEPTED {SIMULATED}"]


def test_deselected_is_said_only_when_the_user_deselected(accept):
    """The gpus suite has clauses this contract lacks (memory, driver, form factor, ...): their tests are not made,
    so pytest counts no deselection of ours."""
    run = accept(WRONG_MODEL, nvml_recording("h100_sxm5_8gpu.json"))
    assert not re.search(r"\d+ deselected", run.result.stdout.str())
    assert "collected 17 items" in run.result.outlines
    by_user = accept(WRONG_MODEL, nvml_recording("h100_sxm5_8gpu.json"), "-k", "GPU0")
    assert "collected 17 items / 15 deselected / 2 selected" in by_user.result.outlines


def test_a_users_own_failing_test_keeps_its_own_failed_line(accept, pytester):
    pytester.makepyfile(test_mine="def test_mine():\n    assert 1 == 2\n")
    run = accept(WRONG_MODEL, nvml_recording("h100_sxm5_8gpu.json"), "test_mine.py")
    assert "FAILED test_mine.py::test_mine - assert 1 == 2" in run.result.outlines
    assert run.result.outlines[-3] == ("gpuaccept first not measured: gpus.count host: did not run (deselected, or "
                                       "the run stopped early)")


def test_without_nvml_the_root_cause_is_among_the_last_lines(accept):
    run = accept(WRONG_MODEL)
    error = run.json["host"].get("error")
    if not error:
        pytest.skip("NVML started here: this host has a driver")
    lines = run.result.outlines
    assert lines[-4] == "gpuaccept: REJECTED: 0 passed, 0 failed, 17 not measured"
    assert lines[-3] == f"gpuaccept root cause: {error}: 17 checks not measured"
    assert lines[-2] == f"gpuaccept report: {run.path / 'gpuaccept-report.html'}"


def _check(clause: str, subject: str, outcome: Outcome, message: str = "") -> Check:
    return Check(clause, subject, outcome, None, "GB/s", ">= 1 GB/s", message)


def test_folding_names_each_clause_once_with_its_first_subject_and_counts_in_good_grammar():
    checks = [_check("gpus.count", "host", Outcome.NOT_MEASURED, "not measured: nvidia-smi not found"),
              _check("p2p", "GPU0->GPU1", Outcome.PASSED), _check("p2p", "GPU0->GPU2", Outcome.FAILED, "12.0 < 350"),
              _check("p2p", "GPU1->GPU0", Outcome.NOT_MEASURED, "not measured: no output"),
              _check("nvlink", "GPU0-GPU1", Outcome.PASSED), _check("allreduce", "host", Outcome.FAILED, "x" * 500)]
    assert folded(checks) == [
        "NOT MEASURED gpus.count: 1 of 1 subject (first: host: nvidia-smi not found)",
        "FAILED p2p: 2 of 3 subjects (first: GPU0->GPU2: 12.0 < 350)",
        f"FAILED allreduce: 1 of 1 subject (first: host: {'x' * (MESSAGE_CHARS - 3)}...)"]
