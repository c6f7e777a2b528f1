"""dcgm: DCGM's own diagnostic (`dcgmi diag -r LEVEL -j`), read from real DCGM 3.x and 4.x JSON (tests/data/dcgm,
sources in tests/data/SOURCES.md) and judged per test and GPU: Pass passes; Fail, Warn, a Pass with an error, an exit
code the JSON contradicts and a serial NVML reads otherwise fail; Skip, a test not run and a GPU not named are not
measured."""

from __future__ import annotations

import pytest
from builders import dcgm4_document, t4_recording
from conftest import DATA, nvml_recording, pci_tree
from judging import Output, judge

from pytest_gpuaccept.clauses.dcgm import Dcgm, level_tests
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.dcgm import SHAPE_3, SHAPE_4, canonical, parse_diag

DCGM = DATA / "dcgm"
R2_T4 = DCGM / "3.x_r2_t4_1gpu_pass.json"
R3_T4 = DCGM / "3.x_r3_t4_1gpu_eud_skip.json"
R1_8GPU = DCGM / "3.1.0_8gpu_warning_banner_nulls_custom_software.txt"
GB10 = DCGM / "4.2.3_r1_gb10_software_fail_persistence_exit226.json"
FRAGMENT = DCGM / "4.x_diagnostic_8gpu_fragment_issue215.txt"


# ------------------------------------------------------------------ the parser, on every real file

READ = {
    R2_T4.name: (SHAPE_3, None, ["software"] * 9 + ["pcie", "memory"]),
    R3_T4.name: (SHAPE_3, None, ["software"] * 9 + ["pcie", "memory", "diagnostic", "eud", "targeted_stress",
                                                   "targeted_power", "memory_bandwidth"]),
    R1_8GPU.name: (SHAPE_3, "3.1.0", ["software"] * 10),
    GB10.name: (SHAPE_4, "4.2.3", ["software"]),
}


@pytest.mark.parametrize("name", sorted(READ))
def test_every_real_document_reads_with_its_shape_version_and_tests(name):
    diag = parse_diag((DCGM / name).read_text())
    shape, version, tests = READ[name]
    assert (diag.shape, diag.version, [t.name for t in diag.tests]) == (shape, version, tests)


def test_dcgm_3_deployment_checks_are_one_result_for_every_gpu_and_the_others_name_theirs():
    diag = parse_diag(R3_T4.read_text())
    software = diag.for_gpu("software", 0)
    assert [(r.check, r.status, r.gpus) for r in software][:2] == [("Denylist", "pass", None), ("NVML Library", "pass", None)]
    assert [(r.status, r.gpus) for r in diag.for_gpu("eud", 0)] == [("skip", (0,))]
    assert diag.for_gpu("diagnostic", 0)[0].info == (
        "GPU 0 Allocated space for 408 output matricies from 13826359296 bytes available., GPU 0 Running with "
        "precisions: FP64 0, FP32 1, FP16 1, GPU 0 GPU 0 calculated at approximately 11103.02 gigaflops during this test",)
    assert diag.for_gpu("pcie", 1) == []


def test_the_8_gpu_dcgm_3_1_output_reads_past_its_warning_line_and_null_entries():
    diag = parse_diag(R1_8GPU.read_text())
    assert all(r.gpus == (0, 1, 2, 3, 4, 5, 6, 7) and r.status == "pass" for t in diag.tests[:9] for r in t.results)
    assert [r.gpus for r in diag.tests[9].results] == [(g,) for g in range(8)]  # "Custom" software, gpu_ids as numbers


def test_dcgm_4_reads_the_failed_software_test_with_its_error_id_the_summary_serial_and_metadata():
    diag = parse_diag(GB10.read_text())
    (result,) = diag.for_gpu("software", 0)
    assert (result.status, result.findings[0].error_id, result.findings[0].category, result.findings[0].severity) == \
        ("fail", 29, 8, 5)
    assert result.findings[0].message.startswith("Persistence Mode: Persistence mode for GPU 0 is disabled.")
    assert diag.tests[0].summary == "fail"
    assert diag.tests[0].summary_info[0].startswith("Error getting the SRAM Threshold Count for GPU 0.")
    assert (diag.driver, diag.serials, diag.device_ids) == ("580.82.09", {0: "<<<NOT_SUPPORTED>>>"}, {0: "2e12"})


