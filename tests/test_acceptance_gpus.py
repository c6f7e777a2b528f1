"""The gpus and nvlink clauses: judged in process from real `topo -m` outputs and NVML recordings (tests/judging.py),
and end to end through pytester where the run itself is the point: contract -> checks -> report and results JSON.

In a whole run `nvidia-smi` is a fake on PATH replaying the recorded outputs.
"""

from pathlib import Path

import pytest
from conftest import DATA, nvml_recording, pci_tree, run_pytest, staged_recording
from judging import Output, judge

H100_8 = """\
gpuaccept: 1
vendor: "Example GPU Cloud"
reference: "SLA-1"
gpus:
  count: 8
  model: "H100 80GB HBM3"
  memory: "80 GB"
  driver: ">=550"
  cuda: ">=12.4"
nvlink:
  every_pair: true
  min_links: 18
"""


NV18 = DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt"
FOUR_GPUS = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 4\nnvlink:\n  every_pair: true\n"


def _staged(tmp_path, source, change) -> Path:
    """conftest.staged_recording's file, for the harness."""
    return Path(staged_recording(tmp_path, source, change).split("=", 1)[1])


def test_an_nv18_h100_box_passes_all_28_pairs_with_18_links(tmp_path):
    judged = judge(H100_8, {"nvidia-smi": Output(NV18)}, tmp_path)
    pairs = judged.of("nvlink")
    assert len(pairs) == 28
    assert {(c.outcome.value, c.measured, c.unit) for c in pairs} == {("passed", 18, "links")}
    assert pairs[0].message == "NV18 between GPU0 and GPU1 (100% of the 18 NVLinks of a H100 SXM5 80GB)"
    assert judged.verdict == "accepted"
    assert judged.recordings.asked == [["nvidia-smi", "topo", "-m"]]  # once, for 28 pairs


def test_nvlink_bridges_on_two_of_four_gpus_fail_four_pairs_with_zero(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "4gpu_nv4_bridge_pairs_no_nic_blog.txt")
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 4\nnvlink:\n  every_pair: true\n",
                 nvml_recording("a40_4gpu_bridged_pairs.json"))
    pairs = {c["subject"]: c for c in run.checks("nvlink")}
    assert len(pairs) == 6
    failed = {s for s, c in pairs.items() if c["outcome"] == "failed"}
    assert failed == {"GPU0-GPU2", "GPU0-GPU3", "GPU1-GPU2", "GPU1-GPU3"}
    assert all(pairs[s]["measured"] == 0 for s in failed)
    assert pairs["GPU0-GPU2"]["message"] == "SYS between GPU0 and GPU2, 0 < 1 links"
    assert pairs["GPU0-GPU1"]["measured"] == 4 and pairs["GPU0-GPU1"]["outcome"] == "passed"
    assert run.json["verdict"] == "rejected" and run.result.ret == 1
    run.result.stdout.fnmatch_lines(["*nvlink GPU0-GPU2: failed: SYS between GPU0 and GPU2, 0 < 1 links*"])


def test_nvlink_printed_for_cards_that_have_none_fails_naming_both_sources(tmp_path):
    """A shadowed nvidia-smi printing NV4 bridges for RTX 5090s: the device ID's model has no NVLink, and NVML
    says NotSupported."""
    judged = judge(FOUR_GPUS, {"nvidia-smi": Output(DATA / "topo" / "4gpu_nv4_bridge_pairs_no_nic_blog.txt")},
                   tmp_path, nvml="rtx5090_4gpu.json")
    pair = judged.one("nvlink", "GPU0-GPU1")
    assert pair.outcome.value == "failed"
    assert pair.message == ("`topo -m` says NV4 between GPU0 and GPU1, but PCI device 0x2b85 "
                            "(GeForce RTX 5090) has no NVLink, not even a bridge")


