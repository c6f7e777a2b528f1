"""Headers are sources too, and a figure stands for the copies the real tool makes.

1. What a copy tool prints of where it ran (nvbandwidth's driver and CUDA driver version, every tool's device names and
   PCI addresses) is set beside NVML's: another host's saved run replayed here, same bus layout, is refused naming
   NVML; a field the header lacks is listed unconfirmed in the check's details, never failed.
2. The least time a run's figures imply counts the copies the real tools make (nvbandwidth: 512 MiB buffers from v0.7,
   16 copies in each of the 2 samples of 3 at or below the median; p2pBandwidthLatencyTest: 40,000,000 ints x 5 per
   cell): a run 4x-16x shorter than that, which the old 64 MiB x 16 / 10,000,000-int model let pass, is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA, pci_tree, staged_recording
from judging import Output, judge

from pytest_gpuaccept.clauses import plausible
from pytest_gpuaccept.probes.nvbandwidth import copies, parse_nvbandwidth
from pytest_gpuaccept.probes.nvml import parse_host
from pytest_gpuaccept.probes.p2p_latency import cell_bytes, parse_p2p_latency
from pytest_gpuaccept.probes.sysfs import sysfs_bus_id

NVB = DATA / "nvbandwidth"
B300 = (NVB / "b300_sxm6_7gpu_v0.10.0_ce_full_bidir_read1_read2_total.txt").read_text()
AZURE_V04 = (NVB / "h100_8gpu_v0.4_read_ce_unpadded_row_labels_azure_nhc.txt").read_text()
DCGM_JSON = (NVB / "dcgm_tests_v0.5_json_verbose_1gpu_pcie3_waived_latency.json").read_text()
P2P_H100 = DATA / "p2pBandwidthLatencyTest" / "h100_8gpu_full_p2p_writes_spreadsheet_quoted_no_trailing_spaces.txt"
P2P_H100_BUSES = ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")

CONTRACT = "gpuaccept: 1\nvendor: V\ngpus: {{count: {count}}}\np2p: {{min_bandwidth: '{minimum}'{extra}}}\n"


def host_for(tmp_path: Path, driver: str | None = None, cuda: str | None = None, buses: tuple[str, ...] = (),
             source: str = "h100_sxm5_8gpu.json") -> Path:
    """CONSTRUCTED: a real NVML recording as the host an output came from (or, given another driver, one it did
    not): the driver and CUDA version given, and the PCI buses given (NVML's and CUDA's bus IDs alike)."""
    def change(reading):
        reading.update({k: v for k, v in (("driver", driver), ("cuda", cuda)) if v})
        for gpu, bus in zip(reading["gpus"], buses):
            gpu["pci_bus_id"] = f"00000000:{bus.upper()}:00.0"
        reading["cuda_devices"]["bus_ids"] = [sysfs_bus_id(g["pci_bus_id"]) for g in reading["gpus"]]
    return Path(staged_recording(tmp_path, source, change).split("=", 1)[1])


def b300_judged(tmp_path: Path, driver: str, cuda: str, seconds: float | None = None):
    """The real B300 run judged on a host of B300s (0x3182) whose NVML says `driver` and `cuda`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    nvml = host_for(tmp_path, driver, cuda)
    sysfs = Path(pci_tree(tmp_path / "sys", "0x3182", nvml).split("=", 1)[1])
    return judge(CONTRACT.format(count=7, minimum="700 GB/s", extra=""), {"nvbandwidth": Output(B300, seconds=seconds)},
                 tmp_path, nvml=nvml, sysfs=sysfs)


def outcomes(judged, clause: str = "p2p") -> set[str]:
    return {c.outcome.value for c in judged.of(clause)}


# ------------------------------------------------------------------ 1. the header against NVML

def test_the_real_headers_read_to_driver_cuda_and_devices():
    b300, azure, json_run = parse_nvbandwidth(B300), parse_nvbandwidth(AZURE_V04), parse_nvbandwidth(DCGM_JSON)
    assert (b300.driver, b300.cuda_driver, b300.cuda_runtime, b300.devices) == ("610.57.04", 13030, 13030, ())
    assert (azure.driver, azure.cuda_driver, azure.cuda_runtime) == ("570.133.20", 12080, 12020)
    assert [(d.ordinal, d.name, d.bus_id) for d in azure.devices] == [(n, "NVIDIA H100 80GB HBM3", None) for n in range(8)]
    assert (json_run.driver, json_run.cuda_driver, json_run.cuda_runtime) == ("565.02", None, 12070)
    h20 = parse_nvbandwidth((NVB / "h20-3e_8gpu_v0.8_device_local_copy.txt").read_text())
    assert [d.bus_id for d in h20.devices] == [f"00000000:{b}:00" for b in ("18", "38", "49", "59", "9b", "bb", "ca", "da")]
    p2p = parse_p2p_latency(P2P_H100.read_text())
    assert p2p.pci_addresses == tuple((0, int(b, 16), 0) for b in P2P_H100_BUSES)


