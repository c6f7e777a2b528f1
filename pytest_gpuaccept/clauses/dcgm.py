"""The `dcgm` section: NVIDIA's own diagnostic (`dcgmi diag -r LEVEL -j`), one check per test per GPU.

Which tests a level runs is DCGM's (NVIDIA/DCGM nvvs/src/NvidiaValidationSuite.cpp, FillTestVectors, DCGM 4.6.0;
the run levels of docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html): level 1 the
deployment checks (`software`), level 2 adds `pcie` and `memory`, level 3 `diagnostic` (the GEMM),
`targeted_stress`, `targeted_power`, `memory_bandwidth` and `nvbandwidth` (DCGM 4.0 and later), level 4 `memtest`
and `pulse_test`. `eud: true` asks for the EUD plugin too (`eud`, root only): DCGM runs it within levels 3 and 4 and
as `dcgmi diag -r eud` below them (docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/eud.html).

A check passes only on DCGM's `Pass` with no error id beside it. `Fail`, `Warn`, a `Pass` that carries an error
(DCGM #284: an allocation error still marked Pass), a test summary that says Fail, an exit code the JSON contradicts
(dcgmi exits 226 or 205 when a test reported an error, 0 when none did) and a GPU serial or device ID DCGM reads
otherwise than NVML or sysfs fail. `Skip`, a test the level should run and DCGM did not (#55, #139), a GPU a
test's results do not name, and any other status are not measured. A test beyond the level's list (nccl_tests,
cpu_eud) that fails on a GPU fails that GPU's `software` check, naming it.

A Pass is DCGM's word; what DCGM does not print confirms that the document is of this run, this host and this card,
and each check's details `sources` name what did (a Pass refuted by one of them fails, naming it):
- the plugin's clock: the run took at least its level's floor (FLOOR_S, below), where the document passes a test of
  that level that runs for a set time;
- NVML's driver version: the driver DCGM says it detected;
- NVML's serial, UUID and PCI address of the GPU (DCGM 4's entity_groups give the serial; a serial DCGM calls
  `<<<NOT_SUPPORTED>>>` or leaves out where NVML reads one fails); sysfs's PCI device ID beside DCGM's;
- NVML's memory total beside the memory test's "Allocated N bytes (P%)" (P of CUDA's total, which the driver keeps
  a little below NVML's: an H100 80GB's CUDA total is 99.4 % of NVML's) and the diagnostic's free bytes;
- NVML's row remapping and retired pages (read with the host): a remapping pending or failed, or pages pending
  retirement, on a GPU whose deployment checks (`software`) pass. DCGM's "Page Retirement/Row Remap" check fails such
  a GPU (nvvs/src/Software.cpp, checkRowRemapping and checkPageRetirement).
A document that names its GPUs by nothing of their own (DCGM 3.x before 3.3: no serial) cannot be confirmed to be
this card's: its checks name DCGM as their one source and say what else agreed (`unconfirmed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from .. import schema
from ..measurements import GpuModels, HostReading
from ..probes import dcgm
from ..probes._run import Reading, ToolRun
from ..probes.sysfs import sysfs_bus_id
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import bytes_to_gb
from ..verdict import Check, Verdict
from .base import Clause, HostNames, Section
from .sources import UNCONFIRMED, with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.dcgm import Diag, Result
    from ..probes.nvml import Gpu
    from ..session import Session

# The tests each run level adds (the module docstring gives the source); a level runs its own and every lower one's.
LEVEL_TESTS = {1: (dcgm.SOFTWARE,), 2: ("pcie", "memory"),
               3: ("diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth", "nvbandwidth"),
               4: ("memtest", "pulse_test")}
EUD = "eud"
# How long a run may take unless tools.timeout says otherwise: DCGM's docs give seconds for level 1, about two
# minutes for 2, about 15 for 3, and longer for 4 (an hour and more on 8 GPUs).
LEVEL_TIMEOUT_S = {1: 600.0, 2: 1800.0, 3: 7200.0, 4: 14400.0}
EUD_TIMEOUT_S = 7200.0
# The least time a run takes whose document passes a test of the level that runs for a set time (TIMED). Published:
# `dcgmi diag -r` "1 Quick deployment checks, normally lasting seconds; 2 Medium validation, normally lasting
# approximately two minutes; 3 Long hardware diagnostics, normally lasting approximately 15 minutes; 4 Extended"
# (docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html) and the run levels
# table "r1 Seconds, r2 < 2 mins, r3 < 30 mins, r4 1-2 hours" (docs.nvidia.com/datacenter/dcgm/latest/user-guide/
# dcgm-diagnostics.html, Run Levels and Tests); DCGM's own default durations (NVIDIA/DCGM 4.6.0, the same since 3.0.4):
# targeted_stress 30 s, targeted_power 120 s, diagnostic 180 s (nvvs/plugin_src/*/), memtest 600 s. Each floor is
# well below them, so that an honest fast host passes: level 2 5 s (1/24 of its two minutes: CUDA started on every
# GPU, the whole framebuffer written and read, the PCIe copies), level 3 30 s (the shortest of its timed tests alone,
# 1/30 of its 15 minutes), level 4 300 s (half of memtest's 600 s). Level 1 has none ("seconds").
FLOOR_S = {2: 5.0, 3: 30.0, 4: 300.0}
PUBLISHED = {2: "about two minutes", 3: "about 15 minutes", 4: "one to two hours"}
TIMED = {"pcie": 2, "memory": 2, "diagnostic": 3, "targeted_stress": 3, "targeted_power": 3, "memtest": 4}
# DCGM's memory test allocates P % of CUDA's total; CUDA's total is NVML's less what the driver keeps (0.6 % on an
# H100 80GB, 1.3 % on a T4 with ECC). The total DCGM's line implies may lie this far from NVML's and be this card's.
CUDA_TOTAL_OF_NVML = (0.90, 1.01)
DCGM = "DCGM (dcgmi diag)"
CLOCK = "the plugin's clock"


@dataclass(frozen=True, slots=True)
class Dcgm:
    level: int
    eud: bool


SECTION = Section("dcgm", {"level": Key(schema.whole(1, 4), required=True), "eud": Key(schema.boolean, default=False)},
                  Dcgm, "NVIDIA DCGM diagnostics (dcgmi diag) at a run level", needs_gpu_count=True)


def level_tests(section: Dcgm) -> tuple[str, ...]:
    """The tests DCGM runs at the section's level, and eud where asked."""
    tests = tuple(t for level in range(1, section.level + 1) for t in LEVEL_TESTS[level])
    return tests + ((EUD,) if section.eud else ())


