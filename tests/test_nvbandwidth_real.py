"""nvbandwidth as real hosts print it: every corpus output read to the figures EXPECTED.yaml gives (driver,
what each waived testcase printed, device_local_copy per GPU); a testcase nvbandwidth waives (`Waiving X.`
up to v0.4, a bare `Waived: ` in its place from v0.5) fails every pair or GPU that needed it, quoting it;
memory_bandwidth measured through nvbandwidth's device_local_copy, judged on twice the printed figure."""

import json
import re
import statistics
from pathlib import Path

import pytest
import yaml
from conftest import DATA, nvml_recording, pci_tree, staged_recording
from judging import Output, Recordings, judge

from pytest_gpuaccept.clauses import memory_bandwidth
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.doctor import needs
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.probes.nvbandwidth import ALL_TESTCASES, parse_nvbandwidth
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id

NVB = DATA / "nvbandwidth"
EXPECTED = yaml.safe_load((NVB / "EXPECTED.yaml").read_text())
H20 = (NVB / "h20-3e_8gpu_v0.8_device_local_copy.txt").read_text()
RTX2080TI = (NVB / "rtx2080ti_2gpu_v0.2_git6cefdda_waiving_write_ce.txt").read_text()
RTX3050 = (NVB / "rtx3050_laptop_1gpu_v0.8_full_run_bare_waived_device_local_copy.txt").read_text()
P2P_CASES = ("device_to_device_memcpy_write_ce", "device_to_device_memcpy_read_ce")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_real_output_reads_to_its_driver_waived_lines_and_local_copy(name):
    facts = EXPECTED[name]
    result = parse_nvbandwidth((NVB / name).read_text(errors="replace"))
    assert result.driver == str(facts["driver_version"])
    waived = {case for case, f in facts["testcases"].items() if f.get("status") == "Waived"}
    assert result.waived == waived == set(result.waived_lines)
    for case, line in facts.get("waived_lines", {}).items():
        assert result.waived_lines[case] == line
    if "waived_count" in facts:
        assert len(result.waived) == facts["waived_count"]
    if "device_local_copy_gbyte_s" in facts:
        assert list(result.matrices["device_local_copy"].cells[0]) == facts["device_local_copy_gbyte_s"]


def test_each_bare_waived_line_is_the_testcase_in_whose_place_it_stands():
    result = parse_nvbandwidth(RTX3050)
    # The 1-GPU DCGM JSON names its waived testcases; the 1-GPU v0.8 text run prints 17 nameless lines in
    # their places: both name the same testcases.
    dcgm = parse_nvbandwidth((NVB / "dcgm_tests_v0.5_json_verbose_1gpu_pcie3_waived_latency.json").read_text())
    assert result.waived == dcgm.waived and len(result.waived) == 17
    assert set(result.waived_lines.values()) == {"Waived:"}
    # The matrix printed before a run of Waived lines is still that testcase's, never a waived one.
    assert "device_to_host_bidirectional_memcpy_ce" not in result.waived
    assert result.matrices["device_to_host_bidirectional_memcpy_ce"].cells == ((11.06,),)
    assert parse_nvbandwidth(RTX3050, ALL_TESTCASES).waived == result.waived


def test_a_run_of_waived_lines_that_does_not_fill_its_place_is_refused():
    cut = RTX3050.replace("Waived: \nWaived: \nRunning all_to_host_memcpy_ce.", "Waived: \nRunning all_to_host_memcpy_ce.")
    with pytest.raises(ParseError) as raised:
        parse_nvbandwidth(cut)
    assert "3 testcase(s) printed as Waived before all_to_host_memcpy_ce, where 4 were to run" in str(raised.value)


# Constructed: what nvbandwidth v0.8 prints for `-t device_to_device_memcpy_write_ce -t
# device_to_device_memcpy_read_ce` where no GPU can reach a peer (output.cpp: `Waived: ` for each testcase whose
# filter() fails, in the order asked): the real 1-GPU run's header and two of its real `Waived: ` lines.
V08_NO_PEER = RTX3050.split("Running host_to_device_memcpy_ce.")[0] + "Waived: \nWaived: \n"


def test_bare_waived_lines_are_named_by_the_testcases_asked_in_order():
    result = parse_nvbandwidth(V08_NO_PEER, P2P_CASES)
    assert result.waived == set(P2P_CASES) and not result.matrices
    with pytest.raises(ParseError) as raised:
        parse_nvbandwidth(V08_NO_PEER, P2P_CASES[:1])
    assert "2 testcase(s) printed as Waived at the end, where 1 were left to run" in str(raised.value)


