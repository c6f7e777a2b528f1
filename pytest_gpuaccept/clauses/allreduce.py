"""The `allreduce` section: out-of-place busbw at the contracted size (nccl-tests, or torch if the contract says)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .. import schema
from ..measurements import AllReduceRuns, GpuModels, HostReading
from ..models import PCIE_X16_GBYTE_S, fraction_note
from ..probes import nccl_tests, nvidia_smi, option_value
from ..probes._run import parse_run
from ..probes.nccl_tests import NcclResult, RankLine, Row, asked_iters
from ..probes.nvml import cuda_version
from ..probes.sysfs import pci_address, pci_name, sysfs_bus_id
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Bandwidth, Size, human_bytes, parse_size
from ..verdict import Check, fmt
from . import plausible
from .base import Clause, HostWide, Section
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes._run import ToolRun
    from ..probes.nvml import Host
    from ..session import Session

TOOLS = ("nccl-tests", "torch")
ALGOS = ("nvls",)
NCCL_INFO = {"NCCL_DEBUG": "INFO"}  # the run's own word on what NCCL set up (allreduce.algo)
TORCH_ALLREDUCE = "pytest_gpuaccept.workloads.torch_allreduce"


@dataclass(frozen=True, slots=True)
class AllReduce:
    min_busbw: Bandwidth
    max_bytes: Size
    min_bytes: Size
    repeats: int
    args: tuple[str, ...]
    tool: str
    algo: str | None = None  # "nvls": NCCL's INFO lines must show NVLink SHARP set up on every rank (allreduce.algo)


def _cross_check(allreduce: AllReduce, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    if algo := _algo_cross_check(allreduce):
        return algo
    low, high = allreduce.min_bytes.nbytes, allreduce.max_bytes.nbytes
    if low > high:
        return [("allreduce.min_bytes", f"expected at most max_bytes ({allreduce.max_bytes}), got {allreduce.min_bytes}")]
    below = low << ((high // low).bit_length() - 1)  # the largest size the doubling sweep (-f 2) reaches
    if below != high:
        # The sweep would stop short of max_bytes and every host would be rejected for it: say so now.
        return [("allreduce.max_bytes", f"expected a size the sweep from min_bytes ({allreduce.min_bytes}) reaches by "
                 f"doubling, got {allreduce.max_bytes} ({high} B); the nearest are {below} B and {below * 2} B")]
    return []


SECTION = Section(
    "allreduce",
    {"min_busbw": Key(schema.bandwidth, required=True), "max_bytes": Key(schema.size, default=parse_size("8 GiB")),
     "min_bytes": Key(schema.size, default=parse_size("8 MiB")), "repeats": Key(schema.whole(1, 100), default=1),
     "args": Key(schema.argv, default=()), "tool": Key(schema.one_of(*TOOLS), default="nccl-tests"),
     "algo": Key(schema.one_of(*ALGOS))},
    AllReduce, "the all_reduce collective over every GPU", needs_gpu_count=True, cross_check=_cross_check)

def judge(section: AllReduce, subject: Subject, m: AllReduceRuns, contract: Contract) -> Check:
    """Out-of-place busbw at the largest size, best of the clean runs; any sign of a bad run fails it."""
    minimum = section.min_busbw.gbyte_s
    gpus = gpu_count(contract)
    evidence = tuple(name for r in m.readings for name in r.evidence)
    v = CLAUSE.verdict(subject, f">= {fmt(minimum)}", evidence, minimum)
    tables = []
    problems: list[str] = []
    unknown: list[str] = []  # runs whose ranks cannot be placed on GPUs: not measured, unless a run failed
    best: Row | None = None
    for n, reading in enumerate(m.readings, 1):
        label = f"run {n}" if len(m.readings) > 1 else "run"
        result = reading.value
        if result is None or reading.run is None:
            problems.append(f"{label}: {reading.failure}")
            continue
        tables.append((f"{label}: {reading.run.command}", busbw_rows(result, minimum)))
        run_problems = _run_problems(result, section.max_bytes.nbytes, gpus)
        run_problems += not_this_run(result, reading.run, m.host, gpus)
        run_problems += unasked_sizes(result, reading.run.argv)
        if (unplaced := unplaced_ranks(result, m.host, gpus)) is not None:
            unknown.append(f"{label}: {unplaced}")
        if reading.run.returncode not in (0, None):
            run_problems.insert(0, f"exited with code {reading.run.returncode}")
        problems += [f"{label}: {p}" for p in run_problems]
        largest = result.largest
        if largest is not None and (best is None or largest.oop_busbw_gbyte_s > best.oop_busbw_gbyte_s):
            best = largest
    details: dict[str, Any] = {"tables": tables, "tool": m.tool}
    if m.readings and m.readings[0].value is not None:
        details.update(header_fields(m.readings[0].value, m.host))
    if problems:
        if best is None:
            return v.not_measured("; ".join(problems), details)
        return v.failed(best.oop_busbw_gbyte_s, "; ".join(problems), details)
    if unknown:
        return v.not_measured("; ".join(unknown), details)
    assert best is not None
    extra, note = fraction_note(best.oop_busbw_gbyte_s, *_published(m, gpus))
    cap = plausible.allreduce_cap(m.paths, gpus) if m.paths else plausible.Cap(None, "the paths were not read")
    runs = f" (best of {len(m.readings)} runs, {m.tool}{note}" if len(m.readings) > 1 else f" ({m.tool}{note}"
    where, suffix, found = f" at {human_bytes(best.size_bytes)}", f"{runs}{plausible.unchecked(cap)})", \
        {**details, **extra, **cap.details}
    check = plausible.over_ceiling(v, best.oop_busbw_gbyte_s, minimum, cap.gbyte_s * (1 + plausible.MARGIN)
                                   if cap.gbyte_s else None, f"physically impossible: {cap.path}, at most "
                                   f"{cap.gbyte_s or 0:g} GB/s + {plausible.MARGIN:.0%}", "busbw", found, where, suffix) \
        or v.at_least(best.oop_busbw_gbyte_s, minimum, "busbw", found, where=where, suffix=suffix)
    return plausible.confirmed(check, m.tool, cap)


def _published(m: AllReduceRuns, gpus: int) -> tuple[float | None, str]:
    """The one-way GPU interconnect figure of the slowest model among the GPUs: what busbw is set beside."""
    models = [m.models.model(i) for i in range(gpus)] if m.models else []
    if not models or any(model is None for model in models):
        return None, ""
    slowest = min((model for model in models if model is not None), key=lambda x: x.nvlink_gbyte_s or 0)
    if slowest.nvlink_gbyte_s:
        return slowest.nvlink_gbyte_s / 2, f"{slowest.name} NVLink, one direction"
    pcie = PCIE_X16_GBYTE_S.get(slowest.pcie_gen)
    return pcie, f"{slowest.name} PCIe Gen{slowest.pcie_gen} x16"


def _run_problems(result: NcclResult, max_bytes: int, gpu_count: int) -> list[str]:
    problems = []
    if result.error_lines:
        problems.append("errors in the output: " + " | ".join(repr(line[:160]) for line in result.error_lines[:3]))
    wrong = [r for r in result.rows if (r.oop_wrong or 0) > 0 or (r.ip_wrong or 0) > 0]
    if wrong:
        problems.append(f"#wrong is nonzero at {', '.join(human_bytes(r.size_bytes) for r in wrong[:5])}: results are corrupt")
    largest = result.largest
    if largest is None:
        problems.append("no result rows")
        return problems
    if result.check_column == "#wrong" and largest.oop_wrong is None:
        problems.append("results were not validated (#wrong is N/A): run with -c 1")
    if largest.size_bytes < max_bytes:
        problems.append(f"the sweep stopped at {human_bytes(largest.size_bytes)}, short of max_bytes {human_bytes(max_bytes)}: "
                        "the contracted size was not measured")
    if result.ranks != gpu_count:
        found = "an unknown number of" if result.ranks is None else str(result.ranks)
        problems.append(f"ran on {found} ranks, the contract has {gpu_count} GPUs")
    return problems


def not_this_run(result: NcclResult, run: ToolRun, host: Host | None, gpu_count: int) -> list[str]:
    """Why the output cannot be this run's measurement of this host's GPUs: ranks not on distinct GPUs that
    NVML lists, PIDs that are not the process gpuaccept started, more timed work in the table than the run's
    wall time held, or a busbw the row's own size and time do not give."""
    problems = []
    ranks = result.rank_lines
    if not ranks:
        problems.append("the output has no `# Rank ... Pid ... device ... [bus]` lines: where the ranks ran is unknown")
    if run.pid is not None:
        strangers = sorted({r.pid for r in ranks} - {run.pid})
        if strangers:
            problems.append(f"ranks ran as PID {', '.join(map(str, strangers[:4]))}, not as the process gpuaccept "
                            f"started (PID {run.pid}): this output is not this run's")
    if ranks and host is not None and not host.error:
        problems += _misplaced(ranks, _nvml_places(host, gpu_count), _cuda_order(host), host)
    problems += foreign_cuda(result, host)
    asked = asked_iters(run.argv)
    if result.iters is not None and result.iters != asked:
        problems.append(f"the output says iters: {result.iters}, the run was asked for {asked}: not this run's output")
    timed = result.timed_seconds(asked)
    if timed > run.duration_s * 1.05 + 0.05:
        problems.append(f"the table reports {timed:.2f} s of timed all_reduce work ({asked} iterations per size), "
                        f"but the run took {run.duration_s:.2f} s: not a measurement")
    largest = result.largest
    if largest is not None and largest.oop_time_us > 0 and largest.oop_algbw_gbyte_s > 0:
        algbw = largest.size_bytes / (largest.oop_time_us * 1e3)
        n = result.ranks or gpu_count
        busbw = algbw * 2 * (n - 1) / n  # nccl-tests' all_reduce factor (0 for one rank)
        if abs(busbw - largest.oop_busbw_gbyte_s) > 0.05 * max(busbw, 1e-9) + 0.02:
            problems.append(f"at {human_bytes(largest.size_bytes)} the row's time {largest.oop_time_us:g} us gives busbw "
                            f"{busbw:.2f} GB/s over {n} ranks, the row says {largest.oop_busbw_gbyte_s:g}: the table "
                            "does not add up")
    return problems


