"""Compare a measurement with a contract clause: every verdict of the project is decided here."""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .probes._run import Reading
from .probes.nvml import Host

PASSED, FAILED, NOT_MEASURED = "passed", "failed", "not_measured"


@dataclass(frozen=True)
class Check:
    """One judged clause for one subject, as the results JSON lists it."""

    clause: str
    subject: str
    outcome: str
    measured: float | int | str | None
    unit: str | None
    required: str
    message: str
    evidence: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["evidence"] = list(self.evidence)
        return data


def not_measured(clause: str, subject: str, required: str, reason: str, unit: str | None = None,
                 evidence: tuple[str, ...] = (), details: dict[str, Any] | None = None) -> Check:
    return Check(clause, subject, NOT_MEASURED, None, unit, required, f"not measured: {reason}", evidence, details or {})


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def at_least(clause: str, subject: str, measured: float, minimum: float, unit: str, what: str,
             evidence: tuple[str, ...] = (), details: dict[str, Any] | None = None,
             maximum: float | None = None, maximum_reason: str = "") -> Check:
    """measured >= minimum passes; above a physical `maximum` it is implausible and fails."""
    required = f">= {_fmt(minimum)}"
    measured = round(measured, 3) if isinstance(measured, float) else measured
    if maximum is not None and measured > maximum:
        return Check(clause, subject, FAILED, measured, unit, required,
                     f"{what} {_fmt(measured)} {unit} is implausible: above {_fmt(maximum)} {unit} ({maximum_reason})",
                     evidence, details or {})
    ok = measured >= minimum
    sign = ">=" if ok else "<"
    return Check(clause, subject, PASSED if ok else FAILED, measured, unit, required,
                 f"{what} {_fmt(measured)} {unit} {sign} {_fmt(minimum)} {unit}", evidence, details or {})


# ------------------------------------------------------------------ gpus

def gpu_count(host: Host, count: int, evidence: tuple[str, ...]) -> Check:
    if host.error:
        return not_measured("gpus.count", "host", f"== {count}", host.error, "GPUs", evidence)
    found = len(host.gpus)
    ok = found == count
    return Check("gpus.count", "host", PASSED if ok else FAILED, found, "GPUs", f"== {count}",
                 f"{found} GPUs found, contract says {count}", evidence)


def _gpu_or_failure(host: Host, clause: str, index: int, required: str, unit: str | None,
                    evidence: tuple[str, ...]) -> Check | None:
    if host.error:
        return not_measured(clause, f"GPU{index}", required, host.error, unit, evidence)
    if index >= len(host.gpus):
        return Check(clause, f"GPU{index}", FAILED, None, unit, required,
                     f"GPU{index} not present: found {len(host.gpus)}", evidence)
    return None


def _all_gpus(host: Host, clause: str, required: str, unit: str | None, evidence: tuple[str, ...]) -> Check | None:
    """Without gpus.count a per-GPU clause judges every GPU found; finding none fails."""
    if host.error:
        return not_measured(clause, "GPUs", required, host.error, unit, evidence)
    if not host.gpus:
        return Check(clause, "GPUs", FAILED, None, unit, required, "no GPU found", evidence)
    return None


def gpu_model(host: Host, index: int | None, model: str, evidence: tuple[str, ...]) -> Check:
    """The contract's model is a case-insensitive substring of the GPU's name."""
    required = f"name contains {model!r}"
    if index is None:
        failure = _all_gpus(host, "gpus.model", required, None, evidence)
        if failure:
            return failure
        wrong = [g for g in host.gpus if model.lower() not in g.name.lower()]
        names = ", ".join(sorted({g.name for g in host.gpus}))
        message = (f"all {len(host.gpus)} GPUs are {names}" if not wrong else
                   "; ".join(f"GPU{g.index} is {g.name!r}, which does not contain {model!r}" for g in wrong))
        return Check("gpus.model", "GPUs", FAILED if wrong else PASSED, names, None, required, message, evidence)
    failure = _gpu_or_failure(host, "gpus.model", index, required, None, evidence)
    if failure:
        return failure
    name = host.gpus[index].name
    ok = model.lower() in name.lower()
    return Check("gpus.model", f"GPU{index}", PASSED if ok else FAILED, name, None, required,
                 f"GPU{index} is {name!r}" + ("" if ok else f", which does not contain {model!r}"), evidence)


