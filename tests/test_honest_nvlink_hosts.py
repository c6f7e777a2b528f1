"""Honest NVLink hosts that the caps once rejected, each beside the fraud that is still rejected (issue 38).

An HGX B200's all_reduce and an Azure ND H200 v5 VM's were read as "implausible: above GPU0's PCIe Gen5 x16" where
NVML counts their NVLinks active but names no far end of them (a guest does not see the NVSwitches; NCCL, too, takes
such links for invisible NVSwitches, NVIDIA/nccl#1182): a link without a far end counted for nothing, and the cap fell
back to PCIe. A 16-GPU HGX A100 (two baseboards) was rejected for its 12 NVSwitches, one board's count being 6. The
runs replayed are real nccl-tests outputs (tests/data/nvlink_hosts, tests/data/allreduce, tests/data/nvl72;
tests/data/SOURCES.md), their `# Rank` lines printed as this host's all_reduce_perf prints them (its PID, its GPUs'
addresses). The NVML readings and sysfs trees are CONSTRUCTED here, in the format of the real H200 recording
(tests/data/h200/nvml-h200.json): what NVML answers for a link's far end in a real multi-GPU guest was not recorded,
so both answers are staged (none, and the host's switch addresses). Each GPU sits at the address the real run's rank
lines give, but for the 16-GPU A100 (the run's own are two nodes' same 8).
"""

import json
import re
from pathlib import Path

import pytest
from conftest import DATA
from judging import Output, judge

from pytest_gpuaccept.clauses import nvlink, plausible
from pytest_gpuaccept.measurements import GpuModels
from pytest_gpuaccept.models import all_models, by_device_id
from pytest_gpuaccept.probes.nccl_tests import parse_all_reduce
from pytest_gpuaccept.probes.nvml import parse_host
from pytest_gpuaccept.probes.sysfs import read_hypervisor, sysfs_bus_id

HOSTS = DATA / "nvlink_hosts"
B200_RUN = HOSTS / "b200_8gpu_gke_a4_1node_allreduce_8M_16G_oop_only.txt"
H200_VM_RUN = HOSTS / "h200_8gpu_azure_nd_v5_vm_allreduce_128M.txt"
A100_16_TOPO = HOSTS / "a100_16gpu_2baseboards_nv12_CONSTRUCTED.txt"
B200_TOPO = DATA / "topo" / "b200_8gpu_nv18_16nic_lines_repr.txt"  # a real 8x B200 `topo -m` (NV18 on every pair)
A100_16_RUN = DATA / "allreduce" / "oci_a100_2node_16rank_nccl2.25.1_1G_to_4G.txt"
GB200_RACK_RUN = DATA / "nvl72" / "nccltests_gb200_nvl72_72rank_table_coreweave_pr43.txt"
TEMPLATE = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
NOT_SUPPORTED = "NVMLError_NotSupported: Not Supported"

# The GPUs' addresses, as the real runs' rank lines give them (the A100's chosen: 16 on one host)
B200_BUSES = [f"00000000:{b}:00.0" for b in ("8F", "90", "96", "97", "C4", "C5", "CB", "CC")]
AZURE_BUSES = [f"0000000{d}:00:00.0" if len(d) == 1 else f"000000{d}:00:00.0"
               for d in ("1", "2", "3", "8", "9", "a", "b", "c")]  # Hyper-V: a PCI domain per GPU
GB200_BUSES = [f"0000{d}:01:00.0" for d in ("0008", "0009", "0018", "0019")]  # the tray of NVIDIA/nccl#1769
A100_BUSES = [f"00000000:{b:02X}:00.0" for b in (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD,
                                                 0x17, 0x1F, 0x57, 0x5E, 0x97, 0xA0, 0xC7, 0xCD)]