def _nvml_places(host: Host, gpu_count: int) -> dict[int, tuple[int, int, int]]:
    """Each contracted GPU's PCI (domain, bus, device) as NVML gives it (`00000001:00:00.0`), by index."""
    places = {}
    for gpu in host.gpus[:gpu_count]:
        address = pci_address(gpu.pci_bus_id) if gpu.pci_bus_id else None
        if address is not None:
            places[gpu.index] = address[:3]
    return places


def _cuda_order(host: Host) -> dict[int, int]:
    """NVML's index of the GPU at each CUDA ordinal, as CUDA's own device list of this run's environment orders them
    (probes/nvml.py: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER honoured, as in the tool gpuaccept starts with the
    same environment); empty where that list was not read."""
    cuda = host.cuda_devices
    if cuda is None or cuda.error is not None:
        return {}
    by_bus = {sysfs_bus_id(g.pci_bus_id): g.index for g in host.gpus if g.pci_bus_id}
    return {ordinal: by_bus[bus] for ordinal, bus in enumerate(cuda.bus_ids) if bus in by_bus}


def _candidates(rank: RankLine, places: dict[int, tuple[int, int, int]], order: dict[int, int]) -> list[int]:
    """The GPUs a rank's line can name: the one at its domain:bus:device; from an old bus-only line, every GPU on
    that bus, narrowed where several sit on it (PCI domains of their own, or devices of one bus) to the one at the
    line's CUDA device index (`order`: CUDA's device list), where that one is on the bus (one: placed; several:
    where it ran is unknown)."""
    if rank.address is not None:
        return [i for i, place in places.items() if place == rank.address]
    on_bus = [i for i, place in places.items() if place[1] == rank.bus]
    if len(on_bus) > 1 and order.get(rank.device) in on_bus:
        return [order[rank.device]]
    return on_bus


