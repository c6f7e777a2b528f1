"""ethtool: the negotiated speed and link state of a network interface."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import ParseError
from ._run import Reading, ToolRun, ToolRunner, parse_run

TOOL = "ethtool"
_SPEED = re.compile(r"^(\d+)Mb/s$")
# The header, also where a message printed without a newline is glued before it (Huawei hccn_tool prints
# `Netdev status:Settings for eth3:`; a driver line may end in any character).
_HEADER = re.compile(r"Settings for (\S+):$")
# What a shell or the kernel prints when the tool died: the output before it is cut short, not a reading.
_CRASH = re.compile(r"^(?:Segmentation fault|Aborted|Killed|Bus error|Illegal instruction|Floating point exception"
                    r"|Trace/breakpoint trap)\b|core dumped|^\*\*\* .* \*\*\*: terminated$")


@dataclass(frozen=True, slots=True)
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
    speed that is not `<n>Mb/s`, the output is refused; so is an output with a crash line (`Segmentation
    fault (core dumped)`: cut short) and one whose settings belong to two interfaces.
    """
    name = speed = duplex = link = lanes = None
    seen_speed = False
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip().lstrip(">").strip()
        if _CRASH.search(line):
            raise ParseError(TOOL, "the tool crashed: its output is cut short, not a reading", raw)
        if match := _HEADER.search(line):
            if seen_speed and match.group(1) != name:
                raise ParseError(TOOL, f"settings of two interfaces in one output ({name} and {match.group(1)})", raw)
            name = match.group(1)
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "Speed":
            seen_speed = True
            speed = _speed(value, raw)
        elif key == "Duplex":
            duplex = None if value.startswith("Unknown") else value
        elif key == "Link detected":
            link = _link_detected(value, raw)
        elif key == "Lanes" and value.isdigit():
            lanes = int(value)
    if not seen_speed:
        raise ParseError(TOOL, "no 'Speed:' line in ethtool output")
    return LinkSettings(name, speed, duplex, link, lanes)


def _speed(value: str, raw: str) -> int | None:
    """`25000Mb/s` in Mb/s; `Unknown!` is no speed; anything else is refused."""
    if value.startswith("Unknown"):
        return None
    if match := _SPEED.match(value):
        return int(match.group(1))
    raise ParseError(TOOL, "unreadable Speed", raw)


def _link_detected(value: str, raw: str) -> bool:
    if value not in ("yes", "no"):
        raise ParseError(TOOL, "unreadable Link detected", raw)
    return value == "yes"


def run_ethtool(runner: ToolRunner, interface: str, timeout_s: float = 30.0) -> ToolRun:
    return runner.run(TOOL, [interface], timeout_s)


def read_ethtool(runner: ToolRunner, interface: str, timeout_s: float = 30.0) -> Reading[LinkSettings]:
    return parse_run(run_ethtool(runner, interface, timeout_s), parse_ethtool)
