"""The `burnin` section: a sustained load of up to 24 hours, judged as NVML's records stream, never held.

The builtin training load, the GEMM, or the contract's own command runs on every GPU while NVML is read every
0.15 s, its error counters every 10 s (probes/nvml.py `stream_gpus`). Each record is written to the evidence as
it comes (`burnin-stream.jsonl`) and given to the GPU's watch (probes/nvml_stream.py), which keeps what the judges
read in memory that does not grow with the duration; the watch's summary is kept as `burnin.json`. Per GPU: the
least busy sliding window (and busy samples at an idle GPU's power and clock, as `utilisation` judges them), the lowest
SM clock window against its highest and against the model's boost clock, the power limit in the samples against the
one NVML read before the load, every throttle span longer than `max_throttle_s`, the temperature against the slowdown
threshold, any new ECC error or remapped row (with ECC on: NVML's mode read before the load), NVLink error counter
growth, and Xid events (beside the kernel log's). Each failure says when. A progress line comes every minute.

A burn-in that covers less than its duration (Ctrl-C or SIGTERM, the workload or the NVML stream ending early) is
never passed: what it saw fails where it failed, the rest is not measured. Interrupted, it judges what it saw before
the run unwinds, so the results keep it; the run is then INCOMPLETE, as every interrupted run is.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import schema
from ..bundle_files import Refused
from ..measurements import GpuModels
from ..probes import ParseError, kernel_log, nvml
from ..probes._run import Command, Reading, ToolRun
from ..probes.nvml import decode_reasons
from ..probes.nvml_stream import AT_POWER_LIMIT, BUSY_PERCENT, COUNTER_PARTS, GpuResult, Watch, records, results_of, window_seconds
from ..probes.recorded import Recorded
from ..probes.train import parse_first_steps
from ..schema import Key
from ..session import NVML_HOST_FILE
from ..subjects import Subject, gpu_count
from ..units import Duration, parse_duration
from ..verdict import Check, Outcome, Verdict, fmt
from .base import Clause, PerGpu, Section
from .shared import GET_TORCH
from .sources import with_sources
from .utilisation import HEALTH, IDLE_CLOCK, SAMPLE_INTERVAL_S, TRAIN, clock_floor, kernel_confirmed

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.kernel_log import KernelLog
    from ..session import Session

STREAM_FILE = "burnin-stream.jsonl"
SUMMARY_FILE = "burnin.json"
WINDOW_FILE = "burnin-window.json"
MAX_DURATION_S = 24 * 3600.0
STARTUP_LIMIT_S = 120.0  # a GPU first busy later than this after the launch failed to start
PROGRESS_S = 60.0  # a progress line this often (wall clock)
GEMM = "pytest_gpuaccept.workloads.gemm"
IDLE_SHARE = 0.25  # a window with this share of its samples busy at an idle GPU's power and clock is not busy
BEFORE_KEYS = ("power_limit_enforced_w", "power_limit_default_w", "ecc_mode_current", "ecc_mode_pending")


@dataclass(frozen=True, slots=True)
class Burnin:
    duration: Duration
    workload: str | tuple[str, ...]
    max_throttle_s: float
    min_percent: float


def _workload(value: Any, node: Any) -> str | tuple[str, ...]:
    if value == "gemm":
        return "gemm"
    if isinstance(value, str) and value != "builtin":
        raise ValueError(f"expected 'builtin', 'gemm' or an argv list such as ['torchrun', 'train.py'], got {value!r}")
    return schema.workload(value, node)


def _rules(section: Burnin, sections: Any) -> list[tuple[str, str]]:
    if section.duration.seconds > MAX_DURATION_S:
        return [("burnin.duration", f"expected at most 24 h, got {section.duration}")]
    return []


SECTION = Section(
    "burnin",
    {"duration": Key(schema.duration, default=parse_duration("30 min")), "workload": Key(_workload, default="builtin"),
     "max_throttle_s": Key(schema.number(0.0, MAX_DURATION_S), default=0.0),
     "min_percent": Key(schema.number(0.0, 100.0, low_open=True), required=True)},
    Burnin, "a sustained load of up to 24 h, judged as it streams (NVML)", needs_gpu_count=True, cross_check=_rules)


@dataclass(frozen=True, slots=True)
class BurnInRun:
    """The burn-in: the workload's run, what the watch kept of each GPU, and why the burn-in falls short if it does."""

    run: ToolRun | None
    gpus: dict[int, GpuResult]
    failure: str | None  # nothing could be measured (no driver, no PyTorch, no stream)
    stopped: str | None  # it covers less than its duration: why (interrupted, the workload or the stream ended)
    evidence: tuple[str, ...]
    elapsed_s: float = 0.0
    kernel: Reading[KernelLog] | None = None  # the kernel log after the load; None beside an NVML recording
    window: tuple[float, float] | None = None  # the load, in seconds since boot
    buses: dict[int, str] = field(default_factory=dict)
    models: GpuModels | None = None
    first_steps: dict[int, float] = field(default_factory=dict)  # the builtin load's own launch-to-first-step times
    before: dict[int, dict[str, Any]] = field(default_factory=dict)  # NVML's power limits and ECC mode before the load


