"""The `sdc` section: silent data corruption, wrong answers that no bandwidth figure shows.

Two measurements, one check per host (`sdc`):
- nccl-tests' all_reduce with every iteration checked (`-n N -c N`, `iterations` each), sizes doubling up to `size`:
  any `#wrong` other than 0 fails, naming the size and the GPUs the rank lines place the run on (nccl-tests counts
  the wrong elements over every rank together: which rank's are wrong it does not say). The second word is the
  plugin's own: the run's time by its clock against the timed and checked iterations the table claims, and the rank
  lines' GPUs against NVML (allreduce.not_this_run).
- Our seeded fp32 GEMM (`pytest_gpuaccept.workloads.sdc_gemm`) on every GPU, `iterations` times: every GPU of one
  model must give the same bits every time, and a sample of elements must agree with the CPU's float64 values within
  the rounding of float32 summation. Without PyTorch it is not run where the contract leaves `gemm` unsaid (said in
  the check), and not measured where it says `gemm: true`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .. import schema
from ..measurements import HostReading
from ..probes import ParseError, nccl_tests, sdc_gemm
from ..probes._run import Reading, ToolRun, parse_run
from ..probes.nccl_tests import NcclResult, asked_checks, asked_iters
from ..probes.sdc_gemm import Element, SdcGemm
from ..probes.sysfs import pci_address, sysfs_bus_id
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Size, human_bytes, parse_size
from ..verdict import Check
from . import allreduce
from .base import Clause, HostWide, Section
from .shared import GET_TORCH
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.nvml import Host
    from ..session import Session

DEFAULT_SIZE = parse_size("1 GiB")
RELATIVE_TOLERANCE = 1e-4  # float32 sums of n products in another order, against float64: ~1e-6 at n=4096
MISSING_TORCH = "PyTorch is not installed"  # what workloads.torch_missing prints (exit code 3)


@dataclass(frozen=True, slots=True)
class Sdc:
    iterations: int
    size: Size | None  # None: the allreduce section's max_bytes, else 1 GiB
    gemm: bool | None  # None: where PyTorch is found


def _cross_check(section: Sdc, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    if section.size is not None and section.size.nbytes < 8:
        return [("sdc.size", f"expected at least 8 B (one float of each of two ranks), got {section.size}")]
    return []


SECTION = Section(
    "sdc",
    {"iterations": Key(schema.whole(1, 10000), default=20), "size": Key(schema.size), "gemm": Key(schema.boolean)},
    Sdc, "silent data corruption: every all_reduce iteration checked, a seeded GEMM compared bit for bit",
    needs_gpu_count=True, cross_check=_cross_check)


@dataclass(frozen=True, slots=True)
class SdcRuns:
    """The checked all_reduce sweep and the GEMM (None where `gemm: false`), with NVML's view of the host."""

    sweep: Reading[NcclResult]
    size_bytes: int
    iterations: int
    gemm: Reading[SdcGemm] | None
    host: Host | None

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.sweep.evidence + (self.gemm.evidence if self.gemm else ())


def checked_size(contract: Contract) -> int:
    """`sdc.size`, else the allreduce section's max_bytes, else 1 GiB."""
    section = SECTION.of(contract)
    if section.size is not None:
        return section.size.nbytes
    other = allreduce.SECTION.get(contract)
    return other.max_bytes.nbytes if other is not None else DEFAULT_SIZE.nbytes


def read_sweep(run: ToolRun) -> Reading[NcclResult]:
    """The checked run's table, read even where nccl-tests exited non-zero (it does when a check fails: the rows
    with their #wrong are the finding); a run that did not finish (timeout, not started) has no table."""
    if run.error or run.timed_out or not run.stdout.strip():
        return Reading(run, None, run.failure or f"`{run.command}` printed nothing")
    try:
        return Reading(run, nccl_tests.parse_all_reduce(run.stdout), None)
    except ParseError as exc:
        return Reading(run, None, run.failure or f"cannot read the output of `{run.command}`: {exc}")


def gpuaccept_sdc(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_host: HostReading) -> SdcRuns:
    """The checked all_reduce sweep (`-n iterations -c iterations`, up to `size`) and, unless `gemm: false`, the seeded
    GEMM on every GPU (`iterations` times each): once per run."""
    runner = gpuaccept_state.runner
    section = SECTION.of(gpuaccept_contract)
    gpus, size = gpu_count(gpuaccept_contract), checked_size(gpuaccept_contract)
    run = nccl_tests.run_all_reduce(runner, nccl_tests.check_args(gpus, size, section.iterations), 1,
                                    key=f"sdc_all_reduce_perf_c{section.iterations}")
    gemm = None
    if section.gemm is not False:
        ran = runner.run("python", ["-m", sdc_gemm.MODULE, "--gpus", str(gpus), "--repeats", str(section.iterations)],
                         key="sdc_gemm")
        gemm = parse_run(ran, sdc_gemm.parse_sdc_gemm)
    return SdcRuns(read_sweep(run), size, section.iterations, gemm, gpuaccept_host.host)