def test_a_fragment_of_a_document_is_refused_and_its_results_read_once_whole():
    text = FRAGMENT.read_text()
    with pytest.raises(ParseError) as refused:
        parse_diag(text)
    assert "neither 'DCGM GPU Diagnostic' (DCGM 3) nor 'DCGM Diagnostic' (DCGM 4)" in str(refused.value)
    # Constructed here: the test object, as it was, inside a DCGM 4 document's frame.
    whole = '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [' + text.strip().rstrip(",") + "]}]}}"
    diag = parse_diag(whole)
    assert [(r.gpus, r.status, len(r.info)) for r in diag.for_gpu("diagnostic", 2)] == [((2,), "pass", 2)]
    assert [len(diag.for_gpu("diagnostic", g)[0].info) for g in range(8)] == [3, 3, 2, 0, 0, 0, 0, 0]  # DCGM #215's cut


def test_output_cut_short_or_without_json_is_refused():
    with pytest.raises(ParseError) as cut:
        parse_diag(GB10.read_text()[:600])
    assert "the JSON document is not whole" in str(cut.value)
    with pytest.raises(ParseError) as none:
        parse_diag("Error: unable to establish a connection to the specified host: localhost\n")
    assert str(none.value) == "dcgmi: no JSON document in the output: 'Error: unable to establish a connection to the specified host: localhost'"


@pytest.mark.parametrize(("name", "category", "canonical_name"), [
    ("GPU Memory", "Hardware", "memory"), ("EUD Test", "Hardware", "eud"), ("Targeted Stress", "Stress", "targeted_stress"),
    ("Memory Bandwidth", "Stress", "memory_bandwidth"), ("PCIe", "Integration", "pcie"), ("Persistence Mode", "Deployment", "software"),
    ("pulse_test", "Hardware", "pulse_test"), ("software", "Deployment", "software")])
def test_test_names_are_dcgm_4s_plugin_names(name, category, canonical_name):
    assert canonical(name, category) == canonical_name


def test_each_level_runs_the_tests_dcgm_lists_for_it():
    assert level_tests(Dcgm(1, False)) == ("software",)
    assert level_tests(Dcgm(2, True)) == ("software", "pcie", "memory", "eud")
    assert level_tests(Dcgm(4, False)) == ("software", "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power",
                                        "memory_bandwidth", "nvbandwidth", "memtest", "pulse_test")


# ------------------------------------------------------------------ the clause, with a fake dcgmi replaying them

CONTRACT = """\
gpuaccept: 1
vendor: V
gpus: {{count: {count}}}
dcgm: {{level: {level}{eud}}}
"""


def _run(accept, fake_tools, output, level, count=1, rc=0, recording="h100_sxm5_4gpu.json", eud=False, *extra):
    """A whole run of the contract at `level`, its fake dcgmi printing `output`: its dcgm checks by subject, and the run."""
    fake_tools.add("dcgmi", output, when=f"-r {level}", rc=rc)
    contract = CONTRACT.format(count=count, level=level, eud=", eud: true" if eud else "")
    run = accept(contract, nvml_recording(recording), *extra)
    return {c["subject"]: c for c in run.checks("dcgm")}, run


def _judge(tmp_path, output, level, count=1, rc=0, recording="h100_sxm5_4gpu.json", eud=False, eud_run=None, seconds=None):
    """The same, judged in process (tests/judging.py): dcgmi's `-r LEVEL` printing `output` after `seconds` (by default
    at once), and `eud_run` what `dcgmi diag -r eud` prints; its dcgm checks by subject as the results write them, and
    the session. `recording`: a file of tests/data/nvml, or a path (builders.t4_recording)."""
    contract = CONTRACT.format(count=count, level=level, eud=", eud: true" if eud else "")
    outputs = {f"dcgmi {level}": Output(output, returncode=rc, seconds=seconds),
               **({"dcgmi eud": eud_run} if eud_run else {})}
    judged = judge(contract, outputs, tmp_path, nvml=recording)
    return {c.subject: c.to_dict() for c in judged.of("dcgm")}, judged


