"""nics, iperf3 and rdma.

End to end: real `ethtool` and real `iperf3` over a veth pair into a network namespace this test owns (root
needed: CI runs as root). Judged in process (tests/judging.py): iperf3 and RDMA from real outputs replayed, through
a sysfs tree in a temporary folder, the plugin's clocks moved by each run as long as the run took.
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from builders import IB_UP, RDMA_CONTRACT, sysfs_tree
from conftest import DATA, pci_port
from judging import Clock, Output, judge

BASE_PORT = 15201


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def veth():
    """A veth pair: `gpaN-h` here (10.231.N.1), `gpaN-p` in namespace `gpaccept-N` (10.231.N.2)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to create a network namespace (CI runs as root)")
    n = os.getpid() % 200 + 20
    ns, host, peer = f"gpaccept-{n}", f"gpa{n}-h", f"gpa{n}-p"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("addr", "add", f"10.231.{n}.1/24", "dev", host)
        _ip("link", "set", host, "up")
        _ip("-n", ns, "addr", "add", f"10.231.{n}.2/24", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield {"ns": ns, "host": host, "server": f"10.231.{n}.2"}
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.fixture
def iperf3_servers(veth):
    """`iperf3 -s` in the namespace on BASE_PORT and BASE_PORT+1 (iperf3 < 3.16 needs one per stream)."""
    if not shutil.which("iperf3"):
        pytest.skip("iperf3 is not installed (.ci/run installs it)")
    servers = [subprocess.Popen(["ip", "netns", "exec", veth["ns"], "iperf3", "-s", "-p", str(BASE_PORT + n)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(2)]
    time.sleep(0.5)
    yield veth
    for server in servers:
        server.terminate()
        server.wait(timeout=10)


def nics_contract(interfaces: str, speed: str, physical: bool = False) -> str:
    """`physical: false` where a test measures a veth's speed; the default (true) refuses a veth outright."""
    return (f"gpuaccept: 1\nvendor: V\nnics:\n  interfaces: {interfaces}\n  min_speed: '{speed}'\n"
            f"  physical: {'true' if physical else 'false'}\n")


def test_real_ethtool_on_a_veth_below_the_contracted_speed_fails_with_10(accept, veth):
    run = accept(nics_contract(f"['{veth['host']}']", "100 Gb/s"))
    check = run.checks("nics")[0]
    assert (check["subject"], check["outcome"], check["measured"], check["unit"]) == (veth["host"], "failed", 10, "Gb/s")
    assert check["message"] == f"{veth['host']} speed 10 Gb/s < 100 Gb/s (not a PCI function)"
    assert "Speed: 10000Mb/s" in run.html


def test_real_ethtool_on_a_veth_at_the_contracted_speed_passes(accept, veth):
    """The real kernel's /sys/class/net/IF/speed says what the real ethtool says: two sources, one figure."""
    run = accept(nics_contract(f"['{veth['host']}']", "10 Gb/s"))
    assert [(c["outcome"], c["measured"]) for c in run.checks("nics")] == [("passed", 10)]
    assert run.checks("nics")[0]["details"]["sources"] == ["ethtool", "sysfs speed"]
    assert run.json["verdict"] == "accepted"


def test_a_glob_matching_no_interface_fails(accept, veth):
    run = accept(nics_contract(f"['{veth['host']}', 'gpa-none*']", "10 Gb/s"))
    checks = {c["subject"]: c for c in run.checks("nics")}
    assert checks[veth["host"]]["outcome"] == "passed"
    assert checks["gpa-none*"]["outcome"] == "failed"
    assert checks["gpa-none*"]["message"].startswith("no interface matches 'gpa-none*' (host has: ")
    assert run.json["verdict"] == "rejected"


def test_a_veth_named_and_set_like_a_nic_is_refused_by_default(accept, veth):
    """The real veth: ethtool would report 10 Gb/s (a tap can be set to say 400G); sysfs says it is virtual."""
    run = accept(f"gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['{veth['host']}']\n  min_speed: '10 Gb/s'\n")
    check = run.checks("nics")[0]
    assert check["outcome"] == "failed" and check["measured"] is None
    assert check["message"] == (f"{veth['host']} is not a PCI function: a virtual device "
                                f"(devices/virtual/net/{veth['host']}) (veth, tap, bridge, dummy or the like) (sysfs), "
                                "whatever its name or settings say")
    assert run.json["verdict"] == "rejected"


def test_real_iperf3_between_namespaces_passes_with_the_measured_value(accept, iperf3_servers):
    server = iperf3_servers["server"]
    run = accept(f"gpuaccept: 1\nvendor: V\niperf3:\n  server: '{server}'\n  min_throughput: '0.1 Gb/s'\n"
                 f"  duration: '1 s'\n  streams: 2\n  port: {BASE_PORT}\n")
    check = run.checks("iperf3")[0]
    assert check["outcome"] == "passed", check["message"]
    assert check["subject"] == server and check["unit"] == "Gb/s" and check["measured"] > 0.1
    assert run.json["verdict"] == "accepted" and run.json["complete"] is True and run.result.ret == 0
    assert f"{check['measured']} Gb/s" in run.html
    assert "end" in (run.path / "gpuaccept-evidence" / check["evidence"][0]).read_text()
    # The rate is confirmed by the route's own interface: its tx_bytes over the time the clients ran.
    assert check["details"]["sources"] == ["iperf3", "tx_bytes"] and check["details"]["wall_s"] >= 1.0
    assert check["details"]["counted_gbit_s"] * 1.1 >= check["measured"]


def test_an_iperf3_server_on_an_address_of_this_host_is_refused(accept, veth):
    """The real kernel's answer: the host's own veth address routes through the loopback, never a NIC."""
    if not shutil.which("iperf3"):
        pytest.skip("iperf3 is not installed (.ci/run installs it)")
    own = veth["server"].rsplit(".", 1)[0] + ".1"
    server = subprocess.Popen(["iperf3", "-s", "-B", own, "-p", str(BASE_PORT + 9)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        run = accept(f"gpuaccept: 1\nvendor: V\niperf3:\n  server: '{own}'\n  min_throughput: '0.1 Gb/s'\n"
                     f"  duration: '1 s'\n  streams: 1\n  port: {BASE_PORT + 9}\n")
    finally:
        server.terminate()
        server.wait(timeout=10)
    check = run.checks("iperf3")[0]
    assert check["outcome"] == "failed"
    assert check["message"] == (f"{own} is an address of this host: `ip route get` says local via lo; iperf3 would "
                                "measure the loopback, not a NIC")


# ------------------------------------------------------------------ iperf3 and RDMA, judged in process


def routed(root, dev: str = "ens6f0", server: str = "10.0.0.2") -> tuple[Path, Output]:
    """conftest.routed_nic's host for the harness: the route to `server` leaves through `dev`, a PCI port with byte
    counters; its tx_bytes, and the `ip route get` that says so."""
    entry = pci_port(root, "net", dev, "0000:9a:00.0")
    (entry / "statistics").mkdir()
    for counter in ("rx_bytes", "tx_bytes"):
        (entry / "statistics" / counter).write_text("1000\n")
    route = json.dumps([{"dst": server, "gateway": "10.0.0.1", "dev": dev, "prefsrc": "10.0.0.9", "flags": [], "uid": 0,
                         "cache": []}])
    return entry / "statistics" / "tx_bytes", Output(route)


def sends(tx: Path, counted: int = 10**11):
    """What routed_nic's iperf3 does to the port: `counted` more bytes sent."""
    def moved() -> None:
        tx.write_text(str(int(tx.read_text()) + counted))
    return moved


def iperf3_outputs(tmp_path, clock: Clock, version: str, client: Output) -> tuple[dict[str, Output], Path]:
    tx, route = routed(tmp_path / "sys")
    client.then = clock.runs(1.0, sends(tx))
    return {"iperf3 --version": Output(version), "ip route": route, "iperf3": client}, tmp_path / "sys"


def asked(judged, tool: str) -> list[list[str]]:
    return [argv for argv in judged.recordings.asked if argv[0] == tool]


def test_a_truncated_iperf3_json_is_not_measured(tmp_path, monkeypatch):
    outputs, sysfs = iperf3_outputs(tmp_path, Clock(monkeypatch), "iperf 3.17 (cJSON 1.7.15)\n",
                                    Output(DATA / "iperf3" / "json_3.9_TRUNCATED_invalid.json"))
    judged = judge("gpuaccept: 1\nvendor: V\niperf3:\n  server: 10.0.0.2\n  min_throughput: '1 Gb/s'\n  duration: '1 s'\n",
                   outputs, tmp_path, sysfs=sysfs)
    check = judged.of("iperf3")[0]
    assert (check.outcome.value, check.measured) == ("not_measured", None)
    assert "JSON cut or invalid at line 70 column 26" in check.message
    assert asked(judged, "iperf3")[1] == ["iperf3", "-c", "10.0.0.2", "-p", "5201", "-J", "-t", "1", "-P", "8"]


def test_old_iperf3_runs_one_client_per_stream_on_consecutive_ports(tmp_path, monkeypatch):
    outputs, sysfs = iperf3_outputs(tmp_path, Clock(monkeypatch), "iperf 3.9 (cJSON 1.7.13)\n",
                                    Output(DATA / "iperf3" / "json_3.9_tcp_10s_omit3_1.82Gbps.json"))
    judged = judge("gpuaccept: 1\nvendor: V\niperf3:\n  server: 10.0.0.2\n  min_throughput: '7 Gb/s'\n  streams: 4\n"
                   "  duration: '1 s'\n", outputs, tmp_path, sysfs=sysfs)
    ports = sorted(call[4] for call in asked(judged, "iperf3")[1:])
    assert ports == ["5201", "5202", "5203", "5204"]
    check = judged.of("iperf3")[0]
    assert check.measured == pytest.approx(4 * 1.8228, abs=0.001)
    assert "iperf3 3.9 is single-threaded: 4 client processes on ports 5201-5204, summed" in check.message


def test_an_iperf3_error_is_not_measured_with_its_own_text(tmp_path, monkeypatch):
    outputs, sysfs = iperf3_outputs(tmp_path, Clock(monkeypatch), "iperf 3.17\n",
                                    Output(DATA / "iperf3" / "text_error_control_socket_closed.txt", returncode=1,
                                           seconds=0))
    judged = judge("gpuaccept: 1\nvendor: V\niperf3:\n  server: 10.0.0.2\n  min_throughput: '1 Gb/s'\n", outputs,
                   tmp_path, sysfs=sysfs)
    assert "control socket has closed unexpectedly" in judged.of("iperf3")[0].message


# ------------------------------------------------------------------ RDMA

ROCE_200 = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "Ethernet"}


def ib_write_bw(clock: Clock, output: Path | str, peer: bool = False, **kwargs) -> dict[str, Output]:
    """ib_write_bw replaying `output`: without a peer, a server and a client started 1 s after it (CLIENT_AFTER_S),
    each running the 5 s asked; with one, the client alone."""
    if peer:
        return {"ib_write_bw": Output(output, then=clock.runs(5.0), **kwargs)}
    return {"ib_write_bw": Output(output, then=clock.runs(5.0), **kwargs),
            "ib_write_bw localhost": Output(output, seconds=6.0, then=clock.runs(6.0), **kwargs)}


def test_replayed_ib_write_bw_measures_the_bw_average_in_gbit_s(tmp_path, monkeypatch):
    """In a tree without the port's counters (a container's), the figure stands on ib_write_bw's word, and says so."""
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP})
    judged = judge(RDMA_CONTRACT.format(devices="['mlx5_*']", extra=""),
                   ib_write_bw(Clock(monkeypatch), DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt"),
                   tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert check.subject == "mlx5_0" and check.outcome.value == "passed"
    assert judged.verdict == "accepted"
    assert check.measured == pytest.approx(90.495, abs=0.01)
    assert check.message == ("mlx5_0 ib_write_bw BW average 90.5 Gb/s (sources: ib_write_bw only) >= 90 Gb/s "
                             "(90.5% of 100 Gb/s line rate, port 1 rate in sysfs; HCA only: no cable or switch "
                             "(loopback to localhost))")
    assert check.details["sources"] == ["ib_write_bw"] and "port_xmit_data could not be read" in \
        check.details["unconfirmed"]
    server, client = asked(judged, "ib_write_bw")
    assert server == ["ib_write_bw", "-d", "mlx5_0", "-i", "1", "-s", "65536", "-p", "18515", "--report_gbits", "-F", "-D", "5"]
    assert client == server + ["localhost"]


def test_a_bandwidth_above_line_rate_is_implausible(tmp_path, monkeypatch):
    sysfs_tree(tmp_path / "sys", {"mlx5_5": IB_UP})
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_5]", extra="  line_rate: '50 Gb/s'\n"),
                   ib_write_bw(Clock(monkeypatch), DATA / "ibwritebw" / "oci_roce_mlx5_5_4qp_report_gbits_rdmacm.txt"),
                   tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert check.outcome.value == "failed" and check.measured == 98.01
    assert "is implausible: above 50 Gb/s (the line rate, from the contract)" in check.message


def test_roce_below_the_fraction_fails_and_uses_the_contract_line_rate_and_peer(tmp_path, monkeypatch):
    sysfs_tree(tmp_path / "sys", {"mlx5_0": ROCE_200})
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0]", extra="  peer: 10.0.0.2\n  message_size: '1 MiB'\n"),
                   ib_write_bw(Clock(monkeypatch), DATA / "ibwritebw" / "roce_mlx5_0_a_sweep_gbits_52G_k8s_pod.txt", peer=True),
                   tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert (check.outcome.value, check.measured) == ("failed", 52.52)
    assert check.message == ("mlx5_0 ib_write_bw BW average 52.52 Gb/s (sources: ib_write_bw only) < 180 Gb/s "
                             "(26.3% of 200 Gb/s line rate, port 1 rate in sysfs; to the peer 10.0.0.2)")
    assert asked(judged, "ib_write_bw") == [
        ["ib_write_bw", "-d", "mlx5_0", "-i", "1", "-s", "1048576", "-p", "18515", "--report_gbits", "-F", "-D", "5",
         "10.0.0.2"]]


def test_a_failed_connection_is_not_measured_with_the_tools_words(tmp_path, monkeypatch):
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP})
    failed = " Couldn't connect to localhost:18515\nUnable to open file descriptor for socket connection\n"
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0]", extra=""),
                   {"ib_write_bw": Output(failed, returncode=1, seconds=0)}, tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert check.outcome.value == "not_measured"
    assert "exited with code 1" in check.message