# ------------------------------------------------------------------ the checked all_reduce


@dataclass
class Findings:
    """What the judge found, part by part: failures, reasons it could not measure, and what passed."""

    failed: list[str]
    unmeasured: list[str]
    passed: list[str]
    wrong: int = 0  # wrong or differing values counted


def rank_gpus(result: NcclResult, host: Host | None, gpus: int) -> str:
    """The GPUs the rank lines place the run on, as NVML names them where it can (`rank 0: GPU0 0000:18:00`)."""
    if not result.rank_lines:
        return "the output has no rank lines: which GPUs ran is unknown"
    by_bus: dict[int, list[tuple[int, tuple[int, int, int, int]]]] = {}
    if host is not None and not host.error:
        for gpu in host.gpus[:gpus]:
            address = pci_address(gpu.pci_bus_id) if gpu.pci_bus_id else None
            if address is not None:
                by_bus.setdefault(address[1], []).append((gpu.index, address))
    shown = []
    for rank in result.rank_lines:
        found = [index for index, address in by_bus.get(rank.bus, [])
                 if rank.address is None or rank.address == address[:3]]
        where = f"GPU{found[0]} " if len(found) == 1 else ""
        shown.append(f"rank {rank.rank}: {where}{rank.shown} on {rank.host}")
    return ", ".join(shown)


def checked_rows(result: NcclResult) -> list[list[Any]]:
    """The sweep as the report's table shows it: each size's wrong counts (N/A: not checked) and busbw."""
    rows: list[list[Any]] = [["size (B)", "#wrong out-of-place", "#wrong in-place", "out-of-place busbw (GB/s)"]]
    for r in result.rows:
        rows.append([r.size_bytes, "N/A" if r.oop_wrong is None else r.oop_wrong,
                     "N/A" if r.ip_wrong is None else r.ip_wrong, r.oop_busbw_gbyte_s])
    return rows


def judge_sweep(found: Findings, m: SdcRuns, gpus: int) -> dict[str, Any]:
    """The checked sweep: #wrong, the run's own shape, and the second word (the clock, NVML) on it."""
    run, result = m.sweep.run, m.sweep.value
    if result is None or run is None:
        found.unmeasured.append(f"all_reduce: {m.sweep.failure}")
        return {}
    details: dict[str, Any] = {"tables": [(f"checked sweep: {run.command}", checked_rows(result))]}
    wrong = result.wrong_rows
    if wrong:
        found.wrong += sum((r.oop_wrong or 0) + (r.ip_wrong or 0) for r in wrong)
        found.failed.append(f"all_reduce returned wrong sums: #wrong at {result.wrong_sizes(human_bytes)}, "
                            f"over {rank_gpus(result, m.host, gpus)} "
                            "(nccl-tests counts wrong elements over all ranks together)")
    if result.validation_off or result.check_column != "#wrong" or any(r.oop_wrong is None for r in result.rows):
        found.unmeasured.append("all_reduce: the results were not checked (`validation: 0`, or #wrong N/A): "
                                "the run did not check what it summed")
    largest = result.largest
    if largest is None:
        found.unmeasured.append("all_reduce: no result rows")
        return details
    if largest.size_bytes < m.size_bytes:
        found.failed.append(f"all_reduce: the checked sweep stopped at {human_bytes(largest.size_bytes)}, short of "
                            f"{human_bytes(m.size_bytes)}: the larger sizes were not checked")
    if result.ranks != gpus:
        found.failed.append(f"all_reduce: ran on {result.ranks or 'an unknown number of'} ranks, the contract has "
                            f"{gpus} GPUs")
    others = [line for line in result.error_lines if not wrong or "Out of bounds" not in line
              and "Test failure" not in line]
    if others:
        found.failed.append("all_reduce: errors in the output: " + " | ".join(repr(line[:160]) for line in others[:3]))
    if run.returncode not in (0, None) and not wrong:
        found.failed.append(f"all_reduce: `{run.command}` exited with code {run.returncode}")
    foreign = allreduce.not_this_run(result, run, m.host, gpus) + allreduce.unasked_sizes(result, run.argv)
    timed, checks = asked_iters(run.argv), asked_checks(run.argv)
    least = result.timed_seconds(timed + checks)
    if least > run.duration_s * 1.05 + 0.05 and not any("not a measurement" in p for p in foreign):
        foreign.append(f"the table reports {least:.2f} s of all_reduce work ({timed} timed and {checks} checked "
                       f"iterations per size), but the run took {run.duration_s:.2f} s by the plugin's clock: "
                       "the rows were printed without the work")
    found.failed += [f"all_reduce: {problem}" for problem in foreign]
    if not wrong and not found.failed:
        found.passed.append(f"all_reduce: #wrong 0 at every size up to {human_bytes(largest.size_bytes)}, "
                            f"{checks} checked iterations each")
    return details


