"""compare: two verified bundles of the same fake host, clause by clause: a GPU whose memory bandwidth fell 8 % and a
GPU swapped for another card are both named (exit 1); two identical runs compare clean (exit 0); an edited bundle
is refused with what verify found."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, nvml_recording, pci_tree, staged_recording

from pytest_gpuaccept.compare import compare, compare_check

RECORDED = (DATA / "torch" / "membw_cpu_2dev.txt").read_text()  # a real CPU run, relabelled as two GPUs below
AS_GPUS = RECORDED.replace('"device": "cpu"', '"device": "cuda:0"', 1).replace('"device": "cpu"', '"device": "cuda:1"', 1)
CONTRACT = """\
gpuaccept: 1
vendor: V
tools: {{python: "{python}"}}
gpus: {{count: 2}}
memory_bandwidth: {{min_bandwidth: "10 GB/s", size: "256 MiB", repeats: 5}}
"""


def slower(text: str, gpu: int, factor: float) -> str:
    """The workload's output with one GPU's copies taking 1/factor as long each, its printed rate recomputed as the
    parser recomputes it: that GPU's bandwidth times `factor` (constructed from the real run, said here)."""
    lines = text.splitlines()
    for n, line in enumerate(lines[1:], 1):
        data = json.loads(line)
        if data["gpu"] == gpu:
            data["seconds"] = [s / factor for s in data["seconds"]]
            data["gbyte_s"] = round(2 * data["bytes"] / statistics.median(data["seconds"]) / 1e9, 3)
            lines[n] = json.dumps(data)
    return "\n".join(lines) + "\n"


def bundle(accept, fake_tools, tmp_path: Path, name: str, output: str, *nvml: str) -> Path:
    """One acceptance run of the fake 2-GPU host, its bundle (the report's folder) copied to tmp_path/name."""
    fake_tools.add("python", output)
    run = accept(CONTRACT.format(python=fake_tools.bin_dir / "python"), *(nvml or (nvml_recording("h100_sxm5_8gpu.json"),)),
                 pci_tree(tmp_path / "sys", "0x2330"))
    assert run.checks("memory_bandwidth")
    target = tmp_path / name
    shutil.copytree(run.path, target, ignore=shutil.ignore_patterns("basetemp-*", "sys"))
    fake_tools.tools.clear()
    return target


def python_m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "compare", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def handover(accept, fake_tools, tmp_path) -> Path:
    return bundle(accept, fake_tools, tmp_path, "handover", AS_GPUS)


def test_a_gpu_whose_bandwidth_fell_8_percent_and_a_swapped_gpu_are_both_named(accept, fake_tools, tmp_path, handover):
    def swap_gpu1(reading):
        reading["gpus"][1]["uuid"] = "GPU-ffffffff-0000-0000-0000-000000000001"
        reading["gpus"][1]["serial"] = "1652322999999"

    month = bundle(accept, fake_tools, tmp_path, "month3", slower(AS_GPUS, 0, 0.92),
                   staged_recording(tmp_path, "h100_sxm5_8gpu.json", swap_gpu1))
    out_json, out_html = tmp_path / "compare.json", tmp_path / "compare.html"
    done = python_m(str(handover), str(month), "--json", str(out_json), "--html", str(out_html))
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("GPU1 swapped: OLD had UUID GPU-h100-01aaaaaaa-0000-0000-0000-000000000001, serial 1652322000001; NEW has "
            "UUID GPU-ffffffff-0000-0000-0000-000000000001, serial 1652322999999 there: not compared") in done.stdout
    rows = {(r["clause"], r["subject"]): r for r in json.loads(out_json.read_text())["rows"] if r["status"] != "only in NEW"}
    fell = rows[("memory_bandwidth", "GPU0")]
    assert (fell["status"], fell["old"], fell["new"]) == ("regressed", 15.866, 14.596)
    assert fell["change_pct"] == pytest.approx(-0.08, abs=0.0005)
    assert fell["note"] == "8.0% worse (bound 5%)"
    gpu1 = [(r["status"], r["note"]) for r in json.loads(out_json.read_text())["rows"] if r["clause"] == "memory_bandwidth" and r["subject"] == "GPU1"]
    assert gpu1 == [("swapped", "a GPU of this subject is another card in NEW: not compared"),
                    ("only in NEW", "GPU1 is another card in NEW: nothing to compare it with")]
    assert done.stdout.rstrip().splitlines()[-1].startswith("compare: ")
    assert "regressed beyond 5%" in done.stdout.rstrip().splitlines()[-1]
    page = out_html.read_text()
    assert 'data-regressed="' in page and "<svg" in page and "memory_bandwidth" in page and "GPU1 swapped" in page


