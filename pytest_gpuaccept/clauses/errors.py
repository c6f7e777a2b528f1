"""Error counters as health: PCIe AER of every GPU and NIC and the ports above them (`health.pcie_aer`), and the error
counters of the RDMA ports (`rdma.errors`) and the interfaces (`nics.errors`), read before the run's first
measurement and after its last: around every load and every network measurement of the run.

The counters are the kernel's (sysfs), read by the plugin itself, never printed by a tool; the time they are set
beside is the plugin's own clock. The reading before is taken by `before_run` as the run's tests start (plugin.py;
the judging harness does the same), the reading after by the measurement, whose tests run after every other
(AFTER_RUN, plugin.py): a reading before that was not taken leaves every check not measured, never "no growth".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..probes import aer, counters, port_errors
from ..probes.sysfs import SAFE_NAME, Function, sysfs_bus_id
from ..subjects import Kind, Subject, gpu_count
from ..verdict import Check, Verdict, fmt
from .base import Clause, HostNames, Named, match_names
from .network import NICS, RDMA
from .sources import with_sources
from .utilisation import HEALTH

if TYPE_CHECKING:
    from ..contract import Contract
    from ..session import Session

BEFORE_FILE = "error-counters-before.json"
AFTER_FILE = "error-counters-after.json"
MIN_CORRECTABLE = 10  # correctable AER errors a part may gain in any run, however short: max(10, rate x hours)
CLOCK_SLACK_S = 1.0  # CLOCK_BOOTTIME and the monotonic clock may part by this much (or 5 %) over the run
KERNEL = "the kernel's AER counters (sysfs)"
NO_AER = ("the kernel keeps no AER statistics for any PCI function (no aer_dev_* file under bus/pci/devices: a kernel "
          "before 4.19, CONFIG_PCIEAER off, pci=noaer, or a VM that hides the capability): PCIe errors cannot be "
          "counted on this host")


@dataclass(frozen=True, slots=True)
class ErrorCounters:
    """The counters read before the run's first measurement and after its last, and what stands behind the names."""

    before: dict[str, Any]
    after: dict[str, Any]
    buses: dict[int, str]  # GPU index -> its PCI address (NVML's), "" where NVML gives none
    host_error: str | None  # why the GPUs' addresses are unknown
    names: dict[str, list[str]]  # what the host lists: {"net": interfaces, "infiniband": RDMA devices}
    function: Callable[[str, str], tuple[Function, str]]  # (kind, name) -> what sysfs says stands behind it, its file
    evidence: tuple[str, ...] = (BEFORE_FILE, AFTER_FILE)


# ------------------------------------------------------------------ subjects


@dataclass(frozen=True, slots=True)
class GpusAndNics:
    """GPU0..GPU<count-1>, and each interface of `nics` and device of `rdma` the host lists (a pattern that matched
    nothing is a subject of its own, and it fails): each checked with the ports above it."""

    describe: str = ("`GPU<i>`, one per GPU, and each interface (`nics`) and RDMA device (`rdma`) of the contract; "
                     "each with the ports above it")

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        subjects = [Subject.of_gpu(i) for i in range(gpu_count(contract))]
        for named, listing, patterns in ((NICS.get(contract), "net", "interfaces"),
                                         (RDMA.get(contract), "infiniband", "devices")):
            if named is not None:
                available = list(names().get(listing, []))
                subjects += [Subject.named(p, n) for p, n in match_names(getattr(named, patterns), available)]
        return list(dict.fromkeys(subjects))


def _names(contract: Contract, listings: dict[str, list[str]]) -> dict[str, list[str]]:
    """The interfaces and RDMA devices the contract names that the host lists (safe names only)."""
    found: dict[str, list[str]] = {"net": [], "infiniband": []}
    for named, listing, patterns in ((NICS.get(contract), "net", "interfaces"),
                                     (RDMA.get(contract), "infiniband", "devices")):
        if named is not None:
            found[listing] = [n for _p, n in match_names(getattr(named, patterns), listings.get(listing, []))
                              if n is not None and SAFE_NAME.match(n)]
    return found