def recording(folder: Path, name: str, device: str, memory_gb: float, buses: list[str], ends) -> Path:
    """Constructed: an NVML reading of GPUs named `name` (PCI `device`) at `buses`, each GPU's active NVLinks leading
    to `ends(index)` (a far end NVML names, or None where it names none), or NVLink NotSupported where that is None."""
    gpus = []
    for index, bus in enumerate(buses):
        far = ends(index)
        gpus.append({**TEMPLATE["gpus"][0], "index": index, "name": name, "pci_bus_id": bus, "pci_device_id": device,
                     "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000", "serial": f"16520240{index:05d}",
                     "memory_total_bytes": int(memory_gb * 2**30), "nvlink_error": None if far is not None else NOT_SUPPORTED,
                     "nvlinks": [] if far is None else [{"link": n, "active": True, "remote_bus_id": e}
                                                        for n, e in enumerate(far)]})
    reading = {**TEMPLATE, "hostname": "honest-host", "gpus": gpus,
               "cuda_devices": {"count": len(buses), "bus_ids": [sysfs_bus_id(b) for b in buses], "error": None,
                                "visible_devices": None}}
    path = folder / f"nvml-{device}-{len(buses)}gpu.json"
    path.write_text(json.dumps(reading))
    return path


# Hyper-V's synthetic devices as a guest's sysfs lists them (bus/vmbus/devices/<instance GUID>)
VMBUS = ("f8b3781a-1e82-4818-a1c3-63d806ec15bb", "58f75a6d-d949-4320-99e1-a2a2576d581c")


def sysfs(root: Path, buses: list[str], device: str, switches: dict[str, str] = None, link: bool = True,
          vmbus: bool = False, speed: str = "32.0 GT/s PCIe") -> Path:
    """Constructed: the PCI functions sysfs lists: the GPUs (`device`, on PCIe Gen5 x16 links where `link`), and the
    NVIDIA bridge functions (NVSwitches) `switches` gives, bus ID -> device ID; none in a VM. `vmbus`: a Hyper-V
    guest's VMBus devices (Azure); `speed`: the links' generation as the kernel words it (Gen5 unless told)."""
    devices = root / "bus" / "pci" / "devices"
    for bus in buses:
        folder = devices / sysfs_bus_id(bus)
        folder.mkdir(parents=True)
        files = {"vendor": "0x10de", "device": device, "class": "0x030200"}
        if link:
            files.update({"max_link_speed": speed, "max_link_width": "16", "current_link_speed": speed,
                          "current_link_width": "16"})
        for name, value in files.items():
            (folder / name).write_text(value + "\n")
    for bus, switch in (switches or {}).items():
        (devices / bus).mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", switch), ("class", "0x068000")):
            (devices / bus / name).write_text(value + "\n")
    for guid in VMBUS if vmbus else ():
        (root / "bus" / "vmbus" / "devices" / guid).mkdir(parents=True)
    (root / "class" / "net").mkdir(parents=True, exist_ok=True)
    return root


_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+(?:\s+on\s+\S+)?\s+device\s+(\d+)\s+\[[^\]]+\]\s+(.*)$")


def as_printed_here(text: str, buses: list[str], name: str | None = None) -> bytes:
    """A real run's output as this host's all_reduce_perf prints it: rank r on GPU r's address, with the run's own PID
    (`@PID@`) and, given `name`, this host's GPU name; the table as recorded. Rank lines beyond this host's GPUs are
    dropped (another node's)."""
    lines = []
    for line in text.splitlines(keepends=True):
        match = _RANK.match(line.rstrip("\n"))
        if match:
            rank = int(match.group(1))
            if rank >= len(buses):
                continue
            domain, bus, dev = sysfs_bus_id(buses[rank]).split(".")[0].split(":")
            line = (f"#  Rank {rank:2d} Group  0 Pid @PID@ on honest-host device {rank:2d} "
                    f"[{domain}:{bus}:{dev}] {name or match.group(3)}\n")
        lines.append(line)
    return "".join(lines).encode()


def contract(count: int, min_busbw: str, min_bytes: str, max_bytes: str, extra: str = "") -> str:
    return (f"gpuaccept: 1\nvendor: V\ngpus:\n  count: {count}\nallreduce:\n  min_busbw: '{min_busbw}'\n"
            f"  min_bytes: '{min_bytes}'\n  max_bytes: '{max_bytes}'\n{extra}")


def allreduce(judged):
    [check] = judged.of("allreduce")
    return check


# ------------------------------------------------------------------ the model table: a per-link rate for every NVLink


