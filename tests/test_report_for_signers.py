"""The report a signer reads: a rejected 8-GPU run of the full H100 contract, on a fake host (every tool
replaying real outputs), small enough to mail and print, failures first."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import UTILISATION_FIELDS, h100_errors, h100_status, series
from conftest import DATA, nccl_log, pci_tree

from pytest_gpuaccept.report import compact_report
from pytest_gpuaccept.report.pairs import grouped
from pytest_gpuaccept.verdict import Check

# The host the nvbandwidth output came from (driver 595.71.05, its GPUs' buses): tests/data/SOURCES.md
SHEET = "h100_sxm5_8gpu_acceptance_sheet.json"
H100_8GPU = DATA / "nvml" / SHEET
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
    fake_tools.add_nccl(nccl_log(DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt", SHEET), iters=1)
    fake_tools.add("train-job", "training\n", hang=120)
    reading = json.loads(H100_8GPU.read_text())
    reading["utilisation"] = {"interval_s": 0.2, "fields": UTILISATION_FIELDS, "gpus": [
        {"index": i, "samples": series(seconds=3.0), "xid": {"events": []},
         "health": {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": None,
                    "power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0}} for i in range(8)]}
    recording = tmp_path / "nvml.json"
    recording.write_text(json.dumps(reading))
    contract = (FULL.replace('duration: "60 s"', 'duration: "2 s"').replace('warmup: "10 s"', 'warmup: "1 s"')
                .replace("workload: builtin", "workload: [train-job]").replace('duration: "30 s"', 'duration: "1 s"')
                .replace("repeats: 2", "repeats: 1\n  args: ['-n', '1']")
                .replace('max_bytes: "8 GiB"', 'max_bytes: "16 GiB"'))  # the P5 log's sweep ends at 16 GiB
    run = accept(contract, f"--gpuaccept-nvml={recording}", pci_tree(tmp_path / "sys", recording=SHEET))
    assert run.json["verdict"] == "rejected"
    return run


def test_a_rejected_8gpu_report_for_a_signer(rejected_8gpu, tmp_path):
    """One run of 253 checks (10 s), read five ways; in a real browser where Chromium is installed
    (test.sh installs it from Debian; CI runs it)."""
    _small(rejected_8gpu)
    _first_screen(rejected_8gpu)
    _raw_once_and_human_sizes(rejected_8gpu)
    _print(rejected_8gpu)
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium here to print and screenshot the report (test.sh installs it)")
    _in_chromium(browser, rejected_8gpu.path / "gpuaccept-report.html", tmp_path)


HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000"]
MEASURE = """<script>window.addEventListener("load", () => setTimeout(() => {
  const top = (id) => Math.round(document.getElementById(id).getBoundingClientRect().top);
  document.body.setAttribute("data-positions", JSON.stringify({verdict: top("gpuaccept-verdict"),
    failures: top("gpuaccept-failures"), rows: document.querySelectorAll("tbody.results-table-row").length}));
}, 500));</script>"""


def _in_chromium(browser: str, report: Path, tmp_path: Path) -> None:
    """A4 PDF under 15 pages; in a 1280 x 1000 window the verdict and the failure list start on the first screen."""
    pdf = tmp_path / "report.pdf"
    subprocess.run([browser, *HEADLESS, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", report.as_uri()],
                   capture_output=True, timeout=180, check=False)
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf.read_bytes()))
    assert 0 < pages < 15, pages
    measured = tmp_path / "measured.html"
    measured.write_text(report.read_text() + MEASURE)
    dom = subprocess.run([browser, *HEADLESS, "--window-size=1280,1000", "--dump-dom", measured.as_uri()],
                         capture_output=True, text=True, timeout=180, check=False).stdout
    positions = json.loads(html.unescape(re.search(r'data-positions="([^"]*)"', dom).group(1)))
    # pytest-html drew a row for every check but the passing pairs (one row of Pairs each clause: report/pairs.py)
    passing_pairs = sum(grouped(Check.from_dict(c)) for c in json.loads(
        (report.parent / "gpuaccept-results.json").read_text())["checks"])
    assert passing_pairs > 0 and positions["rows"] == 253 - passing_pairs
    assert 0 <= positions["verdict"] < positions["failures"] < 1000, positions
    shot = tmp_path / "first-screen.png"
    subprocess.run([browser, *HEADLESS, "--window-size=1280,1000", f"--screenshot={shot}", report.as_uri()],
                   capture_output=True, timeout=180, check=False)
    assert shot.stat().st_size > 10_000


def _small(rejected_8gpu):
    """253 checks: 2.9 MB when every check inlined its raw outputs, 560 KB with each output shown once; under
    300 KB since a row's detail is a few lines of text, charts are drawn once per clause, identical outputs
    are shown once, and pytest-html's JSON sits in a single-quoted attribute."""
    size = (rejected_8gpu.path / "gpuaccept-report.html").stat().st_size
    assert len(rejected_8gpu.checks()) == 253
    assert size < 300 * 1024, f"{size / 1024:.0f} KB"