def test_a_full_run_replayed_where_one_testcase_was_asked_is_refused():
    # The bare Waived lines of a run of every testcase cannot stand for the one testcase asked.
    with pytest.raises(ParseError) as raised:
        parse_nvbandwidth(RTX3050, ("device_local_copy",))
    assert "4 testcase(s) printed as Waived before all_to_host_memcpy_ce, where 0 were to run" in str(raised.value)


P2P_CONTRACT = "gpuaccept: 1\nvendor: V\ngpus: {count: 2}\np2p: {min_bandwidth: '10 GB/s'}\n"


@pytest.mark.parametrize("output, printed", [
    (RTX2080TI, "'Waiving device_to_device_memcpy_write_ce.'"),
    (V08_NO_PEER, "'Waived:'; 'Waived:'"),
])
def test_a_waived_peer_copy_fails_every_pair_quoting_nvbandwidth(accept, fake_tools, output, printed):
    fake_tools.add("nvbandwidth", output)
    run = accept(P2P_CONTRACT, nvml_recording("h100_sxm5_8gpu.json"))
    checks = run.checks("p2p")
    assert [(c["subject"], c["outcome"], c["measured"]) for c in checks] == [
        ("GPU0->GPU1", "failed", None), ("GPU1->GPU0", "failed", None)]
    assert all(f"peer access is not possible (it printed {printed})" in c["message"] for c in checks)
    assert run.json["verdict"] == "rejected"


MEMBW_CONTRACT = """\
gpuaccept: 1
vendor: V
gpus: {{count: 8}}
memory_bandwidth: {{{threshold}{tool}}}
"""


def host_of(output: str, tmp_path) -> Path:
    """The NVML recording of the host an nvbandwidth output came from: its `Device N: NAME (BUS)` lines as NVML lists
    them, its driver and CUDA version as NVML gives them (the rest as the 8-GPU H100 recording has it), so that the output is this host's (clauses/plausible.py
    refuses one that lists GPUs NVML does not have here)."""
    devices = re.findall(r"^Device (\d+): (.+?) \(([0-9a-f:]+)\)$", output, re.M)
    driver = re.search(r"^Driver Version: (\S+)$", output, re.M)
    cuda = re.search(r"^CUDA Driver Version: (\d+)", output, re.M)

    def change(reading):
        if driver:  # the header's driver and CUDA version are NVML's on the host that printed it
            reading["driver"] = driver.group(1)
        if cuda:
            reading["cuda"] = f"{int(cuda.group(1)) // 1000}.{int(cuda.group(1)) % 1000 // 10}"
        for n, name, bus in devices:
            reading["gpus"][int(n)].update(name=name, pci_bus_id=f"{bus}.0")
        reading["cuda_devices"]["bus_ids"] = [sysfs_bus_id(g["pci_bus_id"]) for g in reading["gpus"]]
    return Path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", change).split("=", 1)[1])


def _membw(tmp_path, output, threshold, device="0x2330", tool=""):
    nvml = host_of(output, tmp_path)
    pci_tree(tmp_path / "sys", device, nvml)
    judged = judge(MEMBW_CONTRACT.format(threshold=threshold, tool=tool), {"nvbandwidth": Output(output)}, tmp_path,
                   nvml=nvml, sysfs=tmp_path / "sys")
    return {c.subject: c for c in judged.of("memory_bandwidth")}, judged.recordings.asked


def test_a_saved_log_of_another_hosts_gpus_is_not_this_hosts_measurement(fake_tools, tmp_path):
    """The real H20-3e output (devices at 18, 38, 49, 59, 9b, bb, ca, da) replayed where NVML lists eight H100s at
    18, 28, ... 88, as long as its copies took: the wall time is right, the GPUs are not."""
    pci_tree(tmp_path / "sys", "0x2330")
    judged = judge(MEMBW_CONTRACT.format(threshold="min_bandwidth: '1 GB/s'", tool=""), {"nvbandwidth": Output(H20)},
                   tmp_path, sysfs=tmp_path / "sys")
    checks = judged.of("memory_bandwidth")
    assert {c.outcome.value for c in checks} == {"failed"}
    assert checks[0].message.endswith("nvbandwidth -t device_local_copy` lists Device 0: NVIDIA H20-3e at PCI "
                                         "00000000:18:00, where NVML has GPU0 'NVIDIA H100 80GB HBM3': not this host's output")


