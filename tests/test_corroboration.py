"""Every claim from two independent sources: each fraud a vendor could stage is rejected, naming both
sources; the same host telling the truth is accepted. Real H200 readings where a device machine recorded
them (tests/data/h200), constructed NVML recordings beside real sysfs layouts elsewhere.

The clauses are judged in process from the recorded outputs (tests/judging.py); a whole pytest run stays where the
run itself is the point: one accepted, one rejected, and record-nvml's own exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import IB_UP, recording
from conftest import DATA, pci_port, pci_tree, staged_recording, virtual_net
from judging import Clock, Output, judge, option_path, workload

from pytest_gpuaccept.clauses.utilisation import XID as XID_CLAUSE
from pytest_gpuaccept.contract import parse_contract
from pytest_gpuaccept.measurements import LoadRun
from pytest_gpuaccept.probes._run import Reading
from pytest_gpuaccept.probes.kernel_log import parse_xids
from pytest_gpuaccept.probes.nvml import GpuSeries
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Check

H200 = DATA / "h200"
GPUS_1 = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 1\n  model: H200\n  form_factor: sxm\n"
GPUS_8 = "gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\n  model: H100 SXM5\n"


def real_sysfs(root: Path) -> Path:
    """The H200 machine's PCI bus as `sysfs-pci-list.txt` recorded it: every function's vendor, device, class."""
    for line in (H200 / "sysfs-pci-list.txt").read_text().splitlines():
        bus, *fields = line.split()
        folder = root / "bus" / "pci" / "devices" / bus
        folder.mkdir(parents=True)
        for field in fields:
            name, _, value = field.partition("=")
            if name in ("vendor", "device", "class"):
                (folder / name).write_text(value + "\n")
    (root / "class" / "net").mkdir(parents=True)
    return root


def staged(tmp_path: Path, source: str, change) -> Path:
    """conftest.staged_recording's NVML recording, as the file the harness reads."""
    return Path(staged_recording(tmp_path, source, change).split("=", 1)[1])


def identity(judged) -> dict[str, Check]:
    return {c.subject: c for c in judged.of("gpus.identity")}


def test_a_real_h200_is_who_nvml_sysfs_and_cuda_say(accept, tmp_path):
    """A whole run, accepted: the real H200's readings."""
    run = accept(GPUS_1, f"--gpuaccept-nvml={H200 / 'nvml-h200.json'}", f"--gpuaccept-sysfs={real_sysfs(tmp_path / 'sys')}")
    check = {c["subject"]: c for c in run.checks("gpus.identity")}["GPU0"]
    assert (check["outcome"], check["measured"]) == ("passed", "0x2335"), check["message"]
    assert check["message"] == ("GPU0: NVML 'NVIDIA H200' at 0000:00:06.0, sysfs PCI device 0x2335 (H200 SXM 141GB), "
                                "visible to CUDA, MIG off")
    assert run.json["verdict"] == "accepted"


def test_a_gpu_hidden_from_cuda_by_cuda_visible_devices_fails(accept, tmp_path):
    """A whole run, rejected. Recorded for real on the H200 with CUDA_VISIBLE_DEVICES= : NVML lists the GPU, CUDA
    cannot start."""
    run = accept(GPUS_1, f"--gpuaccept-nvml={H200 / 'nvml-h200-cuda-visible-devices-empty.json'}",
                 f"--gpuaccept-sysfs={real_sysfs(tmp_path / 'sys')}")
    check = {c["subject"]: c for c in run.checks("gpus.identity")}["GPU0"]
    assert check["outcome"] == "failed" and check["measured"] == "0x2335"
    assert check["message"] == "CUDA in this run cannot use GPU0: cuInit returned CUDA error 100, CUDA_VISIBLE_DEVICES=''"
    assert run.json["verdict"] == "rejected"


def test_one_of_eight_gpus_hidden_from_cuda_is_named(tmp_path):
    def hide(reading):
        reading["cuda_devices"].update(count=7, bus_ids=reading["cuda_devices"]["bus_ids"][:3] +
                                       reading["cuda_devices"]["bus_ids"][4:], visible_devices="0,1,2,4,5,6,7")
    judged = judge(GPUS_8, {}, tmp_path, nvml=staged(tmp_path, "h100_sxm5_8gpu.json", hide))
    failed = {s: c.message for s, c in identity(judged).items() if c.outcome.value != "passed"}
    assert list(failed) == ["GPU3"]
    assert failed["GPU3"].startswith("GPU3 (0000:48:00.0) is listed by NVML but not visible to CUDA in this run: "
                                     "CUDA sees 7 device(s) at 0000:18:00.0")
    assert failed["GPU3"].endswith("CUDA_VISIBLE_DEVICES='0,1,2,4,5,6,7'")