# ------------------------------------------------------------------ the readings


def _asked(contract: Contract) -> bool:
    return any(clause.asked_by(contract) for clause in CLAUSES)


def _take(state: Session) -> dict[str, Any]:
    """The counters of the run's parts: AER of every PCI function, and the contract's RDMA devices and interfaces."""
    contract = state.contract
    names = _names(contract, state.listings())
    reading: dict[str, Any] = {}
    if PCIE_AER.asked_by(contract):
        reading["aer"] = aer.read_aer(state.sys_root)
    if RDMA_ERRORS.asked_by(contract):
        reading["infiniband"] = {d: port_errors.read_ib_errors(state.sys_root, d) for d in names["infiniband"]}
    if NIC_ERRORS.asked_by(contract):
        reading["net"] = {i: port_errors.read_net_errors(state.sys_root, i) for i in names["net"]}
    return {**reading, **counters.clocks()}


def before_run(state: Session) -> None:
    """The counters before the run's first measurement (plugin.py calls it as the tests start), where asked."""
    if _asked(state.contract):
        state.runner.reading(BEFORE_FILE, lambda: _take(state))


def gpuaccept_error_counters(gpuaccept_state: Session, gpuaccept_contract: Contract) -> ErrorCounters:
    """The error counters read before the run's first measurement (before_run) and now, after its last (the tests of
    these clauses run last)."""
    state = gpuaccept_state
    before = state.runner.reading(BEFORE_FILE, lambda: {
        "error": "the error counters were not read before the run's first measurement"})
    after = state.runner.reading(AFTER_FILE, lambda: _take(state))
    buses: dict[int, str] = {}
    host_error = None
    if PCIE_AER.asked_by(gpuaccept_contract):
        host = state.host()
        buses = {g.index: g.pci_bus_id or "" for g in host.gpus}
        host_error = host.error
    return ErrorCounters(before, after, buses, host_error, state.listings(), state.function)


# ------------------------------------------------------------------ shared judging


def _hours(m: ErrorCounters) -> tuple[float | None, str | None]:
    """The run's length between the two readings on the plugin's monotonic clock, in hours; or why it is unknown."""
    try:
        mono = float(m.after["monotonic_s"]) - float(m.before["monotonic_s"])
        boot = float(m.after["boottime_s"]) - float(m.before["boottime_s"])
    except (KeyError, TypeError, ValueError):
        return None, "the counter readings carry no clock readings"
    if mono < 0 or abs(boot - mono) > max(CLOCK_SLACK_S, 0.05 * mono):
        return None, (f"the plugin's monotonic clock counted {mono:.1f} s between the readings, CLOCK_BOOTTIME "
                      f"{boot:.1f} s: they disagree")
    return mono / 3600.0, None


def _unread(m: ErrorCounters, kind: str) -> str | None:
    """Why the readings of `kind` cannot be judged at all: one missing, or the reading before never taken."""
    for when, reading in (("before the run's first measurement", m.before), ("after its last", m.after)):
        if reading.get("error"):
            return f"{reading['error']}" if when.startswith("before") else f"read {when}: {reading['error']}"
        if kind not in reading:
            return f"the error counters read {when} hold no {kind} reading"
    return None


def _named_subject(v: Verdict, subject: Subject, what: str, available: list[str]) -> Check | None:
    if subject.name is None:
        shown = ", ".join(sorted(available)) or "none"
        return v.failed(None, f"no {what} matches {subject.pattern!r} (host has: {shown})")
    if not SAFE_NAME.match(subject.name):
        return v.not_measured(f"the host's name {subject.name!r} is not safe to read")
    return None


@dataclass(frozen=True, slots=True)
class Growth:
    """What one set of counters did between the readings."""

    grew: dict[str, tuple[int, int]]  # name -> (before, after), for every counter that rose
    down: dict[str, tuple[int, int]]  # name -> (before, after), for every counter that fell: reset during the run
    saturated: list[str]  # counters that sat at their width's maximum both times: they no longer count


