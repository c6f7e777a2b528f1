"""ethtool: the negotiated speed and link state of a network interface."""

from __future__ import annotations

import re

from ..records import record
from . import ParseError
from ._run import Reading, ToolRun, ToolRunner, parse_run

TOOL = "ethtool"
_SPEED = re.compile(r"^(\d+)Mb/s$")


@record
class LinkSettings:
    """`ethtool IFACE`: speed in Mb/s (None: `Unknown!`), duplex, link detected (None: line absent)."""

    name: str | None
    speed_mbps: int | None
    duplex: str | None
    link_detected: bool | None
    lanes: int | None


def parse_ethtool(text: str) -> LinkSettings:
    """Read `ethtool IFACE`: `Settings for ens6f0:`, then `\\tSpeed: 25000Mb/s`, `\\tDuplex: Full`,
    `\\tLink detected: yes`. `Speed: Unknown!` reads as no speed. Without a Speed line, or with a
    speed that is not `<n>Mb/s`, the output is refused.
    """
    name = speed = duplex = link = lanes = None
    seen_speed = False
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip().lstrip(">").strip()
        if match := re.match(r"^Settings for (\S+):$", line):
            name = match.group(1)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "Speed":
            seen_speed = True
            if value.startswith("Unknown"):
                speed = None
            elif match := _SPEED.match(value):
                speed = int(match.group(1))
            else:
                raise ParseError(TOOL, "unreadable Speed", raw)
        elif key == "Duplex":
            duplex = None if value.startswith("Unknown") else value
        elif key == "Link detected":
            if value not in ("yes", "no"):
                raise ParseError(TOOL, "unreadable Link detected", raw)
            link = value == "yes"
        elif key == "Lanes" and value.isdigit():
            lanes = int(value)
    if not seen_speed:
        raise ParseError(TOOL, "no 'Speed:' line in ethtool output")
    return LinkSettings(name, speed, duplex, link, lanes)


def run_ethtool(runner: ToolRunner, interface: str, timeout_s: float = 30.0) -> ToolRun:
    return runner.run(TOOL, [interface], timeout_s)


def read_ethtool(runner: ToolRunner, interface: str, timeout_s: float = 30.0) -> Reading[LinkSettings]:
    return parse_run(run_ethtool(runner, interface, timeout_s), parse_ethtool)
