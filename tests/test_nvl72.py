"""An NVL72 rack (18 trays of 4 GB200s in one NVLink domain) as a cluster contract: `cluster.nvlink_domain`.

The parsers read real outputs (tests/data/nvl72, SOURCES.md): `nvidia-imex-ctl -N` of an 18-node GB200 domain and
of an older 2-node one, NCCL's INFO lines of a GB200 tray (`MNNVL busId ... cliqueId 0x7ffe state 3 healthMask
0xaa`) and of an H100 job that did not use MNNVL (`... MNNVL 0`), and a 72-rank GB200 NVL72 nccl-tests table
(834.57 GB/s busbw at 8 GiB).

The rack: a real Slurm cluster in network namespaces (tests/netns_cluster.py), h0 the login node and h1..h18 the
trays, each tray's own per-node run reading its own NVML recording with its fabric info. What the trays' tools
print is assembled from those real outputs by this file (marked constructed below): each tray's IMEX view is the
real 18-node output with the trays' addresses, and the all_reduce is the real 72-rank table behind rank lines and
NCCL INFO lines in the real lines' formats, one per rank on its tray. Two whole runs go through the rack, where the
process boundary is the point (launcher, the trays' own runs, the report, the exit code): the honest rack accepted,
and a tray whose IMEX daemon refuses (its refusal read through srun) rejected with exit code 1, naming it. The other
frauds are judged in process (judge_fabric, judge_imex, judge_busbw) on the same readings: the trays' NVML
recordings (tray_recording), the IMEX views, the NCCL lines of the all_reduce (nccl_log).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from builders import CHANNELS_LS, ETH, HONEST_DEVICES, IB_PORT, SMI_IDLE, SMI_TRAINING, four_gpus, honest_traffic
from conftest import DATA, pci_tree
from netns_cluster import Cluster, missing_tools

from pytest_gpuaccept.clauses import nvlink_domain, registry
from pytest_gpuaccept.cluster.engine import NodeState
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.measurements import ClusterRun, DomainAllReduce, ImexView, ImexViews, NodeOutcome, PairResult
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.imex import parse_domain
from pytest_gpuaccept.probes.imex_channels import parse_listing, parse_major
from pytest_gpuaccept.probes.nccl_tests import MnnvlSeen, mnnvl_by_host, parse_all_reduce
from pytest_gpuaccept.probes.nvlink_counters import Traffic, parse_nic_counters, parse_throughput
from pytest_gpuaccept.probes.nvml import fabric_health_problems
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Check

NVL72 = DATA / "nvl72"
IMEX_18 = NVL72 / "imex_ctl_N_18node_all_connected_aws_pcluster_doc.txt"
IMEX_2 = NVL72 / "imex_ctl_N_2node_gh200_imex570_no_version_fiberrepro.txt"
NCCL_TABLE = NVL72 / "nccltests_gb200_nvl72_72rank_table_coreweave_pr43.txt"
MNNVL_LINES = NVL72 / "nccl_info_mnnvl_fabric_gb200_1tray_fragment_nccl_issue1769.txt"
MNNVL_OFF = NVL72 / "nccl_info_mnnvl0_h100_3node_24rank_fragment_nccl_issue1453.txt"
FABRIC_SMI = NVL72 / "nvidia_smi_q_fabric_unhealthy_grepC3_dradriver_issue626.txt"
FABRIC_REFUSED = NVL72 / "nvidia_smi_q_fabric_insufficient_resources_azhpc_pr506.txt"
NVML_H = NVL72 / "nvml_h_fabric_defs_go-nvml_2f9e261.h.txt"
TRAYS = 18
UUID = "dc6e40c4-d722-4357-9ba6-5291dd461278"  # the real ClusterUUID of FABRIC_SMI
CLIQUE = 0x7FFE  # the real cliqueId of MNNVL_LINES


# ------------------------------------------------------------------ the parsers, on real outputs


def test_the_imex_view_of_a_real_18_node_gb200_domain_and_of_an_older_2_node_one():
    domain = parse_domain(IMEX_18.read_text())
    assert len(domain.nodes) == 18 and domain.state == "UP"
    assert domain.nodes[0].address == "172.31.48.81" and domain.nodes[17].version == "570.172"
    assert {n.status for n in domain.nodes} == {"READY"} and set(domain.grid.values()) == {"C"}
    assert domain.bad_cells(5) == []
    older = parse_domain(IMEX_2.read_text())
    assert [(n.address, n.version) for n in older.nodes] == [("10.136.206.47", None), ("10.136.206.48", None)]
    assert len(older.grid) == 4 and older.state == "UP"


def test_an_imex_view_cut_short_is_an_error_not_a_domain():
    text = IMEX_18.read_text()
    with pytest.raises(ParseError, match="Domain State"):
        parse_domain(text.split("Domain State")[0])
    with pytest.raises(ParseError, match="grid"):
        parse_domain("\n".join(line for line in text.splitlines() if not line.strip().startswith("17 ")))
    with pytest.raises(ParseError, match="Node"):
        parse_domain("nvidia-imex-ctl: could not connect to the IMEX daemon\n")


def test_nccls_mnnvl_lines_real_gb200_fabric_and_a_real_job_without_mnnvl():
    tray = mnnvl_by_host(MNNVL_LINES.read_text())["gb200a-04"]
    assert tray.cliques == ((CLIQUE, 3),) * 4 and tray.comm_flags == ()
    off = mnnvl_by_host(MNNVL_OFF.read_text())["h100clust-worker-1"]
    assert off.comm_flags == (0,) and off.nodes == (3,)
    table = parse_all_reduce(NCCL_TABLE.read_text())
    assert table.largest is not None and table.largest.size_bytes == 8 * 2**30
    assert table.largest.oop_busbw_gbyte_s == 834.57


def test_the_fabric_health_mask_real_values():
    # 0xaa, as real GB200 trays report it (NCCL's line): every 2-bit field "false", nothing unhealthy.
    assert fabric_health_problems(0xAA) == []
    assert fabric_health_problems(0) == []  # every field "not supported" (an H200: DeepEP#143)
    # The bit layout as nvml.h gives it (tests/data/nvl72, go-nvml's copy).
    header = NVML_H.read_text()
    assert "NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW" in header and "NVML_GPU_FABRIC_STATE_COMPLETED" in header
    assert fabric_health_problems(0xA9) == ["bandwidth degraded"]
    assert fabric_health_problems(0xA6 | (5 << 8)) == ["route recovery in progress",
                                                        "incorrect configuration: too few NVLinks"]
    # nvidia-smi's view of the same fields (real): a tray completed with a ClusterUUID, and one refused for
    # insufficient resources with an all-zero UUID (what gpus[].fabric then records: status not 0).
    assert f"ClusterUUID                       : {UUID}" in FABRIC_SMI.read_text()
    assert "Insufficient Resources" in FABRIC_REFUSED.read_text()


# ------------------------------------------------------------------ each tray's fabric (its own NVML reading)


def judge_fabric_of(run: ClusterRun, tray: str) -> Check:
    contract = parse_contract(CONTRACT)
    return nvlink_domain.judge_fabric(nvlink_domain.SECTION.of(contract), Subject.whole(tray), run, contract)


def fabric_failing(run: ClusterRun) -> dict[str, Check]:
    """Every tray's fabric check on the rack's readings, the ones not passed."""
    checks = {tray: judge_fabric_of(run, tray) for tray in run.nodes}
    return {tray: check for tray, check in checks.items() if not check.passed}


def test_a_tray_whose_fabric_registration_did_not_complete_is_rejected_by_name():
    honest = judge_fabric_of(trays_run(), "h7")
    assert honest.passed and honest.message == (
        f"h7: 4 GPUs in the fabric, completed, healthy, clique 32766 of cluster {UUID} (as 18 of 18 trays)")
    bad = fabric_failing(trays_run({"h7": {"state": 2}}))
    assert list(bad) == ["h7"]
    assert bad["h7"].outcome.value == "failed" and bad["h7"].measured == "in progress"
    assert bad["h7"].message == "h7: " + "; ".join(f"GPU{g}: fabric state in progress, not completed" for g in range(4))


def test_a_tray_in_another_clique_is_rejected_by_name():
    run = trays_run({"h11": {"clique_id": 0x7FFD}})
    bad = fabric_failing(run)
    assert list(bad) == ["h11"] and bad["h11"].outcome.value == "failed" and bad["h11"].measured == "completed"
    assert bad["h11"].message == "h11: " + "; ".join(
        f"GPU{g}: clique 32765 of cluster {UUID}, not the domain's clique 32766 of cluster {UUID}" for g in range(4))
    assert "(as 17 of 18 trays)" in judge_fabric_of(run, "h10").message  # the domain: the clique most trays are in


# ------------------------------------------------------------------ the IMEX channel devices (the driver's word)

DEVICES_MODPROBE = NVL72 / "proc_devices_grep_nvidia_modprobe_issue9.txt"
DEVICES_DRA = NVL72 / "proc_devices_imex_and_caps_dradriver_pr304.txt"


def test_the_real_imex_channel_listing_and_proc_devices_lines():
    channels = parse_listing(CHANNELS_LS.read_text())
    assert [(c.name, c.kind, c.major, c.minor) for c in channels] == [
        ("channel0", "c", 508, 0), ("channel1", "c", 508, 1), ("channel2047", "c", 508, 2047)]
    assert parse_major(DEVICES_MODPROBE.read_text()) == 234  # the poster's "(major number)" note after the name
    # `511 nvidia-caps` is another driver's major, not the channels' (the bug of dra-driver-nvidia-gpu#304)
    assert parse_major(DEVICES_DRA.read_text()) == 234
    assert parse_major("Character devices:\n  1 mem\n511 nvidia-caps\n") is None
    assert parse_listing("total 0\n") == ()
    with pytest.raises(ParseError, match="/proc/devices: no '<major> <name>' line"):
        parse_major("cat: /proc/devices: Permission denied\n")


def imex_views_with(channels: dict[str, tuple[str | None, str]]) -> ImexViews:
    """Every tray's view is the real 18-node one (tray h<k+1> is node #k, all READY); each tray's channels are the
    given `ls` text (None: `ls` could not open the folder) and /proc/devices text."""
    domain = parse_domain(IMEX_18.read_text())
    views = {}
    for k in range(TRAYS):
        name = f"h{k + 1}"
        listing, devices = channels[name]
        views[name] = ImexView(domain, (domain.nodes[k].address,), None, (f"imex-{name}.txt",),
                               parse_listing(listing or ""), parse_major(devices), None,
                               None if listing is not None else
                               "ls: cannot access '/dev/nvidia-caps-imex-channels': No such file or directory")
    return ImexViews(views)


def judge_imex_of(views: ImexViews, tray: str):
    contract = parse_contract(CONTRACT)
    return nvlink_domain.judge_imex(nvlink_domain.SECTION.of(contract), Subject.whole(tray), views, contract)




def test_a_tray_whose_driver_exposes_its_channel_devices_passes_imex():
    views = imex_views_with({f"h{t}": (CHANNELS_LS.read_text(), HONEST_DEVICES) for t in range(1, TRAYS + 1)})
    check = judge_imex_of(views, "h4")
    assert check.passed, check.message
    assert check.details["channels"][0] == "channel0 c 508:0" and check.details["channel_major"] == 508
    assert "the driver's IMEX channel devices (/dev/nvidia-caps-imex-channels, /proc/devices)" in check.details["sources"]


def test_a_tray_whose_daemon_says_ready_with_no_channel_device_is_rejected_naming_it():
    trays = {f"h{t}": (CHANNELS_LS.read_text(), HONEST_DEVICES) for t in range(1, TRAYS + 1)}
    trays["h4"] = (None, HONEST_DEVICES)
    check = judge_imex_of(imex_views_with(trays), "h4")
    assert check.outcome.value == "failed" and check.measured == "no channel"
    assert check.message == ("h4: IMEX READY per nvidia-imex-ctl, but /dev/nvidia-caps-imex-channels has no channel "
                             "device of major 508 (/proc/devices's nvidia-caps-imex-channels): `ls -ln "
                             "/dev/nvidia-caps-imex-channels` said: ls: cannot access '/dev/nvidia-caps-imex-channels': "
                             "No such file or directory")
    assert judge_imex_of(imex_views_with(trays), "h5").passed  # its peers keep theirs


def test_channel_devices_of_another_major_or_no_driver_major_are_rejected():
    trays = {f"h{t}": (CHANNELS_LS.read_text(), HONEST_DEVICES) for t in range(1, TRAYS + 1)}
    # the two real texts together: the listing's nodes are major 508, the driver's channels are 234
    trays["h2"] = (CHANNELS_LS.read_text(), DEVICES_DRA.read_text())
    trays["h3"] = (CHANNELS_LS.read_text(), "Character devices:\n195 nvidia\n511 nvidia-caps\n")
    views = imex_views_with(trays)
    other = judge_imex_of(views, "h2")
    assert other.measured == "no channel" and other.message == (
        "h2: IMEX READY per nvidia-imex-ctl, but /dev/nvidia-caps-imex-channels has no channel device of major 234 "
        "(/proc/devices's nvidia-caps-imex-channels): it lists channel0 (character device 508:0), channel1 (character "
        "device 508:1), channel2047 (character device 508:2047)")
    none = judge_imex_of(views, "h3")
    assert none.message == ("h3: IMEX READY per nvidia-imex-ctl, but /proc/devices has no nvidia-caps-imex-channels "
                            "line: the driver exposes no IMEX channel")


def test_channels_that_could_not_be_read_are_not_measured_not_passed():
    domain = parse_domain(IMEX_18.read_text())
    views = ImexViews({f"h{k + 1}": ImexView(domain, (domain.nodes[k].address,), None) for k in range(TRAYS)})
    check = judge_imex_of(views, "h1")
    assert check.outcome.value == "not_measured" and check.message == (
        "not measured: h1: IMEX READY per nvidia-imex-ctl, but its IMEX channel devices were not read: not read")


# ------------------------------------------------------------------ the trays' NVLink and NIC counters



def test_the_real_nvlink_data_counters_of_an_idle_and_a_training_h800():
    idle, training = parse_throughput(SMI_IDLE.read_text()), parse_throughput(SMI_TRAINING.read_text())
    assert list(idle) == [0] and idle[0].uuid == "GPU-34bf77d1-c686-6821-79a8-32d326c5039c" and len(idle[0].links) == 8
    assert idle[0].links[0] == (5863784 * 1024, 5863677 * 1024)
    moved = Traffic(idle, training, {ETH: 10}, {ETH: 10}).nvlink_tx()
    assert moved == {0: (training[0].tx_bytes - idle[0].tx_bytes)} and moved[0] == 11_081_339_563 * 1024  # 10.3 TiB over 8 links


def test_nvlink_counters_cut_short_or_of_another_kind_are_an_error_not_idle_links():
    text = SMI_IDLE.read_text()
    with pytest.raises(ParseError, match="only its Data Tx counter"):
        parse_throughput(text.replace("         Link 7: Data Rx: 5863146 KiB\n", ""))
    with pytest.raises(ParseError, match="unexpected line"):
        parse_throughput(text.replace("Data Tx", "Raw Tx"))  # `-gt r` counts protocol overhead too: not this reading
    with pytest.raises(ParseError, match="no GPU with an NVLink data counter"):
        parse_throughput("")
    # the NIC counters as `grep -H` prints them (constructed paths and values): port_xmit_data counts 4-byte words
    assert parse_nic_counters(f"{IB_PORT}:100\n{ETH}:7\n/sys/class/net/lo/statistics/tx_bytes:99\n") == {
        IB_PORT: 400, ETH: 7}
    with pytest.raises(ParseError, match="unexpected line reading the NIC counters"):
        parse_nic_counters("grep: /sys/class/net: Permission denied\n")


def trays_run(fabric: dict[str, dict] | None = None) -> ClusterRun:
    """The 18 trays' own runs as the login node keeps them: each tray's results carry its NVML recording
    (tray_recording, with `fabric` changing what a tray's GPUs read), as its per-node run returns it."""
    trays = [f"h{t}" for t in range(1, TRAYS + 1)]
    return ClusterRun("slurm", {t: NodeOutcome(NodeState(t, True, True, "IDLE", 4), f"nodes/{t}",
                                               {"host": tray_recording(t, (fabric or {}).get(t))}, None)
                                for t in trays}, ())


def domain_run(traffic: dict[str, Traffic], mnnvl: dict[str, MnnvlSeen] | None = None) -> DomainAllReduce:
    """The domain's all_reduce as judged (constructed around real values): the real 72-rank table's 834.57 GB/s at
    8 GiB, every tray's NCCL lines the real GB200 tray's with `MNNVL 1` on its 4 communicators (or `mnnvl`, what
    NCCL's lines said per host), and `traffic`."""
    cluster = trays_run()
    real = mnnvl_by_host(MNNVL_LINES.read_text())["gb200a-04"]
    if mnnvl is None:
        mnnvl = {t: dataclasses.replace(real, comm_flags=(1,) * 4, nodes=(18,) * 4) for t in cluster.nodes}
    return DomainAllReduce(cluster, tuple(cluster.nodes), (), 4, PairResult(0, 834.57, "8 GiB", None, ()), mnnvl,
                           traffic=traffic)


def judge_busbw_of(run: DomainAllReduce):
    contract = parse_contract(CONTRACT)
    return nvlink_domain.judge_busbw(nvlink_domain.SECTION.of(contract), Subject.whole("domain"), run, contract)


def test_mnnvl_with_every_trays_nvlink_counters_moving_and_its_nics_quiet_is_accepted():
    check = judge_busbw_of(domain_run({f"h{t}": honest_traffic() for t in range(1, TRAYS + 1)}))
    assert check.passed, check.message
    assert check.details["traffic"]["h3"]["nic_tx_bytes"] == {ETH: 11_200, IB_PORT: 500}


def test_mnnvl_claimed_but_a_trays_nvlink_counters_did_not_move_is_rejected_naming_them():
    traffic = {f"h{t}": honest_traffic() for t in range(1, TRAYS + 1)}
    still = four_gpus(SMI_IDLE.read_text())
    traffic["h5"] = dataclasses.replace(honest_traffic(), nvlink_after=still)
    check = judge_busbw_of(domain_run(traffic))
    assert check.outcome.value == "failed" and check.measured == 834.57
    assert check.message.startswith(
        "not over the NVLink domain: h5: GPU0's NVLink Data Tx (nvidia-smi nvlink -gt d) "
        "grew 0 bytes during the all_reduce, under the 8 GiB (8589934592 bytes) one pass of the largest size sends; "
        "h5: GPU1's"), check.message
    assert "h4" not in check.message and "h6" not in check.message
    assert check.details["mnnvl"]["h5"]["comm"] == [1, 1, 1, 1]  # what NCCL claimed for it


def test_mnnvl_claimed_but_a_trays_nic_carried_the_bytes_is_rejected_naming_the_counter():
    traffic = {f"h{t}": honest_traffic() for t in range(1, TRAYS + 1)}
    # h9's NVLink moved (its GPUs talk among themselves), and its InfiniBand port sent 100 GiB
    traffic["h9"] = dataclasses.replace(honest_traffic(), nic_after={IB_PORT: 2_200_305_029 + 100 * 2**30,
                                                                      ETH: 81_931_204})
    check = judge_busbw_of(domain_run(traffic))
    assert check.outcome.value == "failed"
    assert (f"h9: its NICs sent 107374193600 bytes during the all_reduce (>= 32 GiB; most {IB_PORT} +107374182400 "
            f"bytes): the network carried it") in check.message, check.message
    assert "h8" not in check.message


def test_an_all_reduce_that_fell_back_to_the_network_is_rejected_naming_the_tray():
    traffic = {f"h{t}": honest_traffic() for t in range(1, TRAYS + 1)}
    honest = judge_busbw_of(domain_run(traffic, mnnvl_by_host(nccl_log(None))))
    assert honest.passed, honest.message
    fell_back = mnnvl_by_host(nccl_log("h5"))
    assert fell_back["h5"].comm_flags == (0,) * 4 and fell_back["h5"].net == ("NET/IB",)
    check = judge_busbw_of(domain_run(traffic, fell_back))
    assert check.outcome.value == "failed" and check.measured == 834.57
    assert check.message == "not over the NVLink domain: h5: fell back to the network (MNNVL 0, channels via NET/IB)"
    assert "h4" not in check.message and "h6" not in check.message


def test_trays_whose_counters_were_not_read_or_went_down_fail_the_domain():
    traffic = {f"h{t}": honest_traffic() for t in range(1, TRAYS + 1)}
    del traffic["h2"]
    traffic["h3"] = Traffic(problem="`nvidia-smi nvlink -gt d` before: exit code 9")
    traffic["h4"] = dataclasses.replace(honest_traffic(), nvlink_before=four_gpus(SMI_TRAINING.read_text()),
                                        nvlink_after=four_gpus(SMI_IDLE.read_text()))
    message = judge_busbw_of(domain_run(traffic)).message
    assert "h2: its NVLink and NIC counters were not read;" in message
    assert "h3: its NVLink and NIC counters were not read (`nvidia-smi nvlink -gt d` before: exit code 9)" in message
    assert ("h4: GPU0's NVLink Data Tx counters (nvidia-smi nvlink -gt d) went down or changed links during the "
            "all_reduce: reset, not counted") in message
    traffic = {f"h{t}": honest_traffic() for t in range(1, TRAYS + 1)}
    one = parse_throughput(SMI_TRAINING.read_text())  # the real reading: one GPU, where 4 ranks ran
    traffic["h6"] = dataclasses.replace(honest_traffic(), nvlink_before=parse_throughput(SMI_IDLE.read_text()),
                                        nvlink_after=one)
    assert judge_busbw_of(domain_run(traffic)).message == (
        "not over the NVLink domain: h6: nvidia-smi nvlink -gt d lists 1 GPUs with NVLink counters, 4 ranks ran there")


# ------------------------------------------------------------------ the contract


@pytest.mark.parametrize("domain, problem", [
    ("{fabric: false, imex: false}", "cluster.nvlink_domain: asks for nothing"),
    ('{min_busbw: "800 GB/s", min_bytes: "16 GiB"}', "cluster.nvlink_domain.min_bytes: expected at most max_bytes"),
    ("{fabric: yes-ish}", "cluster.nvlink_domain.fabric (line 10)"),
    ("{imex: true, nvswitch: true}", "cluster.nvlink_domain.nvswitch (line 10): unknown key"),
])
def test_a_mistake_in_the_nvlink_domain_keys_is_named_before_anything_runs(domain, problem):
    with pytest.raises(ContractError) as caught:
        parse_contract(CONTRACT.replace('{fabric: true, imex: true, min_busbw: "800 GB/s"}', domain))
    assert any(problem in line for line in caught.value.problems), caught.value.problems


def test_the_nvlink_domain_through_kubernetes_is_refused_not_skipped():
    text = CONTRACT.replace("engine: slurm", "engine: kubernetes").replace('nodes: ["h[1-18]"]',
                                                                          'nodes: {selector: "rack=r1"}')
    with pytest.raises(ContractError) as caught:
        parse_contract(text.replace("  node_timeout: 10 min\n", "  node_timeout: 10 min\n  kubernetes: {image: i}\n"))
    assert any("cluster.nvlink_domain: not measured through engine: kubernetes" in line
               for line in caught.value.problems), caught.value.problems


def test_the_defaults_ask_for_fabric_and_imex_and_the_busbw_only_when_given():
    contract = parse_contract(CONTRACT.replace('{fabric: true, imex: true, min_busbw: "800 GB/s"}', "{}"))
    asked = {c.key for c in registry.CLAUSES if c.in_contract(contract)}
    assert {"cluster.nvlink_domain.fabric", "cluster.nvlink_domain.imex"} <= asked
    assert "cluster.nvlink_domain.min_busbw" not in asked


# ------------------------------------------------------------------ the rack, in namespaces

PER_TRAY = """gpuaccept: 1
vendor: "Trial NVL72 rack"
gpus:
  count: 4
  model: "GB200"
"""
CONTRACT = PER_TRAY + f"""cluster:
  engine: slurm
  nodes: ["h[1-{TRAYS}]"]
  node_timeout: 10 min
  nvlink_domain: {{fabric: true, imex: true, min_busbw: "800 GB/s"}}
"""


def tray_recording(tray: str, fabric: dict | None = None) -> dict:
    """One tray's NVML recording (constructed): the 4-GPU H100 recording made a GB200 tray (NVML's name, device ID
    0x2941, 186 GB), UUIDs of its own, and each GPU in the fabric: completed, success, the real cluster UUID and
    clique, health 0xaa; `fabric` changes what this tray's GPUs read."""
    reading = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    reading["hostname"] = tray
    for gpu in reading["gpus"]:
        gpu.update(name="NVIDIA GB200", pci_device_id="0x2941", memory_total_bytes=189_471 * 2**20,
                   uuid=gpu["uuid"].replace("GPU-h100-", f"GPU-{tray}-"),
                   fabric={"state": 3, "status": 0, "cluster_uuid": UUID, "clique_id": CLIQUE, "health_mask": 0xAA,
                           **(fabric or {})})
        gpu.pop("nvlinks", None)
    return reading


def imex_view(cluster: Cluster, down: str | None) -> str:
    """A tray's `nvidia-imex-ctl -N` (constructed from the real 18-node output): node #k is h<k+1> at its address;
    with `down`, that node is UNAVAILABLE and its connections disconnected (D) in this view."""
    text = IMEX_18.read_text()
    real = [n.address for n in parse_domain(text).nodes]
    lines = []
    for line in text.splitlines():
        for k, address in enumerate(real):
            if f" {address} " in line:
                line = line.replace(f" {address} ", f" {cluster.address(k + 1):<15} ", 1)
                if down == f"h{k + 1}":
                    line = line.replace("READY      ", "UNAVAILABLE")
        tokens = line.split()
        if down is not None and tokens and tokens[0].isdigit() and len(tokens) == TRAYS + 1:
            bad = int(down[1:]) - 1
            cells = ["D" if (int(tokens[0]) == bad or i == bad) and int(tokens[0]) != i else c
                     for i, c in enumerate(tokens[1:])]
            line = f"      {tokens[0]:<9} " + "   ".join(cells)
        lines.append(line)
    return "\n".join(lines) + "\n"


def nccl_log(fallback: str | None) -> str:
    """The 72-rank job as srun would show it (constructed): for each tray, its four ranks' NCCL INFO lines in the
    real lines' formats (MNNVL busId ... from NVIDIA/nccl#1769, `comm ... MNNVL n` from #1453), the real table's
    rank line format for every rank, then the real GB200 NVL72 table. `fallback`: that tray's communicators say
    MNNVL 0 and its channels go via NET/IB."""
    out = ["# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
           "agg iters: 1 validation: 1 graph: 0", "#"]
    info = []
    for t in range(1, TRAYS + 1):
        host = f"h{t}"
        for local in range(4):
            rank = 4 * (t - 1) + local
            prefix = f"{host}:{2101742 + local}:{2101799 + local} [{local}] NCCL INFO"
            info.append(f"{prefix} MNNVL busId 0x{0x801000 + 0x100000 * local:x} fabric UUID 3143b15bc2cd192b."
                        f"28cc9b5473fb5b93 cliqueId 0x{CLIQUE:x} state 3 healthMask 0xaa")
            flag = 0 if host == fallback else 1
            info.append(f"{prefix} comm 0x5639e9f0e8c0 rank {rank} nRanks 72 nNodes 18 localRanks 4 localRank {local} "
                        f"MNNVL {flag}")
            if host == fallback:
                info.append(f"{prefix} Channel 00/0 : {rank}[{local}] -> {(rank + 4) % 72}[{local}] [send] via "
                            f"NET/IB/{local}")
            out.append(f"#  Rank {rank:2d} Group  0 Pid  {14840 + rank} on {host} device  {local} [0x01] NVIDIA "
                       f"Graphics Device")
    table = NCCL_TABLE.read_text().splitlines()[1:]  # the real table, behind its (real) last rank line
    return "\n".join(info + out + table) + "\n"


TOOLS = r'''#!/bin/sh
# nvidia-imex-ctl -N on a tray (its own view), or its daemon's refusal where the tray's IMEX is down.
host=$(hostname)
if [ -e "@DIR@/imex-down/$host" ]; then
  echo "Connection to the IMEX daemon failed: connection refused" >&2   # constructed: no real refusal was found
  exit 1
fi
exec cat "@DIR@/imex/$host.txt"
'''
NVIDIA_SMI = r'''#!/bin/sh
# `nvidia-smi nvlink -gt d` on a tray: its GPUs' NVLink data counters, grown by one all_reduce's worth since the
# tray's previous reading (a count kept per host); nothing else is asked of it here.
[ "$*" = "nvlink -gt d" ] || { echo "fake nvidia-smi: only 'nvlink -gt d'" >&2; exit 2; }
host=$(hostname)
n=$(cat "@DIR@/smi-count/$host" 2>/dev/null || echo 0)
echo $((n + 1)) > "@DIR@/smi-count/$host"
for gpu in 0 1 2 3; do
  echo "GPU $gpu: NVIDIA GB200 (UUID: GPU-$host-$gpu)"
  for link in $(seq 0 17); do
    grew=$((n * 22967000))
    echo "         Link $link: Data Tx: $((5863784 + grew)) KiB"
    echo "         Link $link: Data Rx: $((5863677 + grew)) KiB"
  done
done
'''
ALL_REDUCE = r'''#!/bin/sh
# one rank of the 72: rank 0 prints the job's output, the others are the GPUs these trays do not have
[ "${SLURM_PROCID:-0}" = 0 ] || exit 0
exec cat "@DIR@/nccl.txt"
'''


def stage(cluster: Cluster, folder: Path, *, imex_down: str | None = None) -> tuple[Path, Path, Path]:
    """The trays' recordings, sysfs, IMEX views and all_reduce output for one run: (tools, recording, sysfs)."""
    tools, nvml, sysfs = folder / "bin", folder / "nvml", folder / "sys"
    for path in (tools, nvml, folder / "imex", folder / "imex-down", folder / "smi-count"):
        path.mkdir(parents=True, exist_ok=True)
    base = tray_recording("h0")
    (nvml / "gb200.json").write_text(json.dumps(base))
    for t in range(1, TRAYS + 1):
        name = f"h{t}"
        (nvml / f"gb200.{name}.json").write_text(json.dumps(tray_recording(name)))
        (folder / "imex" / f"{name}.txt").write_text(imex_view(cluster, imex_down))
    if imex_down:
        (folder / "imex-down" / imex_down).touch()
    (folder / "nccl.txt").write_text(nccl_log(None))
    for name, body in (("nvidia-imex-ctl", TOOLS), ("all_reduce_perf", ALL_REDUCE), ("nvidia-smi", NVIDIA_SMI)):
        (tools / name).write_text(body.replace("@DIR@", str(folder)))
        (tools / name).chmod(0o755)
    staged = json.loads((DATA / "nvml" / "h100_sxm5_4gpu.json").read_text())
    for gpu in staged["gpus"]:
        gpu["pci_device_id"] = "0x2941"
    (folder / "sysfs-source.json").write_text(json.dumps(staged))
    pci_tree(sysfs, recording=folder / "sysfs-source.json")
    # The trays' NIC: one interface whose transmit counter the all_reduce over NVLink leaves alone (constructed).
    (sysfs / "class" / "net" / "eth0" / "statistics").mkdir(parents=True, exist_ok=True)
    (sysfs / "class" / "net" / "eth0" / "statistics" / "tx_bytes").write_text("81920004\n")
    # What the trays' driver exposes (read under the stand-in tree's parent, cluster/domain.py channel_paths): the
    # channels' major in /proc/devices' real line format and channel0 as a real character device of it (constructed).
    (folder / "proc").mkdir(exist_ok=True)
    (folder / "proc" / "devices").write_text(HONEST_DEVICES)
    channels = folder / "dev" / "nvidia-caps-imex-channels"
    channels.mkdir(parents=True, exist_ok=True)
    if not (channels / "channel0").exists():
        os.mknod(channels / "channel0", stat.S_IFCHR | 0o666, os.makedev(508, 0))
    return tools, nvml / "gb200.json", sysfs


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    if os.geteuid() != 0 or missing_tools():
        pytest.fail(f"the NVL72 tests run a real Slurm cluster in network namespaces: they need root and "
                    f"{', '.join(missing_tools()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    net = 100 + (os.getpid() + 37) % 100
    cluster = Cluster(tmp_path_factory.mktemp("nvl72"), TRAYS + 1, f"gn{os.getpid() % 10000}", net, gpus=4)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


def login_run(cluster: Cluster, folder: Path, **staged) -> tuple[int, dict, str]:
    tools, recording, sysfs = stage(cluster, folder, **staged)
    (folder / "rack.yaml").write_text(CONTRACT)
    argv = cluster.inside(0, [sys.executable, "-m", "pytest", "--contract=rack.yaml", "-p", "no:cacheprovider", "-q",
                              f"--gpuaccept-nvml={recording}", f"--gpuaccept-sysfs={sysfs}"])
    env = {**cluster.env(), "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env, timeout=600)
    assert (folder / "gpuaccept-results.json").is_file(), (done.stdout + done.stderr)[-4000:]
    results = json.loads((folder / "gpuaccept-results.json").read_text())
    return done.returncode, results, done.stdout + done.stderr


def domain_checks(results: dict) -> dict[str, dict[str, dict]]:
    found: dict[str, dict[str, dict]] = {}
    for check in results["checks"]:
        if check["clause"].startswith("cluster.nvlink_domain."):
            found.setdefault(check["clause"].rsplit(".", 1)[1], {})[check["subject"]] = check
    return found


def failing(checks: dict[str, dict]) -> dict[str, str]:
    return {subject: c["message"] for subject, c in checks.items() if c["outcome"] != "passed"}


def test_an_honest_18_tray_rack_is_accepted(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path)
    assert code == 0, out[-4000:]
    assert results["verdict"] == "accepted"
    checks = domain_checks(results)
    assert set(checks["fabric"]) == set(checks["imex"]) == {f"h{t}" for t in range(1, TRAYS + 1)}
    assert all(c["outcome"] == "passed" for kind in checks.values() for c in kind.values())
    busbw = checks["min_busbw"]["domain"]
    assert busbw["measured"] == 834.57 and busbw["unit"] == "GB/s" and busbw["details"]["physical_cap"] > 834.57
    assert "MNNVL on every tray" in busbw["message"]
    assert {"all_reduce_perf's table", "NCCL's MNNVL lines",
            "each tray's NVLink and NIC counters (nvidia-smi nvlink -gt d, sysfs)"} <= set(busbw["details"]["sources"])
    # each tray's own counters moved: 18 links x 22967000 KiB a GPU over NVLink, nothing through its NIC
    h2 = busbw["details"]["traffic"]["h2"]
    assert h2["problem"] is None and h2["nvlink_tx_bytes"] == {f"GPU{g}": 18 * 22967000 * 1024 for g in range(4)}
    assert list(h2["nic_tx_bytes"].values()) == [0] and list(h2["nic_tx_bytes"])[0].endswith("/eth0/statistics/tx_bytes")
    # a tray's IMEX state is confirmed by the 17 other trays' views; its fabric is its NVML's word, said so
    assert checks["imex"]["h2"]["details"]["sources"] == [
        "its own nvidia-imex-ctl", "17 other trays' nvidia-imex-ctl",
        "the driver's IMEX channel devices (/dev/nvidia-caps-imex-channels, /proc/devices)"]
    assert checks["imex"]["h2"]["details"]["channels"] == ["channel0 c 508:0"]
    assert "NVML's word" in checks["fabric"]["h2"]["details"]["unconfirmed"]
    assert "clique 32766" in checks["fabric"]["h7"]["message"]
    # every tray's fabric reading is in the results, as its own run read it
    assert results["hosts"] and len(results["hosts"]) == TRAYS


def test_imex_down_on_one_tray_is_rejected_naming_that_tray(rack, tmp_path):
    code, results, out = login_run(rack, tmp_path, imex_down="h3")
    assert code == 1 and results["verdict"] == "rejected", out[-4000:]
    bad = failing(domain_checks(results)["imex"])
    assert list(bad) == ["h3"], bad
    assert "IMEX did not answer" in bad["h3"] and "connection refused" in bad["h3"]