def test_nvlink_that_nvml_does_not_see_fails(tmp_path):
    """A shadowed nvidia-smi printing NV18 everywhere on H100 SXM5s whose links NVML reports down."""

    def links_down(reading):
        for gpu in reading["gpus"][:2]:
            gpu["nvlinks"] = [{**n, "active": False} for n in gpu["nvlinks"]]
        reading["gpus"][2]["nvlinks"] = reading["gpus"][2]["nvlinks"][:6]

    judged = judge(H100_8, {"nvidia-smi": Output(NV18)}, tmp_path,
                   nvml=_staged(tmp_path, "h100_sxm5_8gpu.json", links_down))
    assert judged.one("nvlink", "GPU0-GPU5").message == (
        "`topo -m` says NV18 between GPU0 and GPU5, NVML says GPU0 has no active NVLink (0 of 18 links active)")
    assert judged.one("nvlink", "GPU2-GPU3").message == (
        "`topo -m` says NV18 between GPU2 and GPU3, NVML says GPU2 has 6 and GPU3 18 active links (into an NVSwitch)")
    assert judged.one("nvlink", "GPU3-GPU4").outcome.value == "passed"


def test_direct_links_are_counted_per_pair(tmp_path):
    """4x H100 with NV6 all-to-all: NVML's remote bus IDs name the peer; a pair whose links lead elsewhere fails."""
    topo = {"nvidia-smi": Output(DATA / "topo" / "h100_4gpu_nv6_4nic_matrix_only.txt")}

    def rewire(reading):  # GPU0's six links to GPU1 lead to GPU2 instead
        bus1, bus2 = reading["gpus"][1]["pci_bus_id"], reading["gpus"][2]["pci_bus_id"]
        for link in reading["gpus"][0]["nvlinks"]:
            link["remote_bus_id"] = bus2 if link["remote_bus_id"] == bus1 else link["remote_bus_id"]

    contract = FOUR_GPUS + "  min_links: 6\n"
    honest = judge(contract, topo, tmp_path / "honest", nvml="h100_sxm5_4gpu.json")
    assert {c.outcome.value for c in honest.of("nvlink")} == {"passed"}
    judged = judge(contract, topo, tmp_path / "rewired", nvml=_staged(tmp_path, "h100_sxm5_4gpu.json", rewire))
    failed = {c.subject: c.message for c in judged.of("nvlink") if c.outcome.value != "passed"}
    assert failed == {"GPU0-GPU1": "`topo -m` says NV6 between GPU0 and GPU1, NVML counts 0 active links from GPU0 to GPU1",
                      "GPU0-GPU2": "`topo -m` says NV6 between GPU0 and GPU2, NVML counts 12 active links from GPU0 to GPU2"}


def test_a_pcie_box_sold_as_nvswitch_is_rejected(tmp_path):
    judged = judge(H100_8, {"nvidia-smi": Output(DATA / "topo" / "pcie_8gpu_node_sys_no_nic_lmdeploy.txt")}, tmp_path)
    assert {c.outcome.value for c in judged.of("nvlink")} == {"failed"}
    assert judged.verdict == "rejected"


def test_a_gpu_the_contract_expects_and_the_host_lacks_fails(tmp_path):
    judged = judge(H100_8.replace("min_links: 18", "min_links: 6"),
                   {"nvidia-smi": Output(DATA / "topo" / "h100_4gpu_nv6_4nic_matrix_only.txt")}, tmp_path,
                   nvml="h100_sxm5_4gpu.json")
    assert judged.one("gpus.count", "host").measured == 4
    assert judged.one("gpus.count", "host").outcome.value == "failed"
    assert judged.one("gpus.model", "GPU7").message == "GPU7 not present: found 4"
    assert judged.one("gpus.memory", "GPU7").outcome.value == "failed"
    assert judged.one("nvlink", "GPU3-GPU7").message == "GPU7 not present: found 4"
    assert judged.one("nvlink", "GPU0-GPU3").outcome.value == "passed"