@dataclass(frozen=True, slots=True)
class GpuTests:
    """GPU<i>/<test> for each of gpus.count GPUs and each test the level runs."""

    describe: str = "`GPU<i>/<test>`, one per GPU and test the level runs (`software`, `pcie`, `memory`, ...)"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.gpu_test(i, test) for i in range(gpu_count(contract)) for test in level_tests(section)]


@dataclass(frozen=True, slots=True)
class DcgmRun:
    """One `dcgmi diag -j` run and what its JSON says."""

    run: ToolRun | None
    reading: Reading[Diag]
    asked: str  # the -r argument: "1".."4" or "eud"


@dataclass(frozen=True, slots=True)
class DcgmRuns:
    level: DcgmRun
    eud: DcgmRun | None  # its own run, where the level does not include EUD
    host: HostReading
    models: GpuModels
    # NVML's health of each GPU as read with the host (its `remapped_rows`, `retired_pages_pending`); {} where the
    # reading has none (a recording made without them)
    health: dict[int, dict[str, Any]] = field(default_factory=dict)

    def of(self, test: str) -> DcgmRun:
        return self.eud if test == EUD and self.eud is not None else self.level

    @property
    def evidence(self) -> tuple[str, ...]:
        runs = [self.level] + ([self.eud] if self.eud else [])
        return tuple(e for r in runs for e in r.reading.evidence) + self.host.evidence + self.models.evidence


WORST = ("fail", "warn", "skip")  # in this order a GPU's results decide its status; anything else is unknown