def test_two_identical_runs_compare_clean(accept, fake_tools, tmp_path, handover):
    again = bundle(accept, fake_tools, tmp_path, "again", AS_GPUS)
    done = python_m(str(handover), str(again))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().splitlines()[-1].startswith("compare: nothing regressed beyond 5% over ")


def test_an_edited_bundle_is_refused_with_what_verify_found(tmp_path, handover):
    edited = tmp_path / "edited"
    shutil.copytree(handover, edited)
    results = edited / "gpuaccept-evidence" / "results.json"
    results.write_text(results.read_text().replace("15.866", "25.866"))
    done = python_m(str(handover), str(edited))
    assert done.returncode == 2
    assert f"FAIL NEW {edited}: changed: results.json" in done.stdout
    assert f"NEW {edited}: bundle does NOT verify" in done.stdout and "refused, not compared" in done.stdout


def test_a_bound_of_10_percent_lets_8_percent_through(accept, fake_tools, tmp_path, handover):
    month = bundle(accept, fake_tools, tmp_path, "month1", slower(AS_GPUS, 0, 0.92))
    assert python_m(str(handover), str(month), "--max-regression", "0.10").returncode == 0
    assert python_m(str(handover), str(month)).returncode == 1


# ------------------------------------------------------------------ the pure comparison, on results documents

def _check(measured, outcome="passed", required=">= 10", subject="GPU0", clause="memory_bandwidth", **more):
    return {"clause": clause, "subject": subject, "outcome": outcome, "measured": measured, "unit": "GB/s",
            "required": required, **more}


def test_the_worse_way_is_the_checks_own_required():
    assert compare_check(_check(100.0), _check(90.0), 0.05).status == "regressed"
    assert compare_check(_check(100.0), _check(110.0), 0.05).status == "better"
    assert compare_check(_check(2, required="<= 5"), _check(3, required="<= 5"), 0.05).status == "regressed"
    assert compare_check(_check(100.0), _check(97.0), 0.05).status == "worse"  # within the bound: not a regression


def test_a_check_that_passed_and_now_does_not_regressed_whatever_its_figure():
    row = compare_check(_check("Pass", clause="dcgm", subject="GPU0/memory", required="Pass"),
                        _check("Fail", "failed", clause="dcgm", subject="GPU0/memory", required="Pass"), 0.05)
    assert (row.status, row.note) == ("regressed", "passed -> failed")


def test_a_renumbered_gpu_is_compared_where_it_is_now():
    old = {"host": {"gpus": [{"index": 0, "uuid": "GPU-a", "serial": "1"}, {"index": 1, "uuid": "GPU-b", "serial": "2"}]},
           "checks": [_check(100.0, subject="GPU0"), _check(50.0, subject="GPU1"), _check(9.0, subject="GPU0-GPU1", clause="p2p")]}
    new = {"host": {"gpus": [{"index": 0, "uuid": "GPU-b", "serial": "2"}, {"index": 1, "uuid": "GPU-a", "serial": "1"}]},
           "checks": [_check(50.0, subject="GPU0"), _check(100.0, subject="GPU1"), _check(9.0, subject="GPU0-GPU1", clause="p2p")]}
    result = compare(old, new)
    assert {(r.old_subject, r.subject, r.status) for r in result.rows} == {
        ("GPU0", "GPU1", "same"), ("GPU1", "GPU0", "same"), ("GPU0-GPU1", "GPU0-GPU1", "same")}
    assert result.gpus[0] == "GPU0 (UUID GPU-a, serial 1) is GPU1 in NEW: compared there"
