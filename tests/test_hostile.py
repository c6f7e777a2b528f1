"""Hostile and broken input: malformed contracts and tool outputs never crash the session, never pass,
and always say what was wrong; markup and control bytes from tools are escaped and bounded in the report."""

import re

import pytest
from conftest import DATA, nvml_recording, pci_port

from pytest_gpuaccept.clauses import allreduce, network, nvlink
from pytest_gpuaccept.clauses.base import Clause
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.measurements import AllReduceRuns, GpuModels, Iperf3Path, NicLinks, RdmaDevices, WithModels
from pytest_gpuaccept.probes import ethtool, ib_write_bw, iperf3, nccl_tests, nvidia_smi
from pytest_gpuaccept.probes._run import Reading, ToolRun, parse_run
from pytest_gpuaccept.probes.iproute import Route
from pytest_gpuaccept.probes.sysfs import Function, IbPort
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Check

HEAD = "gpuaccept: 1\nvendor: V\n"
GPUS = HEAD + "gpus:\n  count: 8\n"
MALFORMED_CONTRACTS = [
    "", "   \n", "[]", "42", "'just a string'", "gpuaccept: 1", HEAD, "gpuaccept: one\nvendor: V\ngpus: {count: 1}\n",
    "gpuaccept: 1\nvendor: ''\ngpus: {count: 1}\n", "gpuaccept: 1\nvendor: V\ngpus: 8\n",
    GPUS + "  count: 8\n", GPUS.replace("count: 8", "count: 0"), GPUS.replace("count: 8", "count: 8.5"),
    GPUS.replace("count: 8", "count: yes"), GPUS + "  memory: '80 gigabytes'\n", GPUS + "  memory: '-80 GB'\n",
    GPUS + "  cuda: '>=twelve'\n", GPUS + "  model: \"H100\\x00\"\n", GPUS + "nvlink: {every_pair: maybe}\n",
    GPUS + "nvlink: {every_pair: true, min_links: 0}\n", GPUS + "allreduce: {min_busbw: '450 GB/s', repeats: 0}\n",
    GPUS + "allreduce: {min_busbw: '450 GB/s', min_bytes: '8 GiB', max_bytes: '8 MiB'}\n",
    GPUS + "allreduce: {min_busbw: '450 GB/s', args: '-n 40'}\n", GPUS + "allreduce: {min_busbw: '450 GB/s', tool: mpi}\n",
    HEAD + "nics: {interfaces: eth0, min_speed: '10 Gb/s'}\n", HEAD + "nics: {interfaces: ['../etc'], min_speed: '10 Gb/s'}\n",
    HEAD + "nics: {interfaces: ['eth0'], min_speed: '10 Gb'}\n", HEAD + "rdma: {devices: ['mlx5_0'], min_fraction_of_line_rate: 0}\n",
    HEAD + "rdma: {devices: ['mlx5_0'], min_fraction_of_line_rate: 0.9, peer: 'host; reboot'}\n",
    HEAD + "iperf3: {server: 10.0.0.2, min_throughput: '10 Gb/s', streams: 0}\n",
    HEAD + "iperf3: {server: 10.0.0.2, min_throughput: '10 Gb/s', duration: 10}\n",
    GPUS + "utilisation: {min_percent: 180}\n", GPUS + "utilisation: {min_percent: 80, workload: []}\n",
    GPUS + "health: {ecc: true}\n", GPUS + "utilisation: {min_percent: 80}\nhealth: {pcie_gen: 9}\n",
    "gpuaccept: 1\nvendor: V\ngpus: {count: 1}\ngpus: {count: 2}\n", "gpuaccept: 1\nvendor: V\n  gpus: {count: 1}\n",
    "gpuaccept: 1\nvendor: !!python/object/apply:os.system ['true']\ngpus: {count: 1}\n",
    "gpuaccept: 1\nvendor: &a V\ngpus: {count: 1, model: *b}\n", "\tgpuaccept: 1\n",
]


def test_the_campaign_has_at_least_30_contracts():
    assert len(MALFORMED_CONTRACTS) >= 30


@pytest.mark.parametrize("text", MALFORMED_CONTRACTS)
def test_a_malformed_contract_is_a_clear_error(text):
    with pytest.raises(ContractError) as info:
        parse_contract(text, "vendor.yaml")
    assert info.value.problems
    for problem in info.value.problems:
        assert re.match(r"^vendor\.yaml:\d+: [\w.]+: .*(expected|unknown key|duplicate key|missing|needs)", problem), problem