def _growth(before: dict[str, int], after: dict[str, int], widths: dict[str, int] | None = None) -> Growth:
    grew, down, saturated = {}, {}, []
    for name in before:
        if name not in after:
            continue
        low, high = int(before[name]), int(after[name])
        if high > low:
            grew[name] = (low, high)
        elif high < low:
            down[name] = (low, high)
        elif widths and name in widths and low == widths[name]:
            saturated.append(name)
    return Growth(grew, down, saturated)


def _shown(changes: dict[str, tuple[int, int]], where: str = "") -> str:
    return ", ".join(f"{where}{name} {a} -> {b}" for name, (a, b) in changes.items())


# ------------------------------------------------------------------ health.pcie_aer


def _parts(m: ErrorCounters, subject: Subject, v: Verdict, contract: Contract) -> tuple[str, list[str]] | Check:
    """(what the subject is, the PCI addresses to judge: its function and the ports above it), or why there are none."""
    devices = m.after.get("aer", {}).get("devices") or {}
    if subject.kind is Kind.GPU:
        assert subject.gpu is not None
        if m.host_error:
            return v.not_measured(f"the GPUs' PCI addresses are unknown: {m.host_error}")
        bus = m.buses.get(subject.gpu)
        if bus is None:
            return v.failed(None, f"GPU{subject.gpu} not present (NVML found {len(m.buses)})")
        if not bus:
            return v.not_measured(f"NVML gives no PCI address of GPU{subject.gpu}")
        address, what = sysfs_bus_id(bus), f"GPU{subject.gpu}"
    else:
        refused = _named_subject(v, subject, "interface or RDMA device", [])
        if refused:
            return refused
        nics = NICS.get(contract)
        listing = "net" if nics is not None and subject.pattern in nics.interfaces else "infiniband"
        function, _file = m.function(listing, str(subject.name))
        if not function.pci_address:
            return v.not_measured(f"{subject.name} is not a PCI function (sysfs): it has no PCIe link whose errors "
                                  "could be counted")
        address, what = str(function.pci_address), str(subject.name)
    if address not in devices:
        return v.not_measured(f"PCI {address} ({what}) is not listed under bus/pci/devices")
    return what, aer.upstream(m.after["aer"], address)


def _aer_counts(entry: dict[str, Any], address: str) -> dict[str, dict[str, int]] | str:
    """Each of the part's three files parsed, or why not."""
    files = entry.get("files") or {}
    counts: dict[str, dict[str, int]] = {}
    for kind, name in aer.KINDS.items():
        text = files.get(kind)
        if text is None:
            return f"PCI {address} has no {name}"
        if text.startswith("!"):
            return f"PCI {address}'s {name} cannot be read ({text[1:]})"
        try:
            counts[kind] = aer.parse_aer(text, f"{address}/{name}")
        except ValueError as exc:
            return str(exc)
    return counts


