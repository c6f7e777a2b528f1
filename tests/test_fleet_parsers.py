"""The cluster engine's parsers on real multi-node outputs (tests/data/fleet, from ../shared/corpus/fleet)."""

from __future__ import annotations

import pytest
from conftest import DATA

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.nccl_tests import network_transport, parse_all_reduce
from pytest_gpuaccept.probes.slurm import SlurmNode, expand_hostlist, gpu_count, parse_scontrol_nodes, parse_sinfo_nodes, tres_gpus

FLEET = DATA / "fleet"


def test_scontrol_of_slurm_24_11_gives_the_node_its_gpus_and_version_and_skips_the_partition():
    (node,) = parse_scontrol_nodes((FLEET / "scontrol_show_partition_and_node_a100_slurm24.11.txt").read_text())
    assert node == SlurmNode("amax-a100", ("IDLE",), 2, "amax-a100", "24.11.3", None)
    assert node.schedulable


def test_scontrol_and_sinfo_of_the_namespace_cluster():
    text = (FLEET / "slurm22.05_netns_sinfo_scontrol.txt").read_text()
    (node,) = parse_scontrol_nodes(text)
    assert (node.name, node.addr, node.version, node.gpus) == ("h1", "10.213.0.2", "22.05.8", None)
    assert parse_sinfo_nodes(text) == {"h1": "idle", "h2": "idle", "h3": "idle", "h4": "idle"}


def test_grepped_tres_lines_give_the_gpus_but_are_no_node_record():
    text = (FLEET / "scontrol_show_node_gres_lines_slurmcommander5.txt").read_text()
    assert tres_gpus(text.split("CfgTRES=")[1].split()[0]) == 4
    assert tres_gpus(text.split("AllocTRES=")[1].split()[0]) == 3
    with pytest.raises(ParseError, match="no NodeName= record"):
        parse_scontrol_nodes(text)


def test_sinfo_without_a_header_is_refused_not_guessed():
    with pytest.raises(ParseError, match="no NODELIST ... STATE table"):
        parse_sinfo_nodes((FLEET / "sinfo_N_O_gres_gresused_pr83.txt").read_text())
    assert gpu_count("gpu:tesla:4") == 4 and gpu_count("(null)") is None and gpu_count("gpu:a100:4(S:0-1),gpu:t4:2") == 6


@pytest.mark.parametrize("state, schedulable", [("IDLE", True), ("MIXED", True), ("DOWN+NOT_RESPONDING", False),
                                                ("IDLE+DRAIN", False), ("DOWN*", False), ("ALLOCATED", True)])
def test_a_node_down_or_drained_is_not_schedulable(state, schedulable):
    (node,) = parse_scontrol_nodes(f"NodeName=g1 Arch=x86_64\n   Gres=gpu:8\n   State={state} ThreadsPerCore=1\n"
                                   "   Reason=bad psu [root@2026-11-30T10:00:00]\n")
    assert node.schedulable is schedulable and node.gpus == 8
    assert node.reason == "bad psu [root@2026-11-30T10:00:00]"


def test_hostlist_expressions_expand_as_slurm_does():
    assert expand_hostlist("gpu[01-03,07],h[1-2]-ib[0-1],login") == [
        "gpu01", "gpu02", "gpu03", "gpu07", "h1-ib0", "h1-ib1", "h2-ib0", "h2-ib1", "login"]
    with pytest.raises(ValueError, match="unbalanced"):
        expand_hostlist("gpu[01-03")


@pytest.mark.parametrize("name, transport", [
    ("ncclinfo_net_socket_two_ifaces_issue_nccl278_excerpt.txt", {"sh-01": {"NET/Socket"}, "sh-03": {"NET/Socket"}}),
    ("ncclinfo_net_ib_2node_a100pcie_issue182_excerpt.txt", {"testgpu2": {"NET/IB"}}),
    ("ncclinfo_net_ib_sharp_plugin_2node_a100_issue293_excerpt.txt", {"test1": {"NET/IB"}, "test2": {"NET/IB"}}),
])
def test_nccl_says_whether_nodes_talked_over_ib_or_sockets(name, transport):
    assert network_transport((FLEET / name).read_text()) == transport


def test_a_two_node_log_places_its_sixteen_ranks_on_two_hosts():
    result = parse_all_reduce((FLEET / "nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt").read_text())
    assert result.ranks == 16 and sorted({r.host for r in result.rank_lines}) == ["bm-h100-01", "bm-h100-02"]
    assert (result.largest.size_bytes, result.largest.oop_busbw_gbyte_s) == (17179869184, 469.21)
    assert network_transport((FLEET / "nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt").read_text()) == {}