def _misplaced(ranks: tuple[RankLine, ...], places: dict[int, tuple[int, int, int]], order: dict[int, int],
               host: Host) -> list[str]:
    """Ranks on a GPU NVML does not list, ranks that share a GPU, and ranks whose line names another GPU model than
    NVML's GPU there, among those their lines place."""
    problems = []
    elsewhere = [r for r in ranks if not _candidates(r, places, order)]
    if elsewhere:
        problems.append("ranks on GPUs NVML does not list here: " + ", ".join(
            f"rank {r.rank} at {r.shown}" for r in elsewhere[:4]) +
            f" (NVML: {', '.join(f'GPU{i} {pci_name(p)}' for i, p in sorted(places.items()))})")
    names = {g.index: g.name for g in host.gpus}
    shared: dict[int, list[int]] = {}
    renamed = []
    for r in ranks:
        if len(found := _candidates(r, places, order)) == 1:
            shared.setdefault(found[0], []).append(r.rank)
            nvml = names.get(found[0], "")
            if r.name and r.name.strip().lower() != nvml.strip().lower():
                renamed.append(f"rank {r.rank}'s line names {r.name!r} at {pci_name(places[found[0]])}, where NVML "
                               f"has GPU{found[0]} {nvml!r}")
    if renamed:
        problems.append("; ".join(renamed[:4]) + ": not this host's output")
    crowded = {index: rs for index, rs in shared.items() if len(rs) > 1}
    if crowded:
        problems.append("ranks share a GPU: " + "; ".join(
            f"ranks {', '.join(map(str, rs))} all on {pci_name(places[index])} (GPU{index})"
            for index, rs in sorted(crowded.items())))
    return problems