def status_of(results: list[Result]) -> str:
    """The GPU's status over its results (a 3.x `software` has one per deployment check): the worst one."""
    statuses = [r.status for r in results]
    for status in WORST:
        if status in statuses:
            return status
    unknown = [s for s in statuses if s != "pass"]
    return unknown[0] if unknown else "pass"


def exit_contradiction(run: ToolRun | None, diag: Diag) -> str | None:
    """What dcgmi's exit code says against its JSON: an error code with no test failing or warning, or 0 with one."""
    if run is None or run.returncode is None:
        return None
    # DCGM's exit code follows the errors its tests recorded, which its JSON prints as `warnings` (dcgmi/Diag.cpp).
    failing = any(r.status in ("fail", "warn") or r.findings for t in diag.tests for r in t.results)
    failing = failing or any(t.summary in ("fail", "warn") for t in diag.tests)
    if run.returncode in dcgm.EXIT_ERRORS and not failing:
        return (f"dcgmi exited {run.returncode} ({dcgm.EXIT_ERRORS[run.returncode]}) but its JSON reports no failed "
                "test and no error: the two cannot both be true")
    if run.returncode == 0 and failing:
        return "dcgmi exited 0 (no error) but its JSON reports a test that failed or warned: the two cannot both be true"
    return None


@dataclass
class Corroboration:
    """What the second sources said of one check: the problems they found (each a refutation) and the sources that
    were compared."""

    problems: list[str] = field(default_factory=list)
    agreed: list[str] = field(default_factory=list)
    identity: bool = False  # a serial, UUID or PCI address agreed with NVML's (and none disagreed)

    def add(self, problem: str | None, source: str) -> None:
        if problem:
            self.problems.append(problem)
        self.agreed.append(source)


def floor_of(diag: Diag) -> tuple[int, str] | None:
    """The highest level whose timed test (TIMED) the document passes on some GPU, and that test."""
    passed = [(TIMED[t.name], t.name) for t in diag.tests if t.name in TIMED
              for r in t.results if r.status == "pass" and r.entity_group == "GPU"]
    return max(passed) if passed else None


def run_problems(run: DcgmRun, diag: Diag, m: DcgmRuns, found: Corroboration) -> None:
    """What the plugin's clock and NVML's driver version say of the whole document."""
    timed = floor_of(diag) if run.asked != EUD else None
    if timed is not None and run.run is not None:
        level, test = timed
        took = run.run.duration_s
        found.add(None if took >= FLOOR_S[level] else
                  f"`dcgmi diag -r {run.asked} -j` returned in {took:.1f} s by {CLOCK}, and a run whose {test} passes "
                  f"takes at least {FLOOR_S[level]:g} s (level {level}: DCGM's documentation gives "
                  f"{PUBLISHED[level]}): this document was not made by this run", CLOCK)
    driver = m.host.host.driver
    if diag.driver and driver:
        found.add(None if diag.driver.strip() == driver.strip() else
                  f"DCGM's document says it detected driver {diag.driver}, NVML's driver is {driver}: not this host's "
                  "driver today", "NVML's driver version")


def _nvml_gpu(m: DcgmRuns, gpu: int) -> Gpu | None:
    return next((g for g in m.host.host.gpus if g.index == gpu), None)