def _aer_part(m: ErrorCounters, address: str, label: str, role: str,
              allowance: float) -> tuple[dict[str, Any], list[str], str | None, str | None]:
    """One part's counters before and after: (its record, what grew beyond what is allowed, why it is not measured,
    why it is refused: a counter that went down)."""
    part: dict[str, Any] = {"pci": address, "role": role, "before": {}, "after": {}}
    before_entry = (m.before["aer"].get("devices") or {}).get(address)
    after_entry = (m.after["aer"].get("devices") or {}).get(address) or {}
    if before_entry is None:
        return part, [], f"{label} was not listed under bus/pci/devices before the run", None
    if not before_entry.get("files") and not after_entry.get("files"):
        return part, [], (f"{label} has no aer_dev_* files, though the kernel keeps AER statistics for other "
                          "functions: its PCIe errors cannot be counted"), None
    counts_before, counts_after = _aer_counts(before_entry, address), _aer_counts(after_entry, address)
    if isinstance(counts_before, str) or isinstance(counts_after, str):
        when, why = ("before", counts_before) if isinstance(counts_before, str) else ("after", counts_after)
        return part, [], f"{label}, read {when} the run: {why}", None
    problems = []
    for kind, total in aer.TOTALS.items():
        part["before"][kind] = counts_before[kind].get(total, 0)
        part["after"][kind] = counts_after[kind].get(total, 0)
        growth = _growth(counts_before[kind], counts_after[kind])
        if growth.down:
            return part, [], None, (f"{label}: {aer.KINDS[kind]} went down during the run ({_shown(growth.down)}): "
                                    "the counters were reset (the device removed and found again, or the kernel "
                                    "restarted), so the run's errors cannot be counted")
        low, high = growth.grew.get(total, (0, 0))
        if high > low and (kind != "correctable" or high - low > allowance):
            named = {k: c for k, c in growth.grew.items() if k != total}
            problems.append(f"{label}: {aer.KINDS[kind]} {total} {low} -> {high} (+{high - low}"
                            + (f"; {_shown(named)}" if named else "") + ")")
    return part, problems, None, None


def judge_pcie_aer(section: Any, subject: Subject, m: ErrorCounters, contract: Contract) -> Check:
    """No fatal or non-fatal AER error, and at most max(10, max_correctable_per_hour x the run's hours) correctable
    ones, gained during the run by the part or any port above it up to its root port (each named by PCI address)."""
    rate = section.pcie_aer.max_correctable_per_hour if section.pcie_aer is not None else 0.0
    v = PCIE_AER.verdict(subject, "0 fatal, 0 non-fatal, correctable within the allowance", m.evidence)
    unread = _unread(m, "aer")
    if unread:
        return v.not_measured(unread)
    if m.before["aer"].get("error") or m.after["aer"].get("error"):
        return v.not_measured(str(m.before["aer"].get("error") or m.after["aer"].get("error")))
    if not m.before["aer"].get("with_aer") and not m.after["aer"].get("with_aer"):
        return v.not_measured(NO_AER)
    hours, clock = _hours(m)
    if hours is None:
        return v.not_measured(f"the run's length is unknown: {clock}")
    allowance = max(MIN_CORRECTABLE, rate * hours)
    v = v.but(required=f"<= {fmt(round(allowance, 1))} correctable, 0 non-fatal, 0 fatal", threshold=allowance)
    found = _parts(m, subject, v, contract)
    if isinstance(found, Check):
        return found
    what, addresses = found
    parts: list[dict[str, Any]] = []
    problems: list[str] = []
    worst = 0
    for n, address in enumerate(addresses):
        role = what if n == 0 else f"{what}'s upstream port {address}" if n < len(addresses) - 1 else \
            f"{what}'s root port {address}"
        part, grew, unmeasured, refused = _aer_part(m, address, f"PCI {address} ({what})" if n == 0 else role, role,
                                                    allowance)
        if unmeasured:
            return v.not_measured(unmeasured, {"parts": parts})
        parts.append(part)
        if refused:
            return v.failed(None, refused, {"parts": parts})
        problems += grew
        worst = max(worst, sum(part["after"][k] - part["before"][k] for k in aer.TOTALS))
    details = {"parts": parts, "hours": round(hours, 4), "allowance": round(allowance, 1),
               "max_correctable_per_hour": rate}
    span = f"{hours * 60:.1f} min by the plugin's clock"
    if problems:
        return with_sources(v.failed(worst, f"{'; '.join(problems)} during the run ({span}; correctable allowed: "
                                            f"{fmt(round(allowance, 1))})", details), KERNEL)
    chain = ", ".join(addresses)
    return with_sources(v.passed(worst, f"{what}: no fatal or non-fatal AER error, {worst} correctable (at most "
                                        f"{fmt(round(allowance, 1))}) over {chain} during the run ({span})", details),
                        KERNEL, unconfirmed="the kernel's counters alone: no other source counts a link's errors")