def read_before(reading: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each GPU's power limits and ECC mode as NVML read them before the load (the host reading: `nvml-host.json`);
    a key the reading does not have (a recording made before it was read) is left out."""
    gpus = reading.get("gpus") if isinstance(reading, dict) else None
    return {int(g["index"]): {k: g[k] for k in BEFORE_KEYS if k in g} for g in gpus or []
            if isinstance(g, dict) and isinstance(g.get("index"), int)}


def when(t_s: float) -> str:
    """A time in the load as messages give it: `t=2400.0 s (40.0 min)`."""
    if t_s >= 3600:
        return f"t={t_s:.1f} s ({t_s / 3600:.2f} h)"
    return f"t={t_s:.1f} s ({t_s / 60:.1f} min)" if t_s >= 60 else f"t={t_s:.1f} s"


def _span(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


# ------------------------------------------------------------------ the stream: evidence, progress, the watch

class StreamFile:
    """An evidence file written record by record, hashed as it is written and sealed when closed (never read back)."""

    def __init__(self, state: Session, name: str) -> None:
        self.state, self.name = state, name
        self.digest = hashlib.sha256()
        self.handle: IO[bytes] | None = state.runner.evidence.claim(name).open("wb") if state.runner.keep else None

    def write(self, line: bytes) -> None:
        if self.handle is not None:
            self.handle.write(line)
            self.digest.update(line)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
            self.state.runner.evidence.seal_digest(self.name, self.digest.hexdigest())


class Burning:
    """One burn-in's stream: each record written to the evidence, given to the watch, and a progress line a minute."""

    def __init__(self, state: Session, section: Burnin, count: int, source: Path | None) -> None:
        self.state, self.section, self.count, self.source = state, section, count, source
        self.watch = Watch(section.duration.seconds)
        self.told = time.monotonic()

    def during(self, stop: threading.Event) -> dict[str, Any]:
        """run_during's sampling: the live NVML stream, or the recorded one at the speed it can be read."""
        sink = StreamFile(self.state, STREAM_FILE)
        try:
            if self.source is None:
                nvml.stream_gpus(self.count, SAMPLE_INTERVAL_S, self.section.duration.seconds, stop,
                                 lambda record: self.add(record, sink))
            else:
                self._replay(self.source, sink)
        except ParseError as exc:
            return self.watch.summary(f"the NVML stream could not be read on: {exc}", STREAM_FILE)
        except BaseException as exc:  # Ctrl-C, SIGTERM: judge what was seen, then unwind
            sink.close()
            why = (f"interrupted ({type(exc).__name__}: {exc}) at {when(self.watch.last_t)} of the "
                   f"{_span(self.section.duration.seconds)} burn-in")
            interrupted(self.state, self.watch.summary(why, STREAM_FILE))
            raise
        finally:
            sink.close()
        return self.watch.summary(stream=STREAM_FILE)

    def add(self, record: Any, sink: StreamFile, line: bytes | None = None) -> None:
        sink.write(line if line is not None else json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self.watch.add(record)
        if time.monotonic() - self.told >= PROGRESS_S:
            self.told = time.monotonic()
            say = self.state.runner.progress
            if say is not None:
                say(progress_line(self.watch, self.section))

    def _replay(self, source: Path, sink: StreamFile) -> None:
        """The recorded stream, line by line as it can be read (a file, or a pipe a generator feeds), up to the
        contract's duration: a longer recording ends there."""
        duration = self.section.duration.seconds
        with source.open("rb") as handle:
            for line, record in records(handle):
                t_s = record[1] if isinstance(record, list) else record.get("t_s") if isinstance(record, dict) else None
                if isinstance(t_s, (int, float)) and t_s > duration:
                    self.add({"end": True, "t_s": duration}, sink)
                    return
                self.add(record, sink, line if line.endswith(b"\n") else line + b"\n")


def progress_line(watch: Watch, section: Burnin) -> str:
    """`gpuaccept: burn-in 12/480 min: least busy GPU3 97.5 %; spans over 0 s: GPU5 1; Xid: none; counters grown: none`"""
    low = watch.lowest_busy()
    results = {i: g.result() for i, g in watch.gpus.items()}
    spans = [f"GPU{i} {sum(1 for s in r.spans if s[1] > section.max_throttle_s)}" for i, r in results.items()
             if r.longest_span and r.longest_span[1] > section.max_throttle_s]
    xids = [f"GPU{i} {r.xid_count}" for i, r in results.items() if r.xid_count]
    grown = [f"GPU{i} {name}" for i, r in results.items() for name, c in r.counters.items() if c["grew"]]
    return (f"gpuaccept: burn-in {watch.last_t / 60:.0f}/{section.duration.seconds / 60:.0f} min: "
            f"least busy {'GPU%d %g %%' % low if low else 'no GPU busy yet'}; throttle spans over "
            f"{fmt(section.max_throttle_s)} s: {', '.join(spans) or 'none'}; Xid: {', '.join(xids) or 'none'}; "
            f"counters grown: {', '.join(grown) or 'none'}")


def interrupted(state: Session, summary: dict[str, Any]) -> None:
    """A burn-in cut short by a signal: its summary kept as evidence, and each of its checks judged on what it saw
    (failed where it failed, else not measured) into the run's checks before the run unwinds. Only the process that
    judges the run holds them (under xdist a worker's measurement keeps the evidence only)."""
    state.runner.record_json(SUMMARY_FILE, summary)
    if not state.is_controller or SECTION.get(state.contract) is None:
        return
    try:
        gpus = results_of(summary)
    except ParseError:
        gpus = {}
    try:
        run = BurnInRun(None, gpus, None, str(summary.get("stopped")), (SUMMARY_FILE,),
                        float(summary.get("elapsed_s") or 0.0), models=state.gpu_models(),
                        before=read_before(state.host_reading()))
        checks = [replace(clause.judge(SECTION.of(state.contract), subject, run, state.contract), test=clause.test)
                  for clause in CLAUSES for subject in clause.subjects(state.contract, state.listings)]
    except Exception:  # never in the way of the interrupt: its checks are then "interrupted before it ran"
        return
    state.checks.update({(check.clause, check.subject): check for check in checks})


# ------------------------------------------------------------------ the measurement

def _command(state: Session, section: Burnin, count: int) -> tuple[Command | None, str | None]:
    """The burn-in's workload, or why it cannot run."""
    seconds = f"{section.duration.seconds + 60:g}"
    if section.workload in ("builtin", "gemm"):
        if state.runner.replay is None and importlib.util.find_spec("torch") is None:
            return None, f"PyTorch is not installed for the {section.workload} workload: {GET_TORCH}"
        if section.workload == "builtin":
            return Command("python", ("-m", TRAIN, "--gpus", str(count), "--duration", seconds), key="burnin_builtin"), None
        return Command("python", ("-m", GEMM, "--gpus", str(count), "--duration", seconds, "--window", "60"),
                       key="burnin_gemm"), None
    return Command(section.workload[0], tuple(section.workload[1:]), key="burnin_workload"), None


def _recorded_stream(state: Session) -> tuple[Path | None, str | None]:
    """The recorded stream a --gpuaccept-nvml recording names (`burnin.stream`, beside the recording), or why none."""
    assert state.nvml_recording is not None
    entry = state.host_reading().get("burnin")
    stream = entry.get("stream") if isinstance(entry, dict) else None
    if not isinstance(stream, str) or not stream:
        return None, f"the NVML recording {state.nvml_recording} has no burn-in stream (burnin.stream)"
    path = Path(stream) if Path(stream).is_absolute() else state.nvml_recording.parent / stream
    if not path.exists():
        return None, f"the NVML recording's burn-in stream {path} does not exist"
    return path, None


def _stopped(summary: dict[str, Any], run: ToolRun, duration_s: float, live: bool) -> str | None:
    """Why the burn-in covers less than its duration, or None where it covers all of it."""
    if summary.get("stopped"):
        return str(summary["stopped"])
    elapsed, interval = float(summary.get("elapsed_s") or 0.0), float(summary.get("interval_s") or SAMPLE_INTERVAL_S)
    failure = run.failure
    if failure:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        return f"the workload failed at {when(elapsed)}: {failure}" + (f"; its last output: {tail}" if tail else "")
    if not summary.get("ended"):
        return f"the NVML stream stopped at {when(elapsed)} without its end"
    if elapsed + 2 * interval + 1.0 < duration_s:
        ended = "; the workload ended by itself" if live and run.stopped_after_s is None else ""
        return f"the burn-in ended at {when(elapsed)}, before its {_span(duration_s)}{ended}"
    return None


def gpuaccept_burnin(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_models: GpuModels) -> BurnInRun:
    """Run the contract's burn-in on every GPU while NVML's records stream through the watch (once per run)."""
    state, section, count = gpuaccept_state, SECTION.of(gpuaccept_contract), gpu_count(gpuaccept_contract)
    host = state.host()
    if host.error and state.runner.replay is None:
        return BurnInRun(None, {}, host.error, None, (NVML_HOST_FILE,))
    command, missing = _command(state, section, count)
    source, no_stream = _recorded_stream(state) if state.nvml_recording is not None else (None, None)
    if command is None or no_stream:
        return BurnInRun(None, {}, missing or no_stream, None, ())
    buses = {g.index: g.pci_bus_id for g in host.gpus}
    before = read_before(state.host_reading())  # the session's one reading, taken before the load
    started = kernel_log.uptime()
    run = state.runner.run_during(command, section.duration.seconds, Burning(state, section, count, source).during,
                                  SUMMARY_FILE)
    ended = kernel_log.uptime()
    if state.runner.replay is not None:
        _keep_replayed_stream(state, state.runner.replay)
    evidence = (*run.evidence, SUMMARY_FILE)  # the stream is named in the summary (`stream`): the report never reads it
    if run.error:
        return BurnInRun(run, {}, run.error, None, run.evidence)
    summary = state.runner.reading(SUMMARY_FILE, lambda: {"error": "no burn-in summary was recorded"})
    try:
        gpus = results_of(summary)
    except ParseError as exc:
        return BurnInRun(run, {}, str(exc), None, evidence)
    if summary.get("error") and not any(r.samples for r in gpus.values()):
        return BurnInRun(run, {}, str(summary["error"]), None, evidence)
    kernel, window, tried = _kernel(state, started, ended)
    return BurnInRun(run, gpus, None, _stopped(summary, run, section.duration.seconds, source is None), (*evidence, *tried),
                     float(summary.get("elapsed_s") or 0.0), kernel, window, buses, gpuaccept_models,
                     parse_first_steps(run.stdout), before)


def _keep_replayed_stream(state: Session, replayed: Recorded) -> None:
    """A replayed bundle's stream, copied into this run's evidence a megabyte at a time (what its burnin.json names),
    no further than the size its manifest lists; a stream that is not as listed is not copied, and the summary that
    names it then fails to read."""
    if not replayed.has(STREAM_FILE):
        return
    sink = StreamFile(state, STREAM_FILE)
    try:
        for block in replayed.chunks(STREAM_FILE):
            sink.write(block)
    except (Refused, OSError):
        pass  # the summary's figures are read from the bundle's summary, which the manifest verified
    finally:
        sink.close()


def _kernel(state: Session, started: float | None, ended: float | None
            ) -> tuple[Reading[KernelLog] | None, tuple[float, float] | None, tuple[str, ...]]:
    """The kernel log after the load and the load's window on its clock; none beside an NVML recording (the log here
    is not the recorded host's)."""
    if state.nvml_recording is not None:
        return None, None, ()
    times = state.runner.reading(WINDOW_FILE, lambda: {"started_uptime_s": started, "ended_uptime_s": ended})
    if times.get("started_uptime_s") is None or times.get("ended_uptime_s") is None:
        return Reading(None, None, "the load's window on the boot clock (/proc/uptime) could not be read"), None, (WINDOW_FILE,)
    kernel, tried = kernel_log.read_xids(state.runner, after="burnin")
    return kernel, (float(times["started_uptime_s"]), float(times["ended_uptime_s"])), (WINDOW_FILE, *tried)


# ------------------------------------------------------------------ the judges

def _gpu(subject: Subject) -> int:
    assert subject.gpu is not None
    return subject.gpu


def _result(v: Verdict, m: BurnInRun, subject: Subject) -> GpuResult | Check:
    """The GPU's result, or the check saying why there is none."""
    index = _gpu(subject)
    if m.failure:
        return v.not_measured(m.failure)
    result = m.gpus.get(index)
    if result is None or not result.samples:
        found = f": the host has {len(m.gpus)} GPUs" if m.gpus and index not in m.gpus else ""
        return v.not_measured(f"GPU{index} was not sampled{found}" + (f" ({m.stopped})" if m.stopped else ""))
    return result


def _final(v: Verdict, check: Check, r: GpuResult, m: BurnInRun) -> Check:
    """A check that would pass, where the burn-in fell short: a GPU that stopped answering fails; a burn-in that
    covers less than its duration is not measured, saying what it saw. A failure stays what it is."""
    if check.outcome is not Outcome.PASSED:
        return check
    if r.lost_t_s is not None:
        return v.failed(None, f"GPU{r.index} stopped answering NVML at {when(r.lost_t_s)} of the burn-in ({r.lost_error}): "
                              "lost, not judged on what came before", check.details)
    if m.stopped:
        return v.not_measured(f"{m.stopped}; nothing failed in the {_span(m.elapsed_s)} it saw ({check.message})",
                              check.details)
    return check


def _timeline(r: GpuResult, threshold: float | None) -> dict[str, Any]:
    return {"timeline": {"samples": SUMMARY_FILE, "gpu": r.index, "threshold": threshold,
                         "warmup_s": r.busy_t_s if r.busy_t_s is not None else 0.0}}


def _startup(r: GpuResult, m: BurnInRun) -> dict[str, Any]:
    """The load's start-up on this GPU: NVML's first busy sample, and the workload's own first step where it says."""
    step = m.first_steps.get(r.index)
    return {"startup": {"first_busy_s": r.busy_t_s, **({"first_step_s": step} if step is not None else {})}}


def judge_utilisation(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """The least busy sliding window (a minute, half the load where shorter) from the GPU's first busy sample on,
    against min_percent; a GPU first busy more than STARTUP_LIMIT_S after the launch fails."""
    minimum = section.min_percent
    v = UTILISATION.verdict(subject, f">= {fmt(minimum)} over every {_span(window_seconds(section.duration.seconds))} window",
                            m.evidence, minimum)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    details = {**_timeline(r, minimum), **_startup(r, m)}
    if not r.utilisation_read:
        return v.not_measured(f"NVML gave no utilisation of GPU{r.index}", details)
    if r.busy_t_s is None:
        return v.failed(0, f"GPU{r.index} was never {fmt(BUSY_PERCENT)} % busy in the {_span(m.elapsed_s)} of the burn-in",
                        details)
    if r.busy_t_s > STARTUP_LIMIT_S:
        return v.failed(0, f"GPU{r.index} was first {fmt(BUSY_PERCENT)} % busy at {when(r.busy_t_s)}, more than "
                           f"{fmt(STARTUP_LIMIT_S)} s after the load started", details)
    if r.lowest_util is None:
        return _final(v, v.not_measured(f"no whole window after GPU{r.index} was first busy at {when(r.busy_t_s)}",
                                         details), r, m)
    mean, at = r.lowest_util
    low = f"; lowest sample {fmt(r.lowest_sample[0])} % at {when(r.lowest_sample[1])}" if r.lowest_sample else ""
    shown = (f"GPU{r.index}: the least busy window ended at {when(at)}, mean {fmt(mean)} %{low}; first busy at "
             f"{when(r.busy_t_s)}")
    idle, sources, unconfirmed = _busy_at_idle(r, m, section.duration.seconds)
    if idle:
        return with_sources(v.failed(0, f"{idle}: an idle GPU's power and clock, not busy; {shown}", details), *sources)
    check = v.judged(mean >= minimum, mean, shown + ("" if mean >= minimum else f" (below {fmt(minimum)} %)"), details)
    return _final(v, with_sources(check, *sources, unconfirmed=unconfirmed), r, m)


def _busy_at_idle(r: GpuResult, m: BurnInRun, duration_s: float) -> tuple[str | None, tuple[str, ...], str]:
    """(why the GPU's busy samples are not work, the sources that corroborated its utilisation, what could not be):
    utilisation's rule (clauses/utilisation.py) over the load's windows. The window with the largest share of samples
    NVML calls busy (50 %) while drawing under IDLE_POWER of the sample's enforced power limit: where that share is
    IDLE_SHARE or more and their mean SM clock is under IDLE_CLOCK of the model's boost clock, it is an idle GPU."""
    model = m.models.model(r.index) if m.models else None
    boost = float(model.boost_clock_mhz) if model is not None and model.boost_clock_mhz else None
    if not r.busy_samples:  # a summary made before the watch kept these, or no busy sample: the judge says which
        return None, ("NVML utilisation",), ""
    if not boost or not r.held_samples + r.free_samples:
        why = ("the model table has no boost clock of this GPU" if not boost else
               "NVML gave no power draw or enforced power limit beside its busy samples")
        return None, ("NVML utilisation",), f"NVML's utilisation alone: {why}"
    assert model is not None
    sources = ("NVML utilisation", "NVML power draw and enforced limit", "NVML SM clock",
               f"the model table's boost clock ({model.name})")
    if r.idlest is None:
        return None, sources, ""
    share, clock, power, limit, end = r.idlest
    if share < IDLE_SHARE or clock >= IDLE_CLOCK * boost:
        return None, sources, ""
    return (f"GPU{r.index}: {share:.0%} of the samples of the {_span(window_seconds(duration_s))} ending at {when(end)} "
            f"are at least {fmt(BUSY_PERCENT)} % busy (NVML) while drawing {fmt(power)} W ({power / limit:.0%} of its "
            f"{fmt(limit)} W enforced limit) at {fmt(clock)} MHz ({clock / boost:.0%} of the {fmt(boost)} MHz boost of a "
            f"{model.name}), their means"), sources, ""


def judge_clocks(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """The SM clock of the busy GPU over sliding windows: its lowest window at least min_percent of its highest (a
    card that slows down as the hours go by); and, as health.clocks judges it, against the model's boost clock: the
    lowest window of the busy samples not held by power (under AT_POWER_LIMIT of the sample's enforced limit) at least
    health's min_clock_fraction (CLOCK_FRACTION) of it. A power limit in the samples below the one NVML read before
    the load fails: a limit lowered for the load buys its clocks."""
    fraction = section.min_percent / 100.0
    v = CLOCKS.verdict(subject, f">= {fmt(section.min_percent)} % of its highest window", m.evidence)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    if r.lowest_clock is None or r.highest_clock is None:
        return _final(v, v.not_measured(f"no whole window with GPU{r.index} busy and its SM clock read"), r, m)
    (low, low_t), (high, high_t) = r.lowest_clock, r.highest_clock
    floor = fraction * high
    model = m.models.model(r.index) if m.models else None
    lowered = _limit_lowered(r, m)
    if lowered:
        return with_sources(v.failed(low, lowered, _timeline(r, None)), "NVML enforced power limit in the samples",
                            "NVML power limits read before the load")
    boosted = _against_boost(v, r, model, contract)
    if isinstance(boosted, Check):
        return boosted
    boost, sources, unconfirmed = boosted
    v = v.but(required=f">= {fmt(floor)} ({fmt(section.min_percent)} % of its highest window, {fmt(high)} MHz)",
              threshold=floor)
    shown = (f"GPU{r.index}: lowest SM clock window {fmt(low)} MHz ending at {when(low_t)}, highest {fmt(high)} MHz ending "
             f"at {when(high_t)} ({low / high:.0%}){boost}")
    check = v.judged(low >= floor, low, shown + ("" if low >= floor else f": below {fmt(section.min_percent)} % of its highest"),
                     _timeline(r, None))
    return _final(v, with_sources(check, *sources, unconfirmed=unconfirmed), r, m)


def _limit_lowered(r: GpuResult, m: BurnInRun) -> str | None:
    """Why the GPU's power limit during the load is not the one it had before: the lowest enforced limit in the
    samples under the enforced and the default limit NVML read before the load (set for the load, undone after)."""
    before = m.before.get(r.index, {})
    limits = [(float(w), what) for what, key in (("enforced", "power_limit_enforced_w"), ("default", "power_limit_default_w"))
              if isinstance(w := before.get(key), (int, float)) and w > 0]
    if r.power_limit_low is None or not limits:
        return None
    (during, at), (reference, what) = r.power_limit_low, min(limits)
    if during + 1e-9 >= reference:
        return None
    return (f"GPU{r.index}: the enforced power limit in the samples was {fmt(during)} W at {when(at)}, under the "
            f"{fmt(reference)} W {what} limit NVML read before the load ({during / reference:.0%} of it): a limit lowered "
            "for the load holds its clocks and power")


def _against_boost(v: Verdict, r: GpuResult, model: Any, contract: Contract
                   ) -> Check | tuple[str, tuple[str, ...], str]:
    """The busy GPU's clock against the model's boost clock (health.clocks' floor): a failed check, or (what the
    message says of it, the sources, what could not be confirmed)."""
    floor = clock_floor(contract, model)
    if model is None or floor is None or not model.boost_clock_mhz:
        return "", ("NVML SM clock",), "NVML's clock alone, set beside itself over time: no published boost clock"
    boost = float(model.boost_clock_mhz)
    sources = ("NVML SM clock", f"the model table's boost clock ({model.name})")
    if r.lowest_free_clock is not None:
        low, at = r.lowest_free_clock
        said = (f"the lowest window of its busy samples under {AT_POWER_LIMIT:.0%} of the power limit {fmt(low)} MHz ending "
                f"at {when(at)}, {low / boost:.0%} of the {fmt(boost)} MHz boost of a {model.name}")
        if low < floor:
            return with_sources(v.but(required=f">= {fmt(floor)} ({floor / boost:g} x the {fmt(boost)} MHz boost of a "
                                               f"{model.name})", threshold=floor).failed(
                low, f"GPU{r.index}: {said}, under {fmt(floor)} MHz with its power to spare: a clock held down (locked or "
                     f"application clocks?)", _timeline(r, None)), *sources)
        return f"; {said}", sources, ""
    if r.held_samples:
        return (f"; at its power limit in {r.held_samples} of {r.busy_samples} busy samples: its clock is what that power "
                f"buys (the boost clock of a {model.name} is {fmt(boost)} MHz)"), sources, ""
    return (f"; the boost clock of a {model.name} is {fmt(boost)} MHz", ("NVML SM clock",),
            "NVML's clock alone, set beside itself over time: no power draw and enforced limit beside its busy samples")


def judge_throttle(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """Every span of samples with a bad clock event reason (HW slowdown, thermal, power brake) longer than
    max_throttle_s fails; the first such span and the longest are named with their times."""
    limit = section.max_throttle_s
    v = THROTTLE.verdict(subject, f"no throttle span longer than {fmt(limit)} s", m.evidence, limit)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    if not r.reasons_read:
        return v.not_measured(f"NVML gave no clock event reasons of GPU{r.index}")
    over = [s for s in r.spans if s[1] > limit]
    longest = r.longest_span
    details = {"throttle": {"spans": r.span_count, "throttled_s": r.span_total_s,
                            "longest": list(longest) if longest else None}, **_timeline(r, None)}
    if longest is not None and longest[1] > limit:
        first = over[0] if over else longest
        more = f"{len(over)}{'+' if r.span_count > len(r.spans) else ''} span(s)" if over else "a span"
        return with_sources(v.failed(longest[1], f"GPU{r.index}: {more} longer than {fmt(limit)} s, the first at {when(first[0])} "
                                                 f"lasting {fmt(first[1])} s ({', '.join(decode_reasons(first[2]))}); the longest "
                                                 f"{fmt(longest[1])} s at {when(longest[0])}; {r.span_count} span(s), "
                                                 f"{fmt(r.span_total_s)} s throttled in all", details), "NVML")
    shown = (f"GPU{r.index}: no throttle span longer than {fmt(limit)} s in {r.reasons_read} samples"
             + (f" ({r.span_count} shorter, the longest {fmt(longest[1])} s)" if longest else ""))
    return _final(v, with_sources(v.passed(longest[1] if longest else 0, shown, details), "NVML",
                                  unconfirmed="NVML's clock event reasons alone"), r, m)


def judge_temperature(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """The GPU's temperature stays below its slowdown temperature: NVML's threshold of this GPU, and the model's where
    the table gives one (the lower of the two)."""
    v = TEMPERATURE.verdict(subject, "below the slowdown temperature", m.evidence)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    if not r.temps:
        return v.not_measured(f"NVML gave no temperature of GPU{r.index}")
    model = m.models.model(r.index) if m.models else None
    limits = [(float(r.slowdown_temp_c), "NVML's slowdown threshold")] if r.slowdown_temp_c is not None else []
    if model is not None and model.slowdown_temp_c is not None:
        limits.append((float(model.slowdown_temp_c), f"the published slowdown temperature of a {model.name}"))
    if not limits:
        return v.not_measured(f"neither NVML nor the model table gives GPU{r.index}'s slowdown temperature")
    limit, source = min(limits)
    v = v.but(required=f"< {fmt(limit)} ({source})", threshold=limit)
    hottest = max(r.temps)
    reached = r.first_at_or_above(limit)
    sources = [name for _value, name in limits]
    if reached is not None:
        return with_sources(v.failed(reached[1], f"GPU{r.index} reached {reached[1]} C at {when(reached[0])}, at or above "
                                                 f"{source} of {fmt(limit)} C (hottest {hottest} C)", _timeline(r, None)),
                            *sources)
    check = v.passed(hottest, f"GPU{r.index} hottest {hottest} C (first at {when(r.temps[hottest])}), below {source} of "
                              f"{fmt(limit)} C", _timeline(r, None))
    return _final(v, with_sources(check, *sources, unconfirmed="NVML's threshold alone: the model table publishes no "
                                                             "slowdown temperature of this GPU"), r, m)


def _grown(name: str, counter: dict[str, Any]) -> str:
    """`volatile corrected 0 -> 3, uncorrected 0 -> 1, first seen at t=...`: what grew of a counter group, and when."""
    when_t, values = counter["grew"]
    first = counter["first"] or []
    parts = [f"{part} {a} -> {b}" for part, a, b in zip(COUNTER_PARTS[name], first, values)
             if a is not None and b is not None and b > a]
    return f"{', '.join(parts)}, first seen at {when(float(when_t))}"


def _growth(counter: dict[str, Any]) -> int:
    first, last = counter.get("first") or [], counter.get("last") or []
    return sum(b - a for a, b in zip(first, last) if a is not None and b is not None and b > a)


def judge_ecc(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """No new ECC error (volatile corrected or uncorrected) and no newly remapped row (nor a remapping pending or
    failed) from the first reading of the load to the last."""
    v = ECC.verdict(subject, "no new ECC error or remapped row", m.evidence, 0.0)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    ecc, rows = r.counters.get("ecc", {}), r.counters.get("remapped_rows", {})
    off = _ecc_off(r, m, ecc)
    if off:
        health = HEALTH.get(contract)
        return v.failed(None, off + "; health.ecc expects ECC") if health is not None and health.ecc else v.not_measured(off)
    if not ecc.get("reads"):
        return v.not_measured(f"NVML reads no volatile ECC counter of GPU{r.index} (ECC disabled, or not supported): new "
                              "errors cannot be seen")
    grown = [f"ECC errors: {_grown('ecc', ecc)}"] if ecc.get("grew") else []
    grown += [f"remapped rows: {_grown('remapped_rows', rows)}"] if rows.get("grew") else []
    if grown:
        return with_sources(v.failed(_growth(ecc) + _growth(rows), f"GPU{r.index}: new " + "; ".join(grown)), "NVML")
    rows_read = f" and remapped rows ({rows['reads']} readings)" if rows.get("reads") else \
        " (remapped rows not readable on this GPU)"
    check = v.passed(0, f"GPU{r.index}: no new ECC error in {ecc['reads']} readings of the volatile counters{rows_read}")
    return _final(v, with_sources(check, "NVML", unconfirmed="NVML's counters alone"), r, m)


def _ecc_off(r: GpuResult, m: BurnInRun, ecc: dict[str, Any]) -> str | None:
    """Why the ECC counters of the load say nothing: NVML's ECC mode read before it is disabled (0), or unreadable
    (null) while the counters read; a host reading made before the mode was read has no key, and is judged as before."""
    before = m.before.get(r.index, {})
    if "ecc_mode_current" not in before:
        return None
    counted = f"its ECC counters read {ecc['first']}" if ecc.get("reads") else "its ECC counters do not read"
    mode = before["ecc_mode_current"]
    if mode == 0:
        after = " (enabled after the next reboot)" if before.get("ecc_mode_pending") == 1 else ""
        return (f"ECC is disabled on GPU{r.index}{after} (NVML's ECC mode, read before the load): memory errors are "
                f"neither corrected nor counted, so {counted} and say nothing")
    if mode is None and ecc.get("reads"):
        return (f"NVML reads no ECC mode of GPU{r.index} (not supported: no ECC) before the load, yet {counted}: "
                "counters of memory errors a GPU without ECC does not count say nothing")
    return None


def judge_nvlink(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """No NVLink error counter (replay, recovery, CRC flit, CRC data, ECC data, summed over the active links) grew.
    A GPU with no active NVLink passes only where the model table agrees it has none."""
    v = NVLINK.verdict(subject, "no NVLink error counter growth", m.evidence, 0.0)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    model = m.models.model(r.index) if m.models else None
    if not r.nvlinks:
        if model is not None and not model.nvlink_links:
            return _final(v, with_sources(v.passed(0, f"GPU{r.index} has no NVLink (none active in NVML; a {model.name} has "
                                                      "none in the model table)"), "NVML", "the model table"), r, m)
        has = f"a {model.name} has {model.nvlink_links}" if model is not None else "the model table does not know the GPU"
        return v.not_measured(f"NVML shows no active NVLink on GPU{r.index}, but {has}: no error counter to watch")
    counter = r.counters.get("nvlink_errors", {})
    if not counter.get("reads") or all(value is None for value in counter.get("first") or [None]):
        return v.not_measured(f"NVML reads no NVLink error counter of GPU{r.index}")
    if counter.get("grew"):
        return with_sources(v.failed(_growth(counter), f"GPU{r.index}: NVLink error counters grew over its "
                                                       f"{len(r.nvlinks)} active links: {_grown('nvlink_errors', counter)}"), "NVML")
    check = v.passed(0, f"GPU{r.index}: no NVLink error counter grew over its {len(r.nvlinks)} active links in "
                        f"{counter['reads']} readings")
    return _final(v, with_sources(check, "NVML", unconfirmed="NVML's counters alone"), r, m)


def judge_xid(section: Burnin, subject: Subject, m: BurnInRun, contract: Contract) -> Check:
    """No Xid event during the burn-in: NVML's events, and the kernel log's NVRM Xid lines for the GPU's PCI address
    within the load (not measured where it cannot be read; beside an NVML recording there is no log of that host)."""
    v = XID.verdict(subject, "== 0", m.evidence, 0.0)
    r = _result(v, m, subject)
    if isinstance(r, Check):
        return r
    if r.xid_error:
        return v.not_measured(f"NVML cannot deliver Xid events for GPU{r.index}: {r.xid_error}")
    if r.xid_count:
        shown = ", ".join(f"Xid {x} at {when(t)}" for t, x in r.xids[:5])
        return v.failed(r.xid_count, f"GPU{r.index}: {r.xid_count} Xid event(s) during the burn-in (NVML): {shown}")
    said = f"GPU{r.index}: no Xid event during the burn-in (NVML events)"
    return _final(v, kernel_confirmed(v, said, m.kernel, m.buses.get(r.index, ""), m.window), r, m)


UTILISATION = Clause("burnin.utilisation", SECTION, "test_burnin_utilisation", PerGpu(), gpuaccept_burnin, judge_utilisation,
                     "the least busy sliding window (a minute; half the load where shorter) from the GPU's first busy sample, at "
                     "least `min_percent`; "
                     "first busy within 120 s of the launch; busy at an idle GPU's power and clock is not busy", "%")
CLOCKS = Clause("burnin.clocks", SECTION, "test_burnin_clocks", PerGpu(), gpuaccept_burnin, judge_clocks,
                "the lowest SM clock window of the busy GPU at least `min_percent` of its highest, and (not held by power) "
                "health's fraction of the model's boost clock; the power limit in the samples not below the one read before",
                "MHz")
THROTTLE = Clause("burnin.throttle", SECTION, "test_burnin_throttle", PerGpu(), gpuaccept_burnin, judge_throttle,
                  "no span of HW slowdown, thermal slowdown or power brake longer than `max_throttle_s`", "s")
TEMPERATURE = Clause("burnin.temperature", SECTION, "test_burnin_temperature", PerGpu(), gpuaccept_burnin, judge_temperature,
                     "the temperature stays below the slowdown threshold (NVML's, and the model table's where it has one)",
                     "C")
ECC = Clause("burnin.ecc", SECTION, "test_burnin_ecc", PerGpu(), gpuaccept_burnin, judge_ecc,
             "no new volatile ECC error (corrected or uncorrected) and no newly remapped row during the load, with ECC on",
             "errors")
NVLINK = Clause("burnin.nvlink", SECTION, "test_burnin_nvlink", PerGpu(), gpuaccept_burnin, judge_nvlink,
                "no NVLink error counter (replay, recovery, CRC, ECC) grew during the load", "errors")
XID = Clause("burnin.xid", SECTION, "test_burnin_xid", PerGpu(), gpuaccept_burnin, judge_xid,
             "no Xid event during the load (NVML events; the kernel log's NVRM Xid lines)", "events")
CLAUSES = (UTILISATION, CLOCKS, THROTTLE, TEMPERATURE, ECC, NVLINK, XID)
MEASUREMENTS = (gpuaccept_burnin,)
