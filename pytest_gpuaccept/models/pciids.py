"""The PCI ID database (`pci.ids`, Debian's pciutils / Fedora's hwdata) as the second source of a GPU's name.

The model table (gpus.json) is this project's word; pci.ids is the PCI ID Project's, installed by the
distribution. Neither is the vendor's, so the identity check reports the pci.ids name beside its own and never
fails on it alone: the database lags new devices and names some IDs for several cards ("A2 / A16").
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where distributions install it: Debian/Ubuntu (pci.ids, pciutils), Fedora/RHEL (hwdata), Alpine, old gzipped copies.
PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids", "/usr/share/misc/pci.ids.gz")
NVIDIA = "10de"


@dataclass(frozen=True, slots=True)
class PciIds:
    """One vendor's devices in a pci.ids file: device ID (4 hex digits, lower case) -> the database's name."""

    version: str | None  # the file's `#\tVersion: 2026.08.22` line; None where it has none
    devices: dict[str, str]


def parse_pci_ids(text: str, vendor: str = NVIDIA) -> PciIds:
    """The devices of one vendor in pci.ids text. The format (its header documents it):

        10de  NVIDIA Corporation          <- vendor: 4 hex digits, two spaces, name, at column 0
        \t2330  GH100 [H100 SXM5 80GB]      <- device: one tab
        \t\t10de 16c1  H100 SXM5 80GB        <- subsystem: two tabs (not read: sysfs gives no name for it)
        # a comment                         <- anywhere, even inside a vendor's section

    The vendor's section ends at the next line that starts with neither a tab nor '#' (the next vendor, or
    the `C xx` device classes at the end). A vendor the file does not list gives no devices."""
    version = None
    devices: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("#"):
            if version is None and line[1:].strip().startswith("Version:"):
                version = line[1:].strip().removeprefix("Version:").strip()
            continue
        if not line.strip():
            continue
        if not line.startswith("\t"):
            if inside:
                break
            inside = line[:4].lower() == vendor and line[4:6] == "  "
            continue
        if inside and not line.startswith("\t\t"):
            device, _, name = line[1:].partition("  ")
            if len(device) == 4 and name.strip():
                devices[device.lower()] = name.strip()
    return PciIds(version, devices)


def read_pci_ids(device_ids: list[str], paths: tuple[str, ...] | None = None) -> dict[str, Any]:
    """What the installed pci.ids says of these NVIDIA device IDs, as kept in the evidence:
    {"file": its path, "version", "names": {device ID: name}} (an ID it lacks is left out), or
    {"file": None, "error": "pci.ids not installed (looked in ...)"} where no file is readable."""
    looked = paths if paths is not None else PATHS
    for path in looked:
        try:
            raw = Path(path).read_bytes()
            text = (gzip.decompress(raw) if path.endswith(".gz") else raw).decode("utf-8", "replace")
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        table = parse_pci_ids(text)
        return {"file": path, "version": table.version,
                "names": {d: table.devices[d] for d in sorted(set(device_ids)) if d in table.devices}}
    return {"file": None, "error": f"pci.ids not installed (looked in {', '.join(looked)})"}


def with_pci_ids(reading: dict[str, Any], paths: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A sysfs PCI reading (probes.sysfs.read_pci_devices) with what pci.ids names its NVIDIA devices."""
    ids = [str(d.get("device") or "").lower().removeprefix("0x") for d in reading.get("devices", {}).values()
           if str(d.get("vendor") or "").lower().removeprefix("0x") == NVIDIA]
    return {**reading, "pci_ids": read_pci_ids([i for i in ids if i], paths)}


def describe(pci_ids: dict[str, Any] | None, device: str) -> str:
    """What pci.ids says of a device ID, as one phrase for a message: "pci.ids 2026.08.22: GA102GL [RTX A6000]"."""
    if pci_ids is None:
        return "pci.ids not read (a reading kept before pci.ids was read)"
    if not pci_ids.get("file"):
        return "pci.ids not installed"
    version = f" {pci_ids['version']}" if pci_ids.get("version") else ""
    name = pci_ids.get("names", {}).get(device)
    return f"pci.ids{version}: {name}" if name else f"pci.ids{version} ({pci_ids['file']}) does not list 0x{device}"
