"""cluster.links.rdma: ib_write_bw device to device between nodes, each direction its own check, confirmed by the
sender's port_xmit_data and the receiver's port_rcv_data read on their own nodes; blame on a node's device or a link.

Parsers read real perftest outputs of both sides (tests/data/ibwritebw); the blame is judged in process on recorded
figures; then a real fabric in network namespaces (tests/netns_fabric.py: 8 nodes, 4 rails, per-rail leaves joined
by a spine, shaped with tc), driven by the runner through an engine that enters each node's namespace, reshaped
between cases: all healthy, one node's rail and one link degraded, a 2:1 spine (cluster.fabric).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import DATA
from netns_fabric import Fabric, Namespaces
from netns_fabric import missing_tools as fabric_missing

from pytest_gpuaccept.clauses.cluster import FABRIC, LISTING, RDMA_LINKS, SECTION, judge_rdma_link
from pytest_gpuaccept.cluster import run as cluster_run
from pytest_gpuaccept.cluster.engine import Mpirun, NodeState, Slurm
from pytest_gpuaccept.cluster.fabric import Measured, RdmaLink, RdmaRuns, blamed, directions
from pytest_gpuaccept.cluster.run import node_sysfs
from pytest_gpuaccept.contract import ContractError, parse_contract
from pytest_gpuaccept.measurements import ClusterRun, NodeOutcome
from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes._run import ToolRunner
from pytest_gpuaccept.probes.counters import COUNTER_WORD, busiest, counted
from pytest_gpuaccept.probes.ib_write_bw import gid_ipv4, parse_ib_write_bw
from pytest_gpuaccept.rates import Rated, rate_check
from pytest_gpuaccept.state import State
from pytest_gpuaccept.subjects import Subject
from pytest_gpuaccept.verdict import Outcome

BW = DATA / "ibwritebw"

# ------------------------------------------------------------------ perftest's output, both sides


def test_a_real_servers_output_names_the_client_it_served_and_its_figure():
    """OCI A100 over SR-IOV: `ib_write_bw -d mlx5_3 -a -F` as the server of a `-D 10` client (MB/sec)."""
    served = parse_ib_write_bw((BW / "server_oci_a100_sriov_mlx5_3_duration_MBsec.txt").read_text(), rows_needed=False)
    assert served.waited and served.device == "mlx5_3" and served.link_type == "Ethernet"
    assert served.local == ("0000", "00:00:00:00:00:00:00:00:00:00:255:255:192:168:07:201")
    assert gid_ipv4(served.remote[1] if served.remote else None) == "192.168.7.189"  # the client's port
    assert served.last[0] == 65536 and round(served.last[2], 4) == 0.8074  # 96.25 MB/sec: MiB/s


def test_a_real_cross_node_pair_server_and_client_name_each_other():
    """AMD ionic RoCE, bidirectional, 4 QPs, a sweep: the first row in six decimals (each side's own average is below
    0.1 Gb/s: perftest's REPORT_FMT_EXT), the sum of both sides printed."""
    server = parse_ib_write_bw((BW / "server_ionic_bidirectional_4qp_gbits_sweep.txt").read_text(), rows_needed=False)
    client = parse_ib_write_bw((BW / "client_ionic_bidirectional_4qp_gbits_sweep.txt").read_text())
    assert server.waited and not client.waited
    assert server.remote == client.local and client.remote == server.local  # each side's first QP
    assert server.rows[0] == (2, 0.147331, 0.146472) and client.last == (8388608, 779.21, 779.21)
    assert gid_ipv4(client.remote[1] if client.remote else None) is None  # a routable IPv6 GID: no IPv4 in it


def test_rates_below_a_tenth_of_a_gigabit_are_read_in_perftests_six_decimals():
    rows = parse_ib_write_bw((BW / "roce_mlx5_0_a_sweep_gbits_52G_k8s_pod.txt").read_text()).rows
    assert rows[0] == (2, 0.080755, 0.07309) and rows[1] == (4, 0.16, 0.15)


def test_a_server_with_no_remote_address_is_refused():
    with pytest.raises(ParseError, match="no bandwidth table"):
        parse_ib_write_bw("\n************************************\n* Waiting for client to connect... *\n", rows_needed=False)


@pytest.mark.parametrize(("gid", "ipv4"), [("0000:0000:0000:0000:0000:ffff:0a01:0002", "10.1.0.2"),
                                           ("00:00:00:00:00:00:00:00:00:00:255:255:192:168:111:02", "192.168.111.2"),
                                           ("fe80:0000:0000:0000:0000:0000:0000:0001", None), (None, None)])
def test_the_ipv4_of_a_gid_as_sysfs_and_as_perftest_print_it(gid, ipv4):
    assert gid_ipv4(gid) == ipv4


# ------------------------------------------------------------------ the contract

BASE = "gpuaccept: 1\nvendor: V\ncluster:\n  engine: slurm\n  nodes: ['gpu[01-04]']\n"


def test_devices_are_names_or_ranges_and_a_glob_is_refused_before_anything_runs():
    contract = parse_contract(BASE + "  links: {rdma: {devices: ['mlx5_[0-1]'], pairing: all}}\n")
    subjects = [str(s) for s in RDMA_LINKS.subjects(contract, lambda: {LISTING: ["gpu01", "gpu02"]})]
    assert subjects == ["gpu01:mlx5_0->gpu02:mlx5_0", "gpu01:mlx5_1->gpu02:mlx5_1", "gpu02:mlx5_0->gpu01:mlx5_0",
                        "gpu02:mlx5_1->gpu01:mlx5_1", "gpu01:mlx5_0->gpu02:mlx5_1", "gpu01:mlx5_1->gpu02:mlx5_0",
                        "gpu02:mlx5_0->gpu01:mlx5_1", "gpu02:mlx5_1->gpu01:mlx5_0"]  # all: every device pair, both ways
    with pytest.raises(ContractError) as refused:
        parse_contract(BASE + "  links: {rdma: {devices: ['mlx5_*']}}\n", "c.yaml")
    assert refused.value.problems == [
        "c.yaml:6: cluster.links: cluster.links.rdma (line 6): cluster.links.rdma.devices (line 6): expected device names "
        "or ranges such as 'mlx5_[0-7]', got the glob 'mlx5_*': the checks are named before anything runs"]
    with pytest.raises(ContractError) as refused:
        parse_contract(BASE + "  fabric: {min_fraction_under_load: 0.9}\n", "c.yaml")
    assert refused.value.problems == ["c.yaml:3: cluster.fabric: needs cluster.links.rdma (its devices and ib_write_bw's "
                                      "keys)"]


# ------------------------------------------------------------------ one link's sources: the real pair of outputs

IONIC_GID = "fd93:16d3:59b6:0150:069:81ff:fe36:5bb0"  # the client's port (GID 253:147:...:91:176), as sysfs writes it
WORDS = 779.21e9 / 8 * 13 / 4  # what 779.21 Gb/s moves in the run's 13 s, in port_xmit_data's 4-byte words
# (the published run was a sweep timed by its own clock; its last row's figure stands for a 13 s duration run here)


def step_of(tmp_path, peer_gid: str = "fd93:16d3:59b6:0150:9e08:3ab3:5fc7:7cca"):
    contract = parse_contract(BASE + "  links: {rdma: {devices: [ionic_1], line_rate: '800 Gb/s', duration: '13 s'}}\n")
    info = {"a1": {"ionic_1": {"state": "4: ACTIVE", "link_layer": "Ethernet", "gid_index": 1, "lid": "0x0",
                               "gid": IONIC_GID}},
            "a3": {"ionic_1": {"state": "4: ACTIVE", "link_layer": "Ethernet", "gid_index": 1, "lid": "0x0",
                               "gid": peer_gid}}}
    state = type("S", (), {"runner": ToolRunner(tmp_path / "evidence", shared=False)})()
    keys = SECTION.of(contract).links.rdma
    return cluster_run._RdmaStep(state, Namespaces(None), keys, info, ["a1", "a3"], ["ionic_1"])  # type: ignore[arg-type]


def sides(sent_words: float, received_words: float, client_s: float = 13.4) -> dict[str, dict]:
    """What the two nodes' sides printed: the real client on a1 (Aliyun3), the real server on a3 (Aliyun1), each
    port's counters before and after with the clocks around the run."""
    name = "a1:ionic_1->a3:ionic_1"
    def counters(xmit: float, rcv: float, at: float) -> dict:
        return {"ionic_1": {"port_xmit_data": int(xmit), "port_rcv_data": int(rcv), "monotonic_s": at, "boottime_s": at}}
    client = {"name": name, "role": "client", "device": "ionic_1", "argv": ["ib_write_bw"], "returncode": 0,
              "stdout": (BW / "client_ionic_bidirectional_4qp_gbits_sweep.txt").read_text(), "seconds": client_s}
    server = {"name": name, "role": "server", "device": "ionic_1", "argv": ["ib_write_bw"], "returncode": 0,
              "stdout": (BW / "server_ionic_bidirectional_4qp_gbits_sweep.txt").read_text(), "seconds": client_s + 1}
    return {"a1": {"before": counters(1000, 0, 100.0), "after": counters(1000 + sent_words, 0, 115.0), "tools": [client]},
            "a3": {"before": counters(0, 5000, 100.0), "after": counters(0, 5000 + received_words, 115.0),
                   "tools": [server]}}


def test_a_links_figure_confirmed_by_both_ports_counters_is_believed(tmp_path):
    m = step_of(tmp_path)._measured(("a1", "ionic_1"), ("a3", "ionic_1"), sides(WORDS, WORDS), {}, 13)
    assert m.problem is None and m.refuted is None and m.gbit_s == 779.21
    assert m.shown == " (port_xmit_data: 779.21 Gb/s over 13.00 s)"  # the client's 13.4 s, less start-up, over 13 s
    assert m.details["sources"] == ["ib_write_bw", "port_xmit_data"] and m.details["received_bytes"] == int(WORDS) * 4


def test_a_figure_the_senders_counter_does_not_carry_is_refuted_naming_port_xmit_data(tmp_path):
    m = step_of(tmp_path)._measured(("a1", "ionic_1"), ("a3", "ionic_1"), sides(WORDS / 4, WORDS / 4), {}, 13)
    assert m.refuted is not None and m.refuted.startswith(
        "ib_write_bw says 779.21 Gb/s, but a1's ionic_1 port_xmit_data (its sysfs, 4-byte words) counted ")
    assert m.counted_gbit_s is not None and m.counted_gbit_s < 200


def test_bytes_the_receivers_port_did_not_count_did_not_cross_the_link(tmp_path):
    m = step_of(tmp_path)._measured(("a1", "ionic_1"), ("a3", "ionic_1"), sides(WORDS, WORDS / 2), {}, 13)
    assert m.refuted == (f"a1's ionic_1 port_xmit_data counted {int(WORDS) * 4} bytes sent, but a3's ionic_1 "
                         f"port_rcv_data (its sysfs) only {int(WORDS / 2) * 4}: the bytes did not arrive through "
                         "a3:ionic_1")


def test_a_client_that_reached_another_port_than_the_peers_own_sysfs_names_measured_another_link(tmp_path):
    m = step_of(tmp_path, peer_gid="0000:0000:0000:0000:0000:ffff:0a00:0203")._measured(
        ("a1", "ionic_1"), ("a3", "ionic_1"), sides(WORDS, WORDS), {}, 13)
    assert m.gbit_s is None and m.problem == (
        "the client's ib_write_bw reached GID 253:147:22:211:89:182:01:80:158:08:58:179:95:199:124:202 (no IPv4), but "
        "a3:ionic_1's own sysfs gives 10.0.2.3: it measured another port")


def test_through_slurm_and_mpirun_each_node_of_a_step_is_one_launcher_with_perftests_command_lines(tmp_path):
    """A step of a pair with two rails: one exclusive srun (one mpirun --host) per node, whose side starts a server
    per device it receives on (no host: perftest's server) and a client per device it sends from (the peer's rail
    address last, the GID index of its own rail's IPv4), on port 18515 + the device's index."""
    contract = parse_contract(BASE + "  links: {rdma: {devices: ['mlx5_[0-1]'], line_rate: '400 Gb/s', qps: 4, "
                                     "duration: '2 s'}}\n")
    keys = SECTION.of(contract).links.rdma
    info = {n: {f"mlx5_{r}": {"state": "4: ACTIVE", "link_layer": "Ethernet", "gid_index": 3, "lid": "0x0",
                              "gid": f"0000:0000:0000:0000:0000:ffff:0a00:{r:02x}{int(n[-1]):02x}"} for r in (0, 1)}
            for n in ("gpu01", "gpu02")}
    asked = []

    class Runner:
        def which(self, tool):
            return f"/opt/perftest/{tool}"

        def run_together(self, commands, timeout_s=None):
            asked.extend(commands)
            return [cluster_run.ToolRun(c.key or "", (c.tool, *c.args), 0, 1.0, "{}", "") for c in commands]

    state = type("S", (), {"runner": Runner(), "sys_root": tmp_path / "sys"})()
    for engine, launcher in ((Slurm(), ["srun", "-N", "1", "-n", "1", "-w", "gpu01", "--exclusive", "--"]),
                             (Mpirun(), ["mpirun", "--host", "gpu01:1", "-np", "1", "-x", "PATH", "--"])):
        asked.clear()
        step = cluster_run._RdmaStep(state, engine, keys, info, ["gpu01", "gpu02"], list(keys.devices))  # type: ignore[arg-type]
        step.run("round1-0", directions("gpu01", "gpu02", keys.devices, 0))
        assert [c.key for c in asked] == ["rdma-round1-0-gpu01", "rdma-round1-0-gpu02"]
        argv = [asked[0].tool, *asked[0].args]
        assert argv[:len(launcher)] == launcher
        assert argv[len(launcher):len(launcher) + 6] == [sys.executable, "-m", "pytest_gpuaccept.cluster.rdma_side", "run",
                                                         "--sysfs", str(tmp_path / "sys")]
        spec = json.loads(base64.b64decode(argv[-1]))
        assert spec["head_start_s"] == 1.0
        assert [(t["name"], t["role"], t["argv"]) for t in spec["tools"]] == [
            ("gpu01:mlx5_0->gpu02:mlx5_0", "client", ["/opt/perftest/ib_write_bw", "-d", "mlx5_0", "-i", "1", "-s", "65536",
                                                    "-p", "18515", "--report_gbits", "-F", "-D", "2", "-q", "4", "-x", "3",
                                                    "10.0.0.2"]),
            ("gpu01:mlx5_1->gpu02:mlx5_1", "client", ["/opt/perftest/ib_write_bw", "-d", "mlx5_1", "-i", "1", "-s", "65536",
                                                    "-p", "18516", "--report_gbits", "-F", "-D", "2", "-q", "4", "-x", "3",
                                                    "10.0.1.2"]),
            ("gpu02:mlx5_0->gpu01:mlx5_0", "server", ["/opt/perftest/ib_write_bw", "-d", "mlx5_0", "-i", "1", "-s", "65536",
                                                    "-p", "18515", "--report_gbits", "-F", "-D", "2", "-q", "4", "-x", "3"]),
            ("gpu02:mlx5_1->gpu01:mlx5_1", "server", ["/opt/perftest/ib_write_bw", "-d", "mlx5_1", "-i", "1", "-s", "65536",
                                                    "-p", "18516", "--report_gbits", "-F", "-D", "2", "-q", "4", "-x", "3"])]


def test_a_simulated_node_reads_its_own_sysfs_tree_beside_the_login_nodes(tmp_path):
    root = tmp_path / "sys"
    root.mkdir()
    (tmp_path / "sys.h2").mkdir()
    assert node_sysfs(root, "h2") == tmp_path / "sys.h2"
    assert node_sysfs(root, "h3") == root  # none of its own: the login node's
    assert node_sysfs(Path("/sys"), "h2") == Path("/sys")  # a real node reads its own /sys


# ------------------------------------------------------------------ the blame, on recorded figures

def link(a: str, b: str, device: str, gbit_s: float, alone: float | None = None) -> RdmaLink:
    return RdmaLink((a, device), (b, device), 1, 400.0, "the contract's line_rate", Measured(gbit_s),
                    Measured(alone) if alone is not None else None)


def recorded(nodes: int, slow: dict[tuple[str, str], float], device: str = "mlx5_2") -> RdmaRuns:
    """Every pair of h1..h<nodes> on `device`, both ways, at 390 Gb/s but the directed links in `slow`."""
    names = [f"h{i}" for i in range(1, nodes + 1)]
    links = {}
    for a in names:
        for b in names:
            if a != b:
                one = link(a, b, device, slow.get((a, b), 390.0))
                links[one.name] = one
    minimum = {name: 360.0 for name in links}
    found, partners = blamed(links, minimum)
    return RdmaRuns(links, minimum, found, partners=partners)


def check(runs: RdmaRuns, name: str):
    contract = parse_contract(BASE + "  links: {rdma: {devices: ['mlx5_[0-3]'], line_rate: '400 Gb/s'}}\n")
    return judge_rdma_link(SECTION.of(contract), Subject.whole(name), runs, contract)


def test_a_device_failing_with_most_partners_is_that_nodes_nic_cable_or_port():
    runs = recorded(8, {**{("h3", f"h{i}"): 150.0 for i in (1, 2, 4, 5, 6, 7, 8)},
                        **{(f"h{i}", "h3"): 150.0 for i in (1, 2, 4, 5, 6, 7, 8)}})
    assert runs.blame.bad_nodes == ("h3:mlx5_2",) and runs.blame.bad_links == ()
    failed = check(runs, "h5:mlx5_2->h3:mlx5_2")
    assert failed.outcome is Outcome.FAILED and failed.measured == 150.0
    assert failed.message.endswith("; h3's mlx5_2 fails with 7 of 7 partners (that node's NIC, cable or switch port)")
    assert check(runs, "h5:mlx5_2->h1:mlx5_2").outcome is Outcome.PASSED


def test_a_link_failing_alone_is_that_link():
    runs = recorded(8, {("h1", "h6"): 120.0})
    assert runs.blame.bad_nodes == () and runs.blame.bad_links == (("h1:mlx5_2", "h6:mlx5_2"),)
    failed = check(runs, "h1:mlx5_2->h6:mlx5_2")
    assert failed.outcome is Outcome.FAILED
    assert failed.message.endswith("; the link h1:mlx5_2 - h6:mlx5_2 itself: both ends pass with every other partner")
    assert check(runs, "h6:mlx5_2->h1:mlx5_2").outcome is Outcome.PASSED  # the other direction is its own check


def test_a_link_slow_only_with_its_round_loaded_is_judged_alone_and_blames_no_one():
    runs = recorded(4, {})
    contended = link("h1", "h3", "mlx5_2", 190.0, alone=391.0)
    runs.links[contended.name] = contended
    found, partners = blamed(runs.links, runs.minimum)
    runs = RdmaRuns(runs.links, runs.minimum, found, partners=partners)
    passed = check(runs, "h1:mlx5_2->h3:mlx5_2")
    assert passed.outcome is Outcome.PASSED and passed.measured == 391.0 and runs.blame.failing == ()
    assert "; alone: 190 Gb/s with its round loaded (the fabric's share: cluster.fabric))" in passed.message
    assert passed.details["alone"] is True and passed.details["loaded_gbit_s"] == 190.0


def test_a_figure_its_counters_refute_fails_naming_both_sources_and_an_unmeasured_link_is_not_passed():
    runs = recorded(4, {})
    lying = RdmaLink(("h1", "mlx5_2"), ("h2", "mlx5_2"), 1, 400.0, "the contract's line_rate", Measured(
        395.0, refuted="h1's mlx5_2 port_xmit_data counted 50000000000 bytes sent, but h2's mlx5_2 port_rcv_data (its "
        "sysfs) only 1000: the bytes did not arrive through h2:mlx5_2", counted_gbit_s=80.0))
    runs.links[lying.name] = lying
    failed = check(runs, lying.name)
    assert failed.outcome is Outcome.FAILED and failed.measured == 80.0 and failed.required == ">= 360"
    assert failed.message == lying.loaded.refuted
    runs.links[lying.name] = RdmaLink(lying.sender, lying.receiver, 1, 400.0, "", Measured(
        None, "ib_write_bw's client on h1 (mlx5_2) exited with code 1: Couldn't connect to 10.0.2.2:18517"))
    assert check(runs, lying.name).outcome is Outcome.NOT_MEASURED


def test_a_figure_above_the_line_rate_is_implausible_whatever_its_counters_say():
    runs = recorded(4, {("h2", "h4"): 430.0})
    failed = check(runs, "h2:mlx5_2->h4:mlx5_2")
    assert failed.outcome is Outcome.FAILED and failed.measured == 430.0
    assert failed.message.startswith("ib_write_bw BW average 430 Gb/s is implausible: above 400 Gb/s (the line rate, "
                                     "the contract's line_rate) (107.5% of 400 Gb/s line rate")


# ------------------------------------------------------------------ a real fabric in network namespaces

LINE = 10  # Mbit/s a rail: 64 links at once stay far below what two shared cores move, beside the other tests
# One fabric at a time (test.sh runs xdist with --dist loadgroup): the three runs share a module's fabric on one worker
FABRIC_RUN = pytest.mark.xdist_group("fabric")
CONTRACT = f"""\
gpuaccept: 1
vendor: "Trial fabric"
cluster:
  engine: mpirun
  nodes: ["h[1-8]"]
  links:
    rdma: {{devices: ["mlx5_[0-3]"], line_rate: "{LINE} Mb/s", min_fraction_of_line_rate: 0.6, duration: "1 s"}}
"""
WITH_FABRIC = CONTRACT + "  fabric: {min_fraction_under_load: 0.8}\n"


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    if os.geteuid() != 0 or fabric_missing():
        pytest.fail(f"the RDMA fabric tests build a fabric in network namespaces: they need root and "
                    f"{', '.join(fabric_missing()) or 'nothing more'} (./test.sh installs them)", pytrace=False)
    made = Fabric(tmp_path_factory.mktemp("fabric"), 8, 4, f"rf{os.getpid() % 10000}", 50 + os.getpid() % 50,
                  f"{LINE}mbit")
    try:
        made.up()
        yield made
    finally:
        made.down()


def measured(fabric: Fabric, folder, text: str, nodes: list[str] | None = None) -> dict[str, object]:
    """The login node's measurement and judgement, in this process: the runner starts each node's side through the
    namespaces' engine, every node of the contract (`nodes`, default all) available; every check by subject."""
    names = nodes or fabric.nodes
    contract = parse_contract(text, "vendor.yaml")
    runner = ToolRunner(folder / "evidence", tool_paths={"ib_write_bw": str(fabric.bin(folder / "bin"))}, shared=False)
    state = State(contract, runner, folder / "report.html", folder / "results.json", folder / "evidence", None, True,
                  sys_root=fabric.sysfs)
    outcomes = {n: NodeOutcome(NodeState(n, True, True, "listed", None), f"nodes/{n}", {"checks": []}, None)
                for n in names}
    section = SECTION.of(contract)
    fraction = section.fabric.min_fraction_under_load if section.fabric else None
    runs = cluster_run.run_rdma_links(state, Namespaces(fabric), section, ClusterRun("namespaces", outcomes, ()), fraction)
    checks = {}
    for clause in (RDMA_LINKS, FABRIC):
        if clause.in_contract(contract):
            for subject in clause.subjects(contract, lambda: {LISTING: names}):
                checks[str(subject)] = clause.judge(section, subject, runs, contract)
    return checks


@FABRIC_RUN
def test_a_healthy_8_node_4_rail_fabric_is_accepted_every_rail_link_each_way_a_check(fabric, tmp_path):
    fabric.reshape()
    checks = measured(fabric, tmp_path, WITH_FABRIC)
    links = {n: c for n, c in checks.items() if "->" in n}
    assert len(links) == 28 * 4 * 2  # every pair of 8 nodes, 4 rails, both ways
    assert [c.message for c in checks.values() if c.outcome is not Outcome.PASSED] == []
    one = links["h2:mlx5_3->h7:mlx5_3"]
    assert one.threshold == 0.6 * LINE / 1000 and one.measured >= one.threshold
    # held to the most the port moved in any second of the run (read every 0.1 s while the tools ran)
    assert re.search(r"\(port_xmit_data: 0\.0\d Gb/s over (0\.[89]\d|1\.00) s\) >= ", one.message), one.message
    assert one.details["sources"] == ["ib_write_bw", "port_xmit_data"] and one.details["received_bytes"] > 0
    rails = {n: c for n, c in checks.items() if n.startswith("cluster:")}
    assert sorted(rails) == ["cluster:mlx5_0", "cluster:mlx5_1", "cluster:mlx5_2", "cluster:mlx5_3"]
    # ~1, give or take the sample of two links alone at 10 Mbit/s beside the rest of the suite: no CPU limit
    assert all(c.passed and 0.8 <= c.measured <= 1.4 for c in rails.values()), [c.message for c in rails.values()]


@FABRIC_RUN
def test_one_nodes_rail_2_at_40_percent_blames_its_mlx5_2_and_one_slow_link_blames_that_link(fabric, tmp_path):
    fabric.reshape()
    fabric.slow_port("h3", 2, f"{LINE * 0.4:g}mbit")
    fabric.slow_link("h1", "h6", 0, f"{LINE * 0.4:g}mbit")  # h1 -> h6 on rail 0 only
    try:
        checks = measured(fabric, tmp_path, CONTRACT)
    finally:
        fabric.reshape()
    failing = {n: c for n, c in checks.items() if c.outcome is not Outcome.PASSED}
    h3_rail2 = {n for n in checks if "h3:mlx5_2" in n}
    assert set(failing) == h3_rail2 | {"h1:mlx5_0->h6:mlx5_0"}, {n: c.message for n, c in failing.items()}
    for name in h3_rail2:
        assert failing[name].outcome is Outcome.FAILED and failing[name].details["alone"] is True
        assert re.search(r"; h3's mlx5_2 fails with [67] of 7 partners \(that node's NIC, cable or switch port\)$",
                         failing[name].message), failing[name].message
    assert failing["h1:mlx5_0->h6:mlx5_0"].message.endswith(
        "; the link h1:mlx5_0 - h6:mlx5_0 itself: both ends pass with every other partner")


@FABRIC_RUN
def test_a_2_to_1_spine_passes_every_link_alone_and_fails_the_fabric_near_one_half_blaming_no_node(fabric, tmp_path):
    """Two nodes of each leaf (h1, h2 and h5, h6) at the line rate each, every rail's spine carrying one: 2:1."""
    fabric.reshape()
    fabric.oversubscribe(f"{LINE}mbit")
    try:
        checks = measured(fabric, tmp_path, WITH_FABRIC.replace('nodes: ["h[1-8]"]', 'nodes: ["h[1-2]", "h[5-6]"]'),
                          ["h1", "h2", "h5", "h6"])
    finally:
        fabric.reshape()
    links = {n: c for n, c in checks.items() if "->" in n}
    assert [c.message for c in links.values() if c.outcome is not Outcome.PASSED] == []
    assert any(c.details["alone"] for c in links.values())  # slow in a loaded round, judged alone
    rails = {n: c for n, c in checks.items() if n.startswith("cluster:")}
    assert all(c.outcome is Outcome.FAILED and 0.35 <= c.measured <= 0.65 for c in rails.values()), \
        [c.message for c in rails.values()]
    for c in rails.values():
        assert "the fabric, not a node" in c.message and not re.search(r"h\d's", c.message)


def _samples(rates_per_tenth: list[float]) -> list[dict]:
    """Readings every 0.1 s of a port that moved these Gb/s in each tenth of a second (clocks in step)."""
    readings, words = [], 10_000
    for n, rate in enumerate([0.0, *rates_per_tenth]):
        words += int(rate * 1e9 / 8 * 0.1 / 4)
        readings.append({"port_xmit_data": words, "port_rcv_data": words, "monotonic_s": 100 + n / 10,
                         "boottime_s": 200 + n / 10})
    return readings


def test_a_link_whose_connect_took_longer_than_a_second_is_held_to_its_busiest_stretch_not_its_start_up():
    # Honest: 1.8 s of connecting (nothing moved), then 1 s at 0.2 Gb/s; ib_write_bw -D 1 says 0.2 Gb/s.
    readings = _samples([0.0] * 18 + [0.2] * 10 + [0.0] * 2)
    whole = counted(readings[0], readings[-1], "port_xmit_data", COUNTER_WORD)
    source = ("port_xmit_data", "h1's mlx5_0 port_xmit_data")
    assert rate_check(0.2, Rated("ib_write_bw", 1, 3.0), whole, source).refuted  # over its wall time less 1 s: refuted
    busy = busiest(readings, "port_xmit_data", COUNTER_WORD, 1.0)
    assert busy is not None and 1.0 <= busy.monotonic_s <= 1.2 + 1e-9  # at most two readings' intervals longer
    assert rate_check(0.2, Rated("ib_write_bw", 1, 1), busy, source).refuted is None
    # The vendor's figure twice what the port moved in any second of the run: refuted, by the busiest stretch too
    fraud = rate_check(0.4, Rated("ib_write_bw", 1, 1), busy, source)
    assert fraud.refuted is not None and fraud.measured == pytest.approx(0.2, abs=0.01)


def test_readings_shorter_than_the_time_asked_hold_no_stretch_and_a_reset_counter_is_no_source():
    assert busiest(_samples([0.2] * 5), "port_xmit_data", COUNTER_WORD, 1.0) is None  # 0.5 s of readings: none
    reset = _samples([0.2] * 12)
    zero = reset[6]["port_xmit_data"]
    for reading in reset[6:]:  # reset mid-run: counting again from 0
        reading["port_xmit_data"] -= zero
    assert busiest(reset, "port_xmit_data", COUNTER_WORD, 1.0).backwards