def test_mig_partitioned_gpus_fail(tmp_path):
    def mig(reading):
        reading["gpus"][5]["mig_mode"] = 1
    judged = judge(GPUS_8, {}, tmp_path, nvml=staged(tmp_path, "h100_sxm5_8gpu.json", mig))
    failed = {s: c.message for s, c in identity(judged).items() if c.outcome.value != "passed"}
    assert failed == {"GPU5": "MIG mode is on for GPU5: it is partitioned into instances, not one whole GPU"}


def test_one_gpu_presented_eight_times_fails_on_every_source(tmp_path):
    """A shim NVML that answers eight indices with the same GPU: one UUID, serial and bus ID; the PCI bus has one."""
    def clone(reading):
        reading["gpus"] = [{**reading["gpus"][0], "index": i} for i in range(8)]
        reading["cuda_devices"].update(count=1, bus_ids=["0000:18:00.0"])
    pci_tree(tmp_path / "sys", recording="h100_sxm5_4gpu.json")
    judged = judge(GPUS_8, {}, tmp_path, nvml=staged(tmp_path, "h100_sxm5_8gpu.json", clone), sysfs=tmp_path / "sys")
    checks = identity(judged)
    assert {c.outcome.value for c in checks.values()} == {"failed"}
    message = checks["GPU1"].message
    assert "NVML gives GPU1 the same UUID 'GPU-h100-00aaaaaaa-0000-0000-0000-000000000000' as GPU0, GPU2" in message
    assert "the same serial '1652322000000'" in message and "the same PCI bus ID '00000000:18:00.0'" in message
    assert "NVML lists 8 GPUs, the PCI bus in sysfs has 4 NVIDIA GPU functions" in message
    count = judged.of("gpus.count")[0]  # NVML's count alone would have passed; CUDA sees one
    assert (count.outcome.value, count.message) == ("failed", "8 GPUs found, contract says 8; but NVML lists 8 and CUDA "
                                                              "in this run sees 1")


def test_an_h100_pcie_named_like_an_sxm5_fails_on_its_device_id(tmp_path):
    """NVML (or a shim) names the cards 'NVIDIA H100 80GB HBM3'; the PCI functions are 0x2331, H100 PCIe."""
    pci_tree(tmp_path / "sys", "0x2331")
    judged = judge(GPUS_8 + "  form_factor: sxm\n", {}, tmp_path, sysfs=tmp_path / "sys")
    check = identity(judged)["GPU0"]
    assert check.outcome.value == "failed"
    assert check.message == "NVML says GPU0 is PCI device 0x2330, sysfs says 0x2331 at 0000:18:00.0"
    assert judged.of("gpus.form_factor")[0].message == ("GPU0 is PCI device 0x2331, a H100 PCIe (pcie), "
                                                        "not sxm as contracted")


def test_a_name_that_is_not_its_device_ids_model_fails(tmp_path):
    """A shim NVML that renames cards and also reports the device ID sysfs has: the name gives it away."""
    def rename(reading):
        for gpu in reading["gpus"]:
            gpu["name"], gpu["pci_device_id"] = "NVIDIA H100 80GB HBM3", "0x20b0"
    judged = judge(GPUS_8, {}, tmp_path, nvml=staged(tmp_path, "a100_sxm4_40gb_8gpu.json", rename))
    check = identity(judged)["GPU0"]
    assert check.message == ("NVML names GPU0 'NVIDIA H100 80GB HBM3', but sysfs says PCI device 0x20b0 at "
                             "0000:18:00.0, a A100 SXM4 40GB (NVML name 'NVIDIA A100-SXM4-40GB')")