def test_every_nvlink_model_has_a_per_link_rate_that_makes_its_published_figure():
    nvlinked = [m for m in all_models() if m.nvlink_links]
    assert {m.name for m in nvlinked} >= {"B200", "B300 SXM6 AC", "GB200", "GB300", "A800 SXM4 80GB", "H800 SXM"}
    for model in nvlinked:
        assert model.nvlink_link_gbyte_s and model.nvlink_links * model.nvlink_link_gbyte_s * 2 == model.nvlink_gbyte_s
        assert any("nvlink" in source.lower() for source in model.sources), model.name
    rates = {m.name: (m.nvlink_links, m.per_link_gbyte_s) for m in nvlinked}
    assert rates["B200"] == rates["GB200"] == rates["B300 SXM6 AC"] == rates["GB300"] == (18, 50)
    assert rates["A800 SXM4 80GB"] == rates["H800 SXM"] == (8, 25)
    assert rates["H100 SXM5 80GB"] == rates["H200 SXM 141GB"] == (18, 25)
    assert rates["A100 SXM4 80GB"] == (12, 25) and rates["Tesla V100 SXM2 32GB"] == (6, 25)


# ------------------------------------------------------------------ HGX B200


def _b200(tmp_path, ends) -> tuple[Path, Path]:
    return (recording(tmp_path, "NVIDIA B200", "0x2901", 179.1, B200_BUSES, ends),
            sysfs(tmp_path / "sys", B200_BUSES, "0x2901"))


def test_an_hgx_b200_all_reduce_is_accepted_under_its_nvlinks(tmp_path):
    """8x B200 (GKE A4, a VM on an HGX B200): 845.44 GB/s at 16 GiB. NVML counts 18 active NVLinks per GPU and names no
    far end; sysfs lists no NVSwitch. The cap is 18 x 50 GB/s x 1.75 (NVLS), not PCIe Gen5 x16's 63; and a real B200
    `topo -m` (NV18) passes every pair against NVML's 18 links."""
    nvml, root = _b200(tmp_path, lambda i: [None] * 18)
    judged = judge(contract(8, "700 GB/s", "8 MiB", "16 GiB", "nvlink: {every_pair: true, min_links: 18}\n"),
                   {"all_reduce_perf": Output(as_printed_here(B200_RUN.read_text(), B200_BUSES)),
                    "nvidia-smi": Output(B200_TOPO)}, tmp_path, nvml=nvml, sysfs=root)
    pairs = judged.of("nvlink")
    assert len(pairs) == 28 and {c.outcome.value for c in pairs} == {"passed"}
    assert pairs[0].message == "NV18 between GPU0 and GPU1 (100% of the 18 NVLinks of a B200)"
    check = allreduce(judged)
    assert check.outcome.value == "passed" and check.measured == 845.44
    assert check.details["physical_cap"] == 1575.0
    assert check.details["physical_cap_source"] == (
        "GPU0's 18 NVLinks (NVML; a VM's view: no NVSwitch in sysfs) x 50 GB/s per link (B200), x 1.75 for reduction "
        "in the NVSwitch; from NVML for the links (a VM's view: no NVSwitch in sysfs), the model table "
        "(pytest_gpuaccept/models/gpus.json) for their rate and switches")
    assert check.message.endswith("a VM's view: no NVSwitch in sysfs: the cap is NVML's 18 active NVLinks of GPU0 x "
                                  "50 GB/s per link (B200))")
    assert judged.verdict == "accepted"


def test_a_b200_whose_nvlinks_nvml_finds_down_cannot_have_reduced_at_nvlink_speed(tmp_path):
    """The same run printed on B200s whose NVLinks NVML reads inactive: PCIe is the path, and 845 GB/s is no PCIe
    figure."""
    nvml, root = _b200(tmp_path, lambda i: [])
    reading = json.loads(nvml.read_text())
    for gpu in reading["gpus"]:
        gpu["nvlinks"] = [{"link": n, "active": False, "remote_bus_id": None} for n in range(18)]
    nvml.write_text(json.dumps(reading))
    judged = judge(contract(8, "700 GB/s", "8 MiB", "16 GiB"),
                   {"all_reduce_perf": Output(as_printed_here(B200_RUN.read_text(), B200_BUSES))}, tmp_path,
                   nvml=nvml, sysfs=root)
    check = allreduce(judged)
    assert check.outcome.value == "failed"
    assert check.message.startswith(
        "busbw 845.44 GB/s at 16 GiB is implausible: above 69.3 GB/s (physically impossible: GPU0's PCIe Gen5 x16 "
        "(NVML: no NVLink active), at most 63 GB/s + 10%)")
    assert check.details["physical_cap_source"] == (
        "GPU0's PCIe Gen5 x16 (NVML: no NVLink active); from sysfs 0000:8f:00.0 (max_link_speed, max_link_width); NVML "
        "for the NVLinks, none active")
    assert judged.verdict == "rejected"


