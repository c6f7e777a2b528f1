"""The kernel log: Xid lines and lost-GPU messages the NVIDIA driver writes, a second source beside NVML's
Xid events.

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

A GPU lost without an Xid line is read too: R570 prints none for a GPU that fell off the bus as the driver probed
it (`NVRM: The NVIDIA GPU 0000:b3:00.0` / `NVRM: (PCI ID: 10de:26b5) installed in this system has` / `NVRM: fallen
off the bus and is not responding to commands.`, one message over three lines). Every NVRM message with the driver's
words for a lost GPU is kept (`fallen off the bus`, `RmInitAdapter failed`, `GPU lost` / `GPU is lost` /
`NV_ERR_GPU_IS_LOST`, `probe routine failed`), and the kernel's `nvidia: probe of 0000:5d:00.0 failed with error -1`
(`nvidia 0000:01:00.0: probe with driver nvidia failed with error -1` on newer kernels); a message that also names
an Xid is read as that Xid. Each names the PCI address it gives; one that gives none (`The NVIDIA probe routine failed
for 1 device(s).`) names the address of the last NVRM message before it that gave one, the GPU the driver was
speaking of; with none before it, it names no GPU (`pci` empty: it counts against every GPU). An indented line
beginning `NVRM:` continues the message above it (dmesg and journalctl indent a message's later lines so) and shares
its time.

What dmesg and journalctl print about themselves is no kernel log: `dmesg: read kernel buffer failed: Operation not
permitted` (kernel.dmesg_restrict=1, not root), `No journal files were found.`, `Failed to ...`, journalctl's `Hint:
You are currently not seeing messages from ...`. In the output read they make it unreadable (not measured), never a
log without an Xid.
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
# What journalctl prints (stderr, exit code 0) to a user who cannot read the system journal (systemd 2xx and later;
# older ones say `from the system` alone).
UNSEEN = ("You are currently not seeing messages from", "insufficient permissions")
# journalctl's own words at the start of a line, never a kernel message's (those come behind the journal's prefix).
_JOURNAL_OWN = re.compile(r"^(?:No journal files were (?:found|opened)|Failed to |Hint: You are currently not seeing)")
# dmesg's own error: util-linux `dmesg: read kernel buffer failed: ...`, busybox `dmesg: klogctl: ...`.
_DMESG_OWN = re.compile(r"^dmesg: ")
MARK = "NVRM: Xid"
NVRM = "NVRM:"
_BODY = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\):\s*(\d+)\b,?\s*(.*)")
_BOOT_CLOCK = re.compile(r"\[\s*(\d+\.\d+)\]")  # `[ 3606.832215]`, where printk.time=1
# A GPU's PCI address as NVRM and the kernel write it: `0000:b3:00.0`, `PCI:0000:5d:00`.
_ADDRESS = re.compile(r"(?<![0-9A-Za-z])(?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?"
                      r"(?![0-9A-Za-z])")
# The driver's words for a GPU it lost or could not bring up, and what a reason calls each.
_LOST = re.compile(r"fallen off the bus|RmInitAdapter failed|GPU (?:is )?lost\b|NV_ERR_GPU_IS_LOST"
                   r"|probe routine failed")
LOST = "GPU lost"
_LOST_NAMES = {"fallen off the bus": "fallen off the bus", "RmInitAdapter failed": "RmInitAdapter failed",
               "probe routine failed": "probe failed"}
# The kernel's own line when the nvidia driver's probe of a device fails (older and newer kernels' wording).
_PROBE = re.compile(r"(?<![\w-])nvidia:? (?:probe of )?\S+? (?:probe with driver nvidia )?failed with error -?\d+")
QUOTE_LIMIT = 200


@dataclass(frozen=True, slots=True)
class KernelXid:
    """An NVRM Xid line, or a message of the driver for a GPU it lost (`xid` None, `lost` saying which words)."""

    t_s: float | None  # seconds since boot; None where the line has no boot-clock stamp (placed inside the load)
    pci: str  # domain:bus:device, lower case; empty for a lost-GPU message naming no GPU (it counts for every GPU)
    xid: int | None
    text: str
    stamp: str = ""  # the line's own time where it is not on the boot clock (`Wed Jul 31 23:14:18 2024`)
    lost: str = ""  # `fallen off the bus`, `RmInitAdapter failed`, `GPU lost`, `probe failed`

    @property
    def what(self) -> str:
        """`Xid 79`, `GPU lost (fallen off the bus)` or `GPU lost`: what a reason calls the line."""
        if self.xid is not None:
            return f"Xid {self.xid}"
        return self.lost if self.lost == LOST else f"{LOST} ({self.lost})"


@dataclass(frozen=True, slots=True)
class KernelLog:
    """The NVRM Xid lines and lost-GPU messages of one kernel log; `unreadable` quotes those naming an Xid that could
    not be read."""

    xids: tuple[KernelXid, ...]
    unreadable: tuple[str, ...] = ()


def quote(line: str) -> str:
    """A log line as a reason quotes it: control characters escaped, cut to QUOTE_LIMIT characters."""
    shown = line.strip().encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= QUOTE_LIMIT else shown[:QUOTE_LIMIT] + "..."


def _placed(prefix: str) -> tuple[float | None, str]:
    """The time of a line from what precedes the driver's words: seconds since boot, or else the line's own stamp."""
    clock = _BOOT_CLOCK.search(prefix)
    if clock:
        return float(clock.group(1)), ""
    return None, prefix.strip().removesuffix("kernel:").strip().strip("[]").strip()[:60]


def _address(text: str) -> str:
    """The first PCI address in the driver's words, as the kernel writes it (`0000:b3:00`); empty where none."""
    found = _ADDRESS.search(text)
    return pci_name(tuple(int(found.group(n), 16) for n in (1, 2, 3))) if found else ""