# ------------------------------------------------------------------ rdma.errors and nics.errors


def _pair(m: ErrorCounters, kind: str, name: str, what: str) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """The readings of one device or interface before and after the run, or why they cannot be judged."""
    unread = _unread(m, kind)
    if unread:
        return unread
    before, after = m.before[kind].get(name), m.after[kind].get(name)
    for when, reading in (("before the run", before), ("after the run", after)):
        if reading is None:
            return f"{name}'s {what} were not read {when}"
        if reading.get("error"):
            return f"{name}'s {what}, read {when}: {reading['error']}"
    assert before is not None and after is not None
    return before, after


def _with_hw(port: dict[str, Any]) -> dict[str, int]:
    return {**port["counters"], **{f"hw_counters/{k}": c for k, c in (port.get("hw_counters") or {}).items()}}


def _ib_port(where: str, was: dict[str, Any], now: dict[str, Any] | None) -> tuple[dict[str, Any], Growth | str]:
    """One port's record (its counters before and after) and what they did, or why they cannot be judged."""
    if now is None:
        return {}, f"{where} is gone after the run"
    record: dict[str, Any] = {"before": _with_hw(was), "after": _with_hw(now),
                              "hw_counters": "read" if was.get("hw_counters") is not None else "none (not an mlx5 port)"}
    missing = sorted(set(was.get("missing", [])) | set(now.get("missing", [])))
    standard = [name for name in missing if not name.startswith("hw_counters/")]
    if standard:
        return record, f"{where}: counters/{', counters/'.join(standard)} cannot be read"
    if missing:
        record["unreadable"] = missing
    growth = _growth(was["counters"], now["counters"], port_errors.IB_ERRORS)
    hw = _growth(was.get("hw_counters") or {}, now.get("hw_counters") or {})
    if growth.saturated:
        return record, (f"{where}: {', '.join(growth.saturated)} sat at its maximum before and after the run (a "
                        "saturated PortCounter no longer counts)")
    return record, Growth({**growth.grew, **{f"hw_counters/{k}": c for k, c in hw.grew.items()}},
                          {**growth.down, **{f"hw_counters/{k}": c for k, c in hw.down.items()}}, [])


def judge_rdma_errors(section: Any, subject: Subject, m: ErrorCounters, contract: Contract) -> Check:
    """No error counter of any port of the device grew during the run: PortCounters (symbol_error, link_downed,
    link_error_recovery, port_rcv_errors, local_link_integrity_errors, excessive_buffer_overrun_errors) and mlx5's
    hw_counters (out_of_sequence, packet_seq_err, local_ack_timeout_err)."""
    v = RDMA_ERRORS.verdict(subject, "== 0", m.evidence, 0.0)
    refused = _named_subject(v, subject, "RDMA device", m.names.get("infiniband", []))
    if refused:
        return refused
    device = str(subject.name)
    pair = _pair(m, "infiniband", device, "error counters")
    if isinstance(pair, str):
        return v.not_measured(pair)
    ports: dict[str, Any] = {}
    problems: list[str] = []
    total = 0
    for port, was in sorted(pair[0].get("ports", {}).items()):
        where = f"{device} port {port}"
        ports[port], growth = _ib_port(where, was, pair[1].get("ports", {}).get(port))
        if isinstance(growth, str):
            return v.not_measured(growth, {"ports": ports})
        if growth.down:
            return v.failed(None, f"{where}: {_shown(growth.down)}: the counters went down during the run (reset), so "
                            "the run's errors cannot be counted", {"ports": ports})
        if growth.grew:
            total += sum(b - a for a, b in growth.grew.values())
            problems.append(f"{where}: {_shown(growth.grew)}")
    if not ports:
        return v.not_measured(f"{device} lists no port")
    if problems:
        return with_sources(v.failed(total, f"error counters grew during the run (sysfs): {'; '.join(problems)}",
                                     {"ports": ports}), "sysfs port counters")
    shown = ", ".join(f"port {p}" for p in ports)
    return with_sources(v.passed(0, f"{device}: no error counter of {shown} grew during the run (sysfs)",
                                 {"ports": ports}), "sysfs port counters", unconfirmed="the kernel's port counters alone")