# ------------------------------------------------------------------ Azure ND H200 v5 (a VM: no NVSwitch in sysfs)


def test_an_azure_nd_h200_v5_vm_is_accepted_and_the_check_says_it_is_a_vm(tmp_path):
    """The real ND H200 v5 run (GPUs in PCI domains 0001..000c, 403.50 GB/s at 128 MiB): NVML's 18 active NVLinks per
    GPU lead nowhere it can name, and the guest's sysfs has no NVSwitch function, nor PCIe link files."""
    nvml = recording(tmp_path, "NVIDIA H200", "0x2335", 140.4, AZURE_BUSES, lambda i: [None] * 18)
    root = sysfs(tmp_path / "sys", AZURE_BUSES, "0x2335", link=False, vmbus=True)
    judged = judge(contract(8, "380 GB/s", "128 MiB", "128 MiB"),
                   {"all_reduce_perf": Output(as_printed_here(H200_VM_RUN.read_text(), AZURE_BUSES))}, tmp_path,
                   nvml=nvml, sysfs=root)
    check = allreduce(judged)
    assert check.outcome.value == "passed" and check.measured == 403.5
    assert check.details["physical_cap"] == 787.5  # 18 x 25 GB/s x 1.75
    assert "a VM's view: no NVSwitch in sysfs" in check.details["physical_cap_note"]
    assert "a VM's view: no NVSwitch in sysfs (Hyper-V: sysfs bus/vmbus lists its devices): the cap is NVML's 18 " \
           "active NVLinks of GPU0 x 25 GB/s per link (H200 SXM 141GB)" in check.message
    assert check.details["sources"] == ["nccl-tests", "the path's cap (NVML for the links (a VM's view: no NVSwitch in "
                                        "sysfs), the model table (pytest_gpuaccept/models/gpus.json) for their rate and "
                                        "switches)"]
    assert judged.verdict == "accepted"


def test_pcie_h100s_claiming_nvlink_class_busbw_are_rejected_in_the_same_vm(tmp_path):
    """The same run printed in a VM of H100 PCIe cards, whose NVML answers NotSupported for NVLink: even the NVLink
    bridge such a card may carry (600 GB/s both ways, one pair) cannot have moved 403.5 GB/s of busbw."""
    nvml = recording(tmp_path, "NVIDIA H100 PCIe", "0x2331", 79.6, AZURE_BUSES, lambda i: None)
    root = sysfs(tmp_path / "sys", AZURE_BUSES, "0x2331", link=False, vmbus=True)
    run = as_printed_here(H200_VM_RUN.read_text(), AZURE_BUSES, "NVIDIA H100 PCIe")
    judged = judge(contract(8, "380 GB/s", "128 MiB", "128 MiB"), {"all_reduce_perf": Output(run)}, tmp_path,
                   nvml=nvml, sysfs=root)
    check = allreduce(judged)
    assert check.outcome.value == "failed"
    assert check.message.startswith(
        "busbw 403.5 GB/s at 128 MiB is implausible: above 330 GB/s (physically impossible: GPU0's NVLinks (the "
        "model's count; NVML's links not read) x an NVLink bridge of 600 GB/s (H100 PCIe), at most 300 GB/s + 10%)")
    assert judged.verdict == "rejected"