TOPO = (DATA / "topo" / "h100_8gpu_nv18_no_legend_mlengineering.txt").read_text()
NCCL = (DATA / "allreduce" / "rtx5090_8gpu_pcie_p2p_ncclt2.18.2_no_footer.txt").read_text()
ETHTOOL = (DATA / "ethtool" / "ice_25g_dac_link_partner.txt").read_text()
IBWB = (DATA / "ibwritebw" / "oci_roce_mlx5_5_4qp_report_gbits_rdmacm.txt").read_text()
IPERF = (DATA / "iperf3" / "json_3.9_tcp_10s_omit3_1.82Gbps.json").read_text()
STATUS = (DATA / "nvlink" / "h100_status_i0_18links.txt").read_text()
SCRIPT = "<script>alert(1)</script>"


JUDGED = parse_contract("""\
gpuaccept: 1
vendor: "x"
gpus: {count: 8}
nvlink: {every_pair: true, min_links: 1, links_per_gpu: 18, link_speed: "26 GB/s"}
allreduce: {min_busbw: "1 GB/s", max_bytes: "128 MiB"}
nics: {interfaces: [eth0], min_speed: "1 Gb/s"}
rdma: {devices: [mlx5_0], min_fraction_of_line_rate: 0.1}
iperf3: {server: 10.0.0.2, min_throughput: "0.001 Gb/s"}
""")


NO_MODELS = GpuModels({}, {}, ())  # no sysfs: no published figure to set beside
PORT = lambda name: Function(name, "0000:18:00.0", "mlx5_core", None, (), None)  # noqa: E731  a physical port


def judge(kind: str, text: str) -> Check:
    """Push one tool output through its parser and its clause's judge, as the suites do."""
    run = ToolRun("k", (kind,), 0, 0.1, text, "")

    def clause_judge(clause: Clause, subject: Subject, measured: object) -> Check:
        return clause.judge(clause.section.of(JUDGED), subject, measured, JUDGED)

    if kind == "topo":
        return clause_judge(nvlink.PAIRS, Subject.pair(0, 1), WithModels(parse_run(run, nvidia_smi.parse_topo), NO_MODELS))
    if kind == "nccl":
        runs = AllReduceRuns((parse_run(run, nccl_tests.parse_all_reduce),), "nccl-tests", ())
        return clause_judge(allreduce.CLAUSE, Subject.whole("all_reduce"), runs)
    if kind == "ethtool":
        links = NicLinks(("eth0",), lambda _name: parse_run(run, ethtool.parse_ethtool), lambda name: (PORT(name), "f.json"))
        return clause_judge(network.NIC_SPEED, Subject.named("eth0", "eth0"), links)
    if kind == "ibwb":
        port = IbPort("mlx5_0", 1, True, "4: ACTIVE / 5: LinkUp", 100.0, "InfiniBand", None)
        devices = RdmaDevices(("mlx5_0",), lambda _d: ([port], "sysfs.json"),
                              lambda _d, _p: parse_run(run, ib_write_bw.parse_ib_write_bw), lambda name: (PORT(name), "f.json"))
        return clause_judge(network.RDMA_BW, Subject.named("mlx5_0", "mlx5_0"), devices)
    if kind == "iperf3":
        runs3 = Iperf3Path(iperf3.Iperf3Runs((parse_run(run, iperf3.parse_iperf3_json),), ""),
                           Reading(None, Route("unicast", "10.0.0.2", "eth0", None), None),
                           {"tx_bytes": 0}, {"tx_bytes": 10**12}, ())
        return clause_judge(network.IPERF3_TCP, Subject.whole("10.0.0.2"), runs3)
    if kind == "nvlink":
        return clause_judge(nvlink.LINKS, Subject.of_gpu(0),
                            WithModels(parse_run(run, nvidia_smi.parse_nvlink_status), NO_MODELS))
    raise AssertionError(kind)


