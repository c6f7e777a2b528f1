"""p2p: every corpus nvbandwidth and p2pBandwidthLatencyTest output read as EXPECTED.yaml says, then
replayed through fake tools: each ordered pair measured from its own cells, a pair without peer access
failing, never passing on a number that went through host memory."""


import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import DATA, nvml_recording, pci_tree, staged_recording
from judging import Output, judge

from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.probes import ParseError, _run
from pytest_gpuaccept.probes.nvbandwidth import parse_nvbandwidth
from pytest_gpuaccept.probes.p2p_latency import parse_p2p_latency
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id
from pytest_gpuaccept.probes.torch_p2p import parse_torch_p2p

NVB = DATA / "nvbandwidth"
P2P = DATA / "p2pBandwidthLatencyTest"
NVB_EXPECTED = yaml.safe_load((NVB / "EXPECTED.yaml").read_text())
P2P_EXPECTED = yaml.safe_load((P2P / "EXPECTED.yaml").read_text())


@pytest.mark.parametrize("name", sorted(NVB_EXPECTED))
def test_every_nvbandwidth_output_reads_as_expected(name):
    result = parse_nvbandwidth((NVB / name).read_text(errors="replace"))
    facts = NVB_EXPECTED[name]
    assert result.version == facts["version"]
    assert set(result.matrices) | set(result.waived) == set(facts["testcases"])
    for key, expected in facts["testcases"].items():
        if expected.get("status") == "Waived":
            assert key in result.waived
            continue
        matrix = result.matrices[key]
        assert (matrix.unit, matrix.sum) == (expected["unit"], pytest.approx(expected["sum"], abs=1e-9))
        if expected.get("matrix"):
            assert [list(row) for row in matrix.cells] == expected["matrix"]
        if "coefficient_of_variation" in expected:
            assert matrix.coefficient_of_variation == expected["coefficient_of_variation"]


def test_the_p2p_latency_test_reads_as_expected():
    (name, facts), = P2P_EXPECTED.items()
    result = parse_p2p_latency((P2P / name).read_text())
    assert list(result.gpus) == facts["gpus"] and not result.no_peer_access
    for key, rows in facts["matrices"].items():
        assert [list(row) for row in result.matrices[key]] == [[float(c) for c in row] for row in rows]


B300 = (NVB / "b300_sxm6_7gpu_v0.10.0_ce_full_bidir_read1_read2_total.txt").read_text()
P2P_H100 = P2P / "h100_8gpu_full_p2p_writes_spreadsheet_quoted_no_trailing_spaces.txt"
P2P_H100_BUSES = ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")  # its `Device: N, ..., pciBusID: BB` lines


def host_for(tmp_path, driver: str | None = None, cuda: str | None = None, buses: tuple[str, ...] = ()) -> Path:
    """CONSTRUCTED: the 8-GPU H100 NVML recording as the host a real output came from: its driver and CUDA version
    and the PCI buses the output printed (NVML's and CUDA's bus IDs alike), so that the output is this host's."""
    def change(reading):
        reading.update({k: v for k, v in (("driver", driver), ("cuda", cuda)) if v})
        for gpu, bus in zip(reading["gpus"], buses):
            gpu["pci_bus_id"] = f"00000000:{bus.upper()}:00.0"
        reading["cuda_devices"]["bus_ids"] = [sysfs_bus_id(g["pci_bus_id"]) for g in reading["gpus"]]
    return Path(staged_recording(tmp_path, "h100_sxm5_8gpu.json", change).split("=", 1)[1])


def b300_host(tmp_path):
    """The NVML recording's GPUs as B300s (0x3182): B300 figures are more than an H100's NVLinks carry."""
    pci_tree(tmp_path / "sys", "0x3182")
    return tmp_path / "sys"


def b300_judge(contract: str, tmp_path, output: str = B300):
    """The B300 output judged on the host it came from: driver 610.57.04, CUDA 13.3 (its header), B300 GPUs."""
    return judge(contract, {"nvbandwidth": Output(output)}, tmp_path, nvml=host_for(tmp_path, "610.57.04", "13.3"),
                 sysfs=b300_host(tmp_path))