def test_a_vm_s_nvlink_pairs_pass_and_say_the_switches_are_unconfirmed(tmp_path):
    """nvlink.every_pair in the VM: `topo -m`'s NV18 against NVML's 18 active links; the switches NVML names no far end
    of, on a PCI bus without NVSwitches, are unconfirmed (a VM's view), not phantoms."""
    nvml = recording(tmp_path, "NVIDIA H200", "0x2335", 140.4, AZURE_BUSES, lambda i: [None] * 18)
    root = sysfs(tmp_path / "sys", AZURE_BUSES, "0x2335", link=False, vmbus=True)
    topo = DATA / "topo" / "h200_8gpu_nv18_8nic_ansi.txt"
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink: {every_pair: true, min_links: 18}\n",
                   {"nvidia-smi": Output(topo)}, tmp_path, nvml=nvml, sysfs=root)
    pairs = judged.of("nvlink")
    assert len(pairs) == 28 and {c.outcome.value for c in pairs} == {"passed"}
    assert pairs[0].details["nvswitches"] == (
        "NVML names no far end of 144 active NVLinks (a VM's view: no NVSwitch in sysfs; Hyper-V: sysfs bus/vmbus lists "
        "its devices): the NVSwitches they lead into are unconfirmed")
    assert pairs[0].details["sources"] == ["`nvidia-smi topo -m`", "NVML's links"]


HOST_SWITCHES = ["00000000:C0:00.0", "00000000:C1:00.0", "00000000:C2:00.0", "00000000:C3:00.0"]


@pytest.mark.parametrize("vmbus, outcome", [(True, "passed"), (False, "failed")], ids=["a Hyper-V guest", "bare metal"])
def test_switches_nvml_names_but_sysfs_lacks_are_a_guests_view_only_where_sysfs_shows_a_hypervisor(tmp_path, vmbus,
                                                                                                   outcome):
    """NVML names the host's NVSwitch addresses, which the guest's PCI bus does not have. Where sysfs shows Hyper-V's
    VMBus, the switches are unconfirmed (a guest cannot see them); where it shows no hypervisor, the same reading is
    a phantom and fails every pair, as before."""
    nvml = recording(tmp_path, "NVIDIA H200", "0x2335", 140.4, AZURE_BUSES,
                     lambda i: [HOST_SWITCHES[n % 4] for n in range(18)])
    root = sysfs(tmp_path / "sys", AZURE_BUSES, "0x2335", link=False, vmbus=vmbus)
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink: {every_pair: true, min_links: 18}\n",
                   {"nvidia-smi": Output(DATA / "topo" / "h200_8gpu_nv18_8nic_ansi.txt")}, tmp_path, nvml=nvml,
                   sysfs=root)
    pairs = judged.of("nvlink")
    assert {c.outcome.value for c in pairs} == {outcome}
    if vmbus:
        assert pairs[0].details["nvswitches"] == (
            "NVML says the NVLinks lead into NVSwitches at 0000:c0:00.0, 0000:c1:00.0, 0000:c2:00.0, 0000:c3:00.0, which "
            "the guest's PCI bus does not show (a VM's view: no NVSwitch in sysfs; Hyper-V: sysfs bus/vmbus lists its "
            "devices): unconfirmed")
    else:
        assert pairs[0].message == (
            "NVML says the NVLinks of GPU0, GPU1, GPU2, GPU3 lead into NVSwitches at 0000:c0:00.0, 0000:c1:00.0, "
            "0000:c2:00.0, 0000:c3:00.0, but sysfs has no NVIDIA bridge function (an NVSwitch) at 0000:c0:00.0, "
            "0000:c1:00.0, 0000:c2:00.0, 0000:c3:00.0")


@pytest.mark.parametrize("files, shown", [
    ({"bus/vmbus/devices/f8b3781a-1e82-4818-a1c3-63d806ec15bb/": ""}, "Hyper-V: sysfs bus/vmbus lists its devices"),
    ({"hypervisor/type": "xen"}, "xen: sysfs hypervisor/type"),
    ({"class/dmi/id/product_name": "Google Compute Engine"}, "Google Compute Engine: sysfs DMI product_name"),
    ({"class/dmi/id/sys_vendor": "QEMU"}, "QEMU: sysfs DMI sys_vendor"),
    ({"class/dmi/id/product_name": "ProLiant XD670 Gen11", "class/dmi/id/sys_vendor": "HPE"}, None),
    ({"bus/vmbus/devices/": ""}, None),  # the bus without a device: no Hyper-V guest
])
def test_what_sysfs_shows_of_a_hypervisor(tmp_path, files, shown):
    for name, text in files.items():
        path = tmp_path / name
        if name.endswith("/"):
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")
    assert read_hypervisor(tmp_path) == shown