def test_nvml_without_a_pci_function_behind_it_fails(tmp_path):
    pci_tree(tmp_path / "sys", recording="h100_sxm5_4gpu.json")
    judged = judge(GPUS_8, {}, tmp_path, sysfs=tmp_path / "sys")
    failed = {s: c.message for s, c in identity(judged).items() if c.outcome.value != "passed"}
    assert len(failed) == 8  # every GPU: NVML lists 8 where the PCI bus has 4
    assert failed["GPU0"] == "NVML lists 8 GPUs, the PCI bus in sysfs has 4 NVIDIA GPU functions (0000:18:00.0, " \
        "0000:28:00.0, 0000:38:00.0, 0000:48:00.0)"
    assert "NVML puts GPU4 ('NVIDIA H100 80GB HBM3') at PCI 0000:58:00.0, where sysfs has no NVIDIA GPU function" \
        in failed["GPU4"]


def test_a_recording_without_cudas_word_is_not_measured(tmp_path):
    def old(reading):
        del reading["cuda_devices"]
    judged = judge(GPUS_8, {}, tmp_path, nvml=staged(tmp_path, "h100_sxm5_8gpu.json", old))
    check = identity(judged)["GPU0"]
    assert check.outcome.value == "not_measured"
    assert check.message == "not measured: GPU0: CUDA's device list could not be read, so NVML's word stands alone"


# ---------------------------------------------------------------- network: sysfs against the tools' word

NICS_25 = "gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['{pattern}']\n  min_speed: '25 Gb/s'\n{extra}"
ICE_25G = DATA / "ethtool" / "ice_25g_dac_link_partner.txt"
RDMA_8 = "gpuaccept: 1\nvendor: V\nrdma:\n  devices: ['mlx5_*']\n  min_fraction_of_line_rate: 0.9\n{extra}"


def test_a_physical_port_passes_and_shows_its_pci_function(tmp_path):
    port = pci_port(tmp_path / "sys", "net", "ens6f0", "0000:9a:00.0", driver="ice")
    (port / "speed").write_text("25000\n")  # the kernel's word on the speed, as an honest host's sysfs has it
    judged = judge(NICS_25.format(pattern="ens6f0", extra=""), {"ethtool": Output(ICE_25G)}, tmp_path,
                   sysfs=tmp_path / "sys")
    check = judged.of("nics")[0]
    assert check.outcome.value == "passed"
    assert check.message == "ens6f0 speed 25 Gb/s >= 25 Gb/s (PCI 0000:9a:00.0, driver ice)"


def test_a_tap_named_like_a_nic_fails_whatever_ethtool_says(tmp_path):
    """ethtool on a tap prints what the vendor set (`ethtool -s tap0 speed 25000`); sysfs says it is virtual."""
    virtual_net(tmp_path / "sys", "ens400g0")
    judged = judge(NICS_25.format(pattern="ens400g0", extra=""), {"ethtool": Output(ICE_25G)}, tmp_path,
                   sysfs=tmp_path / "sys")
    check = judged.of("nics")[0]
    assert check.outcome.value == "failed"
    assert check.message == ("ens400g0 is not a PCI function: a virtual device (devices/virtual/net/ens400g0) "
                             "(veth, tap, bridge, dummy or the like) (sysfs), whatever its name or settings say")
    asked = [argv for argv in judged.recordings.asked if Path(argv[0]).name == "ethtool"]
    assert asked == []  # never measured: nothing it says could make a tap a port


def test_a_bond_counts_as_physical_only_when_every_member_is(tmp_path):
    ethtool = {"ethtool": Output(DATA / "ethtool" / "bond0_200000_lacp_tabs.txt")}
    root = tmp_path / "sys"
    bond = virtual_net(root, "bond0")
    (bond / "bonding").mkdir()
    (bond / "bonding" / "slaves").write_text("ens1f0 veth9\n")
    pci_port(root, "net", "ens1f0", "0000:3b:00.0")
    virtual_net(root, "veth9")
    contract = "gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['bond0']\n  min_speed: '200 Gb/s'\n"
    check = judge(contract, ethtool, tmp_path / "first", sysfs=root).of("nics")[0]
    assert check.outcome.value == "failed"
    assert check.message.startswith("bond0 is a bond of ens1f0, veth9 whose members are not all physical "
                                    "(veth9: not a PCI function")
    (bond / "bonding" / "slaves").write_text("ens1f0 ens1f1\n")
    (bond / "speed").write_text("200000\n")  # the bonding driver's sum of its members, as ethtool says
    pci_port(root, "net", "ens1f1", "0000:3b:00.1")
    check = judge(contract, ethtool, tmp_path / "second", sysfs=root).of("nics")[0]
    assert (check.outcome.value, check.message) == ("passed", "bond0 speed 200 Gb/s >= 200 Gb/s (bond of ens1f0, ens1f1)")