@pytest.mark.parametrize("cut, why", [
    (lambda t: t.replace(" 3    765.80    765.18    765.93       N/A    765.32    765.05    764.50\n", ""), "row 3 missing"),
    (lambda t: t.replace("SUM device_to_device_memcpy_read_ce 32140.19", "SUM device_to_device_memcpy_read_ce 32999.19"),
     "not the printed SUM"),
    (lambda t: t.split("SUM device_to_device_memcpy_read_ce")[0], "no SUM line after the matrix"),
    (lambda t: t.replace("765.86", "765.86 ..."), "not 7 cells wide"),
    (lambda t: t + "\nASSERT: verification of device 3 failed\n", "the run reported a failure"),
])
def test_a_cut_edited_or_failed_nvbandwidth_output_is_refused(cut, why):
    with pytest.raises(ParseError) as raised:
        parse_nvbandwidth(cut(B300))
    assert why in str(raised.value)


CONTRACT = """\
gpuaccept: 1
vendor: V
gpus:
  count: {count}
p2p:
  min_bandwidth: "{minimum}"
{extra}"""


def _checks(run, clause="p2p"):
    return {c["subject"]: c for c in run.checks(clause)}


def _judged(judged, clause="p2p"):
    return {c.subject: c for c in judged.of(clause)}


def test_nvbandwidth_each_ordered_pair_is_judged_on_its_own_cells(tmp_path):
    judged = b300_judge(CONTRACT.format(count=7, minimum="700 GB/s", extra="  min_bidirectional: '1500 GB/s'\n"), tmp_path)
    result = parse_nvbandwidth(B300)
    write = result.matrices["device_to_device_memcpy_write_ce"].cells
    read = result.matrices["device_to_device_memcpy_read_ce"].cells
    checks = _judged(judged)
    assert len(checks) == 42
    for i in range(7):
        for j in range(7):
            if i != j:  # data i -> j: GPU i writing into j, and GPU j reading from i
                assert checks[f"GPU{i}->GPU{j}"].measured == pytest.approx(min(write[i][j], read[j][i]), abs=0.01)
    assert {c.outcome.value for c in checks.values()} == {"passed"}
    both = _judged(judged, "p2p.bidirectional")
    total = result.matrices["device_to_device_bidirectional_memcpy_read_ce_total"].cells
    assert len(both) == 21
    assert all(both[f"GPU{i}<->GPU{j}"].measured == min(total[i][j], total[j][i]) for i in range(7) for j in range(i + 1, 7))
    assert [a for a in judged.recordings.asked if a[0] == "nvbandwidth"] == [
        ["nvbandwidth", "-t", "device_to_device_memcpy_write_ce", "-t", "device_to_device_memcpy_read_ce", "-t",
         "device_to_device_bidirectional_memcpy_read_ce"]]


def test_nvbandwidth_a_threshold_just_above_the_weakest_pairs_fails_those_pairs_only(tmp_path):
    result = parse_nvbandwidth(B300)
    write = result.matrices["device_to_device_memcpy_write_ce"].cells
    read = result.matrices["device_to_device_memcpy_read_ce"].cells
    pairs = {(i, j): min(write[i][j], read[j][i]) for i in range(7) for j in range(7) if i != j}
    lowest = min(pairs.values())
    weakest = sorted(f"GPU{i}->GPU{j}" for (i, j), value in pairs.items() if value == lowest)
    assert len(weakest) == 4  # four pairs at 764.16 GB/s in the real output: the other 38 stay above
    judged = b300_judge(CONTRACT.format(count=7, minimum=f"{lowest + 0.005:.3f} GB/s", extra=""), tmp_path)
    failed = sorted(s for s, c in _judged(judged).items() if c.outcome.value != "passed")
    assert failed == weakest