# ------------------------------------------------------------------ HGX A100, 16 GPUs on two baseboards

A100_BOARDS = [[f"00000000:{0xC0 + 16 * board + s:02X}:00.0" for s in range(6)] for board in (0, 1)]


def _a100_links(index: int, gpus: int = 16) -> list[str]:
    """12 NVLinks per GPU, two into each of its own board's six NVSwitches."""
    board = A100_BOARDS[index // 8 if gpus > 8 else 0]
    return [switch for switch in board for _ in range(2)]


def _a100(tmp_path, gpus: int, ends) -> tuple[Path, Path]:
    buses = A100_BUSES[:gpus]
    switches = {sysfs_bus_id(s): "0x1af1" for board in A100_BOARDS for s in board}
    return (recording(tmp_path, "NVIDIA A100-SXM4-40GB", "0x20b0", 40, buses, ends),
            sysfs(tmp_path / "sys", buses, "0x20b0", switches, link=False))


def test_a_16_gpu_hgx_a100_with_twelve_nvswitches_is_accepted(tmp_path):
    """Two baseboards of eight, six NVSwitches each: 12 switches in sysfs (0x1af1), NVML's links into them, NV12 on
    every pair; and a real 16-rank A100 all_reduce (190.02 GB/s at 4 GiB) under 12 links x 25 GB/s."""
    nvml, root = _a100(tmp_path, 16, _a100_links)
    judged = judge(contract(16, "180 GB/s", "1 GiB", "4 GiB", "nvlink: {every_pair: true, min_links: 12}\n"),
                   {"nvidia-smi": Output(A100_16_TOPO),
                    "all_reduce_perf": Output(as_printed_here(A100_16_RUN.read_text(), A100_BUSES))}, tmp_path,
                   nvml=nvml, sysfs=root)
    pairs = judged.of("nvlink")
    assert len(pairs) == 120 and {c.outcome.value for c in pairs} == {"passed"}
    assert pairs[-1].message == "NV12 between GPU14 and GPU15 (100% of the 12 NVLinks of a A100 SXM4 40GB)"
    assert pairs[0].details["sources"] == ["`nvidia-smi topo -m`", "NVML's links", "sysfs NVSwitches"]
    check = allreduce(judged)
    assert check.outcome.value == "passed" and check.measured == 190.02 and check.details["physical_cap"] == 300.0
    assert judged.verdict == "accepted"


def first_gpus(topo: str, n: int) -> str:
    """The `topo -m` of a 16-GPU host cut to its first `n` GPUs (rows and columns), as a host of `n` prints it."""
    lines = topo.splitlines()
    gpus = lines[0].count("GPU") - 1  # "GPU NUMA ID" is no GPU

    def keep(cells: list[str]) -> list[str]:
        return cells[:1 + n] + cells[1 + gpus:]
    return "\n".join(["\t".join(keep(line.split("\t"))) for line in lines[:1 + n]] + lines[1 + gpus:]) + "\n"


def test_an_8_gpu_board_showing_twelve_nvswitches_is_rejected(tmp_path):
    """Eight GPUs are one baseboard: NVML's links leading into 12 NVSwitches are not an A100 board's six."""
    nvml, root = _a100(tmp_path, 8, lambda i: A100_BOARDS[i % 2] + A100_BOARDS[i % 2])
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink: {every_pair: true, min_links: 12}\n",
                   {"nvidia-smi": Output(first_gpus(A100_16_TOPO.read_text(), 8))}, tmp_path, nvml=nvml, sysfs=root)
    failing = [c for c in judged.of("nvlink") if c.outcome.value == "failed"]
    assert len(failing) == 28
    assert {c.message for c in failing} == {
        "NVML's links lead into 12 NVSwitches (0000:c0:00.0, 0000:c1:00.0, 0000:c2:00.0, 0000:c3:00.0, 0000:c4:00.0, "
        "0000:c5:00.0 ...); a A100 SXM4 40GB baseboard has 6"}
    assert "sysfs-nvswitches.json" in failing[0].evidence and judged.verdict == "rejected"


