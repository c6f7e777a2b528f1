"""No ACCEPTED that the run itself did not earn: planted evidence, recordings from config files, modes
that judge nothing, foreign code, and a bundle that protects the report people sign."""

import importlib.metadata
import json
import shutil
import sys
import sysconfig
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from builders import BUNDLE_CONTRACT, keypair, p5_log
from conftest import DATA, nvml_recording

import pytest_gpuaccept.verdict as verdict
from pytest_gpuaccept import charts
from pytest_gpuaccept.__main__ import main as cli
from pytest_gpuaccept.clauses import utilisation
from pytest_gpuaccept.evidence import LEDGER, Evidence, ForeignEvidence, new_key, sha256_bytes
from pytest_gpuaccept.integrity import replaced_code
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.report.collect import name_version

SOLD = BUNDLE_CONTRACT  # what the vendor sold: 8x H100 80 GB, NV18 between every pair, 450 GB/s busbw


@pytest.fixture
def accepted(accept, fake_tools):
    """An honest H100 box, accepted: the bundle the later tests attack."""
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    run = accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "accepted"
    return run


# ------------------------------------------------------------------ planted evidence

def test_a_tool_that_plants_nvml_topology_and_workload_files_is_named_and_never_believed(accept, fake_tools, tmp_path,
                                                                                          capsys):
    """An 8x A100 40GB PCIe box whose all_reduce_perf writes an H100 NVML reading, an NV18 topology with its
    run record, NVML samples and a workload log into the evidence folder before it prints a P5 log."""
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "nvml-host.json").write_text((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    (forged / "nvidia-smi_topo_-m.txt").write_text((DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt").read_text())
    (forged / "nvidia-smi_topo_-m.stderr.txt").write_text("")
    (forged / "nvidia-smi_topo_-m.json").write_text(json.dumps({
        "argv": ["nvidia-smi", "topo", "-m"], "returncode": 0, "duration_s": 0.1, "timed_out": False, "timeout_s": 60,
        "error": None, "truncated": False, "stdout": "nvidia-smi_topo_-m.txt", "stderr": "nvidia-smi_topo_-m.stderr.txt",
        "replayed": False, "stopped_after_s": None}))
    (forged / "nvml-samples.json").write_text('{"gpus": []}')
    (forged / "workload.txt").write_text("training at 99 %\n")
    fake_tools.add("nvidia-smi", DATA / "topo" / "pcie_8gpu_node_sys_no_nic_lmdeploy.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    planter = fake_tools.bin_dir / "all_reduce_perf"
    planter.write_text(planter.read_text().replace(
        "import json, os, signal, sys, time",
        f"import json, signal, sys, time, shutil, os\nshutil.copytree({str(forged)!r}, 'gpuaccept-evidence', dirs_exist_ok=True)"))
    run = accept(SOLD, nvml_recording("a100_sxm4_40gb_8gpu.json"))
    assert run.json["verdict"] == "rejected" and run.result.ret == 1
    foreign = run.json["foreign_evidence"]
    # The NVML reading was taken (and sealed) before the load: overwritten, it is "changed"; the rest "not written".
    assert "nvml-host.json: changed after it was captured" in foreign
    for name in ("nvidia-smi_topo_-m.txt", "nvidia-smi_topo_-m.json", "nvml-samples.json", "workload.txt"):
        assert any(line.startswith(name) and line.endswith(": not written by this run") for line in foreign), (name, foreign)
    # No check used them: the GPUs are the A100s NVML reports, the pairs the PCIe paths topo printed.
    assert {c["measured"] for c in run.checks("gpus.model")} == {"NVIDIA A100-SXM4-40GB"}
    assert {c["measured"] for c in run.checks("nvlink")} == {0}
    assert "FOREIGN FILES IN THE EVIDENCE FOLDER" in run.html
    # The bundle keeps what was planted, as it was found: every digest matches, but the re-judge reads the planted
    # H100 reading and cannot reach the checks the run made from its own: verify fails, naming them.
    capsys.readouterr()
    assert cli(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert fails and all(line.startswith("FAIL re-judged: ") for line in fails), out
    assert "FAIL re-judged: results.json: check gpus.memory GPU0: measured 42.95 in the bundle, 85.520809984 re-judged" in out


# ------------------------------------------------------------------ recordings: the command line only

@pytest.mark.parametrize("where", ["ini", "addopts", "env"])
@pytest.mark.parametrize("flag, ini", [("--gpuaccept-nvml", "gpuaccept_nvml"), ("--gpuaccept-replay", "gpuaccept_replay")])
def test_a_recording_from_a_config_file_or_the_environment_is_a_usage_error(accept, pytester, monkeypatch, fake_tools,
                                                                             where, flag, ini):
    path = DATA / "nvml" / "h100_sxm5_8gpu.json"
    if where == "ini":
        pytester.makeini(f"[pytest]\n{ini} = {path}\n")
    elif where == "addopts":
        pytester.makeini(f"[pytest]\naddopts = {flag}={path}\n")
    else:
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{flag}={path}")
    run = accept(SOLD)
    assert run.result.ret == 4
    place = {"ini": f"the ini option {ini}", "addopts": "the ini addopts", "env": "PYTEST_ADDOPTS"}[where]
    run.result.stderr.fnmatch_lines([f"ERROR: {flag} may only be given on the command line, not in {place}: "
                                     "a recording or replay replaces what this host measures"])
    assert fake_tools.calls() == []


def test_a_simulated_run_says_so_in_results_banner_last_line_and_junit(accepted):
    assert accepted.json["mode"] == "simulated"
    assert "SIMULATED: NVML readings from a recording" in accepted.html
    last = accepted.result.outlines[-1]
    assert last == "gpuaccept verdict: ACCEPTED [SIMULATED: NVML readings from a recording, not from this host's driver]"


def test_junit_carries_verdict_mode_and_contract_digest(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    run = accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"), "--junitxml=junit.xml")
    xml = (run.path / "junit.xml").read_text()
    assert '<property name="gpuaccept_mode" value="simulated" />' in xml
    assert '<property name="gpuaccept_verdict" value="accepted" />' in xml
    assert f'<property name="gpuaccept_contract_sha256" value="{run.json["contract"]["sha256"]}" />' in xml
    # Each testcase: its check as separate properties and as one JSON document, never a Python repr.
    case = next(c for c in ET.fromstring(xml).iter("testcase") if c.get("name") == "test_gpu_memory[GPU3]")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props["gpuaccept_clause"], props["gpuaccept_subject"], props["gpuaccept_outcome"]) == ("gpus.memory", "GPU3", "passed")
    assert (props["gpuaccept_measured"], props["gpuaccept_unit"], props["gpuaccept_required"]) == ("85.521", "GB", ">= 80")
    check = json.loads(props["gpuaccept_check"])
    assert (check["measured"], check["unit"], check["threshold"]) == (85.521, "GB", 80.0)


def test_a_replay_shows_the_recorded_host_and_time(accepted, accept, tmp_path):
    bundle = tmp_path / "elsewhere"
    shutil.copytree(accepted.path, bundle, ignore=shutil.ignore_patterns("fakebin"))
    replay = accept(BUNDLE_CONTRACT, f"--gpuaccept-replay={bundle}", f"--html={tmp_path / 'r' / 'report.html'}",
                    f"--gpuaccept-json={tmp_path / 'r' / 'results.json'}")
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["mode"] == "replay"
    assert results["recorded"]["host"] == accepted.json["host"]["hostname"]
    assert results["recorded"]["started"] == accepted.json["started"]
    assert replay.result.outlines[-1] == (f"gpuaccept verdict: ACCEPTED [REPLAY of host {accepted.json['host']['hostname']} "
                                          f"recorded {accepted.json['started']} (a SIMULATED run: NVML readings from a "
                                          "recording): judged from a bundle, not measured now; verdict recomputed from "
                                          "the raw evidence on the verifying machine]")


# ------------------------------------------------------------------ modes that judge nothing touch nothing

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "fakebin" not in p.parts and p.name != "fake-tools.log"}


@pytest.mark.parametrize("mode", ["--collect-only", "--fixtures", "--markers", "--help", "--version"])
def test_modes_that_judge_nothing_leave_the_bundle_byte_for_byte(accepted, accept, mode):
    before = _snapshot(accepted.path)
    run = accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"), mode)
    assert _snapshot(accepted.path) == {**before, "vendor.yaml": before["vendor.yaml"]}
    assert not any("gpuaccept verdict" in line or "gpuaccept: ACCEPTED" in line for line in run.result.outlines)
    if mode == "--collect-only":
        assert run.result.ret == 5  # never 0: with --contract, 0 means accepted


def test_a_run_interrupted_in_collection_leaves_no_stale_accepted(accepted, accept, pytester):
    suite = pytester.mkdir("interrupted")
    (suite / "test_stop.py").write_text("raise KeyboardInterrupt\n")
    run = accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"), str(suite), subprocess=True)
    results = accepted.path / "gpuaccept-results.json"
    assert not results.exists() or json.loads(results.read_text())["verdict"] == "rejected"
    assert run.result.ret != 0


# ------------------------------------------------------------------ foreign code cannot judge

PATCHES = """\
import pytest_gpuaccept.verdict as verdict
from pytest_gpuaccept.clauses import nvlink

verdict.Verdict.judged = lambda self, ok, measured, message, details=None: self.passed(measured, "patched")
nvlink.judge_pair = lambda *args: verdict.Verdict("nvlink", "GPU0-GPU1").passed(18, "patched")
"""


def test_a_conftest_in_the_working_directory_does_not_judge(accept, pytester, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "pcie_8gpu_node_sys_no_nic_lmdeploy.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    pytester.makeconftest(PATCHES)
    run = accept(SOLD, nvml_recording("a100_sxm4_40gb_8gpu.json"), subprocess=True)
    assert {c["outcome"] for c in run.checks("nvlink")} == {"failed"}
    assert {c["outcome"] for c in run.checks("gpus.model")} == {"failed"}
    assert all("patched" not in c["message"] for c in run.checks())
    assert not any(p["file"].endswith("conftest.py") for p in run.json["plugins"])  # never even loaded


def _with_vendor_plugin(accept, pytester, fake_tools, source: str):
    """A healthy H100 host whose run loads the vendor's plugin `vendorplugin` (-p), in a subprocess."""
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    pytester.makepyfile(vendorplugin=source)
    pytester.syspathinsert()
    return accept(BUNDLE_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"), "-p", "vendorplugin", subprocess=True)


def test_a_plugin_that_replaces_a_judge_is_named_and_rejects_the_run(accept, pytester, fake_tools):
    run = _with_vendor_plugin(accept, pytester, fake_tools, PATCHES)
    assert run.json["verdict"] == "rejected"
    assert any(line.startswith("pytest_gpuaccept.verdict.Verdict.judged was replaced by code from")
               and line.endswith("vendorplugin.py") for line in run.json["foreign_code"])
    plugin = [p for p in run.json["plugins"] if p["file"].endswith("vendorplugin.py")][0]
    assert len(plugin["sha256"]) == 64 and plugin["sha256"] in run.html


SWALLOWER = """\
import pytest


class Elsewhere:  # the test's request, but its node is not the test's: what it records goes nowhere
    def __init__(self, request):
        self.getfixturevalue = request.getfixturevalue
        self.node = type("Node", (), {"user_properties": []})()


class Swallower:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        args["request"] = Elsewhere(args["request"])
        try:
            pyfuncitem.obj(**args)
        except BaseException:
            pass  # a failed check swallowed
        return True  # called, and the check recorded elsewhere: the test passes


def pytest_configure(config):
    config.pluginmanager.register(Swallower(), "swallower")  # registered last: called first
"""


def test_a_plugin_that_calls_the_clause_tests_itself_leaves_them_not_measured(accept, pytester, fake_tools):
    """A clause test records its check on its own item: a vendor's plugin that calls the tests first, has them
    record elsewhere and swallows their failures has tests that pass, and checks that were never recorded."""
    run = _with_vendor_plugin(accept, pytester, fake_tools, SWALLOWER)
    assert run.json["verdict"] == "rejected"
    assert run.checks() and {c["outcome"] for c in run.checks()} == {"not_measured"}
    assert all("without judging a measurement" in c["message"] for c in run.checks())


def test_code_from_an_installed_package_is_not_taken_for_the_standard_library(monkeypatch):
    """In a virtual environment the standard library's platform folder (lib/pythonX.Y) holds site-packages:
    a vendor's plugin installed there with pip replacing a method is foreign code all the same."""
    planted = Path(sysconfig.get_paths()["purelib"]) / "vendor_plugin.py"
    namespace: dict[str, object] = {}
    exec(compile("def judged(self, ok, measured, message, details=None):\n    return self.passed(measured, 'x')\n",
                 str(planted), "exec"), namespace)
    monkeypatch.setattr(verdict.Verdict, "judged", namespace["judged"])
    assert f"pytest_gpuaccept.verdict.Verdict.judged was replaced by code from {planted}" in replaced_code()


class _Anything:
    """A vendor's stand-in: a class, and callable."""

    def __call__(self, *args: object) -> None:
        return None


def test_a_module_name_given_someone_else_s_function_class_or_callable_is_named(monkeypatch):
    """A judge looks its helpers up in its module when it runs: a plugin's lambda put there keeps the plugin's
    __module__, and is foreign code all the same (as are a plugin's class and a callable object)."""
    monkeypatch.setattr(utilisation, "_sampled", lambda *args: None)
    monkeypatch.setattr(verdict, "Verdict", _Anything)
    monkeypatch.setattr(charts, "PALETTE", _Anything())
    found = replaced_code()
    assert f"pytest_gpuaccept.clauses.utilisation._sampled was replaced by code from {__file__}" in found
    assert f"pytest_gpuaccept.verdict.Verdict was replaced by the class {__name__}._Anything" in found
    assert f"pytest_gpuaccept.charts.PALETTE was replaced by a {__name__}._Anything object" in found
    assert len(found) == 3


def test_with_their_own_test_paths_the_conftests_are_listed_with_their_digest_and_are_foreign_unless_allowed(
        accept, pytester, fake_tools):
    """A conftest.py is code in the judging process like any plugin: listed, and foreign code unless the contract's
    tools.allow_plugins names it with its SHA-256 (test_foreign_code.py)."""
    suite = pytester.mkdir("mine")
    (suite / "conftest.py").write_text("# the buyer's own helpers\n")
    (suite / "test_own.py").write_text("def test_mine():\n    pass\n")
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n", nvml_recording("h100_sxm5_8gpu.json"), str(suite))
    listed = [p for p in run.json["plugins"] if p["file"].endswith("conftest.py")]
    assert listed and listed[0]["distribution"] == "conftest" and len(listed[0]["sha256"]) == 64
    assert f"conftest {suite / 'conftest.py'}, loaded because test paths were given" in run.json["foreign_code"]


# ------------------------------------------------------------------ the bundle protects the document people sign

def _copy(accepted, tmp_path: Path) -> Path:
    bundle = tmp_path / "archive" / "handover"
    shutil.copytree(accepted.path, bundle, ignore=shutil.ignore_patterns("fakebin", "fake-tools.log*"))
    return bundle


def test_a_copied_bundle_verifies_elsewhere(accepted, tmp_path, capsys):
    bundle = _copy(accepted, tmp_path)
    shutil.rmtree(accepted.path / "gpuaccept-evidence")  # nothing of the original is needed
    assert cli(["verify", str(bundle)]) == 0
    manifest = json.loads((bundle / "gpuaccept-evidence" / "manifest.json").read_text())
    assert {e["path"] for e in manifest["bundle"]} == {"gpuaccept-report.html", "gpuaccept-results.json", "vendor.yaml"}
    assert {"contract.yaml", "results.json", "nvml-host.json"} <= {e["path"] for e in manifest["files"]}


@pytest.mark.parametrize("target", ["gpuaccept-report.html", "gpuaccept-results.json",
                                    "gpuaccept-evidence/contract.yaml", "gpuaccept-evidence/results.json",
                                    "gpuaccept-evidence/nvidia-smi_topo_-m.txt"])
def test_one_byte_changed_anywhere_in_a_copy_fails_verify_naming_it(accepted, tmp_path, capsys, target):
    bundle = _copy(accepted, tmp_path)
    path = bundle / target
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert cli(["verify", str(bundle)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL changed: {target.removeprefix('gpuaccept-evidence/')}" in out, out


def test_a_report_saying_accepted_over_rejected_results_fails_verify(accept, fake_tools, tmp_path, capsys):
    fake_tools.add("nvidia-smi", DATA / "topo" / "pcie_8gpu_node_sys_no_nic_lmdeploy.txt")
    fake_tools.add_nccl(p5_log(), iters=1)
    run = accept(SOLD, nvml_recording("a100_sxm4_40gb_8gpu.json"), "--html=handover-2026.html")
    page = run.path / "handover-2026.html"
    page.write_text(page.read_text().replace('data-verdict="rejected"', 'data-verdict="accepted"')
                    .replace(">REJECTED<", ">ACCEPTED<"))
    assert cli(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL changed: handover-2026.html" in out
    assert "FAIL the report handover-2026.html states accepted verdict, the results give 'rejected'" in out


def test_a_deleted_report_fails_verify_naming_it(accepted, tmp_path, capsys):
    bundle = _copy(accepted, tmp_path)
    (bundle / "gpuaccept-report.html").unlink()
    assert cli(["verify", str(bundle)]) == 1
    assert "FAIL missing: gpuaccept-report.html" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="OpenSSH's ssh-keygen is needed (.ci/run installs it)")
def test_buyer_and_vendor_sign_and_any_later_change_fails(accepted, tmp_path, capsys):
    bundle = _copy(accepted, tmp_path)
    buyer, buyer_line = keypair(tmp_path, "buyer")
    vendor, vendor_line = keypair(tmp_path, "vendor")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(buyer_line + vendor_line)
    assert cli(["sign", str(bundle), "--key", str(buyer)]) == 0
    assert cli(["sign", str(bundle), "--key", str(vendor)]) == 0
    capsys.readouterr()
    assert cli(["verify", str(bundle), "--allowed-signers", str(allowed)]) == 0
    out = capsys.readouterr().out
    assert "signed by: buyer@example.com" in out and "signed by: vendor@example.com" in out
    # One byte of the manifest after signing: both signatures fail.
    manifest = bundle / "gpuaccept-evidence" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"verdict": "accepted"', '"verdict": "accepted" '))
    assert cli(["verify", str(bundle), "--allowed-signers", str(allowed)]) == 1
    assert "FAIL signature 1.sig of buyer@example.com: does not match the manifest" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="OpenSSH's ssh-keygen is needed (.ci/run installs it)")
def test_a_signature_by_a_key_not_allowed_fails(accepted, tmp_path, capsys):
    bundle = _copy(accepted, tmp_path)
    stranger, _line = keypair(tmp_path, "stranger")
    _buyer, buyer_line = keypair(tmp_path, "buyer")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(buyer_line)
    assert cli(["sign", str(bundle), "--key", str(stranger)]) == 0
    assert cli(["verify", str(bundle), "--allowed-signers", str(allowed)]) == 1
    assert "signed by a key not in" in capsys.readouterr().out


def test_an_unsigned_bundle_fails_when_signatures_are_required(accepted, tmp_path, capsys):
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")
    assert cli(["verify", str(accepted.path), "--allowed-signers", str(allowed)]) == 1
    assert "FAIL no signature in" in capsys.readouterr().out


def test_a_pytest_gpuaccept_planted_in_the_working_directory_never_runs_as_a_workload(accept, pytester):
    """`python -m pytest_gpuaccept.workloads.membw` started in the run's folder would import a package planted
    there (python -m puts the working directory first on sys.path): our workloads start beside our package. The run
    itself is started as the buyer starts it, `python -I -m pytest`: without -I, `python -m pytest` would import the
    planted package instead of the plugin (docs/running.md)."""
    planted = pytester.path / "pytest_gpuaccept" / "workloads"
    planted.mkdir(parents=True)
    (planted.parent / "__init__.py").write_text("")
    (planted / "__init__.py").write_text("")
    marker = pytester.path / "planted-ran"
    fake = (DATA / "torch" / "membw_cpu_2dev.txt").read_text().replace("device cpu", "device cuda")
    fake = fake.replace('"device": "cpu"', '"device": "cuda:0"')
    (planted / "membw.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nprint({fake!r})\n")
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 2}\nmemory_bandwidth: {min_bandwidth: '1 GB/s'}\n",
                 nvml_recording("h100_sxm5_4gpu.json"), python=(sys.executable, "-I"))
    assert not marker.exists()
    assert {c["outcome"] for c in run.checks("memory_bandwidth")} != {"passed"}


def test_each_plugin_s_distribution_is_named_by_importlib_metadata_whatever_the_case_of_its_fields(tmp_path):
    """plugins.json names a plugin's distribution as importlib.metadata reads it: core metadata field names are
    case-insensitive, so a METADATA that writes `name:` and `version:` is named all the same."""
    for dist in importlib.metadata.distributions():
        assert name_version(dist) == f"{dist.metadata['Name']}=={dist.version}"
    info = tmp_path / "some_plugin-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("metadata-version: 2.1\nname: some-plugin\nversion: 2.0\n\nA description.\n")
    assert name_version(importlib.metadata.PathDistribution(info)) == "some-plugin==2.0"


# ------------------------------------------------------------------ the ledger of seals, between processes

def test_seals_cross_processes_and_a_forged_or_broken_ledger_vouches_for_nothing(tmp_path):
    """Two processes of one run (an xdist worker and the controller: the same folder and key) read each
    other's seals from the ledger; a line written without the key, a torn line, a ledger deleted, and a file
    that another process rewrote put back as it first was, are each caught."""
    key = new_key()
    worker, controller = Evidence(tmp_path, key), Evidence(tmp_path, key)
    worker.write("host.json", b'{"gpus": 8}')
    (tmp_path / "topo.txt").write_bytes(b"GPU0 X NV18")
    worker.seal("topo.txt")
    assert controller.read("host.json") == b'{"gpus": 8}' and controller.foreign() == []

    # a tool writes a file and a ledger line for it, with a MAC made without the run's key
    (tmp_path / "planted.txt").write_text("NV18 everywhere")
    forger = Evidence(tmp_path, new_key())
    forger.seal("planted.txt")
    with pytest.raises(ForeignEvidence, match="not written by this run"):
        controller.read("planted.txt")
    assert controller.foreign() == ["planted.txt: not written by this run"]
    (tmp_path / "planted.txt").unlink()

    # a torn last line (a write cut short) and a line of garbage in every ledger file: skipped, the whole
    # lines still count, and a seal written after the torn line is a line of its own
    for ledger_file in (tmp_path / LEDGER).glob("*.seals"):
        with open(ledger_file, "a") as ledger:
            ledger.write('not json\n{"name": "host.json", "sha256": "00", "ma')
    assert controller.read("host.json") == b'{"gpus": 8}' and controller.foreign() == []

    # the worker rewrites topo.txt and seals it again; the first content put back is not its seal any more
    (tmp_path / "topo.txt").write_bytes(b"GPU0 X SYS")
    worker.seal("topo.txt")
    assert controller.read("topo.txt") == b"GPU0 X SYS"
    (tmp_path / "topo.txt").write_bytes(b"GPU0 X NV18")
    assert controller.foreign() == ["topo.txt: changed after it was captured"]
    with pytest.raises(ForeignEvidence, match="changed after it was captured"):
        worker.read("topo.txt")

    # the ledger deleted: what only another process sealed is vouched for by nothing
    (tmp_path / "topo.txt").write_bytes(b"GPU0 X SYS")
    shutil.rmtree(tmp_path / LEDGER)
    assert controller.foreign() == ["host.json: not written by this run", "topo.txt: not written by this run"]
    assert worker.foreign() == []  # its own seals are in its memory, not on disk
    worker.write("results.json", b"{}")  # and it can seal again (the ledger's folder made anew)
    assert controller.read("results.json") == b"{}"


def test_json_evidence_is_read_back_only_as_the_sealed_bytes(tmp_path):
    """What write_json wrote is read back as its sealed bytes, by the process that wrote it and by another process
    of the run (same folder and key), never as the object in memory, and only while the file is what was sealed."""
    key = new_key()
    loop, report_of_controller = Evidence(tmp_path, key), Evidence(tmp_path, key)
    samples = {"gpus": [{"index": 0, "samples": [[0.0, 99, 1980, 690.0, 70, 0, 5, 16]]}]}
    loop.write_json("nvml-samples.json", samples)
    samples["gpus"] = []  # the object changed after it was written: the evidence is what was sealed
    for reader in (loop, report_of_controller):
        assert json.loads(reader.read("nvml-samples.json") or b"")["gpus"][0]["index"] == 0
    (tmp_path / "nvml-samples.json").write_text('{"gpus": []}')  # the load's samples swapped after sealing
    for reader in (loop, report_of_controller):
        with pytest.raises(ForeignEvidence, match="changed after it was captured"):
            reader.read("nvml-samples.json")


def test_a_tool_s_output_is_what_came_through_its_pipes_and_a_process_it_left_behind_adds_nothing(tmp_path):
    """The runner reads a tool's output through pipes into memory: the text it parses is the bytes it writes and
    seals. A process the tool left behind in its group is stopped when the tool exits: what it would print later
    reaches neither the run nor the evidence (the tool never had the evidence file to write into)."""
    tool = tmp_path / "bin" / "quick-exit"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho measured 450\n(sleep 0.4; echo 'measured 9999') &\n")
    tool.chmod(0o755)
    runner = ToolRunner(tmp_path / "evidence", tool_paths={"quick-exit": str(tool)})
    run = runner.run("quick-exit", [], key="quick")
    assert run.stdout == "measured 450\n" and run.returncode == 0
    assert runner.evidence.sealed_files()["quick.txt"] == frozenset({sha256_bytes(b"measured 450\n")})
    time.sleep(0.6)  # past the moment the process left behind would have printed
    assert (tmp_path / "evidence" / "quick.txt").read_bytes() == b"measured 450\n"
    assert runner.evidence.foreign() == []