def identity_problems(diag: Diag, m: DcgmRuns, gpu: int, found: Corroboration) -> None:
    """DCGM's serial, UUID and PCI address of the GPU against NVML's, its PCI device ID against sysfs's."""
    nvml = _nvml_gpu(m, gpu)
    serial, ok = diag.serials.get(gpu), True
    if nvml is not None and nvml.serial and (serial == dcgm.NOT_SUPPORTED or (not serial and diag.carries_identity)):
        said = "calls its serial not supported" if serial else "gives it no serial"
        found.add(f"DCGM's document {said} for GPU {gpu}, NVML reads GPU{gpu}'s serial {nvml.serial}: DCGM reads the "
                  "serial from NVML, so not this card's document", "NVML's serial")
        ok = False
    elif nvml is not None and serial and serial != dcgm.NOT_SUPPORTED:
        same = serial == nvml.serial.strip()
        found.add(None if same else f"DCGM's GPU {gpu} has serial {serial}, NVML's GPU{gpu} has "
                  f"{nvml.serial or 'none'}: not the same card", "NVML's serial")
        ok, found.identity = ok and same, found.identity or same
    for mine, theirs, what in ((diag.uuids.get(gpu), nvml.uuid if nvml else "", "UUID"),
                               (diag.bus_ids.get(gpu), nvml.pci_bus_id if nvml else "", "PCI address")):
        if mine and theirs:
            same = mine.lower() == theirs.lower() or (what == "PCI address" and sysfs_bus_id(mine) == sysfs_bus_id(theirs))
            found.add(None if same else f"DCGM's GPU {gpu} has {what} {mine}, NVML's GPU{gpu} has {theirs}: not the "
                      "same card", f"NVML's {what}")
            ok, found.identity = ok and same, found.identity or same
    found.identity = found.identity and ok
    device, sysfs = diag.device_ids.get(gpu), m.models.device_ids.get(gpu)
    if device and sysfs:
        found.add(None if device.lower() == sysfs.lower().removeprefix("0x") else
                  f"DCGM's GPU {gpu} has PCI device ID {device}, sysfs gives GPU{gpu} 0x{sysfs.removeprefix('0x')}",
                  "sysfs's PCI device ID")


def memory_problems(diag: Diag, m: DcgmRuns, gpu: int, found: Corroboration) -> None:
    """DCGM's memory test's allocation (the total it implies) and the diagnostic's free bytes against NVML's total."""
    nvml = _nvml_gpu(m, gpu)
    figures = dcgm.memory_figures(diag, gpu)
    if nvml is None or not nvml.memory_total_bytes or not (figures.allocated or figures.available):
        return
    total = nvml.memory_total_bytes
    low, high = CUDA_TOTAL_OF_NVML
    problems = [f"DCGM's memory test on GPU {gpu} allocated {bytes_to_gb(n):.1f} GB, {p:g} % of a "
                f"{bytes_to_gb(round(n * 100 / p)):.1f} GB card; NVML's GPU{gpu} has {bytes_to_gb(total):.1f} GB: "
                "not this card's memory" for n, p in figures.allocated if not low * total <= n * 100 / p <= high * total]
    problems += [f"DCGM's diagnostic on GPU {gpu} started from {bytes_to_gb(n):.1f} GB free; NVML's GPU{gpu} has "
                 f"{bytes_to_gb(total):.1f} GB in all: not this card's memory" for n in figures.available
                 if n > high * total]
    found.add("; ".join(problems[:1]) or None, "NVML's memory total")


def health_problems(m: DcgmRuns, gpu: int, found: Corroboration) -> None:
    """NVML's pending or failed row remapping and pages pending retirement, which DCGM's deployment checks fail."""
    health = m.health.get(gpu) or {}
    rows, retired = health.get("remapped_rows"), health.get("retired_pages_pending")
    if isinstance(rows, list) and len(rows) == 4 and all(isinstance(v, int) for v in rows):
        corrected, uncorrected, pending, failure = (int(v) for v in rows)
        bad = [w for w, n in (("a row remapping pending", pending), ("a row remapping that failed", failure)) if n]
        found.add(f"NVML's GPU{gpu} has {' and '.join(bad)} (NVML's remapped rows: {corrected} correctable, "
                  f"{uncorrected} uncorrectable, pending {pending}, failure {failure}), which DCGM's deployment check "
                  "'Page Retirement/Row Remap' fails: not this card's document today" if bad else None,
                  "NVML's row remapping")
    elif retired is not None:
        found.add(f"NVML's GPU{gpu} has retired pages pending, which DCGM's deployment check 'Page Retirement/Row "
                  "Remap' fails: not this card's document today" if retired else None, "NVML's retired pages")