def judge_nic_errors(section: Any, subject: Subject, m: ErrorCounters, contract: Contract) -> Check:
    """No error statistic of the interface grew during the run (rx_errors, rx_crc_errors, rx_frame_errors,
    rx_length_errors, rx_over_errors, rx_fifo_errors, tx_errors, tx_aborted_errors, tx_carrier_errors,
    tx_fifo_errors); drops (rx_dropped, tx_dropped, rx_missed_errors) are recorded, not judged."""
    v = NIC_ERRORS.verdict(subject, "== 0", m.evidence, 0.0)
    refused = _named_subject(v, subject, "interface", m.names.get("net", []))
    if refused:
        return refused
    name = str(subject.name)
    pair = _pair(m, "net", name, "statistics")
    if isinstance(pair, str):
        return v.not_measured(pair)
    before, after = pair
    missing = sorted(set(before.get("missing", [])) | set(after.get("missing", [])))
    details = {"before": before.get("statistics", {}), "after": after.get("statistics", {})}
    if missing:
        return v.not_measured(f"{name}: statistics/{', statistics/'.join(missing)} cannot be read", details)
    growth = _growth(before["statistics"], after["statistics"])
    judged = {k: c for k, c in growth.grew.items() if k in port_errors.NET_ERRORS}
    down = growth.down
    if down:
        return v.failed(None, f"{name}: {_shown(down)}: the statistics went down during the run (reset), so the "
                        "run's errors cannot be counted", details)
    dropped = {k: c for k, c in growth.grew.items() if k not in port_errors.NET_ERRORS}
    noted = f" (recorded, not judged: {_shown(dropped)})" if dropped else ""
    if judged:
        count = sum(b - a for a, b in judged.values())
        return with_sources(v.failed(count, f"{name}: {_shown(judged)} during the run (sysfs statistics){noted}",
                                     details), "sysfs statistics")
    return with_sources(v.passed(0, f"{name}: no error statistic grew during the run (sysfs){noted}", details),
                        "sysfs statistics", unconfirmed="the kernel's interface statistics alone")


PCIE_AER = Clause("health.pcie_aer", HEALTH, "test_pcie_aer", GpusAndNics(), gpuaccept_error_counters,
                  judge_pcie_aer, "with `pcie_aer`: no fatal or non-fatal PCIe AER error, and correctable ones at most "
                  "max(10, `max_correctable_per_hour` x the run's hours), gained during the whole run by the part or a "
                  "port above it (sysfs aer_dev_*)", "errors", lambda s: s.pcie_aer is not None)
RDMA_ERRORS = Clause("rdma.errors", RDMA, "test_rdma_errors",
                     Named("infiniband", lambda s: s.devices, "each matching device (or the pattern that matched none)"),
                     gpuaccept_error_counters, judge_rdma_errors, "with `errors: true`: no port error counter (sysfs "
                     "counters, mlx5 hw_counters) grew during the run", "errors", lambda s: s.errors)
NIC_ERRORS = Clause("nics.errors", NICS, "test_nic_errors",
                    Named("net", lambda s: s.interfaces, "each matching interface (or the pattern that matched none)"),
                    gpuaccept_error_counters, judge_nic_errors, "with `errors: true`: no error statistic (sysfs "
                    "statistics) grew during the run; drops recorded", "errors", lambda s: s.errors)
CLAUSES = (PCIE_AER, RDMA_ERRORS, NIC_ERRORS)
MEASUREMENTS = (gpuaccept_error_counters,)
BEFORE_RUN = (before_run,)  # called as the run's tests start, before any measurement (plugin.py)
AFTER_RUN = tuple(clause.key for clause in CLAUSES)  # their tests run after every other (plugin.py)