def unplaced_ranks(result: NcclResult, host: Host | None, gpu_count: int) -> str | None:
    """Why where the ranks ran cannot be told, or None: an old bus-only rank line (`[0x00]`) names a bus that
    several of the host's GPUs sit on (in PCI domains of their own, or as devices of one bus), and its CUDA device
    index does not name one of them through CUDA's device list (not read). Never read as "shared": the line does not
    say which GPU, so the run is not measured."""
    if host is None or host.error:
        return None
    lined = {r.rank for r in result.rank_lines}
    if lined and (bare := sorted(set(range(result.ranks or 0)) - lined)):
        return (f"where ranks {', '.join(map(str, bare[:8]))} ran is unknown: their `# Rank` lines give no "
                "`Pid ... device N [address]`")
    places = _nvml_places(host, gpu_count)
    order = _cuda_order(host)
    unknown = [(r, found) for r in result.rank_lines if len(found := _candidates(r, places, order)) > 1]
    if not unknown:
        return None
    rank, found = unknown[0]
    ranks = ", ".join(str(r.rank) for r, _ in unknown)
    why = "CUDA's device list of this run was not read" if not order else \
        f"CUDA's device {rank.device} is not one of them"
    return (f"where ranks {ranks} ran is unknown: rank {rank.rank}'s line names PCI bus 0x{rank.bus:02x} alone "
            f"(`[0x{rank.bus:02x}]`, as nccl-tests before 2.14.1 prints it), "
            f"{', '.join(f'GPU{i} ({pci_name(places[i])})' for i in found)} all sit on that bus, and {why}: "
            "an nccl-tests that prints [domain:bus:device] tells which GPU each rank ran on")