def test_the_b300_run_on_its_own_host_is_accepted_with_its_header_confirmed(tmp_path):
    judged = b300_judged(tmp_path, "610.57.04", "13.3")
    assert outcomes(judged) == {"passed"}
    details = judged.of("p2p")[0].details
    assert details["header_confirmed"] == ["driver 610.57.04", "CUDA 13.3"]
    assert details["header_unconfirmed"] == ["GPU names and PCI addresses: nvbandwidth lists no device"]


def test_another_hosts_saved_b300_run_is_rejected_naming_nvmls_driver(tmp_path):
    """The same real run replayed on a host of the same GPUs and bus layout whose driver is another: not its output."""
    judged = b300_judged(tmp_path, "580.95.05", "13.3")
    assert outcomes(judged) == {"failed"} and len(judged.of("p2p")) == 42
    assert {c.message for c in judged.of("p2p")} == {
        "nvbandwidth's header says driver 610.57.04, but NVML here says driver 580.95.05: not this host's output"}
    assert judged.verdict != "accepted"


def test_another_cuda_version_in_the_header_is_rejected_naming_nvml(tmp_path):
    judged = b300_judged(tmp_path, "610.57.04", "13.0")
    assert {c.message for c in judged.of("p2p")} == {
        "nvbandwidth's header says CUDA 13.3, but NVML here says CUDA 13.0: not this host's output"}


def test_names_without_addresses_are_matched_through_cudas_device_order(tmp_path):
    """nvbandwidth v0.4 prints `Device N: NAME` alone (the real Azure NHC run): NVML's GPU at CUDA's device N."""
    host = parse_host_of(host_for(tmp_path, "570.133.20", "12.8"))
    foreign, details = plausible.foreign_header("nvbandwidth", plausible.nvbandwidth_said(parse_nvbandwidth(AZURE_V04)), host)
    assert foreign is None
    assert details["header_confirmed"][:3] == [
        "driver 570.133.20", "CUDA 12.8", "device 0 NVIDIA H100 80GB HBM3 CUDA device 0 (0000:18:00.0) (NVML GPU0)"]
    assert details["header_unconfirmed"] == []


def test_names_without_addresses_of_another_model_are_not_this_hosts(tmp_path):
    a100 = parse_host_of(host_for(tmp_path, "570.133.20", "12.8", source="a100_sxm4_40gb_8gpu.json"))
    foreign, _ = plausible.foreign_header("nvbandwidth", plausible.nvbandwidth_said(parse_nvbandwidth(AZURE_V04)), a100)
    assert foreign == ("nvbandwidth's device 0 'NVIDIA H100 80GB HBM3' is CUDA device 0 (0000:18:00.0), where NVML "
                       "has GPU0 'NVIDIA A100-SXM4-40GB': not this host's output")


def test_a_header_field_the_json_lacks_is_unconfirmed_never_failed(tmp_path):
    """-j output has no `CUDA Driver Version` (its `CUDA Runtime Version` is not compared) and no device list here."""
    host = parse_host_of(host_for(tmp_path, "565.02", "12.7"))
    foreign, details = plausible.foreign_header("nvbandwidth", plausible.nvbandwidth_said(parse_nvbandwidth(DCGM_JSON)), host)
    assert foreign is None
    assert details == {"header_confirmed": ["driver 565.02"],
                       "header_unconfirmed": ["CUDA: nvbandwidth does not print it",
                                              "GPU names and PCI addresses: nvbandwidth lists no device"]}


def test_a_p2p_latency_run_listing_gpus_at_other_addresses_is_rejected_naming_nvml(tmp_path):
    """The real H100 p2pBandwidthLatencyTest run (GPUs at 19, 3b, ...) where NVML has its GPUs at 18, 28, ...;
    beside it, the same run on the host whose buses it printed, accepted."""
    contract = CONTRACT.format(count=8, minimum="300 GB/s", extra=", tool: p2pBandwidthLatencyTest")
    judged = judge(contract, {"p2pBandwidthLatencyTest": Output(P2P_H100)}, tmp_path / "elsewhere")
    assert outcomes(judged) == {"failed"}
    assert judged.of("p2p")[0].message == (
        "p2pBandwidthLatencyTest's device 0 'NVIDIA H100 80GB HBM3' is at PCI 0000:19:00, where NVML lists no GPU here "
        "(NVML: GPU0 0000:18:00.0, GPU1 0000:28:00.0, GPU2 0000:38:00.0, GPU3 0000:48:00.0, GPU4 0000:58:00.0, "
        "GPU5 0000:68:00.0, GPU6 0000:78:00.0, GPU7 0000:88:00.0): not this host's output")
    nvml = host_for(tmp_path, buses=P2P_H100_BUSES)
    judged = judge(contract, {"p2pBandwidthLatencyTest": Output(P2P_H100)}, tmp_path / "its-own", nvml=nvml,
                   sysfs=Path(pci_tree(tmp_path / "sys", "0x2330", nvml).split("=", 1)[1]))
    assert outcomes(judged) == {"passed"}
    assert judged.of("p2p")[0].details["header_unconfirmed"] == [
        "driver: p2pBandwidthLatencyTest does not print it", "CUDA: p2pBandwidthLatencyTest does not print it"]