def _first_screen(rejected_8gpu):
    page = (rejected_8gpu.path / "gpuaccept-report.html").read_text()
    order = [page.index(marker) for marker in ('id="gpuaccept-verdict"', "<h3>Did not pass (101)</h3>",
                                               "<h3>Per clause</h3>", "<h3>Signatures</h3>",
                                               "<h3>Tools run (provenance)</h3>", "Raw tool outputs",
                                               "The auditor's environment")]
    assert order == sorted(order)
    failures = page[page.index("<h3>Did not pass"):page.index("<h3>Per clause</h3>")]
    # 101 checks, 5 lines: checks of a clause that failed for one reason with nothing measured share a line
    assert failures.count("<li class=gpuaccept-fail>") == 5
    assert ("<b>rdma mlx5_*</b>: failed, measured —, required &gt;= 0.9 x line rate — no RDMA device matches "
            "&#x27;mlx5_*&#x27; (host has: none)") in failures
    assert "GPU0-&gt;GPU1, GPU0-&gt;GPU2, " in failures and "GPU7-&gt;GPU6 (56)</b>: not measured" in failures
    assert "#environment-header, #environment { display: none; }" in page  # the auditor's table moved to the end


def _raw_once_and_human_sizes(rejected_8gpu):
    html = rejected_8gpu.html  # the page and every test's details
    assert html.count('id="raw-nvidia-smi_topo_-m.txt"') == 1
    page = (rejected_8gpu.path / "gpuaccept-report.html").read_text()
    # Every NVLink pair passed: its clause's row in Pairs counts them, and no row of their own links to the output
    # (each of the 28 did before)
    assert page.count("href=#raw-nvidia-smi_topo_-m.txt>") == 0 and "<b>nvlink</b><td>28 pairs: 28 passed" in page
    assert 'id="raw-nvidia-smi_nvlink_-e.after.txt"></h4><p>byte for byte the same as' in html.replace(
        "nvidia-smi_nvlink_-e.after.txt</h4>", "</h4>")  # the unchanged counters are shown once
    # the eight GPUs' load in four charts (a line each), and the sweep; beside them the schedule's time line, one small
    # bar for each tool run
    assert html.count("<svg") - html.count('<svg width="360" height="12" role="img"') == 5
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


def test_the_report_blob_is_compacted_only_where_it_decodes_to_the_same_json(tmp_path):
    """The blob pytest-html wrote (markupsafe's escapes in a double-quoted attribute) is rewritten single-quoted
    only when it decodes to the same JSON; a hostile row's quotes, tags and entity look-alikes survive."""
    rows = {"tests": {"t": [{"log": "</div><script>x('&#34;')</script> \"&amp;\" ' &lt;"}]}}
    text = json.dumps(rows)
    escaped = (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")
               .replace("'", "&#39;"))
    page = tmp_path / "report.html"
    page.write_text(f'<html><div id="data-container" data-jsonblob="{escaped}"></div></html>')
    compact_report(page)
    written = page.read_text()
    blob = re.search(r"data-jsonblob='([^']*)'", written)
    assert blob is not None and json.loads(html.unescape(blob.group(1))) == rows
    assert "<script>" not in written and len(blob.group(1)) < len(escaped)
    # Escaped some other way (&quot;): undoing markupsafe's escapes would not give it back; left as written.
    other = f'<html><div data-jsonblob="{escaped.replace("&#34;", "&quot;")}"></div></html>'
    page.write_text(other)
    compact_report(page)
    assert page.read_text() == other
