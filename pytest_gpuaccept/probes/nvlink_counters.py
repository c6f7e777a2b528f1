"""A node's traffic counters read before and after a job: each GPU's NVLink data counters (`nvidia-smi nvlink -gt d`,
the driver's per-link payload counters in KiB) and the kernel's NIC counters (sysfs: an RDMA port's port_xmit_data
in 4-byte words, an interface's statistics/tx_bytes). What moved between the readings says which fabric carried a
job, beside what the job's own log claims.

Lines as they are printed (tests/data/nvl72):

    GPU 0: NVIDIA H800 (UUID: GPU-34bf77d1-c686-6821-79a8-32d326c5039c)
             Link 0: Data Tx: 5863784 KiB
             Link 0: Data Rx: 5863677 KiB
    /sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data:123456
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import ParseError
from .counters import COUNTER_WORD

TOOL = "nvidia-smi"
ARGS = tuple("nvlink -gt d".split())  # one string: the subcommand alone spells a contract section's name
KIB = 1024
# The NICs' transmit counters, one `path:value` line each (grep -H). `; exit 0`: a glob with no match (no RDMA
# device) is not a failure; a node whose every counter is missing prints nothing, which is refused when parsed.
NIC_GLOBS = ("class/infiniband/*/ports/*/counters/port_xmit_data", "class/net/*/statistics/tx_bytes")

_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: (\S+)\))?$")
_DATA = re.compile(r"^Link (\d+): Data (Tx|Rx): (\d+) KiB$")
_NIC = re.compile(r"^(/\S+/(port_xmit_data|tx_bytes)):(\d+)$")


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """One GPU's NVLink data counters: per link, (Tx, Rx) in bytes."""

    name: str
    uuid: str | None
    links: dict[int, tuple[int, int]]

    @property
    def tx_bytes(self) -> int:
        return sum(tx for tx, _rx in self.links.values())


def parse_throughput(text: str) -> dict[int, GpuLinks]:
    """`nvidia-smi nvlink -gt d`: `GPU 0: NAME (UUID: ...)`, then `Link N: Data Tx: V KiB` and `Link N: Data Rx: V KiB`
    for each link. ParseError on any other line (a summary cut short must not read as idle links), on a link with
    only one of its two counters, or where no GPU has a link."""
    gpus: dict[int, GpuLinks] = {}
    counts: dict[tuple[int, int], dict[str, int]] = {}
    gpu: int | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if match := _GPU.match(stripped):
            gpu = int(match.group(1))
            gpus[gpu] = GpuLinks(match.group(2), match.group(3), {})
            continue
        data = _DATA.match(stripped)
        if gpu is None or data is None:
            raise ParseError(TOOL, "unexpected line in `nvlink -gt d` output", line)
        counts.setdefault((gpu, int(data.group(1))), {})[data.group(2)] = int(data.group(3)) * KIB
    for (index, link), pair in sorted(counts.items()):
        if set(pair) != {"Tx", "Rx"}:
            raise ParseError(TOOL, f"GPU {index} link {link} has only its Data {''.join(pair)} counter")
        gpus[index].links[link] = (pair["Tx"], pair["Rx"])
    if not any(g.links for g in gpus.values()):
        raise ParseError(TOOL, "no GPU with an NVLink data counter in `nvlink -gt d` output", text.strip()[:120] or None)
    return gpus


def parse_nic_counters(text: str) -> dict[str, int]:
    """`grep -H . <sysfs>/class/infiniband/*/ports/*/counters/port_xmit_data <sysfs>/class/net/*/statistics/tx_bytes`:
    each counter's path and its value in bytes (port_xmit_data counts 4-byte words). The loopback interface is left
    out (it never leaves the node). ParseError on a line of another shape."""
    found = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _NIC.match(line.strip())
        if match is None:
            raise ParseError("grep", "unexpected line reading the NIC counters", line)
        path, kind, value = match.groups()
        if "/class/net/lo/" in path:
            continue
        found[path] = int(value) * (COUNTER_WORD if kind == "port_xmit_data" else 1)
    return found


@dataclass(frozen=True, slots=True)
class Traffic:
    """One tray's counters around the domain's all_reduce: its GPUs' NVLink data counters and its NICs' transmit
    counters before and after, or why they were not read."""

    nvlink_before: dict[int, GpuLinks] = field(default_factory=dict)
    nvlink_after: dict[int, GpuLinks] = field(default_factory=dict)
    nic_before: dict[str, int] = field(default_factory=dict)
    nic_after: dict[str, int] = field(default_factory=dict)
    problem: str | None = None
    evidence: tuple[str, ...] = ()

    def nvlink_tx(self) -> dict[int, int | None]:
        """Each GPU's NVLink Data Tx growth, in bytes; None where a link's counter went down (reset) or a GPU or
        link is in one reading only."""
        grown: dict[int, int | None] = {}
        for index in sorted(set(self.nvlink_before) | set(self.nvlink_after)):
            low, high = self.nvlink_before.get(index), self.nvlink_after.get(index)
            if low is None or high is None or set(low.links) != set(high.links) or any(
                    high.links[k][0] < low.links[k][0] for k in low.links):
                grown[index] = None
            else:
                grown[index] = high.tx_bytes - low.tx_bytes
        return grown

    def nic_tx(self) -> dict[str, int | None]:
        """Each NIC counter's growth, in bytes; None where it went down or is in one reading only."""
        return {path: (self.nic_after[path] - self.nic_before[path]
                       if path in self.nic_before and path in self.nic_after
                       and self.nic_after[path] >= self.nic_before[path] else None)
                for path in sorted(set(self.nic_before) | set(self.nic_after))}
