"""The verdict that counts is the buyer's re-judge: `verify` judges the bundle again from its raw evidence, in a
process of its own, and fails naming every check the bundle's results say otherwise; a re-judging run never writes
inside the bundle it reads; every source option is the command line's alone and named where the verdict is read."""

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
from conftest import DATA, nvml_recording, reseal

from pytest_gpuaccept.__main__ import main as cli
from pytest_gpuaccept.evidence import files_under

CONTRACT = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
gpus:
  count: 8
  model: "H100"
  memory: "80 GB"
nvlink:
  every_pair: true
  min_links: 18
"""
OVERSOLD = CONTRACT.replace('memory: "80 GB"', 'memory: "141 GB"')  # an H100 80GB host sold as H200s
TOPO = DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"


@pytest.fixture
def bundle(accept, fake_tools):
    fake_tools.add("nvidia-smi", TOPO)
    run = accept(CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "accepted"
    return run


def _snapshot(folder):
    return {relative: (folder / relative).read_bytes() for relative in files_under(folder)}


def _rewrite(folder, change):
    for path in (folder / "gpuaccept-results.json", folder / "gpuaccept-evidence" / "results.json"):
        results = json.loads(path.read_text())
        change(results)
        path.write_text(json.dumps(results))
    reseal(folder)


def test_an_honest_bundle_is_re_judged_to_the_same_verdict(bundle, capsys):
    assert cli(["verify", str(bundle.path)]) == 0
    out = capsys.readouterr().out
    assert "verdict recomputed from the raw evidence on the verifying machine: ACCEPTED over " in out
    assert "which agrees with the bundle's results (ACCEPTED)" in out


def test_the_re_judging_run_writes_its_report_where_asked_and_says_so_in_words_a_signer_reads(bundle, tmp_path):
    assert cli(["verify", str(bundle.path), "--rejudged", str(tmp_path / "recheck")]) == 0
    html = (tmp_path / "recheck" / "report.html").read_text()
    assert "verdict recomputed from the raw evidence on the verifying machine" in html
    assert json.loads((tmp_path / "recheck" / "results.json").read_text())["mode"] == "replay"


def test_foreign_code_on_the_verifying_machine_is_said_to_be_the_verifying_machine_s(bundle, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONSTARTUP", "/dev/null")  # the re-judging run inherits it: code it did not come with
    assert cli(["verify", str(bundle.path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL re-judged: the re-judging run found code it did not come with on THIS verifying machine" in out
    assert "PYTHONSTARTUP" in out


def test_a_re_judge_into_the_bundle_is_refused(bundle, capsys):
    before = _snapshot(bundle.path)
    assert cli(["verify", str(bundle.path), "--rejudged", str(bundle.path / "recheck")]) == 2
    assert "inside the bundle" in capsys.readouterr().out
    assert _snapshot(bundle.path) == before


def _count(results):
    return next(check for check in results["checks"] if check["clause"] == "gpus.count")


@pytest.mark.parametrize("change, named", [
    (lambda r: _count(r).update(measured=9), "check gpus.count host: measured 9 in the bundle, 8 re-judged"),
    (lambda r: _count(r).update(required="== 4"), "check gpus.count host: required '== 4' in the bundle, '== 8' re-judged"),
    (lambda r: r["checks"].remove(_count(r)), "check gpus.count host: made when re-judged (passed), missing from the "
                                              "bundle's results"),
])
def test_results_rewritten_after_the_run_fail_verify_naming_the_check(bundle, capsys, change, named):
    _rewrite(bundle.path, change)
    assert cli(["verify", str(bundle.path)]) == 1
    out = capsys.readouterr().out
    # Every digest matches (the report and the manifest were made again): only the re-judge can tell.
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert sorted(fails) == [f"FAIL re-judged: gpuaccept-results.json: {named}", f"FAIL re-judged: results.json: {named}"], out
    assert "bundle does NOT verify (2 problems)" in out


def test_a_failed_check_turned_passed_is_named(accept, fake_tools, capsys):
    fake_tools.add("nvidia-smi", TOPO)
    run = accept(OVERSOLD, nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "rejected"

    def sold(results):
        results["verdict"] = "accepted"
        for check in results["checks"]:
            check["outcome"] = "passed"
    _rewrite(run.path, sold)
    assert cli(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL re-judged: gpuaccept-results.json: check gpus.memory GPU0: outcome 'passed' in the bundle, 'failed' re-judged" in out
    assert "FAIL re-judged: results.json: check gpus.memory GPU7: outcome 'passed' in the bundle, 'failed' re-judged" in out
    assert "REJECTED over" in out and "DIFFERS from the bundle's results (ACCEPTED)" in out


VENDOR_PLUGIN = '''
"""A vendor's plugin: after the run sealed its bundle, it says the host passed, and seals it again."""
import json
import re
from pathlib import Path