def test_a_real_dcgm_3_1_level_1_run_passes_every_gpus_software_check_on_dcgms_word(accept, fake_tools):
    checks, _run_ = _run(accept, fake_tools, R1_8GPU, 1, 8, 0, "h100_sxm5_8gpu.json")
    assert {c["outcome"] for c in checks.values()} == {"passed"} and len(checks) == 8
    assert fake_tools.calls("dcgmi") == [["dcgmi", "diag", "-r", "1", "-j"]]
    # DCGM 3.1 names its GPUs by nothing of their own: taken on DCGM's word, and said so.
    assert checks["GPU3/software"]["details"]["sources"] == ["DCGM (dcgmi diag)"]
    assert checks["GPU3/software"]["details"]["unconfirmed"] == (
        "DCGM's document names no serial, UUID or PCI address of GPU 3 that NVML's could confirm: its verdict is not "
        "confirmed to be this card's")


def test_a_real_dcgm_3_level_2_run_passes_each_test_on_the_t4_it_ran_on(tmp_path):
    checks, judged = _judge(tmp_path, R2_T4, 2, recording=t4_recording(tmp_path), seconds=95.0)
    assert {s: (c["outcome"], c["measured"]) for s, c in checks.items()} == {
        "GPU0/software": ("passed", "Pass"), "GPU0/pcie": ("passed", "Pass"), "GPU0/memory": ("passed", "Pass")}
    assert checks["GPU0/pcie"]["required"] == "Pass"
    assert checks["GPU0/memory"]["details"]["results"] == [{"status": "pass", "info": ["GPU 0 Allocated 15206918958 bytes (97.3%)"]}]
    assert checks["GPU0/memory"]["details"]["duration_s"] == 95.0
    assert checks["GPU0/memory"]["details"]["unconfirmed"] == (
        "DCGM's document names no serial, UUID or PCI address of GPU 0 that NVML's could confirm: its verdict is not "
        "confirmed to be this card's (the plugin's clock, NVML's memory total agreed with it)")
    assert judged.recordings.asked == [["dcgmi", "diag", "-r", "2", "-j"]]


def test_a_skipped_eud_and_a_level_3_test_dcgm_3_does_not_have_are_not_measured(tmp_path):
    checks, judged = _judge(tmp_path, R3_T4, 3, 1, 0, t4_recording(tmp_path), True, seconds=900.0)
    outcomes = {s: c["outcome"] for s, c in checks.items()}
    assert outcomes == {"GPU0/software": "passed", "GPU0/pcie": "passed", "GPU0/memory": "passed", "GPU0/diagnostic": "passed",
                        "GPU0/targeted_stress": "passed", "GPU0/targeted_power": "passed", "GPU0/memory_bandwidth": "passed",
                        "GPU0/nvbandwidth": "not_measured", "GPU0/eud": "not_measured"}
    assert checks["GPU0/eud"]["message"] == "not measured: DCGM eud on GPU0: Skip: DCGM did not run it (DCGM gave no reason)"
    assert checks["GPU0/nvbandwidth"]["message"].startswith("not measured: DCGM (version not given) ran no nvbandwidth test "
                                                            "(`dcgmi diag -r 3` runs software, ")
    assert checks["GPU0/nvbandwidth"]["message"].endswith("; DCGM 3 has none: it came with DCGM 4.0)")
    assert judged.recordings.asked == [["dcgmi", "diag", "-r", "3", "-j"]]  # EUD is part of level 3: no run of its own


def test_tests_the_level_runs_and_dcgm_did_not_report_are_not_measured(tmp_path):
    checks, judged = _judge(tmp_path, R2_T4.read_text(), 3, rc=0)
    assert checks["GPU0/diagnostic"]["message"] == (
        "not measured: DCGM (version not given) ran no diagnostic test (`dcgmi diag -r 3` runs software, pcie, memory, diagnostic, "
        "targeted_stress, targeted_power, memory_bandwidth, nvbandwidth; it ran: software, pcie, memory)")
    assert judged.verdict == "rejected"