def _details(diag: Diag, run: DcgmRun, results: list[Result], gpu: int) -> dict[str, Any]:
    details: dict[str, Any] = {"dcgm_version": diag.version, "driver_detected": diag.driver, "dcgm_json": diag.shape,
                               "command": f"dcgmi diag -r {run.asked} -j"}
    if run.run is not None and run.run.provenance:
        origin = run.run.provenance
        details["dcgmi"] = {k: origin.get(k) for k in ("path", "sha256", "package", "verified")}
    if results:
        details["results"] = [{"status": r.status, **({"check": r.check} if r.check else {}),
                               **({"info": list(r.info)} if r.info else {}),
                               **({"errors": [{"message": f.message, "error_id": f.error_id, "category": f.category,
                                               "severity": f.severity} for f in r.findings]} if r.findings else {})}
                              for r in results]
    if gpu in diag.serials:
        details["dcgm_serial"] = diag.serials[gpu]
    return details


def _said(results: list[Result], status: str) -> str:
    """DCGM's own words for the results of one status: each check, info line and error with its id."""
    words = []
    for r in results:
        if r.status == status or (status == "pass" and r.findings):
            words += [f"{r.check}: {f}" if r.check else str(f) for f in r.findings]
            words += list(r.info) if status != "pass" else []
    return "; ".join(dict.fromkeys(words))[:600] or "DCGM gave no reason"


def _extras(diag: Diag, section: Dcgm, gpu: int) -> list[str]:
    """Tests beyond the level's list that failed or warned on this GPU, with DCGM's words."""
    wanted = set(level_tests(section))
    return [f"{t.shown} {status_of(diag.for_gpu(t.name, gpu))}: {_said(diag.for_gpu(t.name, gpu), 'fail')}"
            for t in diag.tests if t.name not in wanted and status_of(diag.for_gpu(t.name, gpu)) in ("fail", "warn")]


def _judge_status(v: Verdict, test: str, gpu: int, results: list[Result], diag: Diag, details: dict[str, Any]) -> Check:
    status = status_of(results)
    shown = f"DCGM {test} on GPU{gpu}"
    if status == "fail":
        return v.failed("Fail", f"{shown}: Fail: {_said(results, 'fail')}", details)
    if status == "warn":
        return v.failed("Warn", f"{shown}: Warn (a warning is not a pass): {_said(results, 'warn')}", details)
    if status == "skip":
        return v.not_measured(f"{shown}: Skip: DCGM did not run it ({_said(results, 'skip')})", details)
    if status != "pass":
        return v.not_measured(f"{shown}: status {status!r}, which is none of Pass, Fail, Warn, Skip", details)
    errors = [f for r in results for f in r.findings if f.error_id]
    if errors:
        return v.failed("Pass", f"{shown}: Pass, but DCGM reported an error with it: {_said(results, 'pass')} "
                                "(a pass with an error is not a pass)", details)
    summaries = [t.summary for t in diag.named(test) if t.summary not in (None, "pass")]
    if "fail" in summaries:
        return v.failed("Pass", f"{shown}: Pass, but DCGM's summary of {test} says Fail", details)
    return v.passed("Pass", f"{shown}: Pass (DCGM {diag.version or 'of unknown version'})", details)


def corroborate(run: DcgmRun, diag: Diag, m: DcgmRuns, gpu: int, test: str) -> Corroboration:
    """Every second source's word on GPU `gpu`'s `test` in this document."""
    found = Corroboration()
    run_problems(run, diag, m, found)
    identity_problems(diag, m, gpu, found)
    memory_problems(diag, m, gpu, found)
    if test == dcgm.SOFTWARE:
        health_problems(m, gpu, found)
    return found


def _sourced(check: Check, found: Corroboration, gpu: int) -> Check:
    """The check with the sources that confirmed it; where no serial, UUID or PCI address confirmed that the document
    is this card's, DCGM alone, saying what else agreed."""
    if found.identity or found.problems:
        return with_sources(check, DCGM, *found.agreed)
    check = with_sources(check, DCGM)
    if check.details.get(UNCONFIRMED) is None:
        return check
    agreed = ", ".join(dict.fromkeys(found.agreed))
    why = (f"DCGM's document names no serial, UUID or PCI address of GPU {gpu} that NVML's could confirm: its verdict "
           f"is not confirmed to be this card's" + (f" ({agreed} agreed with it)" if agreed else ""))
    return replace(check, details={**check.details, UNCONFIRMED: why})