def test_p2p_latency_test_a_threshold_1_gb_s_above_a_cell_fails_that_pair_only(tmp_path):
    nvml = host_for(tmp_path, buses=P2P_H100_BUSES)
    judged = judge(CONTRACT.format(count=8, minimum="366.30 GB/s", extra="  tool: p2pBandwidthLatencyTest\n"),
                   {"p2pBandwidthLatencyTest": Output(P2P_H100)}, tmp_path, nvml=nvml,
                   sysfs=Path(pci_tree(tmp_path / "sys", "0x2330", nvml).split("=", 1)[1]))
    checks = _judged(judged)
    assert checks["GPU0->GPU1"].measured == 365.3 and checks["GPU7->GPU6"].measured == 393.08
    assert [s for s, c in checks.items() if c.outcome.value != "passed"] == ["GPU0->GPU1"]
    assert checks["GPU0->GPU1"].message == ("GPU0->GPU1 365.3 GB/s < 366.3 GB/s "
                                                "(p2pBandwidthLatencyTest P2P writes; 81% of the published "
                                                "450 GB/s (H100 SXM5 80GB NVLink))")


def test_a_pair_without_peer_access_fails_and_its_host_memory_figure_is_never_taken(accept, fake_tools, tmp_path):
    text = P2P_H100.read_text().replace("Device=2 CAN Access Peer Device=5", "Device=2 CANNOT Access Peer Device=5")
    fake_tools.add("p2pBandwidthLatencyTest", text)
    run = accept(CONTRACT.format(count=8, minimum="300 GB/s", extra="  tool: p2pBandwidthLatencyTest\n"),
                 f"--gpuaccept-nvml={host_for(tmp_path, buses=P2P_H100_BUSES)}")
    check = _checks(run)["GPU2->GPU5"]
    assert (check["outcome"], check["measured"]) == ("failed", None)
    assert "CANNOT Access Peer" in check["message"]
    assert run.json["verdict"] == "rejected"


def test_nvbandwidth_waiving_peer_copies_fails_every_pair(tmp_path):
    output = Output(NVB / "dcgm_tests_v0.5_json_verbose_1gpu_pcie3_waived_latency.json")
    judged = judge(CONTRACT.format(count=2, minimum="10 GB/s", extra=""), {"nvbandwidth": output}, tmp_path,
                   nvml=host_for(tmp_path, "565.02"))
    checks = _judged(judged)
    assert {c.outcome.value for c in checks.values()} == {"failed"} and len(checks) == 2
    assert "nvbandwidth waived device_to_device_memcpy_write_ce, device_to_device_memcpy_read_ce: peer access is " \
           "not possible" in checks["GPU0->GPU1"].message


def test_more_gpus_contracted_than_the_matrix_has_fail(tmp_path):
    judged = b300_judge(CONTRACT.format(count=8, minimum="700 GB/s", extra=""), tmp_path)
    checks = _judged(judged)
    assert checks["GPU0->GPU7"].outcome.value == "failed"
    assert checks["GPU0->GPU7"].message == "GPU0->GPU7 not in the nvbandwidth matrix: it has 7 GPUs"
    assert checks["GPU0->GPU1"].outcome.value == "passed"


def test_without_nvbandwidth_every_pair_is_not_measured(accept, fake_tools):
    run = accept(CONTRACT.format(count=2, minimum="10 GB/s", extra=""), nvml_recording("h100_sxm5_8gpu.json"))
    assert [c["message"] for c in run.checks("p2p")] == ["not measured: nvbandwidth not found on PATH"] * 2


def test_the_p2p_section_is_validated():
    with pytest.raises(ContractError) as raised:
        parse_contract("gpuaccept: 1\nvendor: V\ngpus: {count: 8}\np2p: {min_bandwidth: '350 GB/s', tool: nccl}\n",
                       "v.yaml")
    assert raised.value.problems == ["v.yaml:4: p2p.tool: expected one of 'nvbandwidth', 'p2pBandwidthLatencyTest', "
                                     "'torch', got 'nccl'"]


def test_corpus_files_are_all_covered():
    assert sorted(p.name for p in NVB.iterdir() if p.name != "EXPECTED.yaml") == sorted(NVB_EXPECTED)
    assert sorted(p.name for p in P2P.iterdir() if p.name != "EXPECTED.yaml") == sorted(P2P_EXPECTED)