def test_a_real_dcgm_4_fail_fails_with_dcgms_words_and_error_id(accept, fake_tools, tmp_path):
    checks, _run_ = _run(accept, fake_tools, GB10, 1, 1, 226, "h100_sxm5_4gpu.json", False,
                         pci_tree(tmp_path / "sys", "0x2e12", "h100_sxm5_4gpu.json"))
    check = checks["GPU0/software"]
    assert (check["outcome"], check["measured"]) == ("failed", "Fail")
    assert check["message"] == ('DCGM software on GPU0: Fail: Persistence Mode: Persistence mode for GPU 0 is disabled. Enable '
                                'persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root. (DCGM error 29)')
    assert check["details"]["dcgm_version"] == "4.2.3" and check["details"]["driver_detected"] == "580.82.09"
    assert check["details"]["results"][0]["errors"][0]["error_id"] == 29
    assert check["details"]["dcgmi"]["sha256"]  # where dcgmi came from, with the check


@pytest.mark.parametrize(("source", "count", "rc"), [(R2_T4, 1, 226), (R1_8GPU, 8, 205)])
def test_an_error_exit_code_with_a_json_of_passes_fails_every_check(tmp_path, source, count, rc):
    checks, judged = _judge(tmp_path, source, 1, count, rc, t4_recording(tmp_path) if count == 1 else "h100_sxm5_8gpu.json",
                            seconds=60.0)
    assert len(checks) == count and {c["outcome"] for c in checks.values()} == {"failed"}
    assert checks["GPU0/software"]["message"].startswith(f"DCGM software on GPU0: Pass, but dcgmi exited {rc} (")
    assert checks["GPU0/software"]["message"].endswith("but its JSON reports no failed test and no error: the two cannot both be true")


def test_exit_code_0_with_a_failed_test_in_the_json_fails_every_check(tmp_path):
    passing = R2_T4.read_text()
    # Constructed from the real T4 run: its PCIe result made a Fail, printed with exit code 0.
    failing = passing.replace('bidirectional latency:\\t\\t4.532 us",\n\t\t\t\t\t\t\t\t"status" : "Pass"',
                              'bidirectional latency:\\t\\t4.532 us",\n\t\t\t\t\t\t\t\t"status" : "Fail"')
    assert failing != passing
    checks, judged = _judge(tmp_path, failing, 2, rc=0, recording=t4_recording(tmp_path), seconds=60.0)
    assert checks["GPU0/pcie"]["outcome"] == "failed"
    assert checks["GPU0/memory"]["message"] == ("DCGM memory on GPU0: Pass, but dcgmi exited 0 (no error) but its JSON reports "
                                                "a test that failed or warned: the two cannot both be true")


def test_a_gpu_no_result_names_is_not_measured(tmp_path):
    checks, judged = _judge(tmp_path, R2_T4, 2, 2, seconds=60.0)
    assert checks["GPU1/software"]["outcome"] == "passed"  # DCGM 3's deployment result is for every GPU
    assert checks["GPU1/pcie"]["message"] == "not measured: DCGM's pcie results name no GPU 1 (they name GPUs [0])"


def test_a_warning_is_not_a_pass(tmp_path):
    # Constructed from the real T4 run: Persistence Mode made a Warn with a message, as DCGM 3 prints one.
    warned = R2_T4.read_text().replace(
        '"name" : "Persistence Mode",\n\t\t\t\t\t\t"results" : \n\t\t\t\t\t\t[\n\t\t\t\t\t\t\t{\n\t\t\t\t\t\t\t\t"status" : "Pass"',
        '"name" : "Persistence Mode",\n\t\t\t\t\t\t"results" : \n\t\t\t\t\t\t[\n\t\t\t\t\t\t\t{\n\t\t\t\t\t\t\t\t"status" : "Warn", '
        '"warnings" : "Persistence mode for GPU 0 is disabled."')
    checks, judged = _judge(tmp_path, warned, 2, rc=226, recording=t4_recording(tmp_path), seconds=60.0)
    assert checks["GPU0/software"]["message"] == ("DCGM software on GPU0: Warn (a warning is not a pass): Persistence Mode: "
                                                  "Persistence mode for GPU 0 is disabled.")
    assert checks["GPU0/pcie"]["outcome"] == "passed"