# ------------------------------------------------------------------ the GEMM


def _missing_torch(reading: Reading[SdcGemm]) -> bool:
    run = reading.run
    return run is not None and run.returncode == 3 and MISSING_TORCH in run.stderr


def _nvml_names(result: SdcGemm, host: Host | None) -> tuple[dict[int, str], list[str]]:
    """Each GPU's model, by NVML where the workload's bus ID is one NVML lists (the second word on which GPU ran);
    and the GPUs whose bus ID NVML does not list here."""
    names = {gpu: r.name for gpu, r in result.gpus.items()}
    if host is None or host.error:
        return names, []
    nvml = {sysfs_bus_id(g.pci_bus_id): g for g in host.gpus if g.pci_bus_id}
    strangers = []
    for gpu, r in result.gpus.items():
        if not r.bus_id:
            continue
        match = nvml.get(sysfs_bus_id(r.bus_id))
        if match is None:
            strangers.append(f"GPU{gpu} at {r.bus_id}")
        else:
            names[gpu] = match.name
    return names, strangers


def _off_the_cpu(result: SdcGemm, gpu: int) -> str | None:
    """How GPU `gpu`'s sampled elements disagree with the CPU's float64 values beyond float32 rounding; None if not."""
    off = []
    for row, col, value in result.gpus[gpu].sample:
        expected = result.reference.get((row, col))
        if expected is None:
            continue
        relative = abs(value - expected) / max(abs(expected), 1e-30)
        if not relative <= RELATIVE_TOLERANCE:  # NaN fails too
            off.append((row, col, value, expected, relative))
    if not off:
        return None
    row, col, value, expected, relative = off[0]
    return (f"GPU{gpu}: {len(off)} of {len(result.gpus[gpu].sample)} sampled elements are off the CPU's float64 "
            f"reference; first [{row}, {col}]: {value!r}, expected {expected!r} (relative {relative:.1e} > "
            f"{RELATIVE_TOLERANCE:g})")


def _usable(found: Findings, section: Sdc, m: SdcRuns, gpus: int) -> SdcGemm | None:
    """The GEMM's output where it is this run's and whole; else None, with what the judge made of that in `found`."""
    reading = m.gemm
    if reading is None:
        found.passed.append("GEMM not asked (sdc.gemm: false)")
        return None
    if reading.value is None:
        if _missing_torch(reading) and section.gemm is None:
            found.passed.append("GEMM not run: PyTorch is not installed where the workload runs (sdc.gemm is true by "
                                "default only where PyTorch is found; `gemm: true` requires it)")
        elif _missing_torch(reading):
            found.unmeasured.append("GEMM: sdc.gemm is true, but PyTorch is not installed where the workload runs: "
                                    f"{GET_TORCH}")
        else:
            found.unmeasured.append(f"GEMM: {reading.failure}")
        return None
    result = reading.value
    if result.device != "cuda":
        found.unmeasured.append(f"GEMM: ran on the {result.device}, not on the GPUs")
        return None
    if result.repeats != m.iterations or not result.done:
        found.failed.append(f"GEMM: the output says {result.repeats} repeats{'' if result.done else ' and never done'}, "
                            f"the run asked {m.iterations}: not this run's output")
        return None
    absent = [i for i in range(gpus) if i not in result.gpus or len(result.gpus[i].digests) != m.iterations]
    if absent:
        found.failed.append(f"GEMM: GPU{', GPU'.join(map(str, absent))} reported no (or not every) result")
        return None
    return result


def _shown(first: Element | None) -> str:
    return f"; first [{first[0]}, {first[1]}]: {first[2]!r}, expected {first[3]!r}" if first else ""