def test_two_names_on_one_physical_port_count_once(tmp_path):
    root = tmp_path / "sys"
    pci_port(root, "net", "ens6f0", "0000:9a:00.0", phys_port_id="b8cef6030012ab00")
    pci_port(root, "net", "ens6f0v", "0000:9a:00.0", phys_port_id="b8cef6030012ab00")
    judged = judge(NICS_25.format(pattern="ens6f0*", extra="  count: 2\n"), {"ethtool": Output(ICE_25G)}, tmp_path,
                   sysfs=root)
    check = judged.of("nics.count")[0]
    assert (check.outcome.value, check.measured) == ("failed", 1)
    assert "ens6f0v: ens6f0v is the same physical port as ens6f0 (phys_port_id b8cef6030012ab00 in sysfs)" in check.message


def test_sr_iov_virtual_functions_are_not_hcas(tmp_path, monkeypatch):
    """Two real HCAs and six VFs of them, all named mlx5_*: 8 devices listed, 2 physical; rdma.count 8 fails."""
    root = tmp_path / "sys"
    (root / "class" / "net").mkdir(parents=True)
    for n in range(8):
        entry = pci_port(root, "infiniband", f"mlx5_{n}", f"0000:{0x18 + n // 4:02x}:00.{n % 4}", vf=n % 4 > 0)
        port = entry / "ports" / "1"
        port.mkdir(parents=True)
        for name, value in IB_UP.items():
            (port / name).write_text(value + "\n")
    bw = DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt"
    clock = Clock(monkeypatch)  # a server and a client started 1 s after it, each running the 5 s asked
    outputs = {"ib_write_bw": Output(bw, then=clock.runs(5.0)),
               "ib_write_bw localhost": Output(bw, seconds=6.0, then=clock.runs(6.0))}
    judged = judge(RDMA_8.format(extra="  count: 8\n"), outputs, tmp_path, sysfs=root)
    check = judged.of("rdma.count")[0]
    assert (check.outcome.value, check.measured) == ("failed", 2)
    assert ("mlx5_1: mlx5_1 is an SR-IOV virtual function (PCI 0000:18:00.1 has physfn), not a physical port (sysfs)"
            in check.message)


IPERF3 = "gpuaccept: 1\nvendor: V\niperf3: {{server: 10.0.0.2, min_throughput: '1 Gb/s', streams: 1, duration: '1 s'}}\n{extra}"
IPERF3_JSON = DATA / "iperf3" / "json_3.9_tcp_10s_omit3_1.82Gbps.json"


def routed(clock: Clock, root: Path, counted: int, dev: str = "ens6f0", server: str = "10.0.0.2") -> dict[str, Output]:
    """conftest.routed_nic for the harness: the route to `server` leaves through `dev`, a PCI port whose tx_bytes
    iperf3 moves by `counted` bytes each run (as the kernel counts what it sends); iperf3 3.17 and `ip route get`."""
    entry = pci_port(root, "net", dev, "0000:9a:00.0")
    (entry / "statistics").mkdir()
    for counter in ("rx_bytes", "tx_bytes"):
        (entry / "statistics" / counter).write_text("1000\n")
    tx = entry / "statistics" / "tx_bytes"
    route = json.dumps([{"dst": server, "gateway": "10.0.0.1", "dev": dev, "prefsrc": "10.0.0.9", "flags": [], "uid": 0,
                         "cache": []}])
    return {"ip route get": Output(route), "iperf3 --version": Output("iperf 3.17 (cJSON 1.7.15)\n"),
            "iperf3": Output(IPERF3_JSON, then=clock.runs(1.0, lambda: tx.write_text(str(int(tx.read_text()) + counted))))}


def test_iperf3_through_a_nic_that_counted_the_bytes_passes(tmp_path, monkeypatch):
    outputs = routed(Clock(monkeypatch), tmp_path / "sys", counted=2_400_000_000)
    check = judge(IPERF3.format(extra=""), outputs, tmp_path, sysfs=tmp_path / "sys").of("iperf3")[0]
    assert check.outcome.value == "passed"
    assert check.message.endswith("(iperf3 3.17, one process, 1 streams; via ens6f0, which counted 2400000000 of "
                                  "2279342080 bytes sent)")