def test_a_test_beyond_the_level_that_fails_fails_the_gpus_software_check(tmp_path):
    # Constructed from the real T4 level-3 run: its Targeted Stress made a Fail, the run read at level 2.
    failing = R3_T4.read_text().replace('relative stress level\\t3184",\n\t\t\t\t\t\t\t\t"status" : "Pass"',
                                        'relative stress level\\t3184",\n\t\t\t\t\t\t\t\t"status" : "Fail"')
    assert failing != R3_T4.read_text()
    checks, judged = _judge(tmp_path, failing, 2, rc=226, recording=t4_recording(tmp_path), seconds=600.0)
    assert checks["GPU0/software"]["message"] == ("DCGM software on GPU0: Pass, but DCGM also ran Targeted Stress fail: "
                                                  "GPU 0 GPU 0 relative stress level\t3184")
    assert checks["GPU0/memory"]["outcome"] == "passed"


def test_dcgms_serials_equal_to_nvmls_pass_and_a_different_one_fails(tmp_path):
    serials = ["1652322000000", "1652322000001", "1652322999999", "1652322000003"]
    checks, judged = _judge(tmp_path, dcgm4_document(serials), 1, 4)
    assert [checks[f"GPU{i}/software"]["outcome"] for i in range(4)] == ["passed", "passed", "failed", "passed"]
    assert checks["GPU2/software"]["message"] == ("DCGM software on GPU2: Pass, but DCGM's GPU 2 has serial 1652322999999, "
                                                  "NVML's GPU2 has 1652322000002: not the same card")
    assert checks["GPU0/software"]["details"]["sources"] == ["DCGM (dcgmi diag)", "NVML's driver version", "NVML's serial",
                                                             "sysfs's PCI device ID"]


def test_a_pass_that_carries_an_error_id_is_not_a_pass(tmp_path):
    """DCGM #284: the memory plugin reported DCGM_FR_MEMORY_ALLOC and still said Pass."""
    error = '[{"error_category": 4, "error_id": 37, "error_severity": 2, "warning": "Unable to allocate enough memory"}]'
    document = dcgm4_document([f"165232200000{i}" for i in range(4)], "Pass", error)
    checks, judged = _judge(tmp_path, document, 1, 4, 226)
    assert checks["GPU0/software"]["message"] == ("DCGM software on GPU0: Pass, but DCGM reported an error with it: Unable to "
                                                  "allocate enough memory (DCGM error 37) (a pass with an error is not a pass)")


def test_eud_below_level_3_is_a_run_of_its_own(tmp_path):
    refused = Output("Error: requested test \"eud\" was not found among possible test choices.\n", returncode=255)
    checks, judged = _judge(tmp_path, R2_T4, 2, 1, 0, t4_recording(tmp_path), True, eud_run=refused, seconds=60.0)
    assert judged.recordings.asked == [["dcgmi", "diag", "-r", "2", "-j"], ["dcgmi", "diag", "-r", "eud", "-j"]]
    assert checks["GPU0/eud"]["outcome"] == "not_measured"
    assert "exited with code 255" in checks["GPU0/eud"]["message"]
    assert checks["GPU0/memory"]["outcome"] == "passed"


def test_no_dcgmi_is_not_measured_and_tools_dcgmi_names_it(accept, fake_tools):
    run = accept(CONTRACT.format(count=1, level=1, eud="") + 'tools: {dcgmi: "/nonexistent/dcgmi"}\n',
                 nvml_recording("h100_sxm5_4gpu.json"))
    assert [c["message"] for c in run.checks("dcgm")] == ["not measured: dcgmi not found at /nonexistent/dcgmi (tools.dcgmi)"]


def test_a_level_outside_1_to_4_is_a_usage_error(accept):
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 1}\ndcgm: {level: 5}\n")
    assert run.result.ret == 4
    run.result.stderr.fnmatch_lines(["*dcgm.level*"])
