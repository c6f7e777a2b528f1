"""PCI addresses as domain:bus:device:function everywhere: Azure-style hosts put every GPU on bus 00 of a PCI
domain of its own (NVML `00000001:00:00.0`, sysfs `0001:00:00.0`, nccl-tests `[0001:00:00]`). A rank is placed on
a GPU by its whole address; an old bus-only line (`[0x00]`) that several GPUs could answer, by its CUDA device index
through CUDA's device list of the run, and is not measured where that list was not read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import DATA, nccl_log, pci_tree
from judging import Output, judge

from pytest_gpuaccept.clauses.allreduce import not_this_run, unplaced_ranks
from pytest_gpuaccept.clauses.utilisation import kernel_pci as _kernel_pci
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes._run import ToolRun
from pytest_gpuaccept.probes.kernel_log import parse_xids
from pytest_gpuaccept.probes.nccl_tests import parse_all_reduce, parse_rank_line
from pytest_gpuaccept.probes.nvml import parse_host
from pytest_gpuaccept.probes.sysfs import pci_address, pci_name, sysfs_bus_id
from pytest_gpuaccept.workloads.torch_allreduce import _address

FOLDER = DATA / "pcidomains"
EXPECTED = yaml.safe_load((FOLDER / "EXPECTED.yaml").read_text())
FILES = sorted(p for p in FOLDER.iterdir() if p.suffix == ".txt")
P5 = DATA / "allreduce" / "aws_batch_p5_mpirun_tagged_table_only.txt"


# ------------------------------------------------------------------ addresses as each tool prints them

@pytest.mark.parametrize("text, address", [
    ("00000001:00:00.0", (1, 0, 0, 0)),     # NVML busId on Azure
    ("00000000:18:00.0", (0, 0x18, 0, 0)),  # NVML busId on a bare-metal HGX
    ("0001:00:00.0", (1, 0, 0, 0)),         # sysfs, cuDeviceGetPCIBusId
    ("0002:00:01", (2, 0, 1, 0)),           # nccl-tests >= 2.14.1, the kernel log's NVRM Xid (PCI:...)
    ("000C:00:00", (0xC, 0, 0, 0)),         # upper case
    ("10000:01:00.0", (0x10000, 1, 0, 0)),  # a VMD domain, wider than 16 bits
    ("0x00", None), ("18:00.0", None), ("", None), ("GPU-1234", None),  # a bus alone names no one device
])
def test_a_pci_address_is_read_whole_from_every_form(text, address):
    assert pci_address(text) == address


@pytest.mark.parametrize("nvml, sysfs", [
    ("00000001:00:00.0", "0001:00:00.0"),
    ("0000000C:00:00.0", "000c:00:00.0"),
    ("00000000:18:00.0", "0000:18:00.0"),
    ("00010000:01:00.0", "10000:01:00.0"),  # the kernel's %04x keeps a wide domain whole, never its last 4 digits
])
def test_nvml_bus_ids_name_the_sysfs_folder_with_their_domain(nvml, sysfs):
    assert sysfs_bus_id(nvml) == sysfs
    assert pci_name(pci_address(nvml)) == sysfs  # with the function, as sysfs lists it


# ------------------------------------------------------------------ real rank lines

def test_every_file_has_expectations():
    assert {f.name for f in FILES} == set(EXPECTED)


def _shown(line) -> str:
    return f"0x{line.bus:02x}" if line.address is None else pci_name(line.address)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_real_rank_lines_read_to_the_addresses_printed(path):
    lines = [r for r in map(parse_rank_line, path.read_text().splitlines()) if r is not None]
    read = {r.rank: [r.host, r.device, _shown(r), r.name] for r in lines}
    assert read == EXPECTED[path.name]["ranks"]


def test_a_domain_rank_line_keeps_domain_bus_and_device():
    text = (FOLDER / "nccltests294_h100_2node_domains_0002_0003_excerpt.txt").read_text()
    lines = [r for r in map(parse_rank_line, text.splitlines()) if r is not None]
    assert [r.address for r in lines[:8]] == [(2, 0, 1), (2, 0, 2), (2, 0, 3), (2, 0, 4),
                                             (3, 0, 1), (3, 0, 2), (3, 0, 3), (3, 0, 4)]
    assert len({r.address for r in lines[:8]}) == 8  # eight GPUs on bus 00, told apart by domain and device


def test_the_old_form_gives_the_bus_alone():
    text = (FOLDER / "nccltests36_azure_nc24rs_v3_v100_2node_bus_only_excerpt.txt").read_text()
    line = [r for r in map(parse_rank_line, text.splitlines()) if r][0]
    assert (line.rank, line.bus, line.slot, line.domain, line.address, line.shown) == (0, 0, None, None, None, "bus 0x00")


def test_an_address_in_no_known_form_is_refused_quoting_the_line():
    line = "#  Rank  0 Group  0 Pid 1 on h device  0 [18:00] NVIDIA H100 80GB HBM3"
    with pytest.raises(ParseError, match=r"\[18:00\] is neither") as caught:
        parse_rank_line(line)
    assert line in str(caught.value)


# ------------------------------------------------------------------ placement on NVML's GPUs (constructed hosts)

def azure_reading(domains: list[int] | None = None, devices: list[int] | None = None,
                  source: str = "h100_sxm5_8gpu.json") -> dict:
    """CONSTRUCTED: the real 8-GPU H100 (or `source`) recording with the bus IDs an Azure ND H100 v5 VM has, each GPU
    on bus 00 of its own PCI domain (`0000000N:00:00.0`), CUDA's bus IDs to match. `devices`: devices of one bus
    instead."""
    reading = json.loads((DATA / "nvml" / source).read_text())
    for n, gpu in enumerate(reading["gpus"]):
        domain = (domains or list(range(1, 9)))[n]
        device = devices[n] if devices else 0
        gpu["pci_bus_id"] = f"{domain:08X}:00:{device:02X}.0"
    reading["cuda_devices"]["bus_ids"] = [sysfs_bus_id(g["pci_bus_id"]) for g in reading["gpus"]]
    return reading


def rank_lines(where: list[str]) -> str:
    return "".join(f"#  Rank {r:2d} Group  0 Pid   4242 on      azure device {r:2d} [{w}] NVIDIA H100 80GB HBM3\n"
                   for r, w in enumerate(where)) + "#       size  count  type  redop  root  time  algbw  busbw  #wrong\n"


def judged(text: str, reading: dict) -> tuple[list[str], str | None]:
    result = parse_all_reduce(text)
    host = parse_host(reading)
    run = ToolRun("k", ("all_reduce_perf", "-n", "20"), 0, 1.0, text, "", pid=4242)
    return not_this_run(result, run, host, 8), unplaced_ranks(result, host, 8)


def test_domain_rank_lines_place_each_rank_on_its_own_gpu():
    assert judged(rank_lines([f"{d:04x}:00:00" for d in range(1, 9)]), azure_reading()) == ([], None)


def test_ranks_that_really_share_an_azure_gpu_are_named():
    problems, unknown = judged(rank_lines(["0001:00:00"] * 2 + [f"{d:04x}:00:00" for d in range(3, 9)]),
                               azure_reading())
    assert problems == ["ranks share a GPU: ranks 0, 1 all on 0001:00:00 (GPU0)"]
    assert unknown is None


def test_a_rank_in_a_domain_nvml_does_not_list_is_elsewhere():
    problems, _ = judged(rank_lines([f"{d:04x}:00:00" for d in range(1, 8)] + ["0009:00:00"]), azure_reading())
    assert problems == ["ranks on GPUs NVML does not list here: rank 7 at 0009:00:00 (NVML: GPU0 0001:00:00, "
                        "GPU1 0002:00:00, GPU2 0003:00:00, GPU3 0004:00:00, GPU4 0005:00:00, GPU5 0006:00:00, "
                        "GPU6 0007:00:00, GPU7 0008:00:00)"]


def nccl583(change=lambda text: text) -> str:
    """The real 8-rank [0x00] lines (nccl issue 583: 8 A100-SXM4-40GB of one host), with the `#` the page lost and
    the PID of the run, and a column header."""
    real = (FOLDER / "nccl583_a100_8gpu_every_rank_bus_0x00_excerpt.txt").read_text()
    text = "".join(f"#{line.lstrip()}\n" for line in real.splitlines() if "Rank" in line)  # the `#` the page lost
    return change(re.sub(r"Pid \d+", "Pid 4242", text)) + "#       size  count  type  redop  root  time  algbw  busbw  #wrong\n"


A100_AZURE = azure_reading(source="a100_sxm4_40gb_8gpu.json")  # eight A100s, each on bus 00 of a domain of its own


def test_the_real_every_rank_0x00_lines_are_placed_by_their_cuda_device_index():
    """Each `device N [0x00]` line is CUDA's device N of the run: CUDA's device list puts it in domain N+1, one GPU."""
    assert judged(nccl583(), A100_AZURE) == ([], None)


def test_two_real_0x00_lines_naming_one_cuda_device_share_a_gpu():
    problems, unknown = judged(nccl583(lambda t: t.replace("device  1 [0x00]", "device  0 [0x00]")), A100_AZURE)
    assert problems == ["ranks share a GPU: ranks 0, 1 all on 0001:00:00 (GPU0)"] and unknown is None


def test_the_real_a100_lines_replayed_where_nvml_has_h100s_are_not_this_hosts():
    problems, _ = judged(nccl583(), azure_reading())
    assert problems == ["rank 0's line names 'NVIDIA A100-SXM4-40GB' at 0001:00:00, where NVML has GPU0 'NVIDIA H100 "
                        "80GB HBM3'; rank 1's line names 'NVIDIA A100-SXM4-40GB' at 0002:00:00, where NVML has GPU1 "
                        "'NVIDIA H100 80GB HBM3'; rank 2's line names 'NVIDIA A100-SXM4-40GB' at 0003:00:00, where NVML "
                        "has GPU2 'NVIDIA H100 80GB HBM3'; rank 3's line names 'NVIDIA A100-SXM4-40GB' at 0004:00:00, "
                        "where NVML has GPU3 'NVIDIA H100 80GB HBM3': not this host's output"]


def test_without_cudas_device_list_the_real_0x00_lines_are_not_measured_never_shared():
    """An older recording without CUDA's device list: the bus alone does not say which GPU, nor does anything else."""
    reading = {k: v for k, v in A100_AZURE.items() if k != "cuda_devices"}
    problems, unknown = judged(nccl583(), reading)
    assert problems == []  # neither "shared" nor "elsewhere": the lines do not say
    assert unknown == ("where ranks 0, 1, 2, 3, 4, 5, 6, 7 ran is unknown: rank 0's line names PCI bus 0x00 alone "
                       "(`[0x00]`, as nccl-tests before 2.14.1 prints it), GPU0 (0001:00:00), GPU1 (0002:00:00), "
                       "GPU2 (0003:00:00), GPU3 (0004:00:00), GPU4 (0005:00:00), GPU5 (0006:00:00), GPU6 (0007:00:00), "
                       "GPU7 (0008:00:00) all sit on that bus, and CUDA's device list of this run was not read: an "
                       "nccl-tests that prints [domain:bus:device] tells which GPU each rank ran on")