def test_iperf3_bytes_the_interface_never_counted_fail_naming_both(tmp_path, monkeypatch):
    """A server the vendor answers from somewhere else (a NAT to a host-local process, a canned JSON): iperf3
    says 2.28 GB left, the route's NIC counted 1 MB."""
    outputs = routed(Clock(monkeypatch), tmp_path / "sys", counted=1_000_000)
    check = judge(IPERF3.format(extra=""), outputs, tmp_path, sysfs=tmp_path / "sys").of("iperf3")[0]
    assert check.outcome.value == "failed"
    assert check.message == ("iperf3 says it sent 2279342080 bytes to 10.0.0.2, but ens6f0's tx_bytes (sysfs) grew by "
                             "1000000: the traffic did not go through ens6f0")


def test_iperf3_leaving_through_an_interface_not_contracted_fails(tmp_path, monkeypatch):
    outputs = {**routed(Clock(monkeypatch), tmp_path / "sys", counted=10**11, dev="eno1"), "ethtool": Output(ICE_25G)}
    pci_port(tmp_path / "sys", "net", "ens6f0", "0000:9b:00.0")
    judged = judge(IPERF3.format(extra="nics: {interfaces: [ens6f0], min_speed: '25 Gb/s'}\n"), outputs, tmp_path,
                   sysfs=tmp_path / "sys")
    check = judged.of("iperf3")[0]
    assert check.message == ("traffic to 10.0.0.2 leaves through eno1 (`ip route get`), which is not one of the "
                             "contracted interfaces ['ens6f0']")


# ---------------------------------------------------------------- Xid events: NVML's, and the kernel's

XID = "gpuaccept: 1\nvendor: V\ngpus: {count: 4}\n" \
      "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\nhealth: {xid: true}\n"






def test_an_xid_event_during_the_load_fails(tmp_path):
    judged = judge(XID, workload(), tmp_path, nvml=option_path(recording(tmp_path, xid={
        2: {"events": [{"t_s": 0.9, "xid": 79, "gpu_index": 2}]},
        3: {"error": "nvmlDeviceRegisterEvents: NVMLError_NotSupported"}})))
    checks = {c.subject: c for c in judged.of("health.xid")}
    assert checks["GPU0"].message == "no Xid event during the load (NVML events)"
    assert (checks["GPU2"].outcome.value, checks["GPU2"].measured) == ("failed", 1)
    assert checks["GPU2"].message == "NVML reported 1 Xid event(s) during the load: Xid 79 at t=0.9 s"
    assert checks["GPU3"].outcome.value == "not_measured"  # a GPU that cannot report Xids is not a clean GPU


def _load(kernel_text: str | None, window=(3600.0, 3700.0)) -> LoadRun:
    """The utilisation load as the judge sees it: GPU0 at 0002:00:00.0 with no NVML Xid; the kernel log given."""
    series = GpuSeries(0, (), {}, None, {"events": []})
    kernel = None if kernel_text is None else Reading(None, parse_xids(kernel_text), None)
    return LoadRun(None, {0: series}, None, None, (), kernel, window, {0: "00000002:00:00.0"})


def _judge_xid(load: LoadRun):
    contract = parse_contract(XID)
    return XID_CLAUSE.judge(XID_CLAUSE.section.of(contract), Subject.of_gpu(0), load, contract)


def test_an_xid_in_the_kernel_log_that_nvml_did_not_report_fails_naming_both():
    check = _judge_xid(_load((DATA / "kernel" / "dmesg_xid119_gsp_timeout_aznhc.txt").read_text()))
    assert check.outcome.value == "failed" and check.measured == 1
    assert check.message == ("NVML reported no Xid event, but the kernel log shows 1 for PCI 0002:00:00 during the load: "
                             "[3606.8] Xid 119: pid=67769, name=nvidia-smi, Timeout waiting for RPC from GSP1! Expected function")