def test_a_40gb_card_sold_as_80gb_fails_model_and_memory(tmp_path):
    judged = judge(H100_8.replace("H100 80GB HBM3", "A100-SXM4-80GB").replace(">=550", ">=530").replace(">=12.4", ">=12.0"),
                   {"nvidia-smi": Output(NV18)}, tmp_path, nvml="a100_sxm4_40gb_8gpu.json")
    memory = judged.of("gpus.memory")[0]
    assert (memory.outcome.value, memory.measured, memory.unit) == ("failed", 42.95, "GB")
    assert memory.message == "GPU0 total memory 42.95 GB < 80 GB"
    model = judged.of("gpus.model")[0]
    assert model.message == ("GPU0 is 'NVIDIA A100-SXM4-40GB', which does not contain 'A100-SXM4-80GB', "
                             "nor does its PCI device 0x20b0 (A100 SXM4 40GB)")
    assert judged.of("gpus.driver")[0].outcome.value == "passed"


def test_without_a_driver_every_check_is_not_measured_with_the_reason(accept, fake_tools):
    # No nvidia-smi on PATH and no NVML library on this machine: nothing can be measured.
    run = accept(H100_8)
    assert run.result.ret == 1
    checks = run.checks()
    assert len(checks) == 1 + 8 + 8 + 8 + 1 + 1 + 28
    assert {c["outcome"] for c in checks} == {"not_measured"}
    assert all(c["measured"] is None for c in checks)
    assert {c["message"] for c in run.checks("nvlink")} == {"not measured: nvidia-smi not found on PATH"}
    assert run.checks("gpus.count")[0]["message"].startswith("not measured: NVML")
    assert run.json["verdict"] == "rejected"
    assert "REJECTED" in run.html


def test_the_report_has_the_verdict_identity_and_raw_output(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"))
    assert run.json["verdict"] == "accepted" and run.json["complete"] is True
    assert run.result.ret == 0
    assert run.checks("nvlink")[0]["test"] == "suites/test_nvlink.py::test_nvlink_pair[GPU0-GPU1]"
    page = run.html
    for text in ("ACCEPTED", "Example GPU Cloud", "SLA-1", run.json["contract"]["sha256"], "560.35.03",
                 "GPU-h100-00aaaaaaa-0000-0000-0000-000000000000", "1652322000000",
                 "<b>nvlink</b><td>28 pairs: 28 passed", "nvidia-smi_topo_-m.txt", "CPU Affinity"):
        assert text in page, text
    # A passing pair is one of its clause's row on the page (many pairs, one page), and whole in the results.
    assert any("NV18 between GPU0 and GPU1" in c["message"] for c in run.json["checks"] if c["subject"] == "GPU0-GPU1")
    assert "<script src=" not in page  # self-contained
    evidence = run.path / "gpuaccept-evidence"
    assert (evidence / "nvidia-smi_topo_-m.txt").read_bytes() == \
        (DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt").read_bytes()
    assert (evidence / "manifest.json").is_file()


def test_html_and_json_paths_can_be_moved(accept, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    out = tmp_path / "out"
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), f"--html={out}/r.html",
                 f"--gpuaccept-json={out}/r.json")
    assert (out / "r.html").is_file() and (out / "r.json").is_file()
    assert (out / "gpuaccept-evidence" / "nvidia-smi_topo_-m.txt").is_file()
    assert run.result.ret == 0


@pytest.mark.parametrize("contract, message", [
    (H100_8.replace("memory:", "memroy:"), "vendor.yaml:7: gpus.memroy: unknown key (did you mean 'memory'?)*"),
    (H100_8 + "allreduce:\n  min_busbw: 450\n",
     "vendor.yaml:14: allreduce.min_busbw: expected a bandwidth such as '450 GB/s', got 450"),
    (H100_8.replace("gpuaccept: 1\n", ""),
     "vendor.yaml:1: gpuaccept: missing: expected 'gpuaccept: 1' (the format version) as the first key"),
])
def test_a_bad_contract_is_a_usage_error_before_any_tool_runs(accept, fake_tools, contract, message):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(contract)
    assert run.result.ret == 4
    run.result.stderr.fnmatch_lines([f"*{message}"])
    assert fake_tools.calls() == []
    assert not (run.path / "gpuaccept-evidence").exists()


def test_a_missing_contract_file_is_a_usage_error(pytester, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    result = pytester.runpytest_inprocess("--contract=missing.yaml")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: --contract missing.yaml: no such file; *"])
    assert fake_tools.calls() == []


def test_collection_runs_no_tool_and_reads_no_gpu(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), "--collect-only")
    run.result.stdout.fnmatch_lines(["*55 tests collected*"])
    assert fake_tools.calls() == []
    assert not (run.path / "gpuaccept-evidence" / "nvml-host.json").exists()


def test_without_contract_the_plugin_does_nothing(pytester):
    pytester.makepyfile("def test_plain(): assert True")
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "gpuaccept-report.html").exists()
    assert not (pytester.path / "gpuaccept-results.json").exists()


