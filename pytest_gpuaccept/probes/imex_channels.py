"""The IMEX channels the NVIDIA driver exposes on a node, beside what its IMEX daemon says: the character devices
/dev/nvidia-caps-imex-channels/channel<N> (`ls -ln`) and the major number the driver registered for them (the
`nvidia-caps-imex-channels` line of /proc/devices). A process imports another node's memory through a channel:
a node whose daemon is READY but that has no channel device of that major shares no memory (NVIDIA IMEX guide,
"IMEX channels").

Lines as they are printed (tests/data/nvl72):

    crw-rw-rw- 1 root root 508,    0 Jan 18 19:11 channel0
    234 nvidia-caps-imex-channels
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import ParseError

FOLDER = "/dev/nvidia-caps-imex-channels"
DEVICES = "/proc/devices"
DRIVER_NAME = "nvidia-caps-imex-channels"

_ENTRY = re.compile(r"^([bcdlps-])[rwxsStT-]{9}\S*\s+\d+\s+\S+\s+\S+\s+(?:(\d+),\s*(\d+)|\d+)\s+.*?\s(\S+)$")
_DEVICE_LINE = re.compile(r"^\s*(\d+)\s+(\S+)")


@dataclass(frozen=True, slots=True)
class Channel:
    name: str  # channel0
    kind: str  # "c" for a character device; anything else is not a channel
    major: int | None
    minor: int | None


def parse_listing(text: str) -> tuple[Channel, ...]:
    """`ls -ln /dev/nvidia-caps-imex-channels` (or `ls -la`): every `channel<N>` entry with its type and numbers.
    `.`, `..`, `total` and the folder's own heading are not entries; an empty folder is no channel."""
    found = []
    for line in text.splitlines():
        match = _ENTRY.match(line.strip())
        if match is None:
            continue
        kind, major, minor, name = match.groups()
        if name.startswith("channel"):
            found.append(Channel(name, kind, int(major) if major else None, int(minor) if minor else None))
    return tuple(found)


def parse_major(text: str) -> int | None:
    """The major number /proc/devices gives `nvidia-caps-imex-channels` (`234 nvidia-caps-imex-channels`), None where
    it has no such line. The name is matched whole: `511 nvidia-caps` is another driver's (dra-driver-nvidia-gpu#304).
    ParseError where the text has no device line at all (not /proc/devices)."""
    lines = [m for line in text.splitlines() if (m := _DEVICE_LINE.match(line))]
    if not lines:
        raise ParseError(DEVICES, "no '<major> <name>' line", text.strip()[:120])
    return next((int(m.group(1)) for m in lines if m.group(2) == DRIVER_NAME), None)