def test_kernel_xids_outside_the_load_or_on_another_gpu_do_not_count():
    line = (DATA / "kernel" / "dmesg_xid119_gsp_timeout_aznhc.txt").read_text()
    assert _judge_xid(_load(line, window=(100.0, 200.0))).outcome.value == "passed"
    assert _judge_xid(_load(line.replace("0002:00:00", "0000:18:00"))).outcome.value == "passed"
    clean = _judge_xid(_load((DATA / "kernel" / "dmesg_h200_vm_boot_no_xid.txt").read_text()))
    assert clean.message == "no Xid event during the load (NVML events); the kernel log agrees (no NVRM Xid for " \
                            "PCI 0002:00:00 during the load)"


def test_a_power_limit_lowered_with_its_default_fails_against_the_published_tdp(tmp_path):
    """A shim NVML that lowers the default limit with the enforced one (350 of 700 W): the model's TDP says otherwise."""
    capped = {"ecc_volatile_uncorrected": 0, "remapped_rows": [0, 0, 0, 0], "retired_pages_pending": None,
              "power_limit_enforced_w": 350.0, "power_limit_default_w": 350.0}
    honest = {**capped, "power_limit_enforced_w": 700.0, "power_limit_default_w": 700.0}
    contract = XID.replace("health: {xid: true}", "health: {power_limit: default}")
    judged = judge(contract, workload(), tmp_path,
                   nvml=option_path(recording(tmp_path, health={0: honest, 1: capped, 2: honest, 3: honest})))
    checks = {c.subject: c for c in judged.of("health.power_limit")}
    assert checks["GPU0"].message == "enforced power limit 700 W under load, default 700 W; published 700 W (H100 SXM5 80GB)"
    assert checks["GPU1"].outcome.value == "failed"
    assert checks["GPU1"].message == ("enforced power limit 350 W under load, default 350 W (NVML), but a H100 SXM5 80GB "
                                      "(PCI device 0x2330) is published at 700 W: 50% of it")


# ---------------------------------------------------------------- the NVML recording format, real

def test_the_real_h200_recording_carries_every_reading_a_check_uses():
    reading = json.loads((H200 / "nvml-h200.json").read_text())
    gpu = reading["gpus"][0]
    for key in ("pci_device_id", "mig_mode", "nvlinks", "nvlink_error", "power_limit_enforced_w",
                "power_limit_default_w", "remapped_rows"):
        assert key in gpu, key
    assert reading["cuda_devices"] == {"count": 1, "bus_ids": ["0000:00:06.0"], "error": None, "visible_devices": None}
    sampled = reading["utilisation"]["gpus"][0]
    assert sampled["xid"] == {"events": []} and sampled["health"]["power_limit_default_w"] == 700.0
    assert (gpu["nvlinks"], gpu["nvlink_error"]) == ([], "NVMLError_NotSupported: Not Supported")  # in this VM


def test_health_judged_on_the_real_h200_recording(tmp_path):
    """Three idle seconds recorded on the H200: health passes on its readings, utilisation fails (it was idle)."""
    contract = ("gpuaccept: 1\nvendor: V\ngpus: {count: 1, model: H200, form_factor: sxm}\n"
                "utilisation: {min_percent: 80, duration: '1.5 s', warmup: '1 s', workload: ['train-job']}\n"
                "health: {ecc: true, row_remapping: true, power_limit: default, max_remapped_rows: 0, xid: true}\n")
    judged = judge(contract, workload(), tmp_path, nvml=H200 / "nvml-h200.json", sysfs=real_sysfs(tmp_path / "sys"))
    outcomes = {c.clause: (c.outcome.value, c.message) for c in judged.checks}
    assert outcomes["health.power_limit"] == ("passed", "enforced power limit 700 W under load, default 700 W; "
                                                        "published 700 W (H200 SXM 141GB)")
    assert outcomes["health.xid"] == ("passed", "no Xid event during the load (NVML events)")
    assert outcomes["gpus.identity"][0] == outcomes["health.remapped_rows"][0] == "passed"
    assert outcomes["utilisation"][0] == "failed" and judged.verdict == "rejected"


def test_record_nvml_without_a_driver_says_so_and_exits_1(tmp_path):
    out = tmp_path / "rec.json"
    done = subprocess.run([sys.executable, "-m", "pytest_gpuaccept", "record-nvml", str(out), "--samples", "0"],
                          capture_output=True, text=True, timeout=120)
    reading = json.loads(out.read_text())
    if reading.get("error") is None:
        pytest.skip("this machine has an NVIDIA driver")
    assert done.returncode == 1 and reading["gpus"] == [] and "NVML" in done.stdout

