"""The kernel's own word on a network port, beside what a tool prints: the link speed sysfs gives, and the byte
counters of an interface or an RDMA port read with the clocks before and after a tool's run.

A rate is bytes over time: the bytes from the port's counters (`/sys/class/net/IF/statistics/tx_bytes`;
`/sys/class/infiniband/DEV/ports/N/counters/port_xmit_data`, in 4-byte words), the time from the plugin's
own clocks (CLOCK_MONOTONIC, the one a tool's run is timed by, and CLOCK_BOOTTIME as a check on it). Readers
return plain dicts (kept as evidence and replayed); `error` where there is nothing to read.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_S = 0.1  # how often a node's side reads its ports' counters while its tools run (cluster/rdma_side.py)
COUNTER_WORD = 4  # port_xmit_data and port_rcv_data count 4-byte words (IBTA PortCounters: octets / 4)
SATURATED_32 = 2**32 - 1  # a 32-bit PortXmitData stops here (no extended counters): it no longer counts
SPEED_UNKNOWN = -1  # what the kernel prints for SPEED_UNKNOWN (0xffffffff read as %d)


def clocks() -> dict[str, float]:
    """This process's monotonic clock (the one tool runs are timed by) and CLOCK_BOOTTIME, read together."""
    return {"monotonic_s": time.monotonic(), "boottime_s": time.clock_gettime(time.CLOCK_BOOTTIME)}


def _read(path: Path) -> tuple[str | None, str | None]:
    """A sysfs file's text, or why not: `ENOENT`, `EINVAL` (the kernel refused), or the error's name."""
    try:
        return path.read_text().strip(), None
    except OSError as exc:
        return None, errno.errorcode.get(exc.errno or 0, str(exc))


def read_link_speed(sys_root: Path, interface: str) -> dict[str, Any]:
    """`/sys/class/net/IF/speed` in Mb/s: the kernel asks the driver itself (the call ethtool makes), so a
    canned or replaced ethtool is refuted by it. `error` ENOENT: no such file (a container, an old kernel);
    EINVAL: the interface is down or its driver gives no speed; -1 is the kernel's SPEED_UNKNOWN."""
    path = sys_root / "class" / "net" / interface / "speed"
    text, error = _read(path)
    entry: dict[str, Any] = {"interface": interface, "file": str(path)}
    if error is not None:
        return {**entry, "error": error}
    if text is None or not text.lstrip("-").isdigit():
        return {**entry, "error": f"unreadable: {text!r}"}
    return {**entry, "speed_mbps": int(text)}


def read_net_counters(sys_root: Path, interface: str) -> dict[str, Any]:
    """An interface's byte counters (statistics/rx_bytes, tx_bytes) and the clocks; `error` where unreadable."""
    folder = sys_root / "class" / "net" / interface / "statistics"
    return _counters({"interface": interface}, folder, ("rx_bytes", "tx_bytes"))


def read_port_counters(sys_root: Path, device: str, port: int) -> dict[str, Any]:
    """An RDMA port's data counters (counters/port_xmit_data, port_rcv_data: 4-byte words) and the clocks."""
    folder = sys_root / "class" / "infiniband" / device / "ports" / str(port) / "counters"
    return _counters({"device": device, "port": port}, folder, ("port_xmit_data", "port_rcv_data"))


def _counters(entry: dict[str, Any], folder: Path, names: tuple[str, ...]) -> dict[str, Any]:
    values = {}
    for name in names:
        text, error = _read(folder / name)
        if error is not None or text is None or not text.isdigit():
            return {**entry, **clocks(), "error": f"{folder / name}: {error or f'unreadable: {text!r}'}"}
        values[name] = int(text)
    return {**entry, **values, **clocks()}


@dataclass(frozen=True, slots=True)
class Counted:
    """What a counter says moved between two readings, over the plugin's clocks; `unread` where it says nothing."""

    counted_bytes: int | None
    monotonic_s: float | None  # the readings' window on the monotonic clock
    boottime_s: float | None
    unread: str | None  # why the counter is no second source here (absent, saturated, never counting)
    backwards: bool = False  # it went down between the readings: reset during the run