import pytest

from pytest_gpuaccept.bundle import evidence_digest, write_manifest


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    folder = Path(config.option.htmlpath).parent
    for path in (folder / "gpuaccept-results.json", folder / "gpuaccept-evidence" / "results.json"):
        results = json.loads(path.read_text())
        results.update(verdict="accepted")
        results.pop("foreign_code", None)
        for check in results["checks"]:
            check["outcome"] = "passed"
        path.write_text(json.dumps(results))
    evidence = folder / "gpuaccept-evidence"
    report = Path(config.option.htmlpath)
    html = re.sub(r'data-evidence-digest="[0-9a-f]{64}"', f'data-evidence-digest="{evidence_digest(evidence)}"',
                  report.read_text())
    report.write_text(re.sub(r'data-verdict="rejected"', 'data-verdict="accepted"', html))
    manifest = json.loads((evidence / "manifest.json").read_text())
    extra = {k: v for k, v in manifest.items() if k not in ("files", "bundle", "evidence_digest", "checksum")}
    write_manifest(evidence, [folder / e["path"] for e in manifest["bundle"]], {**extra, "verdict": "accepted"})
'''


def test_a_bundle_a_vendor_plugin_rewrote_at_capture_time_is_rejected_by_verify_on_a_clean_machine(
        accept, fake_tools, pytester, monkeypatch, capsys, tmp_path):
    plugins = tmp_path / "vendor"
    plugins.mkdir()
    (plugins / "vendorplug.py").write_text(textwrap.dedent(VENDOR_PLUGIN))
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    fake_tools.add("nvidia-smi", TOPO)
    run = accept(OVERSOLD, nvml_recording("h100_sxm5_8gpu.json"), "-p", "vendorplug", subprocess=True)
    assert run.json["verdict"] == "accepted"  # what the vendor's bundle says
    monkeypatch.delenv("PYTHONPATH")  # the verifying machine: a clean environment
    assert cli(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert "check gpus.memory GPU0: outcome 'passed' in the bundle, 'failed' re-judged" in out
    assert "verdict recomputed from the raw evidence on the verifying machine: REJECTED" in out


# ------------------------------------------------------------------ a replay never writes inside its bundle

def _replay(cwd, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_a_replay_into_another_folder_leaves_the_bundle_byte_for_byte_the_same(bundle, tmp_path):
    before = _snapshot(bundle.path)
    stricter = tmp_path / "stricter.yaml"
    stricter.write_text(CONTRACT.replace("min_links: 18", "min_links: 12"))
    done = _replay(tmp_path, f"--contract={stricter}", f"--gpuaccept-replay={bundle.path}",
                   f"--html={tmp_path / 'recheck' / 'report.html'}")
    assert done.returncode == 0, done.stdout[-2000:]
    assert json.loads((tmp_path / "recheck" / "gpuaccept-results.json").read_text())["mode"] == "replay"  # beside it
    assert _snapshot(bundle.path) == before


@pytest.mark.parametrize("outputs", [
    ["--html=recheck/report.html"],  # the case: results would go to the bundle folder itself
    ["--html={other}/report.html", "--gpuaccept-json={bundle}/gpuaccept-results.json"],
    [],
])
def test_a_replay_that_would_write_inside_its_bundle_is_a_usage_error(bundle, tmp_path, outputs):
    before = _snapshot(bundle.path)
    contract = bundle.path / "gpuaccept-evidence" / "contract.yaml"
    args = [a.format(other=tmp_path / "other", bundle=bundle.path) for a in outputs]
    done = _replay(bundle.path, f"--contract={contract}", "--gpuaccept-replay=.", *args)
    assert done.returncode == 4
    assert "--gpuaccept-replay: " in done.stderr and "inside the bundle" in done.stderr and "that this run reads" in done.stderr
    assert _snapshot(bundle.path) == before


# ------------------------------------------------------------------ the recorded mode and the sources, named

def test_a_replay_of_a_simulated_bundle_says_simulated(bundle, accept, tmp_path):
    out = tmp_path / "recheck"
    replayed = accept(CONTRACT, f"--gpuaccept-replay={bundle.path}", f"--html={out / 'report.html'}",
                      f"--junitxml={out / 'junit.xml'}")
    results = json.loads((out / "gpuaccept-results.json").read_text())
    assert results["mode"] == "replay" and results["recorded"]["mode"] == "simulated"
    last = replayed.result.outlines[-1]
    assert "REPLAY of host" in last and "(a SIMULATED run: NVML readings from a recording)" in last
    assert "a SIMULATED run" in (out / "report.html").read_text()
    properties = {p.get("name"): p.get("value") for p in ET.parse(out / "junit.xml").iter("property")}
    assert properties["gpuaccept_mode"] == "replay" and properties["gpuaccept_recorded_mode"] == "simulated"
    assert properties["gpuaccept_source_replay"] == str(bundle.path / "gpuaccept-evidence")
    # ...and a replay of that replay still says so
    again = accept(CONTRACT, f"--gpuaccept-replay={out}", f"--html={tmp_path / 'again' / 'report.html'}")
    assert "(a SIMULATED run: NVML readings from a recording)" in again.result.outlines[-1]


def test_the_results_banner_and_junit_name_every_source(accept, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", TOPO)
    run = accept(CONTRACT, nvml_recording("h100_sxm5_8gpu.json"), f"--junitxml={tmp_path / 'junit.xml'}")
    sysfs = str((run.path / "sys").resolve())
    assert run.json["sources"] == {"sysfs": sysfs, "nvml": str(DATA / "nvml" / "h100_sxm5_8gpu.json")}
    assert f"sysfs: {sysfs}; nvml: " in run.html
    properties = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "junit.xml").iter("property")}
    assert properties["gpuaccept_source_sysfs"] == sysfs
    assert properties["gpuaccept_source_nvml"].endswith("h100_sxm5_8gpu.json")


@pytest.mark.parametrize("where", ["ini", "addopts", "env"])
def test_a_sysfs_tree_from_a_config_file_or_the_environment_is_a_usage_error(accept, pytester, monkeypatch, fake_tools,
                                                                             tmp_path, where):
    flag = f"--gpuaccept-sysfs={tmp_path / 'vendor-sys'}"
    if where == "ini":
        pytester.makeini(f"[pytest]\ngpuaccept_sysfs = {tmp_path / 'vendor-sys'}\n")
    elif where == "addopts":
        pytester.makeini(f"[pytest]\naddopts = {flag}\n")
    else:
        monkeypatch.setenv("PYTEST_ADDOPTS", flag)
    run = accept(CONTRACT)
    assert run.result.ret == 4
    place = {"ini": "the ini option gpuaccept_sysfs", "addopts": "the ini addopts", "env": "PYTEST_ADDOPTS"}[where]
    run.result.stderr.fnmatch_lines([f"ERROR: --gpuaccept-sysfs may only be given on the command line, not in {place}: "
                                     "another sysfs tree replaces this host's own"])
    assert fake_tools.calls() == []