def foreign_cuda(result: NcclResult, host: Host | None) -> list[str]:
    """NCCL's own `cudaDriverVersion N` lines (NCCL_DEBUG=INFO) against NVML's CUDA version: another is another
    host's output. Absent lines are unconfirmed (header_fields), never a failure."""
    if host is None or host.error or host.cuda is None:
        return []
    other = sorted({v for v in result.cuda_driver_versions if cuda_version(v) != host.cuda.strip()})
    if not other:
        return []
    return [f"NCCL's log says cudaDriverVersion {other[0]} (CUDA {cuda_version(other[0])}), but NVML here "
            f"says CUDA {host.cuda}: not this host's output"]


def header_fields(result: NcclResult, host: Host | None) -> dict[str, list[str]]:
    """What of the output's own word on where it ran NVML confirmed, and what the output does not say (unconfirmed):
    the GPU each rank line names, and NCCL's CUDA driver version where NCCL_DEBUG=INFO printed it."""
    if host is None or host.error:
        return {"header_unconfirmed": ["nccl-tests' rank lines and versions: NVML was not read"]}
    confirmed, unconfirmed = [], []
    if result.rank_lines:
        confirmed.append("GPU names and PCI buses of the rank lines")
    else:
        unconfirmed.append("GPU names and PCI addresses: no `# Rank` lines")
    if result.cuda_driver_versions and host.cuda:
        confirmed.append(f"CUDA {host.cuda} (NCCL's cudaDriverVersion)")
    else:
        unconfirmed.append("CUDA: NCCL's cudaDriverVersion is not in the output (NCCL_DEBUG=INFO prints it)")
    unconfirmed.append("driver: nccl-tests does not print it")
    return {"header_confirmed": confirmed, "header_unconfirmed": unconfirmed}


def asked_size(argv: tuple[str, ...] | list[str], *flags: str) -> int | None:
    """The last `-e N` / `--maxbytes N` (or `=N`) of a command line, as nccl-tests reads it: a K, M or G suffix
    is 1024, 1024^2 or 1024^3 (its parsesize); None where the flag is absent or not a size."""
    value = option_value(argv, *flags)
    if value is None:
        return None
    scale = {"k": 2**10, "m": 2**20, "g": 2**30}.get(value[-1:].lower(), 1)
    digits = value[:-1] if scale > 1 else value
    return int(digits) * scale if digits.isdigit() else None


def unasked_sizes(result: NcclResult, argv: tuple[str, ...] | list[str]) -> list[str]:
    """Why the table's sizes are not the ones the command asked for: a row above `-e`, or the judged (largest)
    size outside [-b, -e]. A table that says it measured more than it was asked is not this command's."""
    low, high = asked_size(argv, "-b", "--minbytes"), asked_size(argv, "-e", "--maxbytes")
    largest = result.largest
    if largest is None:
        return []
    if high is None:
        return [f"the command `{' '.join(argv)}` asked no -e (maxbytes): the size judged is not one it asked for"]
    above = max((r.size_bytes for r in result.rows if r.size_bytes > high), default=None)
    if above is not None:
        return [f"the table has a row at {human_bytes(above)} ({above} B), above the "
                f"`-e {high}` ({human_bytes(high)}) the command asked: not this command's measurement"]
    if low is not None and largest.size_bytes < low:
        return [f"the largest row, {human_bytes(largest.size_bytes)}, is below the `-b {low}` the command asked: "
                "not this command's measurement"]
    return []


def busbw_rows(result: NcclResult, threshold: float) -> list[list[Any]]:
    """The sweep as rows (header first), as the results' details and the report's table carry it."""
    rows: list[list[Any]] = [["size (B)", "out-of-place busbw (GB/s)", "in-place busbw (GB/s)", "#wrong",
                              "threshold (GB/s)"]]
    for r in result.rows:
        rows.append([r.size_bytes, r.oop_busbw_gbyte_s, "—" if r.ip_busbw_gbyte_s is None else r.ip_busbw_gbyte_s,
                     "N/A" if r.oop_wrong is None else r.oop_wrong, fmt(threshold)])
    return rows