def _each_gpu(found: Findings, result: SdcGemm, gpus: int, iterations: int) -> set[int]:
    """GPUs whose repeats differ from their first result, or whose sample is off the CPU's values: each said."""
    bad: set[int] = set()
    cells = result.n * result.n
    for gpu in range(gpus):
        mismatches = result.repeat_mismatches.get(gpu, [])
        if mismatches:
            repeat, difference = mismatches[0]
            found.failed.append(f"GEMM: GPU{gpu}'s repeat {repeat} differs from its first result in {difference.count} "
                                f"of {cells} elements{_shown(difference.first)}")
        elif len(set(result.gpus[gpu].digests)) > 1:
            found.failed.append(f"GEMM: GPU{gpu} gave {len(set(result.gpus[gpu].digests))} different results over "
                                f"{iterations} repeats of the same multiplication")
        if mismatches or len(set(result.gpus[gpu].digests)) > 1:
            bad.add(gpu)
        if (off := _off_the_cpu(result, gpu)) is not None:
            bad.add(gpu)
            found.failed.append(f"GEMM: {off}")
    return bad


def _across_gpus(found: Findings, result: SdcGemm, names: dict[int, str], gpus: int, bad: set[int]) -> None:
    """Within each model, the GPUs whose bits are not those of the largest group of GPUs that agree (and pass on
    their own): each named with its count of differing elements and the first."""
    cells = result.n * result.n
    for model in sorted(set(names[g] for g in range(gpus))):
        members = [g for g in range(gpus) if names[g] == model]
        groups: dict[str, list[int]] = {}
        for g in members:
            groups.setdefault(result.gpus[g].digests[0], []).append(g)
        if len(groups) == 1:
            continue
        trusted = [group for group in groups.values() if not set(group) & bad] or list(groups.values())
        reference = max(trusted, key=lambda group: (len(group), -group[0]))
        leader = reference[0]
        for g in (g for g in members if g not in reference):
            difference = result.compared.get((g, leader))
            count = f"{difference.count} of {cells} elements" if difference else "its digest"
            found.wrong += difference.count if difference else 1
            found.failed.append(f"GEMM: GPU{g}: {count} differ bitwise from GPU{leader}'s ({model}, "
                                f"{len(reference)} of {len(members)} GPUs agree)"
                                f"{_shown(difference.first if difference else None)}")


def judge_gemm(found: Findings, section: Sdc, m: SdcRuns, gpus: int) -> dict[str, Any]:
    """Every GPU the same bits every time, GPUs of one model the same bits, and a sample on the CPU's values; the
    details: the GEMM's size, library and each GPU's first digest."""
    result = _usable(found, section, m, gpus)
    if result is None:
        return {}
    details = {"gemm": {"n": result.n, "repeats": result.repeats, "torch": result.torch, "seed": result.seed,
                        "sha256": {f"GPU{g}": r.digests[0] for g, r in sorted(result.gpus.items())}}}
    names, strangers = _nvml_names(result, m.host)
    if strangers:
        found.failed.append(f"GEMM: {', '.join(strangers)}: NVML lists no GPU there: not this host's output")
    failed = len(found.failed)
    _across_gpus(found, result, names, gpus, _each_gpu(found, result, gpus, m.iterations))
    if len(found.failed) == failed and not strangers:
        models = ", ".join(sorted(set(names[g] for g in range(gpus))))
        found.passed.append(f"GEMM fp32 n={result.n} x{m.iterations} on {gpus} GPUs: bitwise identical per model "
                            f"({models}) and every time, sample within {RELATIVE_TOLERANCE:g} of the CPU's float64")
    return details


# ------------------------------------------------------------------ the check


def judge(section: Sdc, subject: Subject, m: SdcRuns, contract: Contract) -> Check:
    """No wrong sum at any size and iteration, and no GPU computing other bits than its peers or the CPU's values."""
    gpus = gpu_count(contract)
    v = CLAUSE.verdict(subject, "0", m.evidence, 0)
    found = Findings([], [], [])
    details = {**judge_sweep(found, m, gpus), **judge_gemm(found, section, m, gpus)}
    details["parts"] = {"failed": found.failed, "not_measured": found.unmeasured, "passed": found.passed}
    if found.failed:
        check = v.failed(found.wrong, "; ".join(found.failed), details)
    elif found.unmeasured:
        return v.not_measured("; ".join(found.unmeasured), details)
    else:
        check = v.passed(0, "no wrong value: " + "; ".join(found.passed), details)
    gemm_ran = m.gemm is not None and m.gemm.value is not None
    return with_sources(check, "nccl-tests' own check (-c) timed by the plugin's clock",
                        "our seeded GEMM against the CPU" if gemm_ran else "",
                        unconfirmed="nccl-tests' check alone: the GEMM was not run")


CLAUSE = Clause("sdc", SECTION, "test_sdc", HostWide(), gpuaccept_sdc, judge,
                "no wrong value: every all_reduce iteration checked up to `size` (`#wrong` 0), and a seeded GEMM "
                "bitwise identical on every GPU of a model and on the CPU's sample", "wrong values")
CLAUSES = (CLAUSE,)
MEASUREMENTS = (gpuaccept_sdc,)