def counted(before: dict[str, Any] | None, after: dict[str, Any] | None, name: str, scale: int = 1,
            not_physical: str | None = None) -> Counted:
    """`name`'s growth between two readings, in bytes (`scale` bytes a unit: 4 for port_xmit_data). A counter that
    reads 0 before and after counted 0 bytes: a physical port's counters count from the driver's load, so 0 is
    its answer; only on a port that is not physical (`not_physical`: what sysfs says it is, a software device
    whose driver may keep no counters) is it no answer."""
    before, after = before or {}, after or {}
    window = [_elapsed(before.get(k), after.get(k)) for k in ("monotonic_s", "boottime_s")]
    if name not in before or name not in after:
        why = before.get("error") or after.get("error") or "not read"
        return Counted(None, window[0], window[1], f"{name} could not be read ({why})")
    low, high = int(before[name]), int(after[name])
    if scale == COUNTER_WORD and SATURATED_32 in (low, high):
        return Counted(None, window[0], window[1], f"{name} is saturated at 2^32-1 (a 32-bit counter): it no longer counts")
    if low == high == 0 and not_physical:
        return Counted(None, window[0], window[1], f"{name} read 0 before and after, and this port is {not_physical} "
                       "(sysfs): its counter does not count")
    if high < low:
        return Counted(None, window[0], window[1], f"{name} went from {low} down to {high} during the run: reset", True)
    return Counted((high - low) * scale, window[0], window[1], None)


def busiest(samples: list[dict[str, Any]], name: str, scale: int, seconds: float) -> Counted | None:
    """The most a counter can have moved in any `seconds` of a run, from readings taken while the tool ran (every
    SAMPLE_S, in time order): for each reading, the bytes from it to the first reading at least `seconds` after the
    next one (or to the last reading), a stretch that holds every `seconds`-long window starting between the two:
    at most two reading intervals longer than `seconds`. A tool asked to send for `seconds` sends at its rate for
    that long once connected, however long its start-up took: a figure above this bound, over `seconds`, is not a
    measurement; readings taken late only widen the bound. None where the readings span less than `seconds`; a
    reset counter is no source (`backwards`)."""
    readings = [r for r in samples if name in r and isinstance(r.get("monotonic_s"), (int, float))]
    for earlier, later in zip(readings, readings[1:]):
        if int(later[name]) < int(earlier[name]):  # reset while the tool ran: no stretch of it counts
            return counted(earlier, later, name, scale)
    if len(readings) < 2 or readings[-1]["monotonic_s"] - readings[0]["monotonic_s"] < seconds:
        return None
    best: Counted | None = None
    end = 0
    for i in range(len(readings) - 1):
        end = max(end, i + 1)
        while end < len(readings) - 1 and readings[end]["monotonic_s"] - readings[i + 1]["monotonic_s"] < seconds:
            end += 1  # the last reading ends every stretch that finds no later one: still a bound
        window = counted(readings[i], readings[end], name, scale)
        if window.counted_bytes is not None and (best is None or window.counted_bytes > (best.counted_bytes or 0)):
            best = window
    return best


def _elapsed(start: object, end: object) -> float | None:
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        return float(end) - float(start)
    return None


def clock_problem(window: Counted, tool_seconds: float) -> str | None:
    """Why the tool's run time, on the monotonic clock, cannot be trusted: the readings around it carry no clocks,
    CLOCK_BOOTTIME disagrees with the monotonic clock over them (by more than 1 s or 5 %, floor 50 ms: what
    two reads of two clocks may drift apart on a busy machine), or the run is longer than the window around it."""
    mono, boot = window.monotonic_s, window.boottime_s
    if mono is None or boot is None:
        return "the counter readings around the run carry no clock readings"
    allowed = max(0.05, min(1.0, 0.05 * mono))
    if abs(boot - mono) > allowed:
        return (f"the plugin's monotonic clock counted {mono:.3f} s between the counter readings, CLOCK_BOOTTIME "
                f"{boot:.3f} s: they disagree by more than {allowed:.2f} s")
    if tool_seconds > mono + 0.01:
        return (f"the run is recorded as {tool_seconds:.3f} s, longer than the {mono:.3f} s between the counter "
                "readings taken before and after it: that record is not of this run")
    return None