def test_old_lines_still_place_ranks_where_each_bus_has_one_gpu():
    """Bare metal: eight buses, one GPU each; the old `[0x18]` form is unambiguous there."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_8gpu.json").read_text())
    buses = [int(g["pci_bus_id"].split(":")[1], 16) for g in reading["gpus"]]
    assert judged(rank_lines([f"0x{b:02x}" for b in buses]), reading) == ([], None)


def test_the_real_domain_lines_place_on_a_vm_with_devices_on_one_bus():
    """The real issue-294 lines of host h100-2 (domains 0002/0003, devices 01-04) on a host NVML lists so."""
    real = (FOLDER / "nccltests294_h100_2node_domains_0002_0003_excerpt.txt").read_text()
    text = re.sub(r"Pid +\d+", "Pid 4242", "".join(line + "\n" for line in real.splitlines() if "h100-2" in line))
    reading = azure_reading(domains=[2, 2, 2, 2, 3, 3, 3, 3], devices=[1, 2, 3, 4, 1, 2, 3, 4])
    assert judged(text + "#  size  count  type  redop  root  time  algbw  busbw  #wrong\n", reading) == ([], None)


# ------------------------------------------------------------------ acceptance: a fake Azure-style host

def contract(min_busbw: str = "450 GB/s") -> str:
    return (f"gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nallreduce:\n  min_busbw: '{min_busbw}'\n"
            "  max_bytes: '16 GiB'\n  args: ['-n', '1']\n")


@pytest.fixture
def azure_host(tmp_path: Path) -> tuple[str, str, Path]:
    """CONSTRUCTED: the NVML state of an Azure-style 8-GPU host (azure_reading), and the sysfs tree whose
    bus/pci/devices lists its GPUs as `0001:00:00.0` ... `0008:00:00.0`."""
    path = tmp_path / "nvml-azure-nd-h100-v5-constructed.json"
    path.write_text(json.dumps(azure_reading()))
    return f"--gpuaccept-nvml={path}", pci_tree(tmp_path / "sys", recording=path), path


def azure_log(path: Path, where) -> bytes:
    """The real P5 table with rank lines for this host: rank r at `where(r)`, the PID the fake prints."""
    text = nccl_log(P5, recording=path, ranks=8).decode()  # rank lines in the old form, `[0x00]`
    return re.sub(r"(device +(\d+) )\[0x00\]", lambda m: f"{m.group(1)}[{where(int(m.group(2)))}]", text).encode()


def test_an_azure_style_host_is_accepted(accept, fake_tools, azure_host):
    nvml, sysfs, path = azure_host
    assert (tmp := Path(sysfs.split("=", 1)[1]) / "bus" / "pci" / "devices" / "0008:00:00.0").is_dir(), tmp
    fake_tools.add_nccl(azure_log(path, lambda r: f"{r + 1:04x}:00:00"), iters=1)
    run = accept(contract(), nvml, sysfs)
    check = run.checks("allreduce")[0]
    assert check["outcome"] == "passed", check["message"]
    assert check["measured"] == pytest.approx(483.05, abs=0.01)
    bad = [(c["clause"], c["outcome"], c["message"]) for c in run.checks() if c["outcome"] != "passed"]
    assert bad == [] and run.json["verdict"] == "accepted"


def test_the_azure_host_whose_ranks_share_a_gpu_is_rejected(accept, fake_tools, azure_host):
    nvml, sysfs, path = azure_host
    fake_tools.add_nccl(azure_log(path, lambda r: "0001:00:00" if r < 2 else f"{r + 1:04x}:00:00"), iters=1)
    run = accept(contract(), nvml, sysfs)
    check = run.checks("allreduce")[0]
    assert (check["outcome"], check["message"]) == ("failed", "run: ranks share a GPU: ranks 0, 1 all on 0001:00:00 (GPU0)")
    assert run.json["verdict"] == "rejected"


def test_old_bus_only_lines_on_the_azure_host_are_placed_by_device_index_and_accepted(azure_host, tmp_path):
    _nvml, sysfs, path = azure_host
    judged = judge(contract(), {"all_reduce_perf": Output(azure_log(path, lambda r: "0x00"))}, tmp_path, nvml=path,
                   sysfs=Path(sysfs.split("=", 1)[1]))
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "passed", check.message
    assert check.details["header_confirmed"] == ["GPU names and PCI buses of the rank lines"]
    assert "driver: nccl-tests does not print it" in check.details["header_unconfirmed"]


def test_old_bus_only_lines_where_cuda_was_not_read_are_not_measured(tmp_path):
    reading = {k: v for k, v in azure_reading().items() if k != "cuda_devices"}
    path = tmp_path / "nvml-azure-without-cuda-constructed.json"
    path.write_text(json.dumps(reading))
    sysfs = Path(pci_tree(tmp_path / "sys", recording=path).split("=", 1)[1])
    judged = judge(contract(), {"all_reduce_perf": Output(azure_log(path, lambda r: "0x00"))}, tmp_path, nvml=path,
                   sysfs=sysfs)
    check = judged.of("allreduce")[0]
    assert check.outcome.value == "not_measured"
    assert check.message.startswith("not measured: run: where ranks 0, 1, 2, 3, 4, 5, 6, 7 ran is unknown: "
                                    "rank 0's line names PCI bus 0x00 alone")
    assert "share" not in check.message
    assert judged.verdict != "accepted"


def test_a_rank_whose_line_gives_no_address_is_not_placed():
    """A torch without `pci_bus_id` prints `[unknown]` (never a guessed 0): that rank is not measured."""
    where = [f"{d:04x}:00:00" for d in range(1, 8)] + ["unknown"]
    assert judged(rank_lines(where), azure_reading()) == (
        [], "where ranks 7 ran is unknown: their `# Rank` lines give no `Pid ... device N [address]`")


class _Props:
    name = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("given, printed", [
    ({"pci_domain_id": 1, "pci_bus_id": 0, "pci_device_id": 0}, "[0001:00:00]"),
    ({"pci_domain_id": 0, "pci_bus_id": 0x18, "pci_device_id": 0}, "[0000:18:00]"),
    ({"pci_bus_id": 0x18}, "[0x18]"),
    ({}, "[unknown]"),
])
def test_the_torch_workload_prints_what_torch_gives_never_a_guessed_zero(given, printed):
    props = _Props()
    for key, value in given.items():
        setattr(props, key, value)
    assert _address(props) == printed
    read = parse_rank_line(f"#  Rank  0 Group  0 Pid 1 on h device  0 {printed} {props.name}")
    shown = {"[0001:00:00]": "0001:00:00", "[0000:18:00]": "0000:18:00", "[0x18]": "bus 0x18"}
    assert (read.shown if read else None) == shown.get(printed)


def test_a_real_azure_kernel_xid_is_matched_to_its_gpu_by_domain():
    """The real Azure NHC Xid 119 line names `PCI:0002:00:00`: GPU1 of the Azure-style host (NVML
    `00000002:00:00.0`), not GPU0 (`00000001:00:00.0`), though both sit on bus 00."""
    log = parse_xids((DATA / "kernel" / "dmesg_xid119_gsp_timeout_aznhc.txt").read_text())
    (xid,) = getattr(log, "xids", log)  # a list, or a KernelLog that also says what it could not read
    assert (xid.pci, xid.xid) == ("0002:00:00", 119)
    buses = [g["pci_bus_id"] for g in azure_reading()["gpus"]]
    assert [_kernel_pci(b) == xid.pci for b in buses] == [False, True, False, False, False, False, False, False]


def test_cuda_and_nvml_bus_ids_agree_on_the_azure_host():
    """CUDA's cuDeviceGetPCIBusId form (`0001:00:00.0`) and NVML's (`00000001:00:00.0`) name the same GPUs."""
    host = parse_host(azure_reading())
    assert host.cuda_devices is not None
    assert host.cuda_devices.bus_ids == tuple(sysfs_bus_id(g.pci_bus_id) for g in host.gpus)
    assert host.cuda_devices.bus_ids[7] == "0008:00:00.0"