def gpuaccept_allreduce(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_host: HostReading,
                        gpuaccept_models: GpuModels, gpuaccept_nvlink_counters_before: bool) -> AllReduceRuns:
    """Every all_reduce run the contract asks for (`repeats`), parsed; `tool` names what measured.

    nccl-tests' all_reduce_perf by default; PyTorch distributed only where the contract says `tool: torch`.
    Where nvlink.errors_stable asks, the NVLink error counters are read right before the first run
    (gpuaccept_nvlink_counters_before) and right after the last: nvlink.errors compares them across this load only.
    """
    runner = gpuaccept_state.runner
    section = SECTION.of(gpuaccept_contract)
    args = nccl_tests.all_reduce_args(gpu_count(gpuaccept_contract), section.min_bytes.nbytes,
                                      section.max_bytes.nbytes, section.args)
    readings = []
    for repeat in range(1, section.repeats + 1):
        if section.tool == "torch":
            run = runner.run("python", ["-m", TORCH_ALLREDUCE, *args[:6], "-f", "2"], key=f"torch_all_reduce.run{repeat}")
        else:
            run = nccl_tests.run_all_reduce(runner, args, repeat, env=NCCL_INFO if section.algo else None)
        readings.append(parse_run(run, nccl_tests.parse_all_reduce))
    if gpuaccept_nvlink_counters_before:
        nvidia_smi.run_nvlink_errors(runner, "after")
    tool = "PyTorch distributed (NCCL backend), not nccl-tests" if section.tool == "torch" else "nccl-tests"
    return AllReduceRuns(tuple(readings), tool, tuple(gpu.name for gpu in gpuaccept_host.host.gpus), gpuaccept_models,
                         gpuaccept_host.host, plausible.read_paths(gpuaccept_state, gpuaccept_models))


def _algo_cross_check(section: AllReduce) -> list[tuple[str, str]]:
    if section.algo is not None and section.tool != "nccl-tests":
        return [("allreduce.algo", f"expected tool: nccl-tests with algo ({section.algo}): NCCL's INFO lines of an "
                 f"nccl-tests run are what the check reads, got tool: {section.tool}")]
    return []


def nvls_switched(host: Host | None, gpus: int) -> bool | None:
    """Whether NVML shows every contracted GPU with an active NVLink to something that is not one of the host's GPUs
    (an NVSwitch: what NVLS multicasts through); None where NVML's links were not read."""
    if host is None or host.error or not host.gpus:
        return None
    ours = {sysfs_bus_id(g.pci_bus_id) for g in host.gpus if g.pci_bus_id}
    switched = []
    for gpu in host.gpus[:gpus]:
        if gpu.nvlinks is None:
            return None
        switched.append(any(link.active and link.remote_bus_id and sysfs_bus_id(link.remote_bus_id) not in ours
                            for link in gpu.nvlinks))
    return bool(switched) and all(switched)


def nvls_missing(seen: nccl_tests.NvlsSeen, ranks: int) -> str | None:
    """What NCCL's INFO lines say it chose instead of NVLS, in one line; None where every rank set up NVLS channels
    and nothing turned NVLS off."""
    setting = seen.off_by_setting()
    if setting:
        return f"NVLS is off: NCCL's log says {setting}"
    if seen.unavailable:
        return ("NCCL's log says NVLS multicast support is not available on dev "
                f"{', '.join(map(str, seen.unavailable))}")
    if not seen.nvls_channels:
        return ("NCCL's log has no `N coll channels, M nvls channels` line (NCCL before 2.17 has no NVLS): what it set "
                "up is unknown")
    zero = sum(1 for n in seen.nvls_channels if n == 0)
    chose = f"; NCCL connected {' and '.join(seen.others)}" if seen.others else ""
    if zero:
        return (f"{zero} of {len(seen.nvls_channels)} ranks set up 0 nvls channels "
                f"({max(seen.coll_channels, default=0)} coll channels){chose}")
    if len(seen.nvls_channels) < ranks:
        return f"only {len(seen.nvls_channels)} of {ranks} ranks logged their nvls channels{chose}"
    return None