def test_memory_bandwidth_by_default_is_nvbandwidth_device_local_copy_judged_on_twice_the_figure(fake_tools, tmp_path):
    checks, asked = _membw(tmp_path, H20, "min_bandwidth: '2232 GB/s'")
    assert [a for a in asked if a[0] == "nvbandwidth"] == [["nvbandwidth", "-t", "device_local_copy"]]
    assert {s: c.measured for s, c in checks.items()} == {
        "GPU0": 2232.6, "GPU1": 2232.6, "GPU2": 2231.44, "GPU3": 2232.32, "GPU4": 2232.32, "GPU5": 2233.76,
        "GPU6": 2234.34, "GPU7": 2232.6}
    assert [s for s, c in checks.items() if c.outcome.value != "passed"] == ["GPU2"]
    assert checks["GPU2"].message == (
        "GPU2 device-local copy 2231.44 GB/s < 2232 GB/s (nvbandwidth device_local_copy 1115.72 GB/s copied, x 2: "
        "read + written; 67% of the published 3350 GB/s (H100 SXM5 80GB, 3350 GB/s))")
    assert not [a for a in asked if a[0] == "python"]


def test_a_fraction_of_peak_through_nvbandwidth(tmp_path):
    checks, _ = _membw(tmp_path, H20, "min_fraction_of_peak: 0.7", tool=", tool: nvbandwidth")
    assert {(c.outcome.value, c.threshold) for c in checks.values()} == {("failed", 2345.0)}


def test_a_local_copy_faster_than_the_models_memory_can_go_fails(fake_tools, tmp_path):
    checks, _ = _membw(tmp_path, H20, "min_bandwidth: '1000 GB/s'", device="0x20b0")
    assert {c.outcome.value for c in checks.values()} == {"failed"}
    assert checks["GPU0"].message.startswith(
        "GPU0 device-local copy 2232.6 GB/s is implausible: above 1710.5 GB/s (physically impossible: the published "
        "1555 GB/s of the A100 SXM4 40GB's memory + 10%, from the model table (pytest_gpuaccept/models/gpus.json) for "
        "PCI device 0x20b0 (sysfs))")


def test_a_waived_local_copy_fails_every_gpu_quoting_nvbandwidth(fake_tools, tmp_path):
    # Constructed: the real H20-3e run with its device_local_copy announced by a bare `Waived: ` instead.
    waived = H20.split("Running device_local_copy.")[0] + "Waived: \n"
    checks, _ = _membw(tmp_path, waived, "min_bandwidth: '1 GB/s'")
    assert len(checks) == 8 and {(c.outcome.value, c.measured) for c in checks.values()} == {("failed", None)}
    assert checks["GPU3"].message == "GPU3: nvbandwidth waived device_local_copy (it printed 'Waived:')"


def test_a_gpu_missing_from_the_row_fails(fake_tools, tmp_path):
    # Constructed: what the real 1-GPU host printed, as `-t device_local_copy` alone would have printed it.
    alone = RTX3050.split("Running host_to_device_memcpy_ce.")[0] + "Running device_local_copy." + \
        RTX3050.split("Running device_local_copy.")[1]
    checks, _ = _membw(tmp_path, alone, "min_bandwidth: '100 GB/s'")
    assert (checks["GPU0"].outcome.value, checks["GPU0"].measured) == ("passed", 168.66)
    assert checks["GPU1"].outcome.value == "failed"
    assert checks["GPU1"].message == "GPU1 was not measured (nvbandwidth measured GPUs [0])"


def test_a_cut_local_copy_is_not_measured(fake_tools, tmp_path):
    checks, _ = _membw(tmp_path, H20.replace("SUM device_local_copy 8930.99\n", ""), "min_bandwidth: '1 GB/s'")
    assert {c.outcome.value for c in checks.values()} == {"not_measured"}
    assert "device_local_copy: no SUM line after the matrix: cut" in checks["GPU0"].message


def test_tool_torch_runs_pytorch_even_where_nvbandwidth_is_found(fake_tools, tmp_path):
    checks, asked = _membw(tmp_path, H20, "min_bandwidth: '1 GB/s'", tool=", tool: torch")
    assert not [a for a in asked if a[0] == "nvbandwidth"] and len(checks) == 8


