"""sysfs: the kernel's PCIe AER statistics of every PCI function (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal).

The kernel (4.19 and later, CONFIG_PCIEAER) gives each AER-capable function three files, one `NAME COUNT` per line,
ending with the total (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats):

    RxErr 0
    BadTLP 0
    ...
    TOTAL_ERR_COR 0

(4.19 itself wrote long names, `Receiver Error 2`: the count is the last word of a line). Read as plain files, with
where each function sits (its path under devices/, so that the ports above it can be named) and the plugin's clocks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from . import ParseError, counters

KINDS = {"correctable": "aer_dev_correctable", "nonfatal": "aer_dev_nonfatal", "fatal": "aer_dev_fatal"}
TOTALS = {"correctable": "TOTAL_ERR_COR", "nonfatal": "TOTAL_ERR_NONFATAL", "fatal": "TOTAL_ERR_FATAL"}
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_LINE = re.compile(r"^(\S.*?)\s+(\d+)$")


def parse_aer(text: str, file: str) -> dict[str, int]:
    """One aer_dev_* file as {name: count}; the total under its own name (`TOTAL_ERR_COR`). Accepts the lines
    `RxErr 0`, `Receiver Error 2`, `TLP_BIT3 1` (a bit the kernel has no name for) and `TOTAL_ERR_FATAL 0`; a file
    without its TOTAL_ line, or a line that is not a name and a count, raises ParseError naming it."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ParseError("sysfs", f"{file}: cannot read {line.strip()[:80]!r} (expected a name and a count)")
        counts[match.group(1)] = int(match.group(2))
    if not any(name.startswith("TOTAL_ERR_") for name in counts):
        raise ParseError("sysfs", f"{file}: no TOTAL_ERR_ line (got {len(counts)} lines)")
    return counts


def _function_path(entry: Path, root: Path) -> str | None:
    """Where a bus/pci/devices entry leads, relative to the sysfs root (devices/pci0000:00/0000:00:01.0/...)."""
    try:
        return str(entry.resolve(strict=True).relative_to(root))
    except (OSError, ValueError):
        return None


def read_aer(sys_root: Path) -> dict[str, Any]:
    """Every function under bus/pci/devices: its path, and the text of its three aer_dev_* files (`files` None where
    it has none of them, the error's name where one cannot be read); `with_aer` how many functions have them."""
    folder = sys_root / "bus" / "pci" / "devices"
    if not folder.is_dir():
        return {"error": f"{folder} cannot be listed", **counters.clocks()}
    root = sys_root.resolve()
    devices: dict[str, Any] = {}
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        files: dict[str, str] = {}
        for kind, name in KINDS.items():
            try:
                files[kind] = (entry / name).read_text(errors="replace")
            except FileNotFoundError:
                continue
            except OSError as exc:
                files[kind] = f"!{type(exc).__name__}: {exc.strerror or exc}"
        devices[entry.name] = {"path": _function_path(entry, root), "files": files or None}
    return {"devices": devices, "with_aer": sum(1 for d in devices.values() if d["files"]), **counters.clocks()}


def upstream(reading: dict[str, Any], address: str) -> list[str]:
    """The function at `address` and the ports above it up to its root port, nearest first, as its sysfs path names
    them (devices/pci0000:16/0000:16:02.0/0000:17:00.0/0000:18:10.0/0000:1b:00.0: 1b:00.0, 18:10.0, 17:00.0, 16:02.0)."""
    entry = (reading.get("devices") or {}).get(address) or {}
    parts = [p for p in str(entry.get("path") or "").split("/") if PCI_ADDRESS.match(p)]
    if not parts or parts[-1] != address:
        return [address]
    return list(reversed(parts))