def gpu_memory(host: Host, index: int | None, minimum_bytes: int, evidence: tuple[str, ...]) -> Check:
    """Total memory as the driver reports it, in GB (10^9 bytes), at least the contract's."""
    required = f">= {_fmt(minimum_bytes / 1e9)}"
    if index is None:
        failure = _all_gpus(host, "gpus.memory", required, "GB", evidence)
        if failure:
            return failure
        smallest = min(host.gpus, key=lambda g: g.memory_total_bytes)
        return at_least("gpus.memory", "GPUs", smallest.memory_total_bytes / 1e9, minimum_bytes / 1e9, "GB",
                        f"smallest GPU memory (GPU{smallest.index})", evidence)
    failure = _gpu_or_failure(host, "gpus.memory", index, required, "GB", evidence)
    if failure:
        return failure
    total = host.gpus[index].memory_total_bytes
    return at_least("gpus.memory", f"GPU{index}", total / 1e9, minimum_bytes / 1e9, "GB",
                    f"GPU{index} total memory", evidence)


def version(clause: str, found: str | None, spec: SpecifierSet, host: Host, evidence: tuple[str, ...]) -> Check:
    """A driver or CUDA version against a PEP 440 specifier set."""
    required = str(spec)
    if host.error or not found:
        return not_measured(clause, "host", required, host.error or "the version could not be read", None, evidence)
    try:
        ok = spec.contains(Version(found), prereleases=True)
    except InvalidVersion:
        return not_measured(clause, "host", required, f"version {found!r} is not a version number", None, evidence)
    return Check(clause, "host", PASSED if ok else FAILED, found, None, required,
                 f"{clause.split('.')[-1]} {found} {'satisfies' if ok else 'does not satisfy'} {required}", evidence)


# ------------------------------------------------------------------ names and globs

