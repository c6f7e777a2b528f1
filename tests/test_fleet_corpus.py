"""Every multi-node file of the corpus (../shared/corpus/fleet, copied to tests/data/fleet): parsed by the
parser it is an output of, with the figures its SOURCES.md line gives, or refused by it where it is not
what that tool printed (another tool's verdicts, a quote, a text where JSON is read). No file is left
out: the list below is checked against the folder."""

from __future__ import annotations

import pytest
from conftest import DATA

from pytest_gpuaccept.cluster.bundles import decode
from pytest_gpuaccept.cluster.engine import ClusterError
from pytest_gpuaccept.probes import ParseError, ib_write_bw, iperf3, nccl_tests, slurm

FLEET = DATA / "fleet"


def nccl(name: str) -> nccl_tests.NcclResult:
    return nccl_tests.parse_all_reduce((FLEET / name).read_text())


def test_the_two_node_h100_logs_give_their_busbw_ranks_and_hosts():
    tree = nccl("nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt")  # mpirun -H bm-h100-01:8,bm-h100-02:8
    assert (tree.largest.size_bytes, tree.largest.oop_busbw_gbyte_s, tree.ranks) == (17179869184, 469.21, 16)
    assert {r.host for r in tree.rank_lines} == {"bm-h100-01", "bm-h100-02"}
    ring = nccl("nccltests309_h100_2node_16rank_ring_mincta24_392GBs.txt")  # NCCL_ALGO=Ring: the IB limit
    assert (ring.largest.size_bytes, ring.largest.oop_busbw_gbyte_s, ring.ranks) == (8589934592, 392.69, 16)


def test_the_kubernetes_all_gather_between_two_pods_is_read_as_any_collective_table():
    gke = nccl("gke_a4_b200_2node_allgather_k8s_statefulset_dranet.txt")
    assert (gke.largest.size_bytes, gke.largest.oop_busbw_gbyte_s, gke.ranks) == (8589934592, 260.03, 16)


@pytest.mark.parametrize("name", ["aznhc_distributed_health_log_example.txt",
                                  "aznhc_issue142_h200_nccl_allreduce_false_fail_excerpt.txt"])
def test_a_peers_merged_verdicts_are_never_read_as_a_measurement(name):
    """Azure NHC's `host | Healthy` lines and its `expected >=431.0 GB/s, but measured 15.1` are another
    tool's verdicts: no all_reduce table, refused (our cluster run measures each node itself)."""
    with pytest.raises(ParseError, match="no result table"):
        nccl(name)


@pytest.mark.parametrize("name", ["aznhc_issue152_ib_write_bw_gdr_8x400_excerpt.txt",
                                  "perftest_issue132_ib_write_bw_node3_to_node1_excerpt.txt",
                                  "ngc_multinode_perf_issue108_ib_write_bw_2hosts_excerpt.txt"])
def test_ib_write_bw_as_others_logged_or_quoted_it_is_refused(name):
    """NHC's per-NIC summary lines, a sweep quoted with `> ` as posted, a launcher's command lines: none is
    the bandwidth table perftest prints, so none is read as one."""
    with pytest.raises(ParseError, match="no bandwidth table"):
        ib_write_bw.parse_ib_write_bw((FLEET / name).read_text())


@pytest.mark.parametrize("name", ["iperf3_host_to_host_kube01_to_kube05_issue55_excerpt.txt",
                                  "iperf3_server_side_40g_issue408_excerpt.txt", "iperf3_3.12_bidir_netns_h2_to_h1.txt"])
def test_iperf3_text_is_refused_the_suite_reads_its_json(name):
    with pytest.raises((ParseError, ValueError)):
        iperf3.parse_iperf3_json((FLEET / name).read_text())


def test_iperf3_json_between_two_namespace_hosts_and_its_error_with_exit_code_0():
    good = iperf3.parse_iperf3_json((FLEET / "iperf3_3.12_json_netns_h2_to_h1.json").read_text())
    assert round(good.received_bits_per_s / 1e9, 2) == 13.09
    with pytest.raises(ParseError, match="unable to connect to server: Connection refused"):
        iperf3.parse_iperf3_json((FLEET / "iperf3_3.12_json_connection_refused_rc0.json").read_text())


def test_a_launchers_output_without_a_bundle_is_no_results():
    """`srun -N4 -l hostname` and `srun --mpi=list`: labelled lines, no node's bundle among them."""
    text = (FLEET / "slurm22.05_netns_srun.txt").read_text()
    assert "0: h1" in text and "pmix" in text
    with pytest.raises(ClusterError, match="h1 returned no bundle"):
        decode("h1", text)


COVERED = {
    "nccltests309_h100_2node_16rank_mpirun_ib400_nvlstree.txt", "nccltests309_h100_2node_16rank_ring_mincta24_392GBs.txt",
    "gke_a4_b200_2node_allgather_k8s_statefulset_dranet.txt", "aznhc_distributed_health_log_example.txt",
    "aznhc_issue142_h200_nccl_allreduce_false_fail_excerpt.txt", "aznhc_issue152_ib_write_bw_gdr_8x400_excerpt.txt",
    "perftest_issue132_ib_write_bw_node3_to_node1_excerpt.txt", "ngc_multinode_perf_issue108_ib_write_bw_2hosts_excerpt.txt",
    "iperf3_host_to_host_kube01_to_kube05_issue55_excerpt.txt", "iperf3_server_side_40g_issue408_excerpt.txt",
    "iperf3_3.12_bidir_netns_h2_to_h1.txt", "iperf3_3.12_json_netns_h2_to_h1.json",
    "iperf3_3.12_json_connection_refused_rc0.json", "slurm22.05_netns_srun.txt",
    "pairwise_roundrobin_h3_egress_500mbit.txt",  # in test_cluster_pairs.py: the rounds' blame falls on h3
    # in test_fleet_parsers.py:
    "ncclinfo_net_ib_2node_a100pcie_issue182_excerpt.txt", "ncclinfo_net_ib_sharp_plugin_2node_a100_issue293_excerpt.txt",
    "ncclinfo_net_socket_two_ifaces_issue_nccl278_excerpt.txt", "scontrol_show_node_gres_lines_slurmcommander5.txt",
    "scontrol_show_partition_and_node_a100_slurm24.11.txt", "sinfo_N_O_gres_gresused_pr83.txt",
    "slurm22.05_netns_sinfo_scontrol.txt",
}


def test_every_file_of_the_fleet_corpus_has_its_test():
    assert {p.name for p in FLEET.iterdir() if p.is_file()} == COVERED
    assert slurm.parse_scontrol_nodes((FLEET / "slurm22.05_netns_sinfo_scontrol.txt").read_text())
