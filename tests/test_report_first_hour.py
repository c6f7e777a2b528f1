"""The report as a buyer first reads it (issue 43): units on every figure, also where nothing was measured; nothing
wider than the window; the mode on every printed page; the warnings outside the verdict's box; no empty heading; the
host said in words; the page count docs/running.md states. One run of the full H100 preset on an 8-GPU fake host
(tests/builders.py signer_run), read in several ways; the rest rendered in this process from Results."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import signer_run

from pytest_gpuaccept.report.page import banner, host_text, measured_text, required_text, verdict_box
from pytest_gpuaccept.report.results import Results, mode_label
from pytest_gpuaccept.verdict import Check, Outcome

# Its tests share a module fixture (one whole run): one worker builds it once (test.sh: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_report_first_hour")

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000"]
WIDTH = """<script>window.addEventListener("load", () => setTimeout(() => {
  document.body.setAttribute("data-width", String(document.documentElement.scrollWidth));
}, 500));</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None or shutil.which("pdftotext") is None:
        pytest.skip("no Chromium or pdftotext here to print the report and read it back (test.sh installs both)")
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One rejected, SIMULATED 8-GPU run of the full H100 preset (253 checks, about 15 s): its folder."""
    folder = tmp_path_factory.mktemp("first-hour") / "run"
    done = signer_run(folder)
    assert json.loads((folder / "gpuaccept-results.json").read_text())["verdict"] == "rejected", done.stdout[-3000:]
    return folder


@pytest.fixture(scope="module")
def pdf(run: Path) -> Path:
    """The report printed to A4 by Chromium, as a signer prints it."""
    printed = run / "report.pdf"
    subprocess.run([chromium(), *HEADLESS, "--no-pdf-header-footer", f"--print-to-pdf={printed}",
                    (run / "gpuaccept-report.html").as_uri()], capture_output=True, timeout=180, check=False)
    assert printed.stat().st_size > 0
    return printed


def pages(pdf: Path) -> list[str]:
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return text.rstrip("\f\n").split("\f")


def test_every_figure_has_its_unit_also_where_nothing_was_measured(run):
    page = (run / "gpuaccept-report.html").read_text()
    failures = page[page.index('id="gpuaccept-failures"'):page.index('id="gpuaccept-warnings"')]
    # memory_bandwidth and compute measured nothing: what they required still says in what
    assert "memory_bandwidth GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7 (8)</b>: not measured, required &gt;= " \
           "2512.5 GB/s — " in failures
    assert "(8)</b>: not measured, required &gt;= 692.65 TFLOPS — " in failures
    assert "(56)</b>: not measured, required &gt;= 350 GB/s — " in failures
    assert not re.search(r"required &gt;= [\d.]+ —", failures)  # no bare number anywhere


def rows(run: Path) -> dict:
    """pytest-html's rows, as its JSON blob keeps them."""
    page = (run / "gpuaccept-report.html").read_text()
    found = re.search(r"data-jsonblob=(?:\"([^\"]*)\"|'([^']*)')", page)
    assert found is not None
    return json.loads(html.unescape(found.group(1) or found.group(2)))


def test_the_table_s_measured_and_required_cells_always_carry_a_unit(run):
    """pytest-html's rows: compute's eight rows read `not measured | >= 692.65 TFLOPS`, never `— —`."""
    data = rows(run)
    cells = [row for results in data["tests"].values() for result in results
             for row in [result.get("resultsTableRow", [])] if len(row) >= 6]
    compute = [c for c in cells if '<td class="col-clause">compute</td>' in c[2]]
    assert len(compute) == 8
    assert all(c[4] == "<td>not measured</td>" and c[5] == "<td>&gt;= 692.65 TFLOPS</td>" for c in compute), compute[0]
    measured = [c for c in cells if "<td>—</td>" in c[4]]
    assert measured == []
    bare = [c[5] for c in cells if re.fullmatch(r"<td>&[lg]t;=? [\d.]+</td>", c[5])]
    assert bare == []


@pytest.mark.parametrize(("check", "measured", "required"), [
    (Check("memory_bandwidth", "GPU0", Outcome.NOT_MEASURED, None, "GB/s", ">= 80", "not measured: no tool"),
     "not measured", ">= 80 GB/s"),
    (Check("allreduce", "host", Outcome.FAILED, 412.5, "GB/s", ">= 450", "busbw 412.5 GB/s < 450 GB/s"),
     "412.5 GB/s", ">= 450 GB/s"),
    (Check("compute", "GPU3", Outcome.NOT_MEASURED, None, "TFLOPS", "", "not measured: no published bf16 figure"),
     "not measured", "not known (TFLOPS)"),
    (Check("compute", "GPU3", Outcome.FAILED, None, "TFLOPS", ">= 692.65", "GPU3 did not run the GEMM"),
     "none", ">= 692.65 TFLOPS"),
    (Check("rdma", "mlx5_*", Outcome.FAILED, None, "Gb/s", ">= 0.9 x line rate", "no RDMA device"),
     "none", ">= 0.9 x line rate"),
    (Check("gpus.model", "GPU0", Outcome.PASSED, "H100 SXM5", None, "H100 SXM5", "ok"), "H100 SXM5", "H100 SXM5"),
])
def test_measured_and_required_as_the_report_writes_them(check, measured, required):
    assert (measured_text(check), required_text(check)) == (measured, required)