def judge(section: Dcgm, subject: Subject, m: DcgmRuns, contract: Contract) -> Check:
    assert subject.gpu is not None and subject.aspect is not None
    gpu, test = subject.gpu, subject.aspect
    run = m.of(test)
    v = CLAUSE.verdict(subject, "Pass", m.evidence)
    diag = run.reading.value
    if diag is None:
        return v.not_measured(run.reading.failure or "dcgmi diag did not run")
    if diag.runtime_error:
        return v.not_measured(f"DCGM could not run the diagnostic: {diag.runtime_error[:300]}")
    results = diag.for_gpu(test, gpu)
    details = _details(diag, run, results, gpu)
    if not diag.named(test):
        ran = ", ".join(dict.fromkeys(t.name for t in diag.tests)) or "none"
        older = "; DCGM 3 has none: it came with DCGM 4.0" if test == "nvbandwidth" and diag.shape == dcgm.SHAPE_3 else ""
        return v.not_measured(f"DCGM {diag.version or '(version not given)'} ran no {test} test (`dcgmi diag -r "
                              f"{run.asked}` runs {', '.join(level_tests(section))}; it ran: {ran}{older})", details)
    if not results:
        named = sorted({g for t in diag.named(test) for r in t.results for g in (r.gpus or ())})
        return v.not_measured(f"DCGM's {test} results name no GPU {gpu} (they name GPUs {named})", details)
    found = corroborate(run, diag, m, gpu, test)
    problems = [p for p in [exit_contradiction(run.run, diag)] if p] + found.problems
    extras = _extras(diag, section, gpu) if test == dcgm.SOFTWARE else []
    problems += ["DCGM also ran " + "; ".join(extras)] if extras else []
    if run.run is not None:
        details["duration_s"] = round(run.run.duration_s, 1)
    check = _judge_status(v, test, gpu, results, diag, details)
    if check.passed and problems:
        check = v.failed("Pass", f"DCGM {test} on GPU{gpu}: Pass, but " + "; and ".join(problems), details)
    return _sourced(check, found, gpu)


def gpuaccept_dcgm(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_host: HostReading,
                   gpuaccept_models: GpuModels) -> DcgmRuns:
    """`dcgmi diag -r LEVEL -j` once per run (and `-r eud` where the level does not include EUD), read per test."""
    section = SECTION.of(gpuaccept_contract)
    runner = gpuaccept_state.runner
    fixed = gpuaccept_contract.tools.timeout
    timeout = fixed.seconds if fixed else LEVEL_TIMEOUT_S[section.level]
    level = DcgmRun(*dcgm.run_diag(runner, str(section.level), timeout), asked=str(section.level))
    eud = None
    if section.eud and section.level < 3:
        eud = DcgmRun(*dcgm.run_diag(runner, EUD, fixed.seconds if fixed else EUD_TIMEOUT_S), asked=EUD)
    gpus = gpuaccept_state.host_reading().get("gpus")
    health = {int(g["index"]): {k: g.get(k) for k in ("remapped_rows", "retired_pages_pending")}
              for g in gpus if isinstance(g, dict) and isinstance(g.get("index"), int)} if isinstance(gpus, list) else {}
    return DcgmRuns(level, eud, gpuaccept_host, gpuaccept_models, health)


CLAUSE = Clause("dcgm", SECTION, "test_dcgm", GpuTests(), gpuaccept_dcgm, judge,
                "DCGM's own diagnostic per test and GPU: Pass passes; Fail, Warn, a Pass with an error, an exit code "
                "the JSON contradicts, or a Pass that what DCGM does not print refutes (the plugin's clock against the "
                "level's floor; NVML's driver, serial, UUID, PCI address, memory total, row remapping) fail; Skip or a "
                "test not run is not measured")
CLAUSES = (CLAUSE,)
MEASUREMENTS = (gpuaccept_dcgm,)