def test_the_p2p_latency_header_reads_to_its_devices():
    said = plausible.p2p_latency_said(parse_p2p_latency(P2P_H100.read_text()))
    assert said.devices[0] == (0, "NVIDIA H100 80GB HBM3", (0, 0x19, 0)) and len(said.devices) == 8


def parse_host_of(path: Path):
    return parse_host(json.loads(path.read_text()))


# ------------------------------------------------------------------ 2. the copies behind each figure

@pytest.mark.parametrize("version, argv, basis", [
    ("v0.2", (), "64 MiB x 16 copies x 2 of 3 samples per figure"),
    ("v0.6", (), "64 MiB x 16 copies x 2 of 3 samples per figure"),
    ("v0.7", (), "512 MiB x 16 copies x 2 of 3 samples per figure"),
    ("v0.10.0", (), "512 MiB x 16 copies x 2 of 3 samples per figure"),
    (None, (), "64 MiB x 16 copies x 2 of 3 samples per figure"),  # no version printed: the smallest default
    ("v0.8", ("-b", "128"), "128 MiB x 16 copies x 2 of 3 samples per figure"),
    ("v0.8", ("--bufferSize=32", "-i", "5"), "32 MiB x 16 copies x 3 of 5 samples per figure"),
    ("v0.8", ("-i", "4", "-m"), "512 MiB x 16 copies x 4 of 4 samples per figure"),
    ("v0.8", ("--loopCount", "4"), "512 MiB x 4 copies x 2 of 3 samples per figure"),
])
def test_each_nvbandwidth_figure_stands_for_its_versions_copies(version, argv, basis):
    result = parse_nvbandwidth(B300)
    counted = copies(type(result)(version, None, result.matrices), argv)
    assert counted.basis == basis
    assert counted.per_figure == counted.buffer_bytes * counted.loops * counted.timed_samples


def test_the_work_the_real_outputs_print():
    """B300 v0.10: 196 figures of 512 MiB x 16 x 2 = 16 GiB each; the H100 p2pBandwidthLatencyTest: 4 matrices of 64
    cells of 800 MB (both ways 1.6 GB; a diagonal cell's figure counts its bytes twice)."""
    work = plausible.nvbandwidth_work(parse_nvbandwidth(B300), ())
    assert work.nbytes == 196 * 16 * 2**30 and work.seconds == pytest.approx(12.84, abs=0.01)
    assert work.basis == "512 MiB x 16 copies x 2 of 3 samples per figure"
    p2p = parse_p2p_latency(P2P_H100.read_text())
    work = plausible.p2p_latency_work(p2p)
    assert work.nbytes == 2 * (56 * 800e6 + 8 * 1600e6) + 2 * (56 * 1600e6 + 8 * 3200e6)
    assert work.seconds == pytest.approx(3.22, abs=0.01)
    assert (cell_bytes(()), cell_bytes(("--numElems=10000000",))) == (800_000_000, 200_000_000)
    assert plausible.p2p_latency_work(p2p, ("--numElems=10000000",)).seconds == pytest.approx(work.seconds / 4)


def test_a_b300_run_16x_shorter_than_its_copies_is_rejected_its_honest_twin_accepted(tmp_path):
    """3 s: what the old model (64 MiB x 16 per figure, 0.80 s) let pass; the copies the run prints take 12.84 s."""
    judged = b300_judged(tmp_path / "short", "610.57.04", "13.3", seconds=3.0)
    assert outcomes(judged) == {"failed"}
    assert {c.message for c in judged.of("p2p")} == {
        "`nvbandwidth -t device_to_device_memcpy_write_ce -t device_to_device_memcpy_read_ce` ran 3.05 s but reports "
        "moving 3.1 TiB at 262 GB/s on average, 12.84 s of copies (512 MiB x 16 copies x 2 of 3 samples per figure): "
        "not a measurement"}
    assert outcomes(b300_judged(tmp_path / "long", "610.57.04", "13.3", seconds=13.0)) == {"passed"}


def test_a_p2p_latency_run_4x_shorter_than_its_copies_is_rejected_its_honest_twin_accepted(tmp_path):
    nvml = host_for(tmp_path, buses=P2P_H100_BUSES)
    sysfs = Path(pci_tree(tmp_path / "sys", "0x2330", nvml).split("=", 1)[1])
    contract = CONTRACT.format(count=8, minimum="300 GB/s", extra=", tool: p2pBandwidthLatencyTest")
    short = judge(contract, {"p2pBandwidthLatencyTest": Output(P2P_H100, seconds=1.0)}, tmp_path / "a", nvml=nvml,
                  sysfs=sysfs)
    assert outcomes(short) == {"failed"}
    assert short.of("p2p")[0].message == (
        "`p2pBandwidthLatencyTest` ran 1.05 s but reports moving 321.9 GiB at 107 GB/s on average, 3.22 s of copies "
        "(40,000,000 ints x 5 repeats per figure): not a measurement")
    honest = judge(contract, {"p2pBandwidthLatencyTest": Output(P2P_H100, seconds=3.5)}, tmp_path / "b", nvml=nvml,
                   sysfs=sysfs)
    assert outcomes(honest) == {"passed"}