def test_a_user_test_asking_for_a_gpuaccept_fixture_without_a_contract_is_told_why(pytester):
    pytester.makepyfile("def test_mine(gpuaccept_contract):\n    assert gpuaccept_contract\n")
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*pytest-gpuaccept fixtures need --contract=PATH*"])


def test_the_fixture_list_names_the_state_fixture_once(accept, fake_tools):
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), "--fixtures")
    assert run.result.stdout.str().count("gpuaccept_state [session scope]") == 1


def test_deselecting_a_check_leaves_the_run_incomplete_and_rejected(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), "-k", "not GPU0-GPU1")
    assert run.json["complete"] is False and run.json["verdict"] == "rejected"
    missing = [c for c in run.checks("nvlink") if c["subject"] == "GPU0-GPU1"][0]
    assert missing["outcome"] == "not_measured"
    assert run.result.ret != 0


def test_a_contract_runs_from_any_directory(pytester, fake_tools, tmp_path):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    contract = tmp_path / "elsewhere" / "vendor.yaml"
    contract.parent.mkdir()
    contract.write_text(H100_8)
    result = run_pytest(pytester, [f"--contract={contract}", nvml_recording("h100_sxm5_8gpu.json"), pci_tree(tmp_path / "sys")])
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*gpuaccept: ACCEPTED*55 passed, 0 failed, 0 not measured*"])


def test_under_xdist_the_topology_is_read_once_and_checks_listed_once(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), "-n", "2", subprocess=True)
    assert run.result.ret == 0, run.result.stdout.str()
    assert fake_tools.calls("nvidia-smi") == [["nvidia-smi", "topo", "-m"]]
    subjects = [(c["clause"], c["subject"]) for c in run.checks()]
    assert len(subjects) == len(set(subjects)) == 55
    assert run.json["verdict"] == "accepted"


def test_the_plugin_works_without_xdist(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), "-p", "no:xdist")
    assert run.result.ret == 0 and run.json["verdict"] == "accepted"


def test_disabling_pytest_html_is_a_usage_error(accept, fake_tools):
    fake_tools.add("nvidia-smi", DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt")
    run = accept(H100_8, nvml_recording("h100_sxm5_8gpu.json"), "-p", "no:html")
    assert run.result.ret == 4
    run.result.stderr.fnmatch_lines(["*writes its report with pytest-html*"])
    assert fake_tools.calls() == []


def test_an_nvml_recording_that_is_not_a_json_object_rejects_and_says_so(tmp_path):
    recording = tmp_path / "list.json"
    recording.write_text("[1, 2, 3]")
    judged = judge(H100_8, {"nvidia-smi": Output(NV18)}, tmp_path, nvml=recording, sysfs=tmp_path / "sys")
    assert judged.verdict == "rejected"
    assert judged.checks and all(c.outcome.value != "passed" for c in judged.of("gpus.count"))
    assert any("not a JSON object" in c.message for c in judged.of("gpus.count"))