def match_names(patterns: tuple[str, ...], available: list[str]) -> list[tuple[str, str | None]]:
    """(pattern, name) for each name each pattern matches, in order; (pattern, None) where none does."""
    pairs: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for pattern in patterns:
        hits = [name for name in sorted(available) if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            pairs.append((pattern, None))
        for name in hits:
            if name not in seen:
                seen.add(name)
                pairs.append((pattern, name))
    return pairs


# ------------------------------------------------------------------ nvlink

def nvlink_pair(reading: Reading, i: int, j: int, min_links: int) -> Check:
    """NVLinks between GPU i and GPU j from the topo matrix; PCIe paths count 0."""
    subject, required = f"GPU{i}-GPU{j}", f">= {min_links}"
    if reading.failure:
        return not_measured("nvlink", subject, required, reading.failure, "links", reading.evidence)
    topo = reading.value
    if j >= topo.gpu_count:
        return Check("nvlink", subject, FAILED, 0, "links", required,
                     f"GPU{j} not present: found {topo.gpu_count}", reading.evidence)
    links, label = topo.nvlinks(i, j), topo.labels[(i, j)]
    ok = links >= min_links
    shortfall = "" if ok else f", {links} < {min_links} links"
    return Check("nvlink", subject, PASSED if ok else FAILED, links, "links", required,
                 f"{label} between GPU{i} and GPU{j}{shortfall}", reading.evidence)


# ------------------------------------------------------------------ all_reduce

# Bidirectional NVLink bandwidth per GPU by model (published figures), in GB/s. A busbw above it is not
# physics: even NVLS in-switch reduction (which lets H100 exceed its 450 GB/s one-way) stays below it.
_NVLINK_BOUND_GBYTE_S = (("GB200", 1800.0), ("B200", 1800.0), ("B100", 1800.0), ("H200", 900.0), ("H100", 900.0),
                         ("H800", 400.0), ("A100", 600.0), ("A800", 400.0), ("V100", 300.0), ("P100", 160.0))
_PCIE_BOUND_GBYTE_S = 128.0  # PCIe 5.0 x16, both directions


def busbw_bound(gpu_names: list[str]) -> tuple[float, str] | None:
    """The highest busbw the GPUs could physically reach, and why; None where the model is unknown."""
    if not gpu_names:
        return None
    bounds = []
    for name in gpu_names:
        known = next(((b, m) for m, b in _NVLINK_BOUND_GBYTE_S if m in name.upper()), None)
        if known is None and any(word in name.upper() for word in ("RTX", "L40", "L4", "A10", "A40", "T4")):
            known = (_PCIE_BOUND_GBYTE_S, "PCIe 5.0 x16")
        if known is None:
            return None
        bounds.append(known)
    value, model = min(bounds)
    reason = f"{model} NVLink, both directions" if model != "PCIe 5.0 x16" else "PCIe 5.0 x16, both directions"
    return value, reason


def allreduce(readings: list[Reading], min_busbw_gbyte_s: float, max_bytes: int, gpu_count: int,
              bound: tuple[float, str] | None, tool: str) -> Check:
    """Out-of-place busbw at the largest size, best of the clean runs; any sign of a bad run fails it."""
    required = f">= {_fmt(min_busbw_gbyte_s)}"
    evidence = tuple(name for r in readings for name in r.evidence)
    tables = []
    problems: list[str] = []
    best = None
    for n, reading in enumerate(readings, 1):
        label = f"run {n}" if len(readings) > 1 else "run"
        result = reading.value
        if result is None:
            problems.append(f"{label}: {reading.failure}")
            continue
        tables.append((f"{label}: {reading.run.command}", _busbw_table(result, min_busbw_gbyte_s)))
        run_problems = _run_problems(result, max_bytes, gpu_count)
        if reading.run.returncode not in (0, None):
            run_problems.insert(0, f"exited with code {reading.run.returncode}")
        problems += [f"{label}: {p}" for p in run_problems]
        largest = result.largest
        if largest is not None and (best is None or largest.oop_busbw_gbyte_s > best.oop_busbw_gbyte_s):
            best = largest
    details = {"tables": tables, "tool": tool}
    if problems:
        measured = best.oop_busbw_gbyte_s if best is not None else None
        outcome = FAILED if measured is not None else NOT_MEASURED
        prefix = "" if measured is not None else "not measured: "
        return Check("allreduce", "all_reduce", outcome, measured, "GB/s", required,
                     prefix + "; ".join(problems), evidence, details)
    runs = f" (best of {len(readings)} runs, {tool})" if len(readings) > 1 else f" ({tool})"
    check = at_least("allreduce", "all_reduce", best.oop_busbw_gbyte_s, min_busbw_gbyte_s, "GB/s",
                     "busbw", evidence, details, bound[0] if bound else None, bound[1] if bound else "")
    message = check.message.replace(" GB/s ", f" GB/s at {best.size_bytes} bytes ", 1) + runs
    return replace(check, message=message)


def _run_problems(result: Any, max_bytes: int, gpu_count: int) -> list[str]:
    problems = []
    if result.error_lines:
        problems.append("errors in the output: " + " | ".join(repr(line[:160]) for line in result.error_lines[:3]))
    wrong = [r for r in result.rows if (r.oop_wrong or 0) > 0 or (r.ip_wrong or 0) > 0]
    if wrong:
        problems.append(f"#wrong is nonzero at {', '.join(str(r.size_bytes) for r in wrong[:5])} bytes: results are corrupt")
    largest = result.largest
    if largest is None:
        problems.append("no result rows")
        return problems
    if result.check_column == "#wrong" and largest.oop_wrong is None:
        problems.append("results were not validated (#wrong is N/A): run with -c 1")
    if largest.size_bytes < max_bytes:
        problems.append(f"the sweep stopped at {largest.size_bytes} bytes, short of max_bytes {max_bytes}: "
                        "the contracted size was not measured")
    if result.ranks != gpu_count:
        found = "an unknown number of" if result.ranks is None else str(result.ranks)
        problems.append(f"ran on {found} ranks, the contract has {gpu_count} GPUs")
    return problems


def _busbw_table(result: Any, threshold: float) -> list[list[Any]]:
    rows: list[list[Any]] = [["size (B)", "out-of-place busbw (GB/s)", "in-place busbw (GB/s)", "#wrong",
                              "threshold (GB/s)"]]
    for r in result.rows:
        rows.append([r.size_bytes, r.oop_busbw_gbyte_s, "—" if r.ip_busbw_gbyte_s is None else r.ip_busbw_gbyte_s,
                     "N/A" if r.oop_wrong is None else r.oop_wrong, _fmt(threshold)])
    return rows


def nvlink_links(reading: Reading, index: int, links_per_gpu: int | None, speed_gbyte_s: float | None) -> Check:
    """Every NVLink of a GPU active, at least `links_per_gpu` of them, each at least `speed` (nvlink -s)."""
    subject = f"GPU{index}"
    wants = [f">= {links_per_gpu} active" if links_per_gpu else "", f"each >= {_fmt(speed_gbyte_s)} GB/s" if speed_gbyte_s else ""]
    required = ", ".join(w for w in wants if w)
    if reading.failure:
        return not_measured("nvlink.links", subject, required, reading.failure, "links", reading.evidence)
    links = reading.value.links.get(index)
    if links is None:
        return Check("nvlink.links", subject, FAILED, 0, "links", required,
                     f"GPU{index} not in `nvidia-smi nvlink -s` output (found GPUs {sorted(reading.value.links)})",
                     reading.evidence)
    active = {n: s for n, s in links.items() if s is not None}
    problems = []
    if links_per_gpu is not None and len(active) < links_per_gpu:
        down = sorted(n for n, s in links.items() if s is None)
        problems.append(f"{len(active)} of {links_per_gpu} links active" + (f" (inactive: {down})" if down else ""))
    slow = sorted(n for n, s in active.items() if speed_gbyte_s is not None and s + 1e-9 < speed_gbyte_s)
    if slow:
        problems.append(f"links {slow} below {_fmt(speed_gbyte_s)} GB/s ({', '.join(f'{active[n]:g}' for n in slow)} GB/s)")
    speeds = sorted({s for s in active.values()})
    shown = f"{len(active)} links active at {', '.join(f'{s:g}' for s in speeds)} GB/s" if active else "no link active"
    return Check("nvlink.links", subject, FAILED if problems else PASSED, len(active), "links", required,
                 shown + ("; " + "; ".join(problems) if problems else ""), reading.evidence)


def nvlink_errors(before: Reading, after: Reading, index: int) -> Check:
    """NVLink error counters of a GPU must not increase across the load (nvlink -e before and after)."""
    subject, required = f"GPU{index}", "== 0 new"
    evidence = before.evidence + after.evidence
    failure = before.failure or after.failure
    if failure:
        return not_measured("nvlink.errors", subject, required, failure, "errors", evidence)
    if index not in before.value.counters or index not in after.value.counters:
        return Check("nvlink.errors", subject, FAILED, None, "errors", required,
                     f"GPU{index} not in `nvidia-smi nvlink -e` output", evidence)
    grown = []
    for link, counters in sorted(after.value.counters[index].items()):
        for name, value in counters.items():
            old = before.value.counters[index].get(link, {}).get(name, 0)
            if value > old:
                grown.append(f"link {link} {name} {old} -> {value}")
    increase = after.value.total(index) - before.value.total(index)
    if grown:
        return Check("nvlink.errors", subject, FAILED, increase, "errors", required,
                     "error counters increased during the load: " + "; ".join(grown[:6]), evidence)
    return Check("nvlink.errors", subject, PASSED, 0, "errors", required,
                 f"no NVLink error counter increased ({after.value.total(index)} in total, as before the load)", evidence)


# ------------------------------------------------------------------ network

def no_match(clause: str, pattern: str, available: list[str], unit: str, required: str) -> Check:
    """A name or glob of the contract that matches nothing on the host fails; the message lists what there is."""
    shown = ", ".join(available) if available else "none"
    return Check(clause, pattern, FAILED, None, unit, required,
                 f"no {'interface' if clause == 'nics' else 'RDMA device'} matches {pattern!r} (host has: {shown})")


def unsafe_name(clause: str, name: str, unit: str, required: str) -> Check | None:
    from .probes.sysfs import SAFE_NAME

    if SAFE_NAME.match(name):
        return None
    return not_measured(clause, name, required, f"the host's name {name!r} is not safe to pass to a tool", unit)


def nic_speed(reading: Reading, name: str, min_gbit_s: float) -> Check:
    """Negotiated speed from ethtool, in Gb/s; no link or an unknown speed measures 0 and fails."""
    required = f">= {_fmt(min_gbit_s)}"
    if reading.failure:
        return not_measured("nics", name, required, reading.failure, "Gb/s", reading.evidence)
    link = reading.value
    if link.link_detected is None:
        return not_measured("nics", name, required, "ethtool did not report 'Link detected'", "Gb/s", reading.evidence)
    if not link.link_detected:
        return Check("nics", name, FAILED, 0, "Gb/s", required, f"{name}: no link (Link detected: no)", reading.evidence)
    if link.speed_mbps is None:
        return Check("nics", name, FAILED, 0, "Gb/s", required, f"{name}: Speed: Unknown!", reading.evidence)
    return at_least("nics", name, link.speed_mbps / 1000.0, min_gbit_s, "Gb/s", f"{name} speed", reading.evidence)


def rdma_bandwidth(reading: Reading | None, device: str, port: Any, line_rate_gbit_s: float | None,
                   rate_source: str, fraction: float, evidence: tuple[str, ...]) -> Check:
    """ib_write_bw BW average in Gb/s against fraction x line rate; above line rate is implausible.

    `reading` is None where no tool ran: no port, a port that is down, or no line rate to compare with.
    """
    evidence = evidence + (reading.evidence if reading is not None else ())
    required = f">= {fraction:g} x line rate"
    if port is None:
        return not_measured("rdma", device, required, f"{device} has no port in sysfs", "Gb/s", evidence)
    if not port.active:
        return Check("rdma", device, FAILED, 0, "Gb/s", required,
                     f"{device} port {port.port} is not Active/LinkUp: {port.state}", evidence)
    if line_rate_gbit_s is None:
        return not_measured("rdma", device, required, f"no line rate: port {port.port} reports none "
                            "and the contract gives no rdma.line_rate", "Gb/s", evidence)
    minimum = fraction * line_rate_gbit_s
    required = f">= {_fmt(minimum)}"
    if reading is None:
        return not_measured("rdma", device, required, "ib_write_bw did not run", "Gb/s", evidence)
    if reading.failure:
        return not_measured("rdma", device, required, reading.failure, "Gb/s", evidence)
    measured = reading.value.last[2]
    check = at_least("rdma", device, measured, minimum, "Gb/s", f"{device} ib_write_bw BW average", evidence,
                     {"line_rate_gbit_s": line_rate_gbit_s, "fraction": round(measured / line_rate_gbit_s, 4)},
                     maximum=line_rate_gbit_s, maximum_reason=f"the line rate, {rate_source}")
    ratio = f" ({measured / line_rate_gbit_s:.1%} of {_fmt(line_rate_gbit_s)} Gb/s line rate, {rate_source})"
    return replace(check, message=check.message + ratio)


def iperf3_throughput(readings: list[Reading], server: str, min_gbit_s: float, processes_note: str) -> Check:
    """Received throughput summed over every client process, in Gb/s; any client failing is not measured."""
    required = f">= {_fmt(min_gbit_s)}"
    evidence = tuple(name for r in readings for name in r.evidence)
    failures = [r.failure for r in readings if r.failure]
    if failures:
        return not_measured("iperf3", server, required, failures[0], "Gb/s", evidence)
    total = sum(r.value.received_bits_per_s for r in readings) / 1e9
    check = at_least("iperf3", server, total, min_gbit_s, "Gb/s", f"received from {server}", evidence)
    return replace(check, message=f"{check.message} ({processes_note})")


# ------------------------------------------------------------------ utilisation and health under load

def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _timeline(series: Any, min_percent: float | None, warmup_s: float) -> dict[str, Any]:
    rows = [[s.t_s, s.util_percent, s.sm_clock_mhz, s.power_w, s.temp_c] for s in series.samples]
    return {"timeline": {"fields": ["t_s", "util_percent", "sm_clock_mhz", "power_w", "temp_c"], "rows": rows,
                         "threshold": min_percent, "warmup_s": warmup_s}}


def utilisation(series: Any, index: int, min_percent: float, warmup_s: float, failure: str | None,
                evidence: tuple[str, ...]) -> Check:
    """The lowest GPU utilisation after warmup (mean and 5th percentile reported) against min_percent."""
    subject, required = f"GPU{index}", f">= {_fmt(min_percent)}"
    if series is None:
        return not_measured("utilisation", subject, required, failure or f"GPU{index} was not sampled", "%", evidence)
    details = _timeline(series, min_percent, warmup_s)
    steady = [s for s in series.samples if s.t_s >= warmup_s and s.util_percent is not None]
    if not steady:
        return not_measured("utilisation", subject, required, failure or f"no utilisation sample after the "
                            f"{_fmt(warmup_s)} s warmup", "%", evidence, details)
    values = [float(s.util_percent) for s in steady]
    lowest = min(steady, key=lambda s: s.util_percent)
    mean, p5 = sum(values) / len(values), _percentile(values, 0.05)
    stats = f"mean {mean:.1f} %, 5th percentile {p5:.1f} % over {len(values)} samples after the {_fmt(warmup_s)} s warmup"
    details["stats"] = {"min": lowest.util_percent, "mean": round(mean, 2), "p5": round(p5, 2), "samples": len(values)}
    if failure:
        return Check("utilisation", subject, FAILED, lowest.util_percent, "%", required,
                     f"the workload failed: {failure}", evidence, details)
    if lowest.util_percent < min_percent:
        return Check("utilisation", subject, FAILED, lowest.util_percent, "%", required,
                     f"GPU{index} dropped to {_fmt(lowest.util_percent)} % at t={lowest.t_s:.1f} s "
                     f"(below {_fmt(min_percent)} %); {stats}", evidence, details)
    return Check("utilisation", subject, PASSED, lowest.util_percent, "%", required,
                 f"GPU{index} lowest {_fmt(lowest.util_percent)} % >= {_fmt(min_percent)} %; {stats}", evidence, details)


def health_ecc(series: Any, index: int, failure: str | None, evidence: tuple[str, ...]) -> Check:
    subject, required = f"GPU{index}", "== 0"
    if series is None:
        return not_measured("health.ecc", subject, required, failure or "not sampled", "errors", evidence)
    count = series.health.get("ecc_volatile_uncorrected")
    if count is None:
        return not_measured("health.ecc", subject, required, "volatile ECC counters are not supported on this GPU "
                            "(or ECC is off)", "errors", evidence)
    return Check("health.ecc", subject, PASSED if count == 0 else FAILED, count, "errors", required,
                 f"{count} volatile uncorrectable ECC errors", evidence)


def health_row_remapping(series: Any, index: int, failure: str | None, evidence: tuple[str, ...]) -> Check:
    """No pending or failed row remapping; retired pages pending where the GPU retires pages instead."""
    subject, required = f"GPU{index}", "no pending or failed remapping"
    if series is None:
        return not_measured("health.row_remapping", subject, required, failure or "not sampled", None, evidence)
    rows = series.health.get("remapped_rows")
    if rows is not None:
        corrected, uncorrected, pending, failed = rows
        bad = bool(pending) or bool(failed)
        return Check("health.row_remapping", subject, FAILED if bad else PASSED, int(bool(pending)) + int(bool(failed)),
                     None, required, f"remapped rows: {corrected} correctable, {uncorrected} uncorrectable, "
                     f"pending {'yes' if pending else 'no'}, failure {'yes' if failed else 'no'}", evidence)
    retired = series.health.get("retired_pages_pending")
    if retired is None:
        return not_measured("health.row_remapping", subject, required, "neither row remapping nor page retirement "
                            "is supported on this GPU", None, evidence)
    return Check("health.row_remapping", subject, FAILED if retired else PASSED, int(retired), None,
                 "no retired pages pending", f"retired pages pending: {'yes' if retired else 'no'} "
                 "(this GPU retires pages instead of remapping rows)", evidence)


def health_throttle(series: Any, index: int, failure: str | None, evidence: tuple[str, ...]) -> Check:
    """No hardware slowdown, thermal slowdown or power brake at any moment of the load."""
    from .probes.nvml import BAD_THROTTLE, decode_reasons

    subject, required = f"GPU{index}", "no HW slowdown / thermal / power brake"
    if series is None or failure:
        return not_measured("health.throttle", subject, required, failure or "not sampled", None, evidence)
    masks = [s.throttle_reasons for s in series.samples if s.throttle_reasons is not None]
    if not masks:
        return not_measured("health.throttle", subject, required, "clock event reasons are not supported on this GPU",
                            None, evidence)
    seen = sorted({name for mask in masks for name in decode_reasons(mask)})
    bad = [s for s in series.samples if s.throttle_reasons and s.throttle_reasons & BAD_THROTTLE]
    details = {"throttle_reasons_seen": seen}
    if bad:
        first = bad[0]
        names = ", ".join(decode_reasons(first.throttle_reasons & BAD_THROTTLE))
        return Check("health.throttle", subject, FAILED, len(bad), "samples", required,
                     f"{len(bad)} of {len(masks)} samples throttled, first at t={first.t_s:.1f} s: {names}; "
                     f"all reasons seen: {', '.join(seen)}", evidence, details)
    return Check("health.throttle", subject, PASSED, 0, "samples", required,
                 f"no bad throttle reason in {len(masks)} samples; reasons seen: {', '.join(seen) or 'none'}",
                 evidence, details)


def health_pcie(series: Any, index: int, gen: int | None, width: int | None, warmup_s: float,
                failure: str | None, evidence: tuple[str, ...]) -> Check:
    """The PCIe link under load (after warmup: idle links downshift to save power) at least gen and width."""
    subject = f"GPU{index}"
    required = " ".join(x for x in (f"gen >= {gen}" if gen else "", f"x{width} or wider" if width else "") if x)
    if series is None or failure:
        return not_measured("health.pcie", subject, required, failure or "not sampled", None, evidence)
    steady = [s for s in series.samples if s.t_s >= warmup_s and s.pcie_gen is not None and s.pcie_width is not None]
    if not steady:
        return not_measured("health.pcie", subject, required, "no PCIe link reading under load", None, evidence)
    low_gen = min(s.pcie_gen for s in steady)
    low_width = min(s.pcie_width for s in steady)
    problems = []
    if gen and low_gen < gen:
        problems.append(f"gen {low_gen} < {gen}")
    if width and low_width < width:
        problems.append(f"x{low_width} < x{width}")
    shown = f"PCIe gen {low_gen} x{low_width} under load (lowest of {len(steady)} samples)"
    return Check("health.pcie", subject, FAILED if problems else PASSED, f"gen{low_gen} x{low_width}", None, required,
                 shown + (": " + ", ".join(problems) if problems else ""), evidence)
