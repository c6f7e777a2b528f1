"""Quantities with units: every conversion of the project lives here and nowhere else."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Bandwidth units, as bits per second per unit. Case matters between B (byte) and b (bit).
_BANDWIDTH_BITS = {
    "Mb/s": 1e6, "Mbps": 1e6, "Mbit/s": 1e6,
    "Gb/s": 1e9, "Gbps": 1e9, "Gbit/s": 1e9,
    "Tb/s": 1e12, "Tbps": 1e12, "Tbit/s": 1e12,
    "MB/s": 8e6, "GB/s": 8e9, "TB/s": 8e12,
}
_SIZE_BYTES = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_DURATION_SECONDS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}

_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z/]+)\s*$")


class UnitError(ValueError):
    """A text that is not the quantity expected; the message says what was found."""


def _split(text: object, table: dict[str, float] | dict[str, int], kind: str, example: str) -> tuple[float, str]:
    if not isinstance(text, str):
        raise UnitError(f"expected {kind} such as '{example}', got {text!r}")
    match = _QUANTITY.match(text)
    if not match or match.group(2) not in table:
        raise UnitError(f"expected {kind} such as '{example}', got {text!r}")
    return float(match.group(1)), match.group(2)


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A bandwidth, kept in bits per second; `text` is how the contract wrote it."""

    bits_per_s: float
    text: str

    @property
    def gbit_s(self) -> float:
        return self.bits_per_s / 1e9

    @property
    def gbyte_s(self) -> float:
        return self.bits_per_s / 8e9

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Size:
    """A size in bytes; `text` is how the contract wrote it."""

    nbytes: int
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Duration:
    """A duration in seconds; `text` is how the contract wrote it."""

    seconds: float
    text: str

    def __str__(self) -> str:
        return self.text


def parse_bandwidth(text: object) -> Bandwidth:
    value, unit = _split(text, _BANDWIDTH_BITS, "a bandwidth", "450 GB/s")
    if value <= 0:
        raise UnitError(f"expected a positive bandwidth, got {text!r}")
    return Bandwidth(value * _BANDWIDTH_BITS[unit], str(text).strip())


def parse_size(text: object) -> Size:
    value, unit = _split(text, _SIZE_BYTES, "a size", "8 GiB")
    nbytes = value * _SIZE_BYTES[unit]
    if nbytes != int(nbytes) or nbytes <= 0:
        raise UnitError(f"expected a positive whole number of bytes, got {text!r}")
    return Size(int(nbytes), str(text).strip())


def parse_duration(text: object) -> Duration:
    value, unit = _split(text, _DURATION_SECONDS, "a duration", "60 s")
    if value <= 0:
        raise UnitError(f"expected a positive duration, got {text!r}")
    return Duration(value * _DURATION_SECONDS[unit], str(text).strip())


# Conversions of what tools print into the units results are given in.

def mbit_to_gbit(mbit_s: float) -> float:
    """ethtool prints Mb/s; results give Gb/s."""
    return mbit_s / 1000.0


def bits_to_gbit(bits_per_s: float) -> float:
    """iperf3 prints bits per second."""
    return bits_per_s / 1e9


def mib_s_to_gbit(mib_s: float) -> float:
    """perftest's 'MB/sec' is MiB/s (2^20 bytes)."""
    return mib_s * 8 * 1048576 / 1e9


def bytes_to_gb(nbytes: int) -> float:
    """Memory sizes in results are GB (10^9 bytes)."""
    return nbytes / 1e9


def human_bytes(nbytes: int | float) -> str:
    """17179869184 -> "16 GiB"; 1536 -> "1.5 KiB"; 100 -> "100 B": sizes as a reader says them."""
    value = float(nbytes)
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= factor:
            amount = value / factor
            return f"{amount:.0f} {unit}" if amount == int(amount) else f"{amount:.1f} {unit}"
    return f"{value:.0f} B"
