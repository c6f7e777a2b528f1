"""`ip -j route get ADDRESS` (iproute2): which interface traffic to an address leaves through, if any.

An iperf3 server that is an address of this host is reached through the loopback: whatever iperf3
measures then, it is not a NIC. Byte counters of the route's interface (sysfs statistics) are the second
source for the bytes iperf3 says it moved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import ParseError
from ._run import Reading, ToolRunner, parse_run

TOOL = "ip"


@dataclass(frozen=True, slots=True)
class Route:
    kind: str  # unicast, local, ...
    dst: str
    dev: str
    gateway: str | None

    @property
    def local(self) -> bool:
        return self.kind == "local" or self.dev == "lo"


def parse_route_get(text: str) -> Route:
    try:
        data = json.loads(text)
        first = data[0]
        return Route(str(first.get("type", "unicast")), str(first["dst"]), str(first["dev"]), first.get("gateway"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ParseError(TOOL, "`ip -j route get` gave no route (dst, dev) as JSON") from None


def read_route(runner: ToolRunner, address: str) -> Reading[Route]:
    return parse_run(runner.run(TOOL, ["-j", "route", "get", address], 30.0, key=f"ip_route_get_{address}"),
                     parse_route_get)


def parse_addresses(text: str, device: str | None = None) -> list[str]:
    """`ip -j -4 addr show`: the IPv4 addresses (scope global first) of interface `device`, or of every interface
    listed; ParseError if none."""
    try:
        entries = json.loads(text)
    except ValueError:
        raise ParseError(TOOL, "`ip -j addr` printed no JSON") from None
    found = [(info.get("scope") != "global", str(info["local"])) for entry in entries
             if isinstance(entry, dict) and (device is None or entry.get("ifname") == device)
             for info in entry.get("addr_info", []) if isinstance(info, dict) and info.get("family") == "inet"
             and info.get("local")]
    if not found:
        raise ParseError(TOOL, f"{device or 'the interface'} has no IPv4 address")
    return [address for _local, address in sorted(found)]