def test_a_16_gpu_host_whose_gpus_each_reach_both_boards_switches_is_rejected(tmp_path):
    """Twelve switches for sixteen GPUs, but every GPU's links lead into all twelve: no A100 baseboard is wired so."""
    nvml, root = _a100(tmp_path, 16, lambda i: A100_BOARDS[0] + A100_BOARDS[1])
    judged = judge("gpuaccept: 1\nvendor: V\ngpus:\n  count: 16\nnvlink: {every_pair: true, min_links: 12}\n",
                   {"nvidia-smi": Output(A100_16_TOPO)}, tmp_path, nvml=nvml, sysfs=root)
    assert {c.message for c in judged.of("nvlink")} == {
        "NVML says the NVLinks of GPU0 lead into 12 NVSwitches; a GPU of a A100 SXM4 40GB baseboard reaches its own "
        "board's 6"}


@pytest.mark.parametrize("gpus, expected", [(1, 1), (8, 1), (9, 2), (16, 2)])
def test_the_baseboards_are_counted_eight_gpus_a_board(gpus, expected):
    assert nvlink.baseboards(gpus) == expected


# ------------------------------------------------------------------ a GB200 NVL72 compute tray (4 GPUs)


def gb200_tray_run(scale: float = 1.0) -> bytes:
    """The real single-rack GB200 NVL72 table (72 ranks, coreweave/nccl-tests PR #43) as a 4-GPU tray's run prints it:
    four rank lines, and each row's busbw recomputed for 4 ranks from its algbw (nccl-tests' 2(n-1)/n), so that the
    table adds up as a 4-rank run's would; `scale` divides every time (x algbw, busbw): a fraud's edit."""
    lines = ["# nThread 1 nGpus 1 minBytes 536870912 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"]
    lines += [f"#  Rank {r:2d} Group  0 Pid @PID@ on honest-host device {r:2d} [{sysfs_bus_id(bus)[:10]}] NVIDIA GB200\n"
              for r, bus in enumerate(GB200_BUSES)]
    for line in GB200_RACK_RUN.read_text().splitlines()[1:]:
        tokens = line.split()
        if len(tokens) == 13 and tokens[0].isdigit():
            t1, a1, t2, a2 = float(tokens[5]) / scale, float(tokens[6]) * scale, float(tokens[9]) / scale, \
                float(tokens[10]) * scale
            tokens[5:8] = [f"{t1:.1f}", f"{a1:.2f}", f"{a1 * 1.5:.2f}"]
            tokens[9:12] = [f"{t2:.1f}", f"{a2:.2f}", f"{a2 * 1.5:.2f}"]
            line = "  ".join(tokens)
        lines.append(line.rstrip() + "\n")
    return "".join(lines).encode()


def _gb200(tmp_path) -> tuple[Path, Path]:
    return (recording(tmp_path, "NVIDIA GB200", "0x2941", 184.0, GB200_BUSES, lambda i: [None] * 18),
            sysfs(tmp_path / "sys", GB200_BUSES, "0x2941", link=False))


def test_a_gb200_tray_of_four_gpus_is_accepted_under_its_nvlinks(tmp_path):
    """A GB200 NVL72 compute tray: 4 GPUs, 18 NVLinks each into the rack's switch trays (no NVSwitch on the tray's
    PCI bus). 634.74 GB/s at 8 GiB (Azure publishes 679.61 for its ND GB200 v6 4-GPU run) under 18 x 50 x 1.5."""
    nvml, root = _gb200(tmp_path)
    run = gb200_tray_run()
    assert parse_all_reduce(run.decode()).largest.oop_busbw_gbyte_s == 634.74
    judged = judge(contract(4, "600 GB/s", "512 MiB", "8 GiB"), {"all_reduce_perf": Output(run)}, tmp_path,
                   nvml=nvml, sysfs=root)
    check = allreduce(judged)
    assert check.outcome.value == "passed" and check.measured == 634.74
    assert check.details["physical_cap"] == 1350.0
    assert judged.verdict == "accepted"