def parse_line(line: str) -> KernelXid | None:
    """One line's Xid; None where the line names `NVRM: Xid` but its address or number cannot be read."""
    body = _BODY.search(line)
    if body is None:
        return None
    t_s, stamp = _placed(line[:body.start()])
    pci = pci_name(tuple(int(body.group(n), 16) for n in (1, 2, 3)))  # as the kernel writes it
    return KernelXid(t_s, pci, int(body.group(4)), body.group(5).strip()[:200], stamp)


def _messages(text: str) -> list[str]:
    """The log's messages: a line, with the indented `NVRM: ...` lines below it that continue it joined on."""
    messages: list[str] = []
    for line in text.splitlines():
        if messages and line[:1].isspace() and line.lstrip().startswith(NVRM):
            messages[-1] += " " + line.strip()
        else:
            messages.append(line)
    return messages


def _lost(message: str, named: str) -> KernelXid | None:
    """The message as a lost GPU, or None where it is none; `named` is the address the driver last gave."""
    start = message.find(NVRM)
    words = _LOST.search(message, start) if start >= 0 else None
    probe = _PROBE.search(message)
    if words is None and probe is None:
        return None
    if words is not None:
        lost = _LOST_NAMES.get(words.group(0), LOST)
        body = " ".join(part.strip() for part in message[start:].split(NVRM) if part.strip())
    else:
        assert probe is not None
        start, lost, body = probe.start(), "probe failed", probe.group(0)
    t_s, stamp = _placed(message[:start])
    return KernelXid(t_s, _address(body) or named, None, body[:200], stamp, lost)


def parse_xids(text: str) -> KernelLog:
    """Every NVRM Xid line and lost-GPU message of a kernel log, in any of the formats above, in the log's order."""
    xids, unreadable = [], []
    named = ""  # the PCI address of the last NVRM message that gave one
    for message in _messages(text):
        if MARK in message:
            xid = parse_line(message)
            if xid is None:
                unreadable.append(quote(message))
            else:
                xids.append(xid)
        elif (lost := _lost(message, named)) is not None:
            xids.append(lost)
        named = _gives(message) or named
    return KernelLog(tuple(xids), tuple(unreadable))


def _gives(message: str) -> str:
    """The PCI address an NVRM message, or the kernel's line on the nvidia driver's probe, gives; empty where none."""
    start = message.find(NVRM)
    if start >= 0:
        return _address(message[start:])
    probe = _PROBE.search(message)
    return _address(probe.group(0)) if probe else ""


def parse_dmesg_xids(text: str) -> KernelLog:
    """`dmesg`'s output: as parse_xids, but dmesg's own error (`dmesg: read kernel buffer failed: Operation not
    permitted`) in it is no kernel log: it cannot be read."""
    for line in text.splitlines():
        if _DMESG_OWN.match(line):
            raise ValueError(f"dmesg printed its own error, not the kernel log: {quote(line)!r}")
    return parse_xids(text)


def parse_journal_xids(text: str) -> KernelLog:
    """`journalctl -k`'s output: as parse_xids, but a journal without a kernel message (`-- No entries --`: journald
    does not read the kernel log here, or this user sees none of it) is not a log without an Xid, nor is journalctl's
    own word about itself (`No journal files were found.`, `Failed to ...`, `Hint: You are currently not seeing
    ...`)."""
    for line in text.splitlines():
        if _JOURNAL_OWN.match(line):
            raise ValueError(f"journalctl printed its own error, not the kernel log: {quote(line)!r}")
    if not any(line.strip() and line.strip() != NO_ENTRIES for line in text.splitlines()):
        raise ValueError(f"journalctl: the journal holds no kernel message of this boot ({NO_ENTRIES!r})")
    return parse_xids(text)


def _journal_unseen(run: ToolRun) -> str | None:
    """Why journalctl exited 0 without the system's messages: it says so on stderr to a user outside its groups, or
    names its own error there (`No journal files were found.`, `Failed to ...`)."""
    lines = (run.stderr or "").splitlines()
    for line in lines:
        if any(words in line for words in UNSEEN):
            return f"`{run.command}` cannot see the system's messages (the systemd-journal or adm group can): {quote(line)}"
    for line in lines if run.failure is None else ():
        if _JOURNAL_OWN.match(line):
            return f"`{run.command}` printed its own error: {quote(line)}"
    return None


def read_xids(runner: ToolRunner, after: str = "load") -> tuple[Reading[KernelLog], tuple[str, ...]]:
    """`dmesg` (needs root, or kernel.dmesg_restrict=0); where it cannot be read, `journalctl -k -o
    short-monotonic` (the systemd-journal and adm groups may read it). Neither readable: no value, both reasons.
    Returned with the evidence of every run tried. `after` names the load it follows (each load reads its own)."""
    dmesg = parse_run(runner.run(TOOL, [], 60.0, key=f"dmesg_after_{after}"), parse_dmesg_xids)
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