MALFORMED_OUTPUTS = [
    ("topo", ""), ("topo", "\x00" * 500), ("topo", f"<html>{SCRIPT}</html>"), ("topo", "\n".join(TOPO.splitlines()[:3])),
    ("topo", TOPO.replace("NV18", "\x1b[31mNV18\x1b[0m")), ("topo", TOPO.replace("NV18", "NV\ufffd8")),
    ("topo", TOPO.splitlines()[0]), ("topo", TOPO.replace("GPU1 ", "GPU9 ", 1)),
    ("nccl", ""), ("nccl", NCCL[: len(NCCL) // 2]), ("nccl", f"{SCRIPT}\n"), ("nccl", "\x00\x01\x02" * 100),
    ("nccl", NCCL.replace("   25.06   43.86", "   25.06   abc")), ("nccl", NCCL.replace("43.86       0", "43.86       x")),
    ("nccl", NCCL.replace("43.86", "N/A")), ("nccl", "\n".join(line for line in NCCL.splitlines() if "size" not in line)),
    ("nccl", NCCL + "\nNCCL WARN NET/IB : Got completion with error 12\n"),
    ("ethtool", ""), ("ethtool", ETHTOOL.replace("25000Mb/s", "25000Gb/s")), ("ethtool", ETHTOOL.replace("yes", "maybe")),
    ("ethtool", SCRIPT), ("ethtool", ETHTOOL.replace("Link detected: yes\n", "")), ("ethtool", "\x00" * 64),
    ("ibwb", ""), ("ibwb", "\n".join(IBWB.splitlines()[:-2])), ("ibwb", " Couldn't connect to 10.0.0.2:18515\n"),
    ("ibwb", SCRIPT), ("ibwb", IBWB.replace("98.01              98.01", "98.01              9e9")),
    ("iperf3", IPERF[:800]), ("iperf3", IPERF + IPERF), ("iperf3", '{"error": "unable to connect to server"}'),
    ("iperf3", "Connecting to host 10.0.0.2, port 5201\n"), ("iperf3", '{"start": {}, "end": {}}'),
    ("iperf3", IPERF.replace("1822789751.4320772", '"fast"')), ("iperf3", "\xff\xfe" + SCRIPT),
    ("nvlink", ""), ("nvlink", STATUS.replace("Link 5: 26.562 GB/s", "[...]")), ("nvlink", SCRIPT),
    ("nvlink", STATUS.replace("Link 7: 26.562 GB/s", "Link 7: <inactive>")),
]


def test_the_campaign_has_at_least_30_tool_outputs():
    assert len(MALFORMED_OUTPUTS) >= 30


@pytest.mark.parametrize("kind, text", MALFORMED_OUTPUTS)
def test_a_malformed_tool_output_never_passes_and_says_why(kind, text):
    check = judge(kind, text)
    assert check.outcome in ("failed", "not_measured")
    assert check.message and len(check.message) < 2000


def test_markup_and_control_bytes_from_a_tool_are_escaped_in_the_report(accept, fake_tools):
    hostile = (TOPO.encode() + f"\n{SCRIPT}<img src=x onerror=alert(2)>\n\x1b[31mred\x1b[0m\x00nul\xff\xfe\n".encode("latin-1"))
    fake_tools.add("nvidia-smi", hostile)
    run = accept("gpuaccept: 1\nvendor: 'V <b>bold</b>'\ngpus:\n  count: 8\nnvlink:\n  every_pair: true\n",
                 nvml_recording("h100_sxm5_8gpu.json"))
    page = run.html
    assert "<script>alert(1)" not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert '@top-center { content: "ACCEPTED · V _b_bold_/b_ · ' in page  # the print header: plain characters only
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\\x1b[31mred" in page and "\\x00nul" in page
    assert "\x00" not in page and "\x1b" not in page
    evidence = run.path / "gpuaccept-evidence" / "nvidia-smi_topo_-m.txt"
    assert evidence.read_bytes() == hostile  # the evidence keeps what the tool printed, byte for byte


def test_a_huge_output_is_stored_bounded_and_never_read_as_a_result(accept, fake_tools):
    fake_tools.add("nvidia-smi", TOPO.encode() + b"x" * (20 * 1024 * 1024))
    run = accept("gpuaccept: 1\nvendor: V\ngpus:\n  count: 8\nnvlink:\n  every_pair: true\n",
                 nvml_recording("h100_sxm5_8gpu.json"))
    evidence = run.path / "gpuaccept-evidence" / "nvidia-smi_topo_-m.txt"
    assert evidence.stat().st_size < 8 * 1024 * 1024 + 200
    size = len(TOPO.encode()) + 20 * 1024 * 1024
    assert evidence.read_bytes().endswith(f"[gpuaccept: output truncated at 8388608 bytes of {size}]\n".encode())
    pair = run.checks("nvlink")[0]
    assert pair["outcome"] == "not_measured" and "exceeded 8388608 bytes" in pair["message"]
    assert (run.path / "gpuaccept-report.html").stat().st_size < 3 * 1024 * 1024


def test_a_host_interface_name_with_markup_is_never_passed_to_a_tool_nor_shown_raw(accept, fake_tools, tmp_path):
    sysfs = tmp_path / "sys"
    (sysfs / "class" / "net" / "<b>x").mkdir(parents=True)
    pci_port(sysfs, "net", "eth0", "0000:18:00.0", driver="ice")
    fake_tools.add("ethtool", DATA / "ethtool" / "ice_25g_dac_link_partner.txt")
    run = accept("gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['*']\n  min_speed: '10 Gb/s'\n",
                 f"--gpuaccept-sysfs={sysfs}")
    odd = [c for c in run.checks("nics") if c["subject"] == "<b>x"][0]
    assert odd["outcome"] == "not_measured" and "not safe to pass to a tool" in odd["message"]
    assert fake_tools.calls("ethtool") == [["ethtool", "eth0"]]
    assert "<b>x" not in run.html