def test_tool_nvbandwidth_without_nvbandwidth_is_not_measured(accept, fake_tools, tmp_path):
    run = accept(MEMBW_CONTRACT.format(threshold="min_bandwidth: '1 GB/s'", tool=", tool: nvbandwidth"),
                 nvml_recording("h100_sxm5_8gpu.json"))
    assert {c["message"] for c in run.checks("memory_bandwidth")} == {"not measured: nvbandwidth not found on PATH"}


@pytest.mark.parametrize("tool, on_path, wanted", [
    ("", True, "nvbandwidth"), ("", False, "torch"), (", tool: torch", True, "torch"),
    (", tool: nvbandwidth", False, "nvbandwidth")])
def test_doctor_asks_for_the_copier_the_run_will_use(fake_tools, tool, on_path, wanted):
    if on_path:
        fake_tools.add("nvbandwidth", H20)
    contract = parse_contract(MEMBW_CONTRACT.format(threshold="min_bandwidth: '1 GB/s'", tool=tool), "v.yaml")
    assert [n.name for n in needs(contract) if "memory_bandwidth" in n.clauses] == [wanted]


def test_a_waived_host_copy_fails_every_gpu_and_direction_quoting_nvbandwidth(tmp_path):
    # Constructed: the real RTX 2080 Ti run's header with both host testcases announced as its v0.2 waives them.
    waived = RTX2080TI.split("Waiving")[0] + ("Waiving host_to_device_memcpy_ce.\n\n"
                                             "Waiving device_to_host_memcpy_ce.\n\n")
    judged = judge("gpuaccept: 1\nvendor: V\ngpus: {count: 2}\nhost_bandwidth: {min_bandwidth: '1 GB/s'}\n",
                   {"nvbandwidth": Output(waived)}, tmp_path)
    checks = judged.of("host_bandwidth")
    assert len(checks) == 4 and {(c.outcome.value, c.measured) for c in checks} == {("failed", None)}
    assert checks[0].message == ("nvbandwidth waived host_to_device_memcpy_ce (it printed "
                                    "'Waiving host_to_device_memcpy_ce.')")


def test_a_copy_run_shorter_than_the_copies_it_reports_fails(tmp_path):
    # Constructed from the real CPU run of our PyTorch workload: its lines as GPU copies, every timing x 100 (and
    # the rate / 100, so that each line still agrees with itself), printed by a tool that returns at once: 2 x 5
    # timed copies that took 35 s in all cannot come from a run of a fraction of a second.
    lines = (DATA / "torch" / "membw_cpu_2dev.txt").read_text().splitlines()
    slow = [lines[0]]
    for line in lines[1:]:
        data = json.loads(line)
        data.update(device=f"cuda:{data['gpu']}", seconds=[t * 100 for t in data["seconds"]])
        data["gbyte_s"] = round(2 * data["bytes"] / statistics.median(data["seconds"]) / 1e9, 5)
        slow.append(json.dumps(data))
    judged = judge(f"gpuaccept: 1\nvendor: V\ntools: {{python: '{tmp_path / 'bin' / 'python'}'}}\ngpus: {{count: 2}}\n"
                   "memory_bandwidth: {min_bandwidth: '0.1 GB/s', tool: torch}\n",
                   {"python": Output("\n".join(slow) + "\n", seconds=0)}, tmp_path)  # a tool that returns at once
    checks = judged.of("memory_bandwidth")
    assert {(c.outcome.value, c.measured) for c in checks} == {("failed", None)}
    assert "not a measurement" in checks[0].message and "the timings it printed" in checks[0].message


@pytest.mark.parametrize("ran", [True, False])
def test_a_replay_asks_the_bundle_whether_nvbandwidth_ran_never_the_verifying_machines_path(tmp_path, monkeypatch, ran):
    """memory_bandwidth's default tool is nvbandwidth where the measured host had it. Re-judged on a machine without
    nvbandwidth (a buyer's laptop), a bundle that ran it is judged from that run, and one without it from PyTorch's:
    the verifying machine's PATH would have sent an honest bundle's re-judge after a run that never was."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    contract = parse_contract(MEMBW_CONTRACT.format(threshold="min_bandwidth: '1000 GB/s'", tool=""))
    recorded = Recordings({"nvbandwidth": Output(H20)} if ran else {"python": Output("")})
    runner = ToolRunner(tmp_path / "evidence", replay=recorded, shared=False)
    assert runner.which("nvbandwidth") is None
    assert memory_bandwidth.nvbandwidth_cases(contract, runner) == ((memory_bandwidth.LOCAL_COPY,) if ran else ())