def judge_algo(section: AllReduce, subject: Subject, m: AllReduceRuns, contract: Contract) -> Check:
    """NVLS in use: every run's NCCL INFO lines (NCCL_DEBUG=INFO, given on its command line) show each rank with
    NVLS channels and nothing turning NVLS off; NVML's NVLinks to an NVSwitch are the second word that it can be."""
    gpus = gpu_count(contract)
    evidence = tuple(name for r in m.readings for name in r.evidence)
    v = ALGO.verdict(subject, "> 0 nvls channels on every rank", evidence, 1)
    switched = nvls_switched(m.host, gpus)
    nvml = {True: "NVML shows every GPU's NVLinks going to an NVSwitch", False: "NVML shows no GPU with an NVLink to "
            "an NVSwitch", None: "NVML's NVLinks were not read"}[switched]
    details: dict[str, Any] = {"nvml": nvml}
    lowest: int | None = None
    for n, reading in enumerate(m.readings, 1):
        label = f"run {n}" if len(m.readings) > 1 else "run"
        result, run = reading.value, reading.run
        if result is None or run is None:
            return v.not_measured(f"{label}: {reading.failure}", details)
        foreign = not_this_run(result, run, m.host, gpus)
        if foreign:
            return v.failed(None, f"{label}: {'; '.join(foreign)}: NCCL's log there is not this run's word", details)
        seen = nccl_tests.parse_nvls(f"{run.stdout}\n{run.stderr}")
        details[f"{label}: NCCL INFO"] = {
            "nvls_channels": list(seen.nvls_channels), "multicast_available_on_dev": list(seen.available),
            "multicast_not_available_on_dev": list(seen.unavailable), "connected_nvls_lines": seen.connected_nvls,
            "settings": [f"NCCL_ALGO={a}" for a in seen.algo_env] + [f"NCCL_NVLS_ENABLE={e}" for e in seen.nvls_enable_env]}
        if not seen.info_lines:
            return v.not_measured(f"{label}: `{run.command}` printed no `NCCL INFO` line: NCCL_DEBUG=INFO did not take "
                                  "effect, so what NCCL set up is unknown", details)
        why = nvls_missing(seen, result.ranks or gpus)
        if why:
            could = "; NVML shows every GPU's NVLinks going to an NVSwitch: NVLS was possible" if switched else ""
            return v.failed(min(seen.nvls_channels, default=0), f"{label}: {why}{could} (`{run.command}`)", details)
        lowest = min(seen.nvls_channels) if lowest is None else min(lowest, *seen.nvls_channels)
    if lowest is None:
        return v.not_measured("no all_reduce run", details)
    if switched is False:
        return v.failed(lowest, f"NCCL's log says NVLS ({lowest} nvls channels per rank), but {nvml}: NVLS cannot run "
                                "here, the log is not this host's", details)
    check = v.passed(lowest, f"NVLS in use: every rank set up {lowest} or more nvls channels (NCCL's INFO lines)", details)
    return with_sources(check, "NCCL's INFO lines (NCCL_DEBUG=INFO)", "NVML's NVLinks to NVSwitches" if switched else "",
                        unconfirmed=f"NCCL's word alone: {nvml}")


CLAUSE = Clause("allreduce", SECTION, "test_allreduce_busbw", HostWide("all_reduce", "`all_reduce`"), gpuaccept_allreduce,
                judge, "out-of-place busbw at `max_bytes`, best of `repeats` runs", "GB/s")
ALGO = Clause("allreduce.algo", SECTION, "test_allreduce_algo", HostWide("all_reduce", "`all_reduce`"),
              gpuaccept_allreduce, judge_algo, "NCCL's INFO lines (NCCL_DEBUG=INFO) show `algo` (NVLS) set up on every rank",
              "nvls channels", lambda s: s.algo is not None)
CLAUSES = (CLAUSE, ALGO)
MEASUREMENTS = (gpuaccept_allreduce,)
