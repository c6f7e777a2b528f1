"""The `nics`, `rdma` and `iperf3` sections: link speed (ethtool), RDMA bandwidth (ib_write_bw), TCP (iperf3)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from .. import schedule, schema
from ..measurements import Iperf3Path, NicLinks, RdmaDevices
from ..probes import counters, ethtool, ib_write_bw, iperf3, iproute, sysfs
from ..probes._run import Command, Reading, parse_run
from ..probes.counters import COUNTER_WORD
from ..probes.sysfs import SAFE_NAME, Function
from ..rates import Rated, SecondSource, rate_check, short_run
from ..schema import Key
from ..subjects import Subject
from ..units import Bandwidth, Duration, Size, bits_to_gbit, mbit_to_gbit, parse_duration, parse_size
from ..verdict import Check, Verdict, fmt
from . import plausible
from .base import Clause, HostWide, Named, Section, match_names

if TYPE_CHECKING:
    from ..contract import Contract
    from ..session import Session

RDMA_BASE_PORT = 18515  # perftest's default; each device gets its own port


@dataclass(frozen=True, slots=True)
class Nics:
    interfaces: tuple[str, ...]
    min_speed: Bandwidth
    count: int | None  # at least this many matching interfaces pass; the others are listed, not failed
    physical: bool  # each interface a PCI function with a driver, not veth/tap/bridge or an SR-IOV VF
    errors: bool = False  # nics.errors: no error counter of a matching interface grew during the run (errors.py)


@dataclass(frozen=True, slots=True)
class Rdma:
    devices: tuple[str, ...]
    min_fraction_of_line_rate: float
    line_rate: Bandwidth | None
    message_size: Size
    peer: str | None
    count: int | None
    qps: int | None  # queue pairs for ib_write_bw (-q); bonded RoCE ports need more than one
    physical: bool  # each device a PCI function with a driver, not an SR-IOV VF or a software device (rxe)
    concurrent: bool  # devices on distinct ports measured at once (schedule.py); false: one after the other
    errors: bool = False  # rdma.errors: no error counter of a matching device's ports grew during the run (errors.py)


@dataclass(frozen=True, slots=True)
class Iperf3:
    server: str
    min_throughput: Bandwidth
    duration: Duration
    streams: int
    port: int


NICS = Section(
    "nics", {"interfaces": Key(schema.names, required=True), "min_speed": Key(schema.bandwidth, required=True),
             "count": Key(schema.whole(1, 1024)), "physical": Key(schema.boolean, default=True),
             "errors": Key(schema.boolean, default=False)},
    Nics, "network interfaces (ethtool)")
RDMA = Section(
    "rdma",
    {"devices": Key(schema.names, required=True),
     "min_fraction_of_line_rate": Key(schema.number(0.0, 1.0, low_open=True), required=True),
     "line_rate": Key(schema.bandwidth), "message_size": Key(schema.size, default=parse_size("64 KiB")),
     "peer": Key(schema.host), "count": Key(schema.whole(1, 1024)), "qps": Key(schema.whole(1, 1024)),
     "physical": Key(schema.boolean, default=True), "concurrent": Key(schema.boolean, default=True),
     "errors": Key(schema.boolean, default=False)},
    Rdma, "RDMA devices (sysfs, ib_write_bw)")
IPERF3 = Section(
    "iperf3",
    {"server": Key(schema.host, required=True), "min_throughput": Key(schema.bandwidth, required=True),
     "duration": Key(schema.duration, default=parse_duration("10 s")), "streams": Key(schema.whole(1, 128), default=8),
     "port": Key(schema.whole(1, 65535), default=5201)},
    Iperf3, "TCP throughput to a server (iperf3)")


def _unmatched_or_unsafe(v: Verdict, subject: Subject, what: str, available: tuple[str, ...]) -> Check | None:
    """A contract name that matched nothing fails (listing what there is); an unsafe host name is never run."""
    if subject.name is None:
        shown = ", ".join(available) if available else "none"
        return v.failed(None, f"no {what} matches {subject.pattern!r} (host has: {shown})")
    if not SAFE_NAME.match(subject.name):
        return v.not_measured(f"the host's name {subject.name!r} is not safe to pass to a tool")
    return None


def _not_a_port(v: Verdict, function: Function, evidence: str, others: list[Function], physical: bool) -> Check | None:
    """With `physical` (the default): an interface or device that is not a port of its own fails, naming
    what sysfs says stands behind it; two names on one physical port (`phys_port_id`) count once."""
    if not physical:
        return None
    v = v.but(evidence=v.evidence + (evidence,))
    if function.not_physical:
        return v.failed(None, f"{function.name} is {function.not_physical} (sysfs), whatever its name or settings say")
    twins = [o.name for o in others if o.name != function.name and function.phys_port_id
             and o.phys_port_id == function.phys_port_id]
    if twins and function.name > min(twins):
        return v.failed(None, f"{function.name} is the same physical port as {', '.join(twins)} "
                        f"(phys_port_id {function.phys_port_id} in sysfs): counted once")
    return None


def _where(function: Function) -> str:
    return f"PCI {function.pci_address}, driver {function.driver}" if function.pci_address else \
        f"bond of {', '.join(function.members)}" if function.members else "not a PCI function"


def _matched(patterns: tuple[str, ...], names: tuple[str, ...]) -> list[str]:
    return [name for _pattern, name in match_names(patterns, list(names)) if name is not None and SAFE_NAME.match(name)]


def _port(v: Verdict, subject: Subject, what: str, names: tuple[str, ...], patterns: tuple[str, ...],
          function_of: Callable[[str], tuple[Function, str]], physical: bool) -> tuple[Check | None, Function, str]:
    """The checks every port gets before it is measured: its name matched and safe, and (with `physical`)
    a port of its own in sysfs. (refusal or None, what stands behind it, that reading's evidence file)."""
    early = _unmatched_or_unsafe(v, subject, what, names)
    if early:
        return early, Function("", None, None, None, (), None), ""
    function, evidence = function_of(str(subject.name))
    others = [function_of(n)[0] for n in _matched(patterns, names)]
    return _not_a_port(v, function, evidence, others, physical), function, evidence


def judge_nic(section: Nics, subject: Subject, m: NicLinks, contract: Contract) -> Check:
    """Negotiated speed from ethtool, in Gb/s, of a physical port (sysfs), as the kernel's sysfs speed says it too;
    no link or an unknown speed fails."""
    minimum = section.min_speed.gbit_s
    v = NIC_SPEED.verdict(subject, f">= {fmt(minimum)}")
    refused, function, function_evidence = _port(v, subject, "interface", m.names, section.interfaces, m.function,
                                                 section.physical)
    if refused:
        return refused
    name = str(subject.name)
    reading = m.read(name)
    v = v.but(evidence=reading.evidence + (function_evidence,))
    link = reading.value
    if link is None:
        return v.not_measured(reading.failure or "no ethtool reading")
    if link.link_detected is None:
        return v.not_measured("ethtool did not report 'Link detected'")
    if not link.link_detected:
        return v.failed(0, f"{name}: no link (Link detected: no)")
    if link.speed_mbps is None:
        return v.failed(0, f"{name}: Speed: Unknown!")
    kernel, kernel_file = m.speed(name) if m.speed is not None else ({"error": "not read"}, "")
    v = v.but(evidence=v.evidence + ((kernel_file,) if kernel_file else ()))
    second = _kernel_speed(name, link.speed_mbps, kernel)
    details = {"function": _where(function), "ethtool_speed_mbps": link.speed_mbps, **second.details}
    if second.refuted is not None:
        return v.failed(second.measured, second.refuted, details)
    return v.at_least(mbit_to_gbit(link.speed_mbps), minimum, f"{name} speed", details, where=second.shown,
                      suffix=f" ({_where(function)})")


def _kernel_speed(name: str, ethtool_mbps: int, kernel: dict[str, Any]) -> SecondSource:
    """ethtool's speed against the kernel's (`/sys/class/net/IF/speed`, the same driver call, made by the kernel
    for sysfs): agreeing, they are two sources; a kernel that says another speed, none (-1, SPEED_UNKNOWN) or
    refuses (EINVAL: down, or no speed from the driver) refutes ethtool, and the lower figure is measured; no
    reading (ENOENT: a container, an old kernel, a recorded tree; a replayed bundle without one) leaves ethtool
    alone, and the message says so (a vendor who hides the file gains no more than that)."""
    sysfs_mbps, error = kernel.get("speed_mbps"), kernel.get("error")
    if sysfs_mbps is None and error != "EINVAL":
        unconfirmed = {"sources": ["ethtool"], "unconfirmed": f"no /sys/class/net/{name}/speed to read ({error})"}
        return SecondSource(None, None, unconfirmed, " (sources: ethtool only)")
    details = {"sources": ["ethtool", "sysfs speed"], "sysfs_speed_mbps": sysfs_mbps}
    if sysfs_mbps == ethtool_mbps:
        return SecondSource(None, None, details, "")
    said = f"ethtool says {fmt(mbit_to_gbit(ethtool_mbps))} Gb/s ({ethtool_mbps}Mb/s)"
    if isinstance(sysfs_mbps, int) and sysfs_mbps >= 0:
        lower = mbit_to_gbit(min(sysfs_mbps, ethtool_mbps))
        return SecondSource(f"{name}: {said}, the kernel's /sys/class/net/{name}/speed says "
                            f"{fmt(mbit_to_gbit(sysfs_mbps))} Gb/s ({sysfs_mbps}Mb/s): they disagree (measured at the "
                            "lower; a link speed two sources disagree on is not as sold)", lower, details, "")
    kernel_says = "nothing (EINVAL: the interface is down, or its driver gives no speed)" if sysfs_mbps is None else \
        "-1 (SPEED_UNKNOWN)" if sysfs_mbps == counters.SPEED_UNKNOWN else f"{sysfs_mbps}Mb/s"
    return SecondSource(f"{name}: {said}, the kernel's /sys/class/net/{name}/speed says {kernel_says}: they "
                        "disagree", None, details, "")


def judge_rdma(section: Rdma, subject: Subject, m: RdmaDevices, contract: Contract) -> Check:
    """ib_write_bw BW average in Gb/s against fraction x line rate; above line rate is implausible; a run shorter
    than asked, or a figure the port's own counters refute, is not a measurement."""
    found = _rdma_port(section, subject, m)
    if isinstance(found, Check):
        return found
    return _rdma_measured(*found, section, m)


def _rdma_port(section: Rdma, subject: Subject, m: RdmaDevices) -> Check | tuple[Verdict, sysfs.IbPort, tuple[float, str]]:
    """What a device is measured through (its verdict so far, its active port, the line rate and where it came from),
    or the check that says why it is not measured at all: what the judge and the fixture's plan both go by."""
    fraction = section.min_fraction_of_line_rate
    v = RDMA_BW.verdict(subject, f">= {fraction:g} x line rate")
    refused, _function, function_evidence = _port(v, subject, "RDMA device", m.names, section.devices, m.function,
                                                  section.physical)
    if refused:
        return refused
    device = str(subject.name)
    ports, sysfs_evidence = m.ports(device)
    v = v.but(evidence=(sysfs_evidence, function_evidence))
    port = next((p for p in ports if p.active), ports[0] if ports else None)
    if port is None:
        return v.not_measured(f"{device} has no port in sysfs")
    if not port.active:
        return v.failed(0, f"{device} port {port.port} is not Active/LinkUp: {port.state}")
    line_rate: float | None = section.line_rate.gbit_s if section.line_rate is not None else port.rate_gbit_s
    source = "from the contract" if section.line_rate is not None else f"port {port.port} rate in sysfs"
    if section.line_rate is not None and port.rate_gbit_s is not None and port.rate_gbit_s + 1e-9 < section.line_rate.gbit_s:
        # A 400G port trained at 2X width runs at 200: whatever ib_write_bw reaches, the port is not as sold.
        return v.but(required=f">= {fmt(fraction * section.line_rate.gbit_s)}").failed(
            0, f"{device} port {port.port} is active at {fmt(port.rate_gbit_s)} Gb/s, below the contract's line rate "
               f"{fmt(section.line_rate.gbit_s)} Gb/s ({port.state}): not measured further")
    if line_rate is None:
        return v.not_measured(f"no line rate: port {port.port} reports none and the contract gives no rdma.line_rate")
    return v, port, (line_rate, source)


def _rdma_measured(v: Verdict, port: sysfs.IbPort, line: tuple[float, str], section: Rdma, m: RdmaDevices) -> Check:
    """ib_write_bw through `port`, with the port's own data counters read before and after it: the figure is
    believed where the run took the time asked and the port moved about what it says (probes/counters.py)."""
    device, (line_rate, source) = port.device, line
    minimum = section.min_fraction_of_line_rate * line_rate
    before, before_file = m.counters(device, port, "before") if m.counters is not None else (None, "")
    reading = m.write_bw(device, port)
    after, after_file = m.counters(device, port, "after") if m.counters is not None else (None, "")
    files = tuple(f for f in (before_file, after_file) if f)
    v = v.but(required=f">= {fmt(minimum)}", evidence=v.evidence + reading.evidence + files)
    if reading.value is None or reading.run is None:
        return v.not_measured(reading.failure or "ib_write_bw did not run")
    measured = reading.value.last[2]
    second = rate_check(measured, Rated("ib_write_bw", ib_write_bw.DURATION_S,
                                        ib_write_bw.client_seconds(reading.run, section.peer)),
                        counters.counted(before, after, "port_xmit_data", COUNTER_WORD, m.function(device)[0].not_physical),
                        ("port_xmit_data", f"port {port.port}'s port_xmit_data (sysfs, 4-byte words)"))
    details = {"line_rate_gbit_s": line_rate, "fraction": round(measured / line_rate, 4), "qps": section.qps or 1,
               "port": port.port, **second.details}
    if second.refuted is not None:
        return v.failed(second.measured, f"{device}: {second.refuted}", details)
    # Without a peer the bytes go to localhost and never leave the HCA: the message says what was measured.
    reach = f"to the peer {section.peer}" if section.peer else "HCA only: no cable or switch (loopback to localhost)"
    details["path"] = "peer" if section.peer else "loopback"
    ratio = f" ({measured / line_rate:.1%} of {fmt(line_rate)} Gb/s line rate, {source}" + \
        (f", {section.qps} queue pairs" if section.qps else "") + f"; {reach})"
    what = f"{device} ib_write_bw BW average"  # no port carries more than its line rate: sanity, then the threshold
    return plausible.over_ceiling(v, measured, minimum, line_rate, f"the line rate, {source}", what, details,
                                  where=second.shown, suffix=ratio) \
        or v.at_least(measured, minimum, what, details, where=second.shown, suffix=ratio)


COUNTED_FRACTION = 0.9  # of the bytes iperf3 says it sent, the route's interface must have counted (headers add)


def judge_iperf3(section: Iperf3, subject: Subject, path: Iperf3Path, contract: Contract) -> Check:
    """Received throughput summed over every client process, in Gb/s, through a NIC: the route to the server
    leaves through a non-local interface (a contracted one, with `nics`), whose tx byte counter grew by about
    what iperf3 says it sent, at about the rate it says over the time it ran (and it ran the time asked).
    Any client failing is not measured."""
    minimum = section.min_throughput.gbit_s
    m = path.runs
    evidence = tuple(name for r in m.readings for name in r.evidence) + path.evidence
    v = IPERF3_TCP.verdict(subject, f">= {fmt(minimum)}", evidence, minimum)
    route = path.route.value
    if route is None:
        return v.not_measured(f"the route to {section.server} is unknown: {path.route.failure}")
    if route.local:
        return v.failed(None, f"{section.server} is an address of this host: `ip route get` says {route.kind} via "
                        f"{route.dev}; iperf3 would measure the loopback, not a NIC")
    nics = NICS.get(contract)
    if nics is not None and not any(name == route.dev for _p, name in match_names(nics.interfaces, [route.dev])):
        return v.failed(None, f"traffic to {section.server} leaves through {route.dev} (`ip route get`), which is not "
                        f"one of the contracted interfaces {list(nics.interfaces)}")
    failures = [r.failure for r in m.readings if r.failure]
    values = [r.value for r in m.readings if r.value is not None]
    if failures or len(values) != len(m.readings):
        return v.not_measured(failures[0] if failures else "no iperf3 result")
    total = bits_to_gbit(sum(value.received_bits_per_s for value in values))
    before, after = path.before or {}, path.after or {}
    if "tx_bytes" not in before or "tx_bytes" not in after:
        return v.not_measured(f"{route.dev}'s byte counters could not be read: "
                              f"{before.get('error') or after.get('error') or 'not read'}")
    sent = [value.sent_bytes for value in values]
    if any(b is None for b in sent):
        return v.not_measured("iperf3's JSON gives no end.sum_sent.bytes to compare with the interface's counter")
    moved, counted = sum(b for b in sent if b is not None), int(after["tx_bytes"]) - int(before["tx_bytes"])
    rated = Rated("iperf3", iperf3.asked_seconds(section.duration.seconds), m.seconds or 0.0)
    if short_run(rated) is not None:
        return v.failed(None, str(short_run(rated)))
    if counted < COUNTED_FRACTION * moved:
        return v.failed(total, f"iperf3 says it sent {moved} bytes to {section.server}, but {route.dev}'s tx_bytes "
                        f"(sysfs) grew by {counted}: the traffic did not go through {route.dev}")
    second = rate_check(total, rated, counters.counted(before, after, "tx_bytes"),
                        ("tx_bytes", f"{route.dev}'s tx_bytes (sysfs)"))
    details = {"route": f"dev {route.dev}", "sent_bytes": moved, "counted_tx_bytes": counted, **second.details}
    if second.refuted is not None:
        return v.failed(second.measured, second.refuted, details)
    return v.at_least(total, minimum, f"received from {section.server}", details, where=second.shown,
                      suffix=f" ({m.note}; via {route.dev}, which counted {counted} of {moved} bytes sent)")


def _at_least_count(v: Verdict, what: str, count: int, each: list[Check]) -> Check:
    """`count` of the matches must pass; the others are listed (storage and management ports are common)."""
    passed = [c for c in each if c.passed]
    details = {"each": [[c.subject, c.outcome.value, "—" if c.measured is None else c.measured, c.message]
                        for c in each]}
    others = "; ".join(f"{c.subject}: {c.message}" for c in each if not c.passed)
    message = (f"{len(passed)} of {len(each)} matching {what} pass ({', '.join(c.subject for c in passed) or 'none'}), "
               f"at least {count} required" + (f"; not passing: {others}" if others else ""))
    v = v.but(required=f">= {count}", threshold=float(count))
    if len(passed) >= count:
        return v.passed(len(passed), message, details)
    if any(c.outcome.value == "not_measured" for c in each):
        return v.not_measured(message, details)
    return v.failed(len(passed), message, details)


def judge_nic_count(section: Nics, subject: Subject, m: NicLinks, contract: Contract) -> Check:
    """With `count`: each matching interface judged as `nics` judges it; at least `count` of them pass."""
    each = [judge_nic(section, Subject.named(pattern, name), m, contract)
            for pattern, name in match_names(section.interfaces, list(m.names)) if name is not None]
    return _at_least_count(NIC_COUNT.verdict(subject), "interfaces", section.count or 0, each)


def judge_rdma_count(section: Rdma, subject: Subject, m: RdmaDevices, contract: Contract) -> Check:
    """With `count`: each matching device judged as `rdma` judges it; at least `count` of them pass."""
    each = [judge_rdma(section, Subject.named(pattern, name), m, contract)
            for pattern, name in match_names(section.devices, list(m.names)) if name is not None]
    return _at_least_count(RDMA_COUNT.verdict(subject), "devices", section.count or 0, each)


def gpuaccept_host_names(gpuaccept_state: Session) -> dict[str, list[str]]:
    """What the host lists in sysfs ({"net": interfaces, "infiniband": RDMA devices}): what names and globs match."""
    return dict(gpuaccept_state.listings())


def gpuaccept_nic_links(gpuaccept_state: Session, gpuaccept_host_names: dict[str, list[str]]) -> NicLinks:
    """The interfaces the host lists, and `ethtool IFACE` for any of them (each run once per run)."""
    state = gpuaccept_state

    def speed(name: str) -> tuple[dict[str, Any], str]:
        file = f"sysfs-net-{name}-speed.json"
        return state.runner.reading(file, lambda: counters.read_link_speed(state.sys_root, name)), file

    return NicLinks(tuple(gpuaccept_host_names.get("net", [])), lambda name: ethtool.read_ethtool(state.runner, name),
                    lambda name: state.function("net", name), speed)


def gpuaccept_rdma_devices(gpuaccept_state: Session, gpuaccept_contract: Contract,
                           gpuaccept_host_names: dict[str, list[str]]) -> RdmaDevices:
    """The RDMA devices the host lists, their ports from sysfs, and ib_write_bw through the port of each device the
    judge will measure: those on distinct ports all at once (rdma.concurrent, the default; schedule.py plans them),
    each port's counters read right before and after its group. Measured as the first device is judged, once."""
    state = gpuaccept_state
    section = RDMA.of(gpuaccept_contract)
    devices = sorted(gpuaccept_host_names.get("infiniband", []))
    measured: dict[str, RdmaRun] = {}

    def ports(device: str) -> tuple[list[sysfs.IbPort], str]:
        reading, evidence = state.ib_device(device)
        return sysfs.parse_ib_device(reading), evidence

    def port_counters(device: str, port: sysfs.IbPort, when: str) -> tuple[dict[str, Any], str]:
        file = f"sysfs-infiniband-{device}-{port.port}-counters-{when}.json"
        return state.runner.reading(file, lambda: counters.read_port_counters(state.sys_root, device, port.port)), file

    def measure(device: str, port: sysfs.IbPort) -> RdmaRun:
        if device not in measured:
            planned = rdma_plan(section, m, lambda name: state.function("infiniband", name))
            slot = next((s for s in planned if device in s), {device: port})
            measured.update(_write_bw_together(state, section, slot, devices, port_counters))
        return measured[device]

    m = RdmaDevices(tuple(gpuaccept_host_names.get("infiniband", [])), ports, lambda d, p: measure(d, p).reading,
                    lambda name: state.function("infiniband", name),
                    lambda d, p, when: measure(d, p).before if when == "before" else measure(d, p).after)
    return m


@dataclass(frozen=True, slots=True)
class RdmaRun:
    """ib_write_bw through one device's port, and the port's counters (with their evidence files) read right before
    and right after the group it ran in."""

    reading: Reading[ib_write_bw.WriteBw]
    before: tuple[dict[str, Any], str]
    after: tuple[dict[str, Any], str]


def rdma_jobs(section: Rdma, m: RdmaDevices,
              function: Callable[[str], tuple[Function, str]]) -> list[tuple[schedule.Job, sysfs.IbPort]]:
    """The devices the judge will measure (as _rdma_port finds them), each a job holding its physical port (sysfs
    phys_port_id, else device/port), with the port it is measured through."""
    jobs: dict[str, tuple[schedule.Job, sysfs.IbPort]] = {}
    for pattern, name in match_names(section.devices, list(m.names)):
        entry = _rdma_port(section, Subject.named(pattern, name), m) if name is not None and name not in jobs else None
        if name is None or entry is None or isinstance(entry, Check):
            continue
        port = entry[1]
        held = function(name)[0].phys_port_id or f"{name}/{port.port}"
        jobs[name] = (schedule.Job(name, frozenset({schedule.port(held)}), float(ib_write_bw.DURATION_S)), port)
    return list(jobs.values())


def rdma_plan(section: Rdma, m: RdmaDevices,
              function: Callable[[str], tuple[Function, str]]) -> list[dict[str, sysfs.IbPort]]:
    """The devices to measure in groups run at once (schedule.plan): all at once where their ports differ, one at a
    time with rdma.concurrent false."""
    jobs = rdma_jobs(section, m, function)
    ports = {job.name: port for job, port in jobs}
    return [{name: ports[name] for name in slot.names}
            for slot in schedule.plan([job for job, _port in jobs], section.concurrent)]


def _write_bw_together(state: Session, section: Rdma, slot: dict[str, sysfs.IbPort], devices: list[str],
                       port_counters: Callable[[str, sysfs.IbPort, str], tuple[dict[str, Any], str]]) -> dict[str, RdmaRun]:
    """One group's ib_write_bw runs at once under one deadline: every server first, then every client after one head
    start (each device on its own TCP port, -p), the ports' counters read right before and after the group. A client
    whose server failed, and did not say why itself, reads as the server's failure."""
    commands: list[list[Command]] = []
    for device, port in slot.items():
        gid = port.roce_v2_gid_index if port.link_layer == "Ethernet" else None
        offset = devices.index(device) if device in devices else 0
        commands.append(ib_write_bw.commands(device, section.message_size.nbytes, RDMA_BASE_PORT + offset, section.peer,
                                             gid, port.port, section.qps or 1))
    servers = [group[0] for group in commands if len(group) > 1]
    clients = [replace(group[-1], start_after_s=ib_write_bw.CLIENT_AFTER_S if servers and n == 0 else 0.0)
               for n, group in enumerate(commands)]
    before = {device: port_counters(device, port, "before") for device, port in slot.items()}
    runs = dict(zip([c.key for c in servers + clients],
                    state.runner.run_together(servers + clients, min(state.runner.default_timeout_s, 120.0))))
    after = {device: port_counters(device, port, "after") for device, port in slot.items()}
    measured = {}
    for device, group in zip(slot, commands):
        reading = parse_run(runs[group[-1].key], ib_write_bw.parse_ib_write_bw)
        server = runs[group[0].key] if len(group) > 1 else None
        if server is not None and server.failure and not reading.failure:
            reading = parse_run(server, ib_write_bw.parse_ib_write_bw)  # the server failed: say so
        measured[device] = RdmaRun(reading, before[device], after[device])
    return measured


def gpuaccept_iperf3(gpuaccept_state: Session, gpuaccept_contract: Contract) -> Iperf3Path:
    """iperf3 clients against the contract's server (one per port before iperf3 3.16), run once, with the route
    to the server and its interface's byte counters (and the clocks) read before and after."""
    state = gpuaccept_state
    section = IPERF3.of(gpuaccept_contract)
    route = iproute.read_route(state.runner, section.server)
    dev = route.value.dev if route.value is not None and sysfs.SAFE_NAME.match(route.value.dev) else None

    def counted(when: str) -> tuple[dict[str, Any] | None, str | None]:
        if dev is None:
            return None, None
        name = f"sysfs-net-{dev}-counters-{when}.json"
        return state.runner.reading(name, lambda: counters.read_net_counters(state.sys_root, dev)), name

    before, before_file = counted("before")
    runs = iperf3.run_iperf3(state.runner, section.server, section.port, section.streams, section.duration.seconds)
    after, after_file = counted("after")
    files = tuple(f for f in (before_file, after_file) if f)
    return Iperf3Path(runs, route, before, after, route.evidence + files)


NIC_SPEED = Clause("nics", NICS, "test_nic_speed",
                   Named("net", lambda s: s.interfaces, "each matching interface (or the pattern that matched none)"),
                   gpuaccept_nic_links, judge_nic, "negotiated speed from `ethtool IFACE` (without `count`)", "Gb/s",
                   lambda s: s.count is None)
NIC_COUNT = Clause("nics.count", NICS, "test_nic_count", HostWide(), gpuaccept_nic_links, judge_nic_count,
                   "with `count`: at least `count` matching interfaces at `min_speed`; the others listed", "interfaces",
                   lambda s: s.count is not None)
RDMA_BW = Clause("rdma", RDMA, "test_rdma_bandwidth",
                 Named("infiniband", lambda s: s.devices, "each matching device (or the pattern that matched none)"),
                 gpuaccept_rdma_devices, judge_rdma, "ib_write_bw BW average against fraction x line rate "
                 "(without `count`)", "Gb/s", lambda s: s.count is None)
RDMA_COUNT = Clause("rdma.count", RDMA, "test_rdma_count", HostWide(), gpuaccept_rdma_devices, judge_rdma_count,
                    "with `count`: at least `count` matching devices pass as `rdma` judges each; the others listed",
                    "devices", lambda s: s.count is not None)
IPERF3_TCP = Clause("iperf3", IPERF3, "test_iperf3_throughput", HostWide(lambda s: s.server, "the server"),
                    gpuaccept_iperf3, judge_iperf3, "received throughput, summed over the clients", "Gb/s")
CLAUSES = (NIC_SPEED, NIC_COUNT, RDMA_BW, RDMA_COUNT, IPERF3_TCP)
RDMA_CLAUSES = (RDMA_BW, RDMA_COUNT)
MEASUREMENTS = (gpuaccept_host_names, gpuaccept_nic_links, gpuaccept_rdma_devices, gpuaccept_iperf3)
