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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .. import schema
from ..measurements import GpuModels, HostReading
from ..probes import dcgm
from ..probes._run import Reading, ToolRun
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..verdict import Check, Verdict
from .base import Clause, HostNames, Section
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.dcgm import Diag, Result
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


def identity_problem(diag: Diag, m: DcgmRuns, gpu: int) -> str | None:
    """DCGM's serial and PCI device ID of the GPU against NVML's serial and sysfs's device ID (second sources)."""
    nvml = next((g for g in m.host.host.gpus if g.index == gpu), None)
    serial = diag.serials.get(gpu)
    if nvml is not None and serial and serial != dcgm.NOT_SUPPORTED and nvml.serial and serial != nvml.serial:
        return f"DCGM's GPU {gpu} has serial {serial}, NVML's GPU{gpu} has {nvml.serial}: not the same card"
    device, sysfs = diag.device_ids.get(gpu), m.models.device_ids.get(gpu)
    if device and sysfs and device.lower() != sysfs.lower().removeprefix("0x"):
        return f"DCGM's GPU {gpu} has PCI device ID {device}, sysfs gives GPU{gpu} 0x{sysfs.removeprefix('0x')}"
    return None


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
    problem = exit_contradiction(run.run, diag) or identity_problem(diag, m, gpu)
    extras = _extras(diag, section, gpu) if test == dcgm.SOFTWARE else []
    check = _judge_status(v, test, gpu, results, diag, details)
    if check.passed and (problem or extras):
        check = v.failed("Pass", f"DCGM {test} on GPU{gpu}: Pass, but {problem or 'DCGM also ran ' + '; '.join(extras)}",
                         details)
    second = "NVML's serial" if diag.serials.get(gpu, dcgm.NOT_SUPPORTED) != dcgm.NOT_SUPPORTED else ""
    return with_sources(check, "DCGM (dcgmi diag)", second,
                        unconfirmed="DCGM's verdict is its own: no second tool repeats its tests here")


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
    return DcgmRuns(level, eud, gpuaccept_host, gpuaccept_models)


CLAUSE = Clause("dcgm", SECTION, "test_dcgm", GpuTests(), gpuaccept_dcgm, judge,
                "DCGM's own diagnostic per test and GPU: Pass passes; Fail, Warn, a Pass with an error, an exit code "
                "the JSON contradicts or a serial NVML reads otherwise fail; Skip or a test not run is not measured")
CLAUSES = (CLAUSE,)
MEASUREMENTS = (gpuaccept_dcgm,)
