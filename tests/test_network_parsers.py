"""ethtool, ib_write_bw and iperf3 parsers on every real output of the corpus; ip's address listing from the real ip."""

import os
import re
import shutil
import subprocess

import pytest
import yaml
from conftest import DATA

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.ethtool import parse_ethtool
from pytest_gpuaccept.probes.ib_write_bw import parse_ib_write_bw
from pytest_gpuaccept.probes.iperf3 import parse_iperf3_json, parse_version
from pytest_gpuaccept.probes.iproute import parse_addresses
from pytest_gpuaccept.probes.sysfs import parse_ib_device, parse_rate

EXPECTED = yaml.safe_load((DATA / "EXPECTED.yaml").read_text())
ETHTOOL = sorted((DATA / "ethtool").iterdir())
IBWRITEBW = sorted((DATA / "ibwritebw").iterdir())


@pytest.mark.parametrize("path", ETHTOOL, ids=[p.name for p in ETHTOOL])
def test_ethtool_outputs(path):
    expected = EXPECTED["ethtool"][path.name]
    if "refused" in expected:
        with pytest.raises(ParseError, match=re.escape(expected["refused"])):
            parse_ethtool(path.read_text())
        return
    link = parse_ethtool(path.read_text())
    assert (link.speed_mbps, link.duplex, link.link_detected) == (
        expected["speed_mbps"], expected["duplex"], expected["link_detected"])
    if "lanes" in expected:
        assert link.lanes == expected["lanes"]
    if "name" in expected:
        assert link.name == expected["name"]


@pytest.mark.parametrize("text, message", [
    ("", "no 'Speed:' line"),
    ("Settings for eth0:\n\tSpeed: fast\n", "unreadable Speed"),
    ("Settings for eth0:\n\tSpeed: 100Mb/s\n\tLink detected: maybe\n", "unreadable Link detected"),
    ("netlink error: no device matches name (offset 24)\n", "no 'Speed:' line"),
])
def test_ethtool_output_that_cannot_be_read_is_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_ethtool(text)


@pytest.mark.parametrize("path", IBWRITEBW, ids=[p.name for p in IBWRITEBW])
def test_ib_write_bw_outputs_in_gbit_s(path):
    expected = EXPECTED["ibwritebw"][path.name]
    result = parse_ib_write_bw(path.read_text())
    size, _peak, average = result.last
    assert size == expected["last_row_bytes"]
    assert average == pytest.approx(expected["bw_avg_gbps"], abs=0.01)
    assert result.unit == expected["bw_unit"]


def test_ib_write_bw_refusal_names_the_tools_error():
    text = " Couldn't connect to 10.0.0.2:18515\nUnable to open file descriptor for socket connection\n"
    with pytest.raises(ParseError, match="no bandwidth table in the output: \"Couldn't connect to 10.0.0.2:18515\""):
        parse_ib_write_bw(text)


@pytest.mark.parametrize("name, gbit", [
    ("json_3.9_tcp_10s_omit3_1.82Gbps.json", 1.8228), ("json_3.6_tcp_bytes_limited.json", 0.16935),
    ("json_3.9_tcp_10KB_single_interval.json", 0.0012252),
])
def test_iperf3_json_received_throughput(name, gbit):
    result = parse_iperf3_json((DATA / "iperf3" / name).read_text())
    assert result.received_bits_per_s / 1e9 == pytest.approx(gbit, rel=1e-3)


@pytest.mark.parametrize("name, message", [
    ("json_3.9_TRUNCATED_invalid.json", "JSON cut or invalid at line 70 column 26"),
    ("json_3.9_two_documents_concatenated.json", "more than one JSON document"),
    ("text_error_control_socket_closed.txt", "iperf3 error: control socket has closed unexpectedly"),
    ("text_3.9_tcp_omit3_crlf_106Mbps.txt", "output is not iperf3 JSON"),
    ("text_old_bandwidth_col_P4_summary_46Gbps.txt", "output is not iperf3 JSON"),
])
def test_iperf3_output_that_is_not_one_complete_json_is_refused(name, message):
    with pytest.raises(ParseError, match=message):
        parse_iperf3_json((DATA / "iperf3" / name).read_text())


def test_iperf3_error_json_is_refused_with_its_own_text():
    with pytest.raises(ParseError, match="iperf3 error: unable to connect to server: Connection refused"):
        parse_iperf3_json('{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server: Connection refused"}')


def test_iperf3_versions():
    assert parse_version("iperf 3.12 (cJSON 1.7.15)\nLinux vm 6.1.0 #1 SMP") == (3, 12)
    assert parse_version("iperf 3.16 (cJSON 1.7.15)") == (3, 16)
    assert parse_version("") is None


def test_sysfs_rates_and_port_states():
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("") is None
    ports = parse_ib_device({"device": "mlx5_0", "ports": {"1": {
        "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand",
        "roce_v2_gid_index": None}}})
    assert ports[0].active and ports[0].rate_gbit_s == 200.0
    down = parse_ib_device({"device": "mlx5_1", "ports": {"1": {
        "state": "1: DOWN", "phys_state": "3: Disabled", "rate": "40 Gb/sec (4X QDR)", "link_layer": "Ethernet"}}})
    assert not down[0].active and down[0].state == "1: DOWN / 3: Disabled"


def test_ip_addr_of_each_interface_from_one_listing_of_the_real_ip():
    """The cluster's links read every interface's address from one `ip -j -4 addr show` a node (one launcher a
    node at a time): the real ip, in a network namespace of its own with two interfaces, one of them with a
    link-local address beside its global one."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("this test runs the real ip in a network namespace: it needs root, unshare and iproute2",
                    pytrace=False)
    made = subprocess.run(["unshare", "--net", "sh", "-c",
                           "ip link add eth0 type veth peer name eth1 && ip addr add 10.9.0.1/24 dev eth0 && "
                           "ip addr add 169.254.3.3/16 scope link dev eth1 && ip addr add 10.9.1.1/24 dev eth1 && "
                           "ip link set lo up && ip -j -4 addr show"], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    assert parse_addresses(made.stdout, "eth0") == ["10.9.0.1"]
    assert parse_addresses(made.stdout, "eth1") == ["10.9.1.1", "169.254.3.3"]  # scope global first
    assert parse_addresses(made.stdout) == ["10.9.0.1", "10.9.1.1", "127.0.0.1", "169.254.3.3"]
    with pytest.raises(ParseError, match="eth2 has no IPv4 address"):
        parse_addresses(made.stdout, "eth2")
