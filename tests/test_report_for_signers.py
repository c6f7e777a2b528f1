"""The report a signer reads: a rejected 8-GPU run of the full H100 contract, on a fake host (every tool
replaying real outputs), small enough to mail and print, failures first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA, nccl_log, pci_tree
from test_nvlink_health import h100_errors, h100_status
from test_utilisation import FIELDS, series

H100_8GPU = DATA / "nvml" / "h100_sxm5_8gpu.json"
NVB = DATA / "nvbandwidth" / "h100_8gpu_v0.10.0_five_runs_cov_latency_spreadsheet_quoted.txt"
FULL = (Path(__file__).resolve().parent.parent / "contracts" / "h100_sxm5_8gpu.yaml").read_text()


@pytest.fixture
def rejected_8gpu(accept, fake_tools, tmp_path):
    """The full H100 preset on an 8-GPU fake host: NVLink, p2p, host and all_reduce measured from real
    outputs, the training load from a recording; no PyTorch, no RDMA: those checks are not measured."""
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt", when="topo")
    fake_tools.add("nvidia-smi", h100_status(8), when="nvlink -s")
    fake_tools.add("nvidia-smi", h100_errors(8), when="nvlink -e")
    fake_tools.add("nvbandwidth", NVB)
    fake_tools.add_nccl(nccl_log(DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt"), iters=1)
    fake_tools.add("train-job", "training\n", hang=120)
    reading = json.loads(H100_8GPU.read_text())
    reading["utilisation"] = {"interval_s": 0.2, "fields": FIELDS, "gpus": [
        {"index": i, "samples": series(seconds=3.0), "xid": {"events": []},
         "health": {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": None,
                    "power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0}} for i in range(8)]}
    recording = tmp_path / "nvml.json"
    recording.write_text(json.dumps(reading))
    contract = (FULL.replace('duration: "60 s"', 'duration: "2 s"').replace('warmup: "10 s"', 'warmup: "1 s"')
                .replace("workload: builtin", "workload: [train-job]").replace('duration: "30 s"', 'duration: "1 s"')
                .replace("repeats: 2", "repeats: 1\n  args: ['-n', '1']"))
    run = accept(contract, f"--gpuaccept-nvml={recording}", pci_tree(tmp_path / "sys"))
    assert run.json["verdict"] == "rejected"
    return run


def test_a_rejected_8gpu_report_for_a_signer(rejected_8gpu):
    """One run of 253 checks (10 s), read four ways."""
    _small(rejected_8gpu)
    _first_screen(rejected_8gpu)
    _raw_once_and_human_sizes(rejected_8gpu)
    _print(rejected_8gpu)


def _small(rejected_8gpu):
    """253 checks: 2.9 MB when every check inlined its raw outputs; now each output is shown once. The
    issue's target, 300 KB, is not met yet: pytest-html's own per-test rows and JSON escaping are most
    of what is left."""
    size = (rejected_8gpu.path / "gpuaccept-report.html").stat().st_size
    assert len(rejected_8gpu.checks()) == 253
    assert size < 640 * 1024, f"{size / 1024:.0f} KB"


def _first_screen(rejected_8gpu):
    page = (rejected_8gpu.path / "gpuaccept-report.html").read_text()
    order = [page.index(marker) for marker in ('id="gpuaccept-verdict"', "<h3>Did not pass (101)</h3>",
                                               "<h3>Per clause</h3>", "<h3>Signatures</h3>",
                                               "<h3>Tools run (provenance)</h3>", "Raw tool outputs",
                                               "The auditor's environment")]
    assert order == sorted(order)
    failures = page[page.index("<h3>Did not pass"):page.index("<h3>Per clause</h3>")]
    assert failures.count('<li class="gpuaccept-fail">') == 101
    assert ("<b>rdma mlx5_*</b>: failed, measured —, required &gt;= 0.9 x line rate — no RDMA device matches "
            "&#x27;mlx5_*&#x27; (host has: none)") in failures
    assert "#environment-header, #environment { display: none; }" in page  # the auditor's table moved to the end


def _raw_once_and_human_sizes(rejected_8gpu):
    html = rejected_8gpu.html  # the page and every test's details
    assert html.count('id="raw-nvidia-smi_topo_-m.txt"') == 1
    assert html.count('href="#raw-nvidia-smi_topo_-m.txt"') == 28  # every NVLink pair links to it
    assert html.count("Legend:") <= 1 and html.count("GPU0\t X \tNV18") <= 1
    check = next(c for c in rejected_8gpu.checks("allreduce"))
    assert " at 16 GiB " in check["message"]
    assert "16 GiB message size (log scale)" in html or "8 GiB message size (log scale)" in html
    assert "1.718e+10" not in html and "8589934592 bytes" not in html


def _print(rejected_8gpu):
    page = (rejected_8gpu.path / "gpuaccept-report.html").read_text()
    assert '@page { size: A4; margin: 16mm 12mm; @top-center { content: "REJECTED · Example GPU Cloud · SLA-2026-0042"' in page
    assert ".gpuaccept-raw, .controls" in page and ".extras-row" in page
    assert "<th>Buyer</th><td>name</td><td>role</td><td>date</td><td>signature</td>" in page
