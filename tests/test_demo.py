"""The demo a new buyer runs first (`python -m pytest_gpuaccept demo`): from a fresh install of the project's
folder, a SIMULATED HGX H100 8-GPU host judged into a bundle that verify passes, SIMULATED on every line it prints
and on every page of its report printed to PDF; with --rejected, a PCIe GPU and a slow NVLink caught by their
second sources."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pytest_gpuaccept.__main__ import main as cli

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
PREFIX = "SIMULATED | "


def _pdf_pages(report: Path, tmp_path: Path) -> list[str]:
    """The report printed to A4 PDF by Chromium, as a signer prints it, each page's text as poppler's pdftotext
    reads it (`-f N -l N`)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None or shutil.which("pdftotext") is None:
        pytest.skip("Chromium and pdftotext (poppler-utils) are needed to print the report and read it (test.sh "
                    "installs both)")
    pdf = tmp_path / "report.pdf"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}", report.as_uri()],
                   capture_output=True, timeout=180, check=False)
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, timeout=60).stdout \
        if shutil.which("pdfinfo") else ""
    count = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1)) if info else \
        len(re.findall(rb"/Type\s*/Page[^s]", pdf.read_bytes()))
    return [subprocess.run(["pdftotext", "-layout", "-f", str(n), "-l", str(n), str(pdf), "-"], capture_output=True,
                           text=True, timeout=60, check=True).stdout for n in range(1, count + 1)]


@pytest.mark.xdist_group("fresh-install")  # the install shared with test_readme's first command: made once
def test_a_fresh_install_runs_the_demo_into_an_accepted_bundle_that_verifies(fresh_install, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = fresh_install.env
    done = subprocess.run(["python", "-m", "pytest_gpuaccept", "demo"], cwd=empty, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert done.stderr == "" and all(line.startswith(PREFIX) for line in lines), [
        line for line in lines if not line.startswith(PREFIX)]
    bundle = empty / "gpuaccept-demo"
    said = [line.removeprefix(PREFIX) for line in lines]
    # the run's ending: counts, the report's path, the verdict; then verify's lines, its verdict line last
    verdict = said.index("gpuaccept verdict: ACCEPTED [SIMULATED: NVML readings from a recording, not from this "
                         "host's driver]")
    assert said[verdict - 2:verdict] == ["gpuaccept: ACCEPTED: 71 passed, 0 failed, 0 not measured",
                                         f"gpuaccept report: {bundle / 'gpuaccept-report.html'}"]
    assert said[verdict + 1] == f"$ python -I -m pytest_gpuaccept verify {bundle}"
    assert said[-1].startswith("OK: every file matches the manifest; manifest SHA-256 ")
    assert "verdict recomputed from the raw evidence on the verifying machine: ACCEPTED over 71 checks" in said[-2]
    results = json.loads((bundle / "gpuaccept-results.json").read_text())
    assert (results["verdict"], results["mode"], results["complete"]) == ("accepted", "simulated", True)
    assert "foreign_code" not in results  # a fresh venv and the demo's isolated run: nothing foreign
    # what the README's first screen shows is what the demo prints (the paths and digest aside)
    shown = [line for line in README.splitlines() if line.startswith("    " + PREFIX)]
    assert len(shown) >= 3
    for line in shown:
        text = line.strip().removesuffix("...").replace("/home/you/gpuaccept-demo", str(bundle))
        assert any(printed.startswith(text) for printed in lines), text

    verified = subprocess.run(["python", "-I", "-m", "pytest_gpuaccept", "verify", "gpuaccept-demo"], cwd=empty,
                              env=env, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.splitlines()[1].startswith("mode: SIMULATED (NVML readings from a recording, not a live host)")

    pages = _pdf_pages(bundle / "gpuaccept-report.html", tmp_path)
    contract = yaml.safe_load((bundle / "vendor.yaml").read_text())
    assert not [key for key in ("vendor", "reference", "description") if "SIMULATED" in contract[key]]  # the mode says it
    assert [n for n, page in enumerate(pages, 1) if "SIMULATED" not in page] == [], f"{len(pages)} pages"


def test_the_rejected_demo_catches_the_pcie_gpu_and_the_slow_link_by_their_second_sources(tmp_path, capsys):
    assert cli(["demo", str(tmp_path / "rejected"), "--rejected"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith(PREFIX) for line in lines)
    results = json.loads((tmp_path / "rejected" / "gpuaccept-results.json").read_text())
    failed = {(c["clause"], c["subject"]): c for c in results["checks"] if c["outcome"] != "passed"}
    assert sorted(failed) == sorted([("gpus.model", "GPU7"), ("gpus.form_factor", "GPU7"), ("nvlink.links", "GPU3"),
                                     ("nvlink.links", "GPU7"), *(("nvlink", f"GPU{i}-GPU7") for i in range(7))])
    assert failed[("gpus.form_factor", "GPU7")]["message"] == \
        "GPU7 is PCI device 0x2331, a H100 PCIe (pcie), not sxm as contracted"
    assert failed[("nvlink", "GPU0-GPU7")]["message"] == ("`topo -m` says NV18 between GPU0 and GPU7, NVML says GPU7 "
                                                          "has no active NVLink (NVMLError_NotSupported: Not Supported)")
    assert failed[("nvlink.links", "GPU3")]["message"] == \
        "18 links active at 13.281, 26.562 GB/s; links [5] below 26.5 GB/s (13.281 GB/s)"
    assert f"{PREFIX}gpuaccept verdict: REJECTED [SIMULATED: NVML readings from a recording, not from this host's " \
           "driver]" in lines
    assert lines[-1].startswith(f"{PREFIX}OK: every file matches the manifest")  # a rejected bundle verifies too


def test_the_demo_never_writes_into_a_folder_that_holds_something(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    assert cli(["demo", str(tmp_path)]) == 2
    assert capsys.readouterr().out == (f"{PREFIX}FAIL the demo's folder {tmp_path} exists and is not an empty folder: "
                                       "name a new one\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_demo_says_which_languages_it_speaks(tmp_path, capsys):
    assert cli(["demo", str(tmp_path / "d"), "--gpuaccept-lang", "fr"]) == 2
    assert capsys.readouterr().out == f"{PREFIX}--gpuaccept-lang fr: expected one of en, zh-CN\n"
    assert not (tmp_path / "d").exists()