def test_a_missing_ib_write_bw_is_not_measured(accept, fake_tools, tmp_path):
    """A whole run: "not found on PATH" is the runner's own look on PATH, which a replayed session never makes."""
    sysfs = sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP})
    run = accept(RDMA_CONTRACT.format(devices="[mlx5_0]", extra=""), sysfs)
    assert run.checks("rdma")[0]["message"] == "not measured: ib_write_bw not found on PATH"


def test_a_port_that_is_down_fails_and_a_missing_device_fails(tmp_path, monkeypatch):
    down = {**IB_UP, "state": "1: DOWN", "phys_state": "3: Disabled"}
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP, "mlx5_1": down})
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0, mlx5_1, mlx5_9]", extra=""),
                   ib_write_bw(Clock(monkeypatch), DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt"),
                   tmp_path, sysfs=tmp_path / "sys")
    checks = {c.subject: c for c in judged.of("rdma")}
    assert checks["mlx5_0"].outcome.value == "passed"
    assert (checks["mlx5_1"].outcome.value, checks["mlx5_1"].measured) == ("failed", 0)
    assert checks["mlx5_1"].message == "mlx5_1 port 1 is not Active/LinkUp: 1: DOWN / 3: Disabled"
    assert checks["mlx5_9"].message == "no RDMA device matches 'mlx5_9' (host has: mlx5_0, mlx5_1)"
    assert len(asked(judged, "ib_write_bw")) == 2  # only mlx5_0 was measured