def test_the_report_draws_the_pairs_as_a_heat_map(accept, fake_tools, tmp_path):
    fake_tools.add("p2pBandwidthLatencyTest", P2P_H100)
    run = accept(CONTRACT.format(count=8, minimum="366.30 GB/s", extra="  tool: p2pBandwidthLatencyTest\n"),
                 f"--gpuaccept-nvml={host_for(tmp_path, buses=P2P_H100_BUSES)}")
    page = run.html
    assert "p2p (GB/s; row: from, column: to)" in page  # its row of the report's Pairs (report/pairs.py)
    assert 'title="GPU0->GPU1: failed">365.3<' in page and 'title="GPU7->GPU6: passed">393.08<' in page


TORCH = (DATA / "torch" / "p2p_cpu_2dev_bidirectional.txt").read_text()  # a real CPU run: device cpu
TORCH_AS_GPUS = TORCH.replace("device cpu", "device cuda", 1)  # relabelled here, not recorded on GPUs


def _torch_run(tmp_path, output: str, minimum: str = "5 GB/s"):
    contract = CONTRACT.format(count=2, minimum=minimum, extra="  min_bidirectional: '10 GB/s'\n  tool: torch\n"
                               "  size: '64 MiB'\n  repeats: 3\n")
    contract = contract.replace("gpus:", f'tools: {{python: "{tmp_path / "bin" / "python"}"}}\ngpus:')
    return judge(contract, {"python": Output(output)}, tmp_path)


def test_torch_copies_are_judged_from_their_bytes_and_timings(tmp_path):
    judged = _torch_run(tmp_path, TORCH_AS_GPUS)
    one_way = _judged(judged)
    assert one_way["GPU0->GPU1"].measured == round(67108864 / 0.009120910000092408 / 1e9, 3)
    assert {c.outcome.value for c in one_way.values()} == {"passed"}
    assert _judged(judged, "p2p.bidirectional")["GPU0<->GPU1"].measured == round(2 * 67108864 / 0.018275563000315742 / 1e9, 3)
    assert [a for a in judged.recordings.asked if a[0] == "python"] == [
        ["python", "-m", "pytest_gpuaccept.workloads.p2p", "--gpus", "2", "--bytes", "67108864", "--repeats", "3",
         "--bidirectional"]]


def test_torch_a_pair_without_peer_access_fails_and_a_cpu_run_is_not_a_gpu_figure(tmp_path):
    no_peer = TORCH_AS_GPUS.replace('{"src": 1, "dst": 0, "peer": true', '{"src": 1, "dst": 0, "peer": false', 1)
    judged = _torch_run(tmp_path, no_peer)
    check = _judged(judged)["GPU1->GPU0"]
    assert (check.outcome.value, check.measured) == ("failed", None) and "no peer access" in check.message
    assert _judged(judged, "p2p.bidirectional")["GPU0<->GPU1"].outcome.value == "failed"


def test_torch_copies_between_cpu_tensors_are_never_a_gpu_figure(tmp_path):
    judged = _torch_run(tmp_path, TORCH)
    assert {c.message for c in judged.of("p2p")} == {"not measured: the copies ran on the cpu, not between GPUs"}


def test_the_torch_workload_runs_for_real_on_this_cpu_or_says_pytorch_is_missing():
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "pytest_gpuaccept.workloads.p2p", "--gpus", "2",
                           "--bytes", str(1 << 20), "--repeats", "2", "--bidirectional", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    if importlib.util.find_spec("torch") is None:
        assert done.returncode == 3 and "PyTorch is not installed" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        result = parse_torch_p2p(done.stdout)
        assert set(result.one_way) == {(0, 1), (1, 0)} and set(result.both_ways) == {(0, 1)}


def test_nvbandwidth_is_found_where_dcgm_ships_it_when_not_on_path(tmp_path, monkeypatch):
    for cuda in ("cuda12", "cuda13"):
        tool = tmp_path / "plugins" / cuda / "nvbandwidth"
        tool.parent.mkdir(parents=True)
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    monkeypatch.setitem(_run.PACKAGED, "nvbandwidth", (str(tmp_path / "plugins" / "cuda*" / "nvbandwidth"),))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    runner = _run.ToolRunner(tmp_path / "evidence")
    assert runner.which("nvbandwidth") == str(tmp_path / "plugins" / "cuda13" / "nvbandwidth")