def test_nothing_is_wider_than_a_1280_pixel_window(run, tmp_path):
    """One-line raw outputs (an NVML reading of 20 KB on one line) made the page 80,158 px wide; they wrap now."""
    page = (run / "gpuaccept-report.html").read_text()
    assert "pre, .log { white-space: pre-wrap; overflow-wrap: anywhere; }" in page
    measured = tmp_path / "measured.html"
    measured.write_text(page + WIDTH)
    dom = subprocess.run([chromium(), *HEADLESS, "--window-size=1280,1000", "--dump-dom", measured.as_uri()],
                         capture_output=True, text=True, timeout=180, check=False).stdout
    width = re.search(r'data-width="(\d+)"', dom)
    assert width is not None and int(width.group(1)) <= 1280, width


def test_every_printed_page_says_the_verdict_and_the_mode(pdf):
    printed = pages(pdf)
    assert len(printed) > 1
    head, mode = "REJECTED · Example GPU Cloud · SLA-2026-0042", "SIMULATED"
    assert [n for n, text in enumerate(printed, 1) if head not in text or mode not in text.splitlines()[0]] == []


def test_the_printed_page_count_is_the_one_the_docs_state(pdf):
    """docs/running.md says how many A4 pages this run prints: measured here, with Chromium."""
    stated = re.search(r"rejected 8-GPU run of the full H100\s+contract \(253 checks\) is about \d+ KB and (\d+) A4 "
                       r"pages", (DOCS / "running.md").read_text())
    assert stated is not None
    assert len(pages(pdf)) == int(stated.group(1))


def test_the_warnings_are_outside_the_verdict_s_box(run):
    """The root warning about tools.user sat inside the green ACCEPTED box; it is below it, in a box of its own."""
    page = (run / "gpuaccept-report.html").read_text()
    start = page.index('<div id="gpuaccept-verdict"')
    depth, at = 0, start
    for tag in re.finditer(r"<(/?)div\b", page[start:]):
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            at = start + tag.end()
            break
    box, after = page[start:at], page[at:]
    assert "tools.user" not in box and "Contract warnings" not in box
    assert after.startswith('><div id="gpuaccept-warnings"><p><b>Contract warnings</b> (not failures: ')
    assert "pytest runs as root and the contract names no tools.user" in after.split("<h3>Per clause</h3>")[0]


def _results(host: dict, **fields) -> Results:
    checks = [Check("gpus.count", "host", Outcome.PASSED, 8, "GPUs", "8", "8 GPUs")]
    contract = {"vendor": "Example GPU Cloud", "reference": "SLA-1", "path": "/c.yaml", "sha256": "ab" * 32}
    return Results("accepted", True, "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00", contract, host, checks,
                   mode="live", **fields)


def test_a_host_nvml_did_not_read_is_said_in_words_and_has_no_empty_gpus_heading():
    """`host: vm: none; driver —` read badly, under an empty GPUs heading."""
    host = {"hostname": "vm", "gpus": [], "driver": None}
    assert host_text(host) == "vm; no GPU read; driver not read; CUDA not read"
    page = banner(_results(host), None, "0" * 64)
    assert "<th>host</th><td>vm; no GPU read; driver not read; CUDA not read</td>" in page
    assert "<h3>GPUs</h3>" not in page
    named = {"hostname": "h1", "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "serial": "1",
                                         "pci_bus_id": "00000000:18:00.0"}], "driver": "570.86.15", "cuda": "12.8"}
    assert host_text(named) == "h1; 1x NVIDIA H100 80GB HBM3; driver 570.86.15; CUDA 12.8"
    assert "<h3>GPUs</h3><ul><li>GPU0: NVIDIA H100 80GB HBM3, uuid GPU-1" in banner(_results(named), None, "0" * 64)


def test_an_accepted_verdict_s_green_box_holds_no_warning():
    results = _results({"hostname": "h1", "gpus": []}, contract_warnings=["the tools ran as root"])
    box = verdict_box(results, "0" * 64)
    inside = box[:box.index('<div id="gpuaccept-warnings">')]
    assert 'border:3px solid #1a7f37' in inside and "the tools ran as root" not in inside
    assert box.endswith("<ul><li>the tools ran as root</li></ul></div>")


@pytest.mark.parametrize("fields", [{"mode": "live"}, {"mode": "simulated"},
                                    {"mode": "replay", "recorded": {"mode": "simulated", "host": "h1", "started": "2026"}},
                                    {"mode": "replay", "recorded": {}}], ids=["live", "simulated", "replay", "replay-unknown"])
def test_the_page_and_the_verdict_line_say_the_mode_in_the_buyers_language(fields):
    # One function (results.mode_label) says the mode for the page's banner and the verdict line alike
    results = _results({"hostname": "h1", "gpus": []}, **{k: v for k, v in fields.items() if k != "mode"})
    results.mode = fields["mode"]
    assert mode_label(results).isascii()
    assert not mode_label(results, "zh-CN").isascii()
