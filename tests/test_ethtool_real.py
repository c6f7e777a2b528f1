"""ethtool's real quirks: a driver message glued before the header, a crash line at the end, a pasted session
with two headers (tests/data/ethtool, sources in tests/data/SOURCES.md)."""

from __future__ import annotations

import pytest
from conftest import DATA

from pytest_gpuaccept.probes import ParseError
from pytest_gpuaccept.probes.ethtool import parse_ethtool

ETHTOOL = DATA / "ethtool"


def test_netdev_status_glued_before_the_header_keeps_the_interface_name():
    # Huawei hccn_tool prints `Netdev status:%s` and then ethtool's text: `Netdev status:Settings for eth3:`
    link = parse_ethtool((ETHTOOL / "ascend_hccn_tool_netdev_status_glued_eth3_200000.txt").read_text())
    assert (link.name, link.speed_mbps, link.duplex, link.link_detected) == ("eth3", 200000, "Full", True)


def test_a_header_glued_to_any_text_keeps_the_interface_name():
    # CONSTRUCTED: a message without a newline ending in a letter, before the real header line of ice_25g
    text = (ETHTOOL / "ice_25g_dac_link_partner.txt").read_text().replace("Settings for", "ice: link upSettings for")
    assert parse_ethtool(text).name == "ens6f0"


def test_an_output_ending_in_a_segmentation_fault_is_refused_quoting_the_line():
    # ethtool commit 4cbff6f: `ethtool swp1` on a Spectrum port (400G, 8 lanes) crashed printing Lanes
    text = (ETHTOOL / "ethtool_commit_4cbff6f_spectrum_swp1_400000_segfault.txt").read_text()
    assert "Speed: 400000Mb/s" in text
    with pytest.raises(ParseError, match=r"crashed.*'Segmentation fault \(core dumped\)'"):
        parse_ethtool(text)


@pytest.mark.parametrize("crash", ["Aborted (core dumped)", "Killed", "Bus error", "Segmentation fault",
                                   "*** stack smashing detected ***: terminated"])
def test_any_trailing_crash_line_is_refused(crash):
    # CONSTRUCTED around the real header and speed lines: the shell's words for a tool that died
    text = f"Settings for eth0:\n\tSpeed: 100000Mb/s\n\tDuplex: Full\n{crash}\n"
    with pytest.raises(ParseError, match="crashed"):
        parse_ethtool(text)


def test_a_pasted_session_with_an_empty_header_reads_the_interface_the_settings_follow():
    # ethtool commit 8db75d1 (FEC support): `Settings for swp1:` with nothing under it, a prompt, then swp18's
    # settings: 100G with FEC modes [RS | BaseR | None | Not reported], link detected
    link = parse_ethtool((ETHTOOL / "ethtool_commit_8db75d1_swp18_100000_fec_pasted_two_headers.txt").read_text())
    assert (link.name, link.speed_mbps, link.duplex, link.link_detected) == ("swp18", 100000, "Full", True)


def test_settings_of_two_interfaces_in_one_output_are_refused():
    # CONSTRUCTED from two real files: which interface's speed this is cannot be said
    text = ((ETHTOOL / "ice_25g_dac_link_partner.txt").read_text()
            + (ETHTOOL / "bond0_200000_lacp_tabs.txt").read_text())
    with pytest.raises(ParseError, match=r"two interfaces in one output \(ens6f0 and bond0\): 'Settings for bond0:'"):
        parse_ethtool(text)
