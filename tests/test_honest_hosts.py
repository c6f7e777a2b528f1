"""Honest hosts must not be rejected: bonding_masters is not an interface, a max_bytes the sweep cannot
reach is the contract's mistake, a dual-port card cabled on port 2 is measured on port 2, a bonded
port gets its queue pairs, and with `count` the storage and management ports do not fail the clause.

A clause's judgement is judged in process (tests/judging.py), the plugin's clocks moved by each replayed run as long
as it took; whole runs stay for the exit code, the report, and one accepted and one rejected host."""

import pytest
from builders import IB_UP, RDMA_CONTRACT, sysfs_tree
from conftest import DATA, pci_port
from judging import Clock, Output, judge

from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.probes.sysfs import list_names

IB_DOWN = {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"}
BW_90 = DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt"  # 90.495 Gb/s


def ib_write_bw(monkeypatch: pytest.MonkeyPatch) -> dict[str, Output]:
    """ib_write_bw printing BW_90 on every device: a server running the 5 s asked, and a client started 1 s after it
    (CLIENT_AFTER_S) running as long."""
    clock = Clock(monkeypatch)
    return {"ib_write_bw": Output(BW_90, then=clock.runs(5.0)),
            "ib_write_bw localhost": Output(BW_90, seconds=6.0, then=clock.runs(6.0))}


def test_bonding_masters_is_a_file_not_an_interface(tmp_path):
    net = tmp_path / "class" / "net"
    (net / "bond0").mkdir(parents=True)
    (net / "eth0").mkdir()
    (net / "bonding_masters").write_text("bond0\n")
    assert list_names(tmp_path)["net"] == ["bond0", "eth0"]


def test_a_glob_over_every_interface_does_not_judge_bonding_masters(accept, fake_tools, tmp_path):
    fake_tools.add("ethtool", DATA / "ethtool" / "ice_25g_dac_link_partner.txt")
    sysfs_tree(tmp_path / "sys", {})
    pci_port(tmp_path / "sys", "net", "ens1", "0000:3b:00.0", driver="ice")
    (tmp_path / "sys" / "class" / "net" / "bonding_masters").write_text("bond0\n")
    run = accept("gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['*']\n  min_speed: '25 Gb/s'\n",
                 f"--gpuaccept-sysfs={tmp_path / 'sys'}")
    assert [c["subject"] for c in run.checks("nics")] == ["ens1"]
    assert run.json["verdict"] == "accepted"


@pytest.mark.parametrize("max_bytes, nbytes, nearest", [("10 GiB", 10737418240, "8589934592 B and 17179869184 B"),
                                                        ("100 MB", 100000000, "67108864 B and 134217728 B")])
def test_a_max_bytes_the_doubling_sweep_never_hits_is_a_usage_error(max_bytes, nbytes, nearest):
    with pytest.raises(ContractError) as raised:
        parse_contract(f"gpuaccept: 1\nvendor: V\ngpus: {{count: 8}}\nallreduce:\n  min_busbw: '1 GB/s'\n"
                       f"  max_bytes: '{max_bytes}'\n", "vendor.yaml")
    assert raised.value.problems == [
        f"vendor.yaml:4: allreduce.max_bytes: expected a size the sweep from min_bytes (8 MiB) reaches by doubling, "
        f"got {max_bytes} ({nbytes} B); the nearest are {nearest}"]


def test_the_usage_error_exits_4_before_any_tool_runs(accept, fake_tools):
    fake_tools.add("all_reduce_perf", "")
    run = accept("gpuaccept: 1\nvendor: V\ngpus: {count: 8}\nallreduce: {min_busbw: '1 GB/s', max_bytes: '10 GiB'}\n")
    assert run.result.ret == 4 and fake_tools.calls() == []


def test_a_dual_port_card_cabled_on_port_2_is_measured_on_port_2(tmp_path, monkeypatch):
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_DOWN})
    port2 = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "2"
    port2.mkdir()
    for name, value in IB_UP.items():
        (port2 / name).write_text(value + "\n")
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0]", extra=""), ib_write_bw(monkeypatch), tmp_path,
                   sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert check.outcome.value == "passed" and check.details["port"] == 2
    calls = [call for call in judged.recordings.asked if call[0] == "ib_write_bw"]
    assert calls and all(call[call.index("-i") + 1] == "2" for call in calls)


def test_rdma_qps_runs_that_many_queue_pairs_and_says_so(accept, fake_tools, tmp_path):
    fake_tools.add("ib_write_bw", BW_90)
    run = accept(RDMA_CONTRACT.format(devices="[mlx5_0]", extra="  qps: 4\n"), sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP}))
    check = run.checks("rdma")[0]
    assert all(call[call.index("-q") + 1] == "4" for call in fake_tools.calls("ib_write_bw"))
    assert check["message"].endswith("(90.5% of 100 Gb/s line rate, port 1 rate in sysfs, 4 queue pairs; HCA only: no "
                                     "cable or switch (loopback to localhost))")
    assert check["details"]["qps"] == 4
    assert "qps: 4" in run.html


def test_with_count_down_ports_are_listed_but_do_not_fail(tmp_path, monkeypatch):
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP, "mlx5_1": IB_UP, "mlx5_2": IB_DOWN})
    judged = judge(RDMA_CONTRACT.format(devices="['mlx5_*']", extra="  count: 2\n"), ib_write_bw(monkeypatch), tmp_path,
                   sysfs=tmp_path / "sys")
    assert judged.of("rdma") == []
    check = judged.of("rdma.count")[0]
    assert (check.subject, check.outcome.value, check.measured, check.unit) == ("host", "passed", 2, "devices")
    assert check.message.startswith("2 of 3 matching devices pass (mlx5_0, mlx5_1), at least 2 required; "
                                    "not passing: mlx5_2: mlx5_2 port 1 is not Active/LinkUp")
    assert judged.verdict == "accepted"


def test_with_count_too_few_passing_fails(accept, fake_tools, tmp_path):
    """A whole run, rejected."""
    fake_tools.add("ib_write_bw", BW_90)
    sysfs = sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP, "mlx5_2": IB_DOWN})
    run = accept(RDMA_CONTRACT.format(devices="['mlx5_*']", extra="  count: 2\n"), sysfs)
    check = run.checks("rdma.count")[0]
    assert (check["outcome"], check["measured"], check["required"]) == ("failed", 1, ">= 2")


def test_nics_count_judges_each_interface_as_nics_would(tmp_path):
    outputs = {"ethtool eno1": Output(DATA / "ethtool" / "i40e_unknown_speed_link_down_unsupported_sfp.txt"),
               "ethtool": Output(DATA / "ethtool" / "ice_25g_dac_link_partner.txt")}
    sysfs_tree(tmp_path / "sys", {})
    for n, name in enumerate(("eno1", "ens1", "ens2")):
        pci_port(tmp_path / "sys", "net", name, f"0000:3{n}:00.0", driver="ice")
    judged = judge("gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['e*']\n  min_speed: '25 Gb/s'\n  count: 2\n", outputs,
                   tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("nics.count")[0]
    assert (check.outcome.value, check.measured, check.unit) == ("passed", 2, "interfaces")
    assert "eno1: eno1: no link (Link detected: no)" in check.message
