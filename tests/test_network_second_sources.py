"""Every network figure beside a source the vendor's tool does not print (issue 28): ethtool's speed beside the
kernel's (/sys/class/net/IF/speed), ib_write_bw's and iperf3's rates beside the port's own byte counters over
the tool's wall time as the plugin timed it. Each fraud is a fake host REJECTED with the clause it fakes failed;
the honest host beside it is ACCEPTED, saying which sources confirmed it.

The iperf3 hosts are live: the real iperf3 over a veth into a network namespace this test owns, shaped with tc
to 200 Mbit/s (root needed: CI runs as root), one of them through a wrapper that runs six times longer than
asked and rewrites its JSON. The other hosts are judged in process (tests/judging.py) from real outputs replayed,
the plugin's clocks moved by each run as long as the run took.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from builders import IB_UP, RDMA_CONTRACT, counting_port, moves, sysfs_tree
from conftest import DATA, pci_port
from judging import Clock, Output, judge

from pytest_gpuaccept.clauses.network import _kernel_speed
from pytest_gpuaccept.probes.counters import SATURATED_32, Counted, counted
from pytest_gpuaccept.rates import Rated, rate_check

ICE_25G = (DATA / "ethtool" / "ice_25g_dac_link_partner.txt").read_text()
BW_90 = DATA / "ibwritebw" / "ib_write_bw_a_sweep_IB_cpufreq_warnings_indented.txt"  # 90.495 Gb/s


# ---------------------------------------------------------------- nics: ethtool beside the kernel's speed


# ---------------------------------------------------------------- nics: ethtool beside the kernel's speed

def test_ethtool_saying_400g_where_the_kernel_says_100g_is_rejected_naming_both(tmp_path):
    """The vendor's ethtool prints 400G; the kernel, asked by sysfs the same question of the same driver, says 100G.
    Beside it, honest ports: one the kernel agrees on, one without a speed file (ethtool alone, said so), and one
    the kernel knows no speed for (SPEED_UNKNOWN)."""
    root = tmp_path / "sys"
    speeds = {"ens1": "400000", "ens2": "25000", "ens3": "25000", "ens4": "25000"}
    kernel = {"ens1": "100000", "ens2": "25000", "ens4": "-1"}  # ens3: no speed file
    outputs = {}
    for n, (name, speed) in enumerate(speeds.items()):
        outputs[f"ethtool {name}"] = Output(ICE_25G.replace("ens6f0", name).replace("25000Mb/s", f"{speed}Mb/s"))
        entry = pci_port(root, "net", name, f"0000:3{n}:00.0", driver="ice")
        if name in kernel:
            (entry / "speed").write_text(kernel[name] + "\n")
    judged = judge("gpuaccept: 1\nvendor: V\nnics:\n  interfaces: ['ens*']\n  min_speed: '25 Gb/s'\n", outputs, tmp_path,
                   sysfs=root)
    checks = {c.subject: c for c in judged.of("nics")}
    assert judged.verdict == "rejected"
    assert (checks["ens1"].outcome.value, checks["ens1"].measured) == ("failed", 100)
    assert checks["ens1"].message == ("ens1: ethtool says 400 Gb/s (400000Mb/s), the kernel's /sys/class/net/ens1/speed "
                                      "says 100 Gb/s (100000Mb/s): they disagree (measured at the lower; a link speed "
                                      "two sources disagree on is not as sold)")
    assert checks["ens1"].details["sources"] == ["ethtool", "sysfs speed"]
    assert "sysfs-net-ens1-speed.json" in checks["ens1"].evidence
    assert (checks["ens2"].outcome.value, checks["ens2"].message) == (
        "passed", "ens2 speed 25 Gb/s >= 25 Gb/s (PCI 0000:31:00.0, driver ice)")
    assert checks["ens2"].details["sources"] == ["ethtool", "sysfs speed"]
    assert (checks["ens3"].outcome.value, checks["ens3"].message) == (
        "passed", "ens3 speed 25 Gb/s (sources: ethtool only) >= 25 Gb/s (PCI 0000:32:00.0, driver ice)")
    assert checks["ens3"].details["sources"] == ["ethtool"]
    assert checks["ens3"].details["unconfirmed"] == "no /sys/class/net/ens3/speed to read (ENOENT)"
    assert (checks["ens4"].outcome.value, checks["ens4"].measured) == ("failed", None)
    assert checks["ens4"].message == ("ens4: ethtool says 25 Gb/s (25000Mb/s), the kernel's /sys/class/net/ens4/speed "
                                      "says -1 (SPEED_UNKNOWN): they disagree")


# ---------------------------------------------------------------- rdma: ib_write_bw beside the port's counters

def ib_write_bw(clock: Clock, device: str = "", printed_after: float = 5.0, moved=None) -> dict[str, Output]:
    """ib_write_bw on `device` (every device: ""), printing BW_90 after `printed_after` s: a server, and a client
    started 1 s after it (CLIENT_AFTER_S), which does `moved` to the port's counters over the `printed_after` s it
    ran."""
    server, client = f"ib_write_bw {device}".strip(), f"ib_write_bw {device} localhost".replace("  ", " ")
    return {server: Output(BW_90, seconds=printed_after, then=clock.runs(printed_after)),
            client: Output(BW_90, seconds=1.0 + printed_after, then=clock.runs(1.0 + printed_after, moved))}


def test_an_honest_ib_write_bw_is_confirmed_by_the_ports_own_counters(tmp_path, monkeypatch):
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP})
    folder = counting_port(tmp_path / "sys", "mlx5_0")
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0]", extra=""),
                   ib_write_bw(Clock(monkeypatch), moved=moves(folder, 90.6, 5.05)), tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert check.outcome.value == "passed" and judged.verdict == "accepted", check.message
    assert re.fullmatch(r"mlx5_0 ib_write_bw BW average 90\.5 Gb/s \(port_xmit_data: \d+(\.\d+)? Gb/s over \d+\.\d\d s\) "
                        r">= 90 Gb/s \(90\.5% of 100 Gb/s line rate, port 1 rate in sysfs; HCA only: no cable or switch "
                        r"\(loopback to localhost\)\)", check.message), check.message
    assert check.details["sources"] == ["ib_write_bw", "port_xmit_data"]
    assert check.details["counted_bytes"] >= int(90.6e9 * 5 / 8 / 4) * 4  # 5 s at 90.6 Gb/s, at least
    assert check.details["asked_s"] == 5 and check.details["wall_s"] >= 5.0
    assert {"sysfs-infiniband-mlx5_0-1-counters-before.json",
            "sysfs-infiniband-mlx5_0-1-counters-after.json"} <= set(check.evidence)


def test_a_canned_ib_write_bw_answering_at_once_is_not_a_measurement(tmp_path, monkeypatch):
    """Asked to run 5 s (-D 5), it prints a saved figure in 0.2 s: whatever it says, it measured nothing."""
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP})
    counting_port(tmp_path / "sys", "mlx5_0")
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0]", extra=""), ib_write_bw(Clock(monkeypatch), printed_after=0.2),
                   tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("rdma")[0]
    assert (check.clause, check.outcome.value, check.measured) == ("rdma", "failed", None)
    assert re.fullmatch(r"mlx5_0: not a measurement: ib_write_bw was asked to run 5 s and returned after [0-3]\.\d\d s "
                        r"\(the plugin's clock\)", check.message), check.message
    assert judged.verdict == "rejected"


def test_ib_write_bw_figures_the_ports_counters_refute_are_rejected(tmp_path, monkeypatch):
    """mlx5_0: a canned figure printed after the 5 s asked, the port idle (its counters never moved); mlx5_1: a
    real-looking run whose port moved 40 Gb/s while the tool says 90.5."""
    sysfs_tree(tmp_path / "sys", {"mlx5_0": IB_UP, "mlx5_1": IB_UP})
    counting_port(tmp_path / "sys", "mlx5_0")
    slow = counting_port(tmp_path / "sys", "mlx5_1")
    clock = Clock(monkeypatch)
    outputs = {**ib_write_bw(clock), **ib_write_bw(clock, "mlx5_1", moved=moves(slow, 40.0, 5.05))}
    judged = judge(RDMA_CONTRACT.format(devices="[mlx5_0, mlx5_1]", extra=""), outputs, tmp_path, sysfs=tmp_path / "sys")
    checks = {c.subject: c for c in judged.of("rdma")}
    assert judged.verdict == "rejected"
    idle = checks["mlx5_0"]
    assert (idle.outcome.value, idle.measured) == ("failed", 0)
    assert re.fullmatch(r"mlx5_0: ib_write_bw says 90\.5 Gb/s, but port 1's port_xmit_data \(sysfs, 4-byte words\) "
                        r"counted 0 bytes in the 5\.00 s it sent for: 0 Gb/s; a figure more than 10% above what the port "
                        r"moved is not a measurement", idle.message), idle.message
    inflated = checks["mlx5_1"]
    assert inflated.outcome.value == "failed" and 30 < inflated.measured <= 40.5, inflated
    assert "ib_write_bw says 90.5 Gb/s, but port 1's port_xmit_data" in inflated.message
    assert inflated.details["sources"] == ["ib_write_bw", "port_xmit_data"]


# ---------------------------------------------------------------- iperf3: live, shaped, beside tx_bytes

BASE_PORT = 15301
LINE_RATE = "200mbit"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def shaped():
    """A veth pair: `gpsN-h` here (10.232.N.1), its egress shaped to 200 Mbit/s with tc, `gpsN-p` in namespace
    `gpsecond-N` (10.232.N.2), where an iperf3 server listens."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc") or not shutil.which("iperf3"):
        pytest.skip("needs root, iproute2, tc and iperf3 to shape a link into a network namespace (CI runs as root)")
    n = os.getpid() % 200 + 20
    ns, host, peer = f"gpsecond-{n}", f"gps{n}-h", f"gps{n}-p"
    _ip("netns", "add", ns)
    server = None
    try:
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("addr", "add", f"10.232.{n}.1/24", "dev", host)
        _ip("link", "set", host, "up")
        _ip("-n", ns, "addr", "add", f"10.232.{n}.2/24", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        subprocess.run(["tc", "qdisc", "replace", "dev", host, "root", "tbf", "rate", LINE_RATE, "burst", "64kb",
                        "latency", "100ms"], check=True, capture_output=True, timeout=10)
        server = subprocess.Popen(["ip", "netns", "exec", ns, "iperf3", "-s", "-p", str(BASE_PORT)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        yield {"host": host, "server": f"10.232.{n}.2"}
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def iperf3_contract(server: str, minimum: str) -> str:
    return (f"gpuaccept: 1\nvendor: V\niperf3:\n  server: '{server}'\n  min_throughput: '{minimum}'\n"
            f"  duration: '1 s'\n  streams: 1\n  port: {BASE_PORT}\n")


REWRITER = """\
#!{python}
# The vendor's iperf3: the real one, run six times as long as asked, its JSON rewritten to say it took the time
# asked. The bytes are real (the interface counts them all); the rate is not.
import json, os, subprocess, sys
REAL = {real!r}
args = sys.argv[1:]
if "-c" not in args:
    os.execv(REAL, [REAL, *args])
asked = float(args[args.index("-t") + 1])
args[args.index("-t") + 1] = str(int(asked * 6))
done = subprocess.run([REAL, *args], capture_output=True, text=True)
doc = json.loads(done.stdout)
for key in ("sum_sent", "sum_received"):
    doc["end"][key]["seconds"] = asked
    doc["end"][key]["end"] = asked
    doc["end"][key]["bits_per_second"] = doc["end"][key]["bytes"] * 8 / asked
doc["start"]["test_start"]["duration"] = int(asked)
print(json.dumps(doc, indent=1))
sys.exit(done.returncode)
"""


def test_real_iperf3_over_a_shaped_link_is_confirmed_by_the_interfaces_counters(accept, fake_tools, shaped):
    run = accept(iperf3_contract(shaped["server"], "0.1 Gb/s"))
    check = run.checks("iperf3")[0]
    assert check["outcome"] == "passed" and run.json["verdict"] == "accepted", check["message"]
    assert 0.1 < check["measured"] <= 0.21
    assert check["details"]["sources"] == ["iperf3", "tx_bytes"]
    assert 0.15 < check["details"]["counted_gbit_s"] <= 0.23 and check["details"]["wall_s"] >= 1.0
    assert re.search(r" \(tx_bytes: 0\.\d+ Gb/s over 1\.\d\d s\) >= 0\.1 Gb/s ", check["message"]), check["message"]


def test_a_slow_iperf3_that_rewrites_its_json_is_rejected_by_the_counters_rate(accept, fake_tools, shaped):
    """Asked for 1 s, it runs 6 s and says it moved those 6 s of bytes in 1 s: about 1.2 Gb/s over a 200 Mbit/s
    link. The bytes agree with tx_bytes (the old check passed it); bytes over the time it ran do not."""
    wrapper = fake_tools.bin_dir / "iperf3"
    wrapper.write_text(REWRITER.format(python=sys.executable, real=shutil.which("iperf3", path="/usr/bin:/bin")))
    wrapper.chmod(0o755)
    run = accept(iperf3_contract(shaped["server"], "0.5 Gb/s"))
    check = run.checks("iperf3")[0]
    assert (check["clause"], check["outcome"]) == ("iperf3", "failed"), check["message"]
    assert 0.15 < check["measured"] <= 0.27  # what the interface carried over its transfer time: 6 s less 1 s
    assert check["details"]["wall_s"] >= 6.0 and check["details"]["asked_s"] == 1
    assert re.fullmatch(rf"iperf3 says \d+(\.\d+)? Gb/s, but {shaped['host']}'s tx_bytes \(sysfs\) counted \d+ bytes in its "
                        r"\d+\.\d\d s of transfer \(the \d+\.\d\d s it ran, less 1 s of start-up\): 0\.\d+ Gb/s; a figure more than 10% above what the port moved is not a "
                        r"measurement", check["message"]), check["message"]
    assert run.json["verdict"] == "rejected"


def test_a_canned_iperf3_answering_at_once_is_not_a_measurement(tmp_path, monkeypatch):
    """It prints a saved JSON at once, and even moves the interface's counters by what the JSON says it sent."""
    entry = pci_port(tmp_path / "sys", "net", "ens6f0", "0000:9a:00.0")  # conftest.routed_nic's port
    (entry / "statistics").mkdir()
    for counter in ("rx_bytes", "tx_bytes"):
        (entry / "statistics" / counter).write_text("1000\n")
    tx = entry / "statistics" / "tx_bytes"
    route = json.dumps([{"dst": "10.0.0.2", "gateway": "10.0.0.1", "dev": "ens6f0", "prefsrc": "10.0.0.9", "flags": [],
                         "uid": 0, "cache": []}])

    def sent() -> None:
        tx.write_text(str(int(tx.read_text()) + 2400000000))

    outputs = {"iperf3 --version": Output("iperf 3.17 (cJSON 1.7.15)\n"), "ip route": Output(route),
               "iperf3": Output(DATA / "iperf3" / "json_3.9_tcp_10s_omit3_1.82Gbps.json", seconds=0,
                                then=Clock(monkeypatch).runs(0.0, sent))}
    judged = judge("gpuaccept: 1\nvendor: V\niperf3: {server: 10.0.0.2, min_throughput: '1 Gb/s', duration: '2 s'}\n",
                   outputs, tmp_path, sysfs=tmp_path / "sys")
    check = judged.of("iperf3")[0]
    assert (check.outcome.value, check.measured) == ("failed", None)
    assert re.fullmatch(r"not a measurement: iperf3 was asked to run 2 s and returned after [01]\.\d\d s \(the plugin's "
                        r"clock\)", check.message), check.message


# ---------------------------------------------------------------- the rule itself

def window(mono: float, boot: float, counted_bytes: int | None = 10**9, unread: str | None = None) -> Counted:
    return Counted(counted_bytes, mono, boot, unread)


def test_a_rate_is_bytes_over_the_time_the_plugin_measured():
    ok = rate_check(7.5, Rated("ib_write_bw", 1, 1.0), window(1.2, 1.2), ("port_xmit_data", "the port"))
    assert ok.refuted is None and ok.details["counted_gbit_s"] == 8.0 and ok.shown == " (port_xmit_data: 8 Gb/s over 1.00 s)"
    assert rate_check(8.8, Rated("t", 1, 1.0), window(1.0, 1.0), ("c", "c")).refuted is None  # 10 % above: believed
    assert rate_check(8.81, Rated("t", 1, 1.0), window(1.0, 1.0), ("c", "c")).measured == 8.0  # beyond: refuted
    assert "returned after 0.90 s" in str(rate_check(1.0, Rated("t", 1, 0.9), window(1.0, 1.0), ("c", "c")).refuted)


def test_a_rate_is_divided_by_the_transfer_time_not_the_tools_start_up():
    """Issue 38: an HGX H100's NDR port, ib_write_bw -D 5 taking 5.78 s with its connect and its server's exit,
    says 392.34 Gb/s; its port counted 346.42 Gb/s over the whole 5.78 s. Over the 5 s it sent for, the port agrees.
    A live iperf3 asked 2 s took 2.39 s on a loaded machine. A run stretched to 6x its time at 1/6 the rate, moving
    every byte its claim needs, is divided by its own length less the start-up, and fails."""
    ndr = rate_check(392.34, Rated("ib_write_bw", 5, 5.78), window(5.8, 5.8, int(346.42e9 * 5.78 / 8)), ("c", "c"))
    assert ndr.refuted is None and ndr.details["transfer_s"] == 5 and ndr.shown == " (c: 400.46 Gb/s over 5.00 s)"
    iperf = rate_check(3.18, Rated("iperf3", 2, 2.39), window(2.4, 2.4, int(2.74e9 * 2.39 / 8)), ("c", "c"))
    assert iperf.refuted is None
    for asked in (1, 2, 5, 10):
        for stretch in (1.5, 2, 6, 30):
            wall = asked * stretch
            moved = int(10e9 / 6 * wall / 8)  # a port that moves 1/6 of the 10 Gb/s claimed, for as long as it likes
            stretched = rate_check(10.0, Rated("t", asked, wall), window(wall, wall, moved), ("c", "c"))
            assert stretched.refuted is not None, (asked, stretch)
    assert "its 5.00 s of transfer (the 6.00 s it ran, less 1 s of start-up)" in str(
        rate_check(10.0, Rated("t", 1, 6.0), window(6.0, 6.0, 10**9), ("c", "c")).refuted)


def test_the_monotonic_clock_is_checked_against_boottime_and_the_run_against_its_window():
    suspended = rate_check(1.0, Rated("t", 5, 5.0), window(6.0, 10.0), ("c", "c"))
    assert suspended.refuted == ("t's run time cannot be trusted: the plugin's monotonic clock counted 6.000 s between the "
                                 "counter readings, CLOCK_BOOTTIME 10.000 s: they disagree by more than 0.30 s")
    outside = rate_check(1.0, Rated("t", 5, 7.0), window(5.1, 5.1), ("c", "c"))
    assert "longer than the 5.100 s between the counter readings" in str(outside.refuted)
    assert rate_check(1.0, Rated("t", 5, 5.0), window(60.0, 60.3), ("c", "c")).refuted is None  # within 1 s and 5 %


def test_counters_that_cannot_confirm_say_why_and_a_reset_one_refutes():
    before = {"port_xmit_data": 100, "monotonic_s": 1.0, "boottime_s": 1.0}
    assert counted(before, {**before, "port_xmit_data": 350, "monotonic_s": 2.0}, "port_xmit_data", 4).counted_bytes == 1000
    assert counted({"error": "x: ENOENT"}, {}, "port_xmit_data").unread == "port_xmit_data could not be read (x: ENOENT)"
    saturated = counted(before, {**before, "port_xmit_data": SATURATED_32}, "port_xmit_data", 4)
    assert saturated.unread == "port_xmit_data is saturated at 2^32-1 (a 32-bit counter): it no longer counts"
    zero = {"port_xmit_data": 0, "monotonic_s": 1.0, "boottime_s": 1.0}
    assert counted(zero, zero, "port_xmit_data", 4).counted_bytes == 0  # a physical port's 0 is its answer
    soft = counted(zero, zero, "port_xmit_data", 4, "a software device (rxe)")
    assert soft.unread == ("port_xmit_data read 0 before and after, and this port is a software device (rxe) (sysfs): "
                           "its counter does not count")
    alone = rate_check(90.0, Rated("ib_write_bw", 5, 5.1), counted({"error": "e"}, {"error": "e"}, "port_xmit_data", 4),
                       ("port_xmit_data", "port 1's port_xmit_data"))
    assert (alone.refuted, alone.shown, alone.details["sources"]) == (None, " (sources: ib_write_bw only)", ["ib_write_bw"])
    reset = counted(before, {"port_xmit_data": 5, "monotonic_s": 7.0, "boottime_s": 7.0}, "port_xmit_data", 4)
    refuted = rate_check(90.0, Rated("ib_write_bw", 5, 5.1), reset, ("port_xmit_data", "port 1's port_xmit_data"))
    assert refuted.refuted == ("port 1's port_xmit_data: port_xmit_data went from 100 down to 5 during the run: reset, so "
                               "nothing confirms ib_write_bw's figure")


def test_a_kernel_that_refuses_the_speed_refutes_ethtool_and_a_reading_not_taken_leaves_it_alone():
    """EINVAL (the kernel's answer for an interface that is down, or a driver without a speed) cannot stand beside
    ethtool's `Link detected: yes` and a speed; a reading a replayed bundle lacks is no second source, said so."""
    down = _kernel_speed("ens1", 400000, {"error": "EINVAL"})
    assert down.refuted == ("ens1: ethtool says 400 Gb/s (400000Mb/s), the kernel's /sys/class/net/ens1/speed says "
                            "nothing (EINVAL: the interface is down, or its driver gives no speed): they disagree")
    missing = _kernel_speed("ens1", 400000, {"error": "not in the replayed bundle /b: no such file"})
    assert (missing.refuted, missing.shown, missing.details["sources"]) == (None, " (sources: ethtool only)", ["ethtool"])