def test_a_gb200_tray_claiming_more_than_its_links_carry_is_rejected(tmp_path):
    """The tray's run with every row's time cut to 40 %: 1586.85 GB/s, above 18 links x 50 GB/s x 1.5 + 10 %."""
    nvml, root = _gb200(tmp_path)
    judged = judge(contract(4, "600 GB/s", "512 MiB", "8 GiB"), {"all_reduce_perf": Output(gb200_tray_run(2.5))},
                   tmp_path, nvml=nvml, sysfs=root)
    check = allreduce(judged)
    assert check.outcome.value == "failed"
    assert check.message.startswith(
        "busbw 1586.85 GB/s at 8 GiB is implausible: above 1485 GB/s (physically impossible: GPU0's 18 NVLinks (NVML; a "
        "VM's view: no NVSwitch in sysfs) x 50 GB/s per link (GB200), x 1.5 for reduction in the NVSwitch, at most "
        "1350 GB/s + 10%)")


# ------------------------------------------------------------------ the cap, alone


def test_active_links_without_a_far_end_count_toward_a_pair_and_the_host(tmp_path):
    """A pair's cap (p2p) counts the links NVML cannot name a far end of, as it counts links into a switch."""
    nvml = recording(tmp_path, "NVIDIA H200", "0x2335", 140.4, AZURE_BUSES, lambda i: [None] * 18)
    host = parse_host(json.loads(nvml.read_text()))
    model = by_device_id("2335")
    models = GpuModels({i: "2335" for i in range(8)}, {i: model for i in range(8)}, ())
    paths = plausible.Paths(models, gpus=tuple(host.gpus), switches={})
    assert plausible.nvlinks_between(paths, 0, 1) == (18, "NVML's active links")
    cap = plausible.pair_cap(paths, 0, 1)
    assert (cap.gbyte_s, cap.path) == (450, "18 NVLinks (NVML's active links) x 25 GB/s per link (H200 SXM 141GB)")
    assert plausible.allreduce_cap(paths, 8).gbyte_s == 787.5


def test_a_gpu_the_table_lacks_leaves_busbw_on_the_tools_word_and_says_so(tmp_path):
    """0x2909 (pci.ids: HGX B200 168GB) is not in the model table: no per-link rate, no cap. The check says so, and the
    judge does not stumble on the unknown cap (it once formatted None into the message it would not send)."""
    nvml = recording(tmp_path, "NVIDIA B200", "0x2909", 167.0, B200_BUSES, lambda i: [None] * 18)
    judged = judge(contract(8, "700 GB/s", "8 MiB", "16 GiB"),
                   {"all_reduce_perf": Output(as_printed_here(B200_RUN.read_text(), B200_BUSES))}, tmp_path,
                   nvml=nvml, sysfs=sysfs(tmp_path / "sys", B200_BUSES, "0x2909"))
    check = allreduce(judged)
    assert check.outcome.value == "passed" and check.details["physical_cap"] is None
    assert check.message.endswith("(nccl-tests; no physical cap (GPU0 is not in the model table: no link figure): "
                                  "taken on the tool's word)")
    assert check.details["unconfirmed"] == ("no physical cap (GPU0 is not in the model table: no link figure): the "
                                            "figure is nccl-tests's alone")


def test_nvlinks_nvml_claims_on_a_model_without_nvlink_leave_the_pcie_cap(tmp_path):
    """RTX 4090s (no NVLink, not even a bridge) whose NVML reading claims 18 active links each: the model table's word
    stands, PCIe is the path, and the B200's 845 GB/s is refused."""
    nvml = recording(tmp_path, "NVIDIA GeForce RTX 4090", "0x2684", 23.5, B200_BUSES, lambda i: [None] * 18)
    judged = judge(contract(8, "700 GB/s", "8 MiB", "16 GiB"),
                   {"all_reduce_perf": Output(as_printed_here(B200_RUN.read_text(), B200_BUSES,
                                                              "NVIDIA GeForce RTX 4090"))},
                   tmp_path, nvml=nvml, sysfs=sysfs(tmp_path / "sys", B200_BUSES, "0x2684", speed="16.0 GT/s PCIe"))
    check = allreduce(judged)
    assert check.outcome.value == "failed"
    assert check.message.startswith("busbw 845.44 GB/s at 16 GiB is implausible: above 34.65 GB/s (physically "
                                    "impossible: GPU0's PCIe Gen4 x16, at most 31.5 GB/s + 10%)")
