"""A run never loses its verdict: Ctrl-C, SIGTERM, a crash in a probe: report and results still written."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import DATA, ctrl_c_as_at_a_terminal, nvml_recording

from pytest_gpuaccept.probes import nvidia_smi

CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: 8
  model: H100
nvlink:
  every_pair: true
allreduce:
  min_busbw: "450 GB/s"
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 2), (signal.SIGTERM, 2)])
def test_a_signal_during_a_long_tool_run_still_writes_a_rejected_incomplete_verdict(fake_tools, tmp_path, sig, code):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add("all_reduce_perf", "# partial output before the hang\n", hang=120)
    contract = tmp_path / "vendor.yaml"
    contract.write_text(CONTRACT)
    work = tmp_path / "run"
    work.mkdir()
    with ctrl_c_as_at_a_terminal():
        proc = subprocess.Popen([sys.executable, "-m", "pytest", f"--contract={contract}", "-p", "no:cacheprovider",
                                 nvml_recording("h100_sxm5_8gpu.json")], cwd=work, env=os.environ.copy(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not fake_tools.calls("all_reduce_perf") and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, out.decode()[-2000:]
    results = json.loads((work / "gpuaccept-results.json").read_text())
    assert results["complete"] is False and results["verdict"] == "rejected"
    allreduce = [c for c in results["checks"] if c["clause"] == "allreduce"][0]
    assert allreduce["outcome"] == "not_measured"
    assert (work / "gpuaccept-report.html").is_file()
    assert "INCOMPLETE RUN" in (work / "gpuaccept-report.html").read_text()
    evidence = work / "gpuaccept-evidence"
    kept = next(evidence.glob("all_reduce_perf*.run1.txt")).read_text()
    assert kept == "# partial output before the hang\n"  # the partial output is kept
    record = json.loads(next(evidence.glob("all_reduce_perf*.run1.json")).read_text())
    assert record["error"] == "interrupted while the tool ran"
    # the tool's whole process group is gone
    pid_alive = subprocess.run(["pgrep", "-f", str(fake_tools.bin_dir / "all_reduce_perf")], capture_output=True)
    assert pid_alive.returncode == 1


def test_a_crash_inside_a_probe_is_not_measured_not_a_pass(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    # A recording whose GPUs are not a list: the NVML adapter raises while the fixture builds the host.
    run = accept(CONTRACT, nvml_recording("../topo/rtx5090_2gpu_phb_legend.txt"))
    gpus = run.checks("gpus.model")
    assert gpus and {c["outcome"] for c in gpus} == {"not_measured"}
    assert run.json["verdict"] == "rejected"


def test_an_exception_in_a_fixture_becomes_a_not_measured_check(fake_tools, accept, monkeypatch):
    # A conftest.py is not loaded with the shipped suites (tests/test_integrity.py), so the measurement
    # is made to crash inside this process, where the in-process run calls it.
    def explode(*_args, **_kwargs):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(nvidia_smi, "read_topo", explode)
    run = accept(CONTRACT, nvml_recording("h100_sxm5_8gpu.json"), subprocess=False)
    pairs = run.checks("nvlink")
    assert len(pairs) == 28 and {c["outcome"] for c in pairs} == {"not_measured"}
    assert pairs[0]["message"] == "not measured: crashed in setup: RuntimeError: probe exploded"
    assert run.json["verdict"] == "rejected"


def test_an_acceptance_test_that_judges_nothing_is_not_measured(pytester, accept, fake_tools):
    """A suite test that forgets to judge passes in pytest, but its clause is not measured."""
    suite = pytester.mkdir("mysuite")
    (suite / "test_lazy.py").write_text(
        "import pytest\n\n@pytest.mark.gpuaccept('gpus.count', subject='host')\ndef test_lazy():\n    pass\n")
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n", nvml_recording("h100_sxm5_8gpu.json"), str(suite))
    check = run.checks("gpus.count")[0]
    assert check["outcome"] == "not_measured"
    assert "without judging a measurement" in check["message"]
    assert run.json["verdict"] == "rejected" and run.result.ret == 1
