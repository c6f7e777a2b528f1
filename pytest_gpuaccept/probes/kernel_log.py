"""The kernel log (`dmesg`): Xid lines the NVIDIA driver writes, a second source beside NVML's Xid events.

`[ 3606.832215] NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi, Timeout waiting for RPC ...`:
seconds since boot, the GPU's PCI domain:bus:device, the Xid number and the driver's words.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..records import record
from ._run import Reading, ToolRunner, parse_run

TOOL = "dmesg"
_XID = re.compile(r"\[\s*(\d+\.\d+)\]\s*NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\):\s*(\d+),?\s*(.*)")


@record
class KernelXid:
    t_s: float  # seconds since boot
    pci: str  # domain:bus:device, lower case
    xid: int
    text: str


def parse_xids(text: str) -> list[KernelXid]:
    return [KernelXid(float(m.group(1)), m.group(2).lower(), int(m.group(3)), m.group(4).strip()[:200])
            for m in (_XID.search(line) for line in text.splitlines()) if m]


def read_xids(runner: ToolRunner) -> Reading[list[KernelXid]]:
    """`dmesg` (needs root, or kernel.dmesg_restrict=0): its Xid lines."""
    return parse_run(runner.run(TOOL, [], 60.0, key="dmesg_after_load"), parse_xids)


def uptime(proc: Path = Path("/proc/uptime")) -> float | None:
    """Seconds since boot, the clock of the kernel log's timestamps."""
    try:
        return float(proc.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
