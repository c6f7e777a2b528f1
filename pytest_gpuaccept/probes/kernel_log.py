"""The kernel log: Xid lines the NVIDIA driver writes, a second source beside NVML's Xid events.

`[ 3606.832215] NVRM: Xid (PCI:0002:00:00): 119, pid=67769, name=nvidia-smi, Timeout waiting for RPC ...`:
seconds since boot, the GPU's PCI domain:bus:device, the Xid number and the driver's words.

The same words arrive behind every prefix the kernel and journald print, and each is read:
plain `dmesg` (`[ 3606.832215] `), `dmesg -T` (`[Wed Jul 31 23:14:18 2024] `), the journal and syslog
(`Oct 15 10:21:33 host kernel: `, `kernel: [ 123.456] `, in any locale's month names), `journalctl -k -o
short-monotonic` (`[ 1234.567890] host kernel: `) and a kernel booted with printk.time=0 (no stamp at all).
Drivers before R340 wrote the PCI address without `PCI:` (`NVRM: Xid (0000:01:00): 16, ...`). The PCI domain
is kept: Azure puts each GPU in its own (`0001:00:00`), Grace-Blackwell trays use `0018:01:00`.

Where a line's time is on the boot clock (a `[seconds.micro]` stamp) it is placed against the load's window.
A wall-clock stamp (dmesg -T, the journal's default) is not placed: dmesg -T is the boot clock plus a boot time
guessed now (off by the time a VM was paused or suspended), the journal's has no year and no zone, and either
moves with NTP. Such a line, and one with no stamp, counts as inside the load (fail closed): `t_s` is None.
Both sources read here (`dmesg`, `journalctl -k`) hold this boot's messages only.

A line naming `NVRM: Xid` whose address and number cannot be read is kept, quoted, in `unreadable`: it is
a failure, never skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ._run import Reading, ToolRun, ToolRunner, parse_run
from .sysfs import pci_name

TOOL = "dmesg"
JOURNAL = "journalctl"
JOURNAL_ARGS = ["-k", "-o", "short-monotonic", "--no-pager"]
NO_ENTRIES = "-- No entries --"
# What journalctl prints (stderr, exit code 0) to a user who cannot read the system journal (systemd 2xx).
UNSEEN = ("not seeing messages from other users and the system", "insufficient permissions")
MARK = "NVRM: Xid"
_BODY = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\):\s*(\d+)\b,?\s*(.*)")
_BOOT_CLOCK = re.compile(r"\[\s*(\d+\.\d+)\]")  # `[ 3606.832215]`, where printk.time=1
QUOTE_LIMIT = 200


@dataclass(frozen=True, slots=True)
class KernelXid:
    t_s: float | None  # seconds since boot; None where the line has no boot-clock stamp (placed inside the load)
    pci: str  # domain:bus:device, lower case
    xid: int
    text: str
    stamp: str = ""  # the line's own time where it is not on the boot clock (`Wed Jul 31 23:14:18 2024`)


@dataclass(frozen=True, slots=True)
class KernelLog:
    """The NVRM Xid lines of one kernel log; `unreadable` quotes those naming an Xid that could not be read."""

    xids: tuple[KernelXid, ...]
    unreadable: tuple[str, ...] = ()


def quote(line: str) -> str:
    """A log line as a reason quotes it: control characters escaped, cut to QUOTE_LIMIT characters."""
    shown = line.strip().encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= QUOTE_LIMIT else shown[:QUOTE_LIMIT] + "..."


def parse_line(line: str) -> KernelXid | None:
    """One line's Xid; None where the line names `NVRM: Xid` but its address or number cannot be read."""
    body = _BODY.search(line)
    if body is None:
        return None
    prefix = line[:body.start()]
    clock = _BOOT_CLOCK.search(prefix)
    pci = pci_name(tuple(int(body.group(n), 16) for n in (1, 2, 3)))  # as the kernel writes it
    stamp = "" if clock else prefix.strip().removesuffix("kernel:").strip().strip("[]").strip()[:60]
    return KernelXid(float(clock.group(1)) if clock else None, pci, int(body.group(4)), body.group(5).strip()[:200],
                     stamp)


def parse_xids(text: str) -> KernelLog:
    """Every NVRM Xid line of a kernel log, in any of the formats above."""
    xids, unreadable = [], []
    for line in text.splitlines():
        if MARK not in line:
            continue
        xid = parse_line(line)
        if xid is None:
            unreadable.append(quote(line))
        else:
            xids.append(xid)
    return KernelLog(tuple(xids), tuple(unreadable))


def parse_journal_xids(text: str) -> KernelLog:
    """`journalctl -k`'s output: as parse_xids, but a journal without a kernel message (`-- No entries --`: journald
    does not read the kernel log here, or this user sees none of it) is not a log without an Xid."""
    if not any(line.strip() and line.strip() != NO_ENTRIES for line in text.splitlines()):
        raise ValueError(f"journalctl: the journal holds no kernel message of this boot ({NO_ENTRIES!r})")
    return parse_xids(text)


def _journal_unseen(run: ToolRun) -> str | None:
    """Why journalctl exited 0 without the system's messages: it says so on stderr to a user outside its groups."""
    for line in (run.stderr or "").splitlines():
        if any(words in line for words in UNSEEN):
            return f"`{run.command}` cannot see the system's messages (the systemd-journal or adm group can): {quote(line)}"
    return None


def read_xids(runner: ToolRunner, after: str = "load") -> tuple[Reading[KernelLog], tuple[str, ...]]:
    """`dmesg` (needs root, or kernel.dmesg_restrict=0); where it cannot be read, `journalctl -k -o
    short-monotonic` (the systemd-journal and adm groups may read it). Neither readable: no value, both reasons.
    Returned with the evidence of every run tried. `after` names the load it follows (each load reads its own)."""
    dmesg = parse_run(runner.run(TOOL, [], 60.0, key=f"dmesg_after_{after}"), parse_xids)
    if dmesg.value is not None:
        return dmesg, dmesg.evidence
    run = runner.run(JOURNAL, list(JOURNAL_ARGS), 60.0, key=f"journalctl_kernel_after_{after}")
    unseen = _journal_unseen(run)
    journal = Reading(run, None, unseen) if unseen else parse_run(run, parse_journal_xids)
    tried = (*dmesg.evidence, *journal.evidence)
    if journal.value is not None:
        return journal, tried
    return Reading(run, None, f"{dmesg.failure}; and {journal.failure}"), tried


def uptime(proc: Path = Path("/proc/uptime")) -> float | None:
    """Seconds since boot, the clock of the kernel log's timestamps."""
    try:
        return float(proc.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
