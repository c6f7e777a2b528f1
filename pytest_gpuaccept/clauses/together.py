"""Runs that the measurements of several sections share, as schedule.py decides, and the run's schedule in the report.

- One nvbandwidth process for every testcase the contract asks of it (p2p, memory_bandwidth, host_bandwidth): one
  CUDA start, not one a section (schedule.one_run). Each section reads its own matrices from the one output.
- One GPU load that the GEMM, utilisation and health clauses read together, where schedule.shared_load_s allows
  (the builtin workload, a load of at most an hour): the GEMM on every GPU for the longer of the two durations. The
  compute figure comes from the GEMM's own timing over its whole run; utilisation and health from NVML over the
  contract's window of the same load (from its start to utilisation.duration: the GEMM, whose clock starts once it is
  busy, still runs then; the samples of its end are not the window's).
- The schedule: a line per tool run on one time line (schedule.timeline), read from the runs' sealed records, drawn
  in the report and written to the results (`schedule`, docs/results.md).
"""

from __future__ import annotations

import html
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .. import schedule
from ..charts import PALETTE
from ..evidence import ForeignEvidence
from ..i18n import DEFAULT, tr
from ..probes import nvbandwidth
from . import compute, host_bandwidth, memory_bandwidth, network, p2p, utilisation
from .base import ReportPart

if TYPE_CHECKING:
    from ..contract import Contract
    from ..evidence import Evidence
    from ..measurements import GpuModels, LoadRun
    from ..probes._run import Reading
    from ..probes.nvbandwidth import NvBandwidth
    from ..session import Session
    from ..verdict import Check
    from .compute import GemmLoad

NVBANDWIDTH_USERS = (p2p, memory_bandwidth, host_bandwidth)  # each declares nvbandwidth_cases(contract, runner)


def gpuaccept_nvbandwidth(gpuaccept_state: Session, gpuaccept_contract: Contract) -> Reading[NvBandwidth] | None:
    """One nvbandwidth run for every testcase the contract's sections ask of it, once per run; None where none does,
    and in the replay of a bundle made before one run served them all (each section then replays its own)."""
    runner = gpuaccept_state.runner
    cases = schedule.one_run(module.nvbandwidth_cases(gpuaccept_contract, runner) for module in NVBANDWIDTH_USERS)
    if not cases or (runner.replay is not None and not runner.replay.has(f"{nvbandwidth.KEY}.json")):
        return None
    return nvbandwidth.run_nvbandwidth(runner, cases)


def gpuaccept_gpu_load(gpuaccept_state: Session, gpuaccept_contract: Contract,
                       gpuaccept_models: GpuModels) -> GemmLoad | None:
    """The one GPU load the GEMM, utilisation and health clauses read together (once per run, NVML sampling it to its
    end); None where the contract's durations or workload give each its own (schedule.shared_load_s)."""
    gemm, load = compute.SECTION.get(gpuaccept_contract), utilisation.UTILISATION.get(gpuaccept_contract)
    if gemm is None or load is None:
        return None
    seconds = schedule.shared_load_s(gemm.duration.seconds, load.duration.seconds, load.workload == "builtin")
    if seconds is None:
        return None
    beside = beside_the_load(gpuaccept_state, gpuaccept_contract)
    return compute.gemm_load(gpuaccept_state, gpuaccept_contract, gpuaccept_models, seconds, utilisation.SAMPLES_FILE,
                             beside)


LOAD = schedule.Job("GPU load", frozenset({schedule.GPUS}))


def beside_the_load(state: Session, contract: Contract) -> Callable[[], object] | None:
    """What is measured while the GPU load runs: the jobs schedule.plan puts in its slot. ib_write_bw holds a network
    port and no GPU, so the devices measured at once (rdma.concurrent) go beside the load, as a training job loads
    its GPUs and its ports together; copies and the all_reduce hold the GPUs and stay apart. None: nothing beside."""
    section = network.RDMA.get(contract)
    if section is None or not section.concurrent or not any(c.asked_by(contract) for c in network.RDMA_CLAUSES):
        return None
    devices = network.gpuaccept_rdma_devices(state, contract, dict(state.listings()))
    jobs = network.rdma_jobs(section, devices, devices.function)
    first = schedule.plan([LOAD, *(job for job, _port in jobs)])[0]
    ports = {job.name: port for job, port in jobs if job in first.jobs}
    if not ports:
        return None
    # The first device's reading measures every device of its group, its counters around it (network.py); the
    # judges later read the runs back from the session's memory (ToolRunner: memoised by key).
    return lambda: [devices.write_bw(name, port) for name, port in ports.items()]


def utilisation_window(load: LoadRun, seconds: float) -> LoadRun:
    """The shared load as utilisation and health read it: each GPU's samples up to `seconds` after the load started
    (utilisation.duration), as a load of their own would have been sampled."""
    series = {index: replace(s, samples=tuple(x for x in s.samples if x.t_s <= seconds)) for index, s in load.series.items()}
    return replace(load, series=series)


def gpuaccept_utilisation_window(gpuaccept_contract: Contract, gpuaccept_gpu_load: GemmLoad | None) -> LoadRun | None:
    """The shared GPU load as the utilisation and health judges read it (utilisation_window); None where the load is
    not shared and utilisation runs its own."""
    if gpuaccept_gpu_load is None:
        return None
    return utilisation_window(gpuaccept_gpu_load.load, utilisation.UTILISATION.of(gpuaccept_contract).duration.seconds)


# ------------------------------------------------------------------ the schedule, in the results and the report

def timeline(evidence: Evidence) -> schedule.Timeline:
    """Every tool run of this session on one time line, from the runs' sealed records (a run keeps its output as
    <key>.txt beside its <key>.json; readings have none); a record that is not sealed is not read."""
    runs = []
    for path in sorted(evidence.folder.glob("*.json")):
        if not path.with_suffix(".txt").is_file():
            continue
        try:
            raw = evidence.read(path.name)
            record = json.loads(raw) if raw else None
        except (ForeignEvidence, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("started_s"), (int, float)):
            argv = record.get("argv") or [path.stem]
            runs.append((path.stem, _tool(argv), float(record["started_s"]), float(record.get("duration_s") or 0.0)))
    return schedule.timeline(runs)


def _tool(argv: list[str]) -> str:
    """A run's tool as a person names it: the executable's name, or the module our workloads run as."""
    name = str(argv[0]).rsplit("/", 1)[-1]
    if len(argv) > 2 and argv[1] == "-m":
        return str(argv[2]).rsplit(".", 1)[-1]
    return name


def record(evidence: Evidence) -> dict[str, Any] | None:
    """The results' `schedule`: the time line as plain data; None where no tool ran."""
    line = timeline(evidence)
    return line.to_json() if line.bars else None


BAR_WIDTH = 360  # the time line's width in the report, in pixels


ROW_PER_RUN = 60  # up to this many runs, a row each; past it (a cluster's thousands), a row per kind of run


def draw(recorded: dict[str, Any] | None, lang: str = DEFAULT) -> str:
    """The report's part: the runs on the run's time line, so that what ran at once shows one above the other; a
    row per run (a host's few dozen), or past ROW_PER_RUN a row per kind of run (`pair`, `link`, `node-run`: the key
    up to its first word with a digit) with the spans its runs covered; every run stays in the results' `schedule`.
    "" where no tool ran. Its own words are said in the report's language (i18n.tr)."""
    if not recorded or not recorded.get("runs"):
        return ""
    wall = max(float(recorded.get("wall_s") or 0.0), 1e-9)
    runs = [(str(r["key"]), str(r["tool"]), float(r["start_s"]), float(r["seconds"])) for r in recorded["runs"]]
    if len(runs) <= ROW_PER_RUN:
        rows = [(key, tool, f"{start:.1f}", f"{seconds:.1f}", _bar(wall, [(start, seconds)]))
                for key, tool, start, seconds in runs]
        head = "".join(f"<th>{html.escape(tr(lang, word), quote=False)}"
                       for word in ("run", "tool", "start (s)", "seconds", "time line"))
    else:
        rows = _kinds(runs, wall)
        head = "".join(f"<th>{html.escape(tr(lang, word), quote=False)}"
                       for word in ("runs", "tool", "first start (s)", "seconds, all its runs", "time line"))
    lines = "".join(f"<tr><td>{html.escape(a)}<td>{html.escape(b)}<td>{c}<td>{d}<td>{bar}" for a, b, c, d, bar in rows)
    said = tr(lang, "The tools ran for {wall} s from the first start to the last end ({busy} s with a tool running); "
                    "one after another they would have taken {tools} s. Runs side by side held nothing in common "
                    "(schedule.py).", wall=f"{float(recorded['wall_s']):.1f}", busy=f"{float(recorded['busy_s']):.1f}",
              tools=f"{float(recorded['tools_s']):.1f}")
    if len(runs) > ROW_PER_RUN:
        said += tr(lang, " {n} runs, a row per kind; each run is in the results' schedule.", n=len(runs))
    return (f'<div class="gpuaccept-schedule"><h3>{html.escape(tr(lang, "Schedule"))}</h3><p>{html.escape(said, quote=False)}</p>'
            f'<table class="gt"><tr>{head}{lines}</table></div>')


def kind(key: str) -> str:
    """The kind of a run, from its key: the words before the first with a digit (`pair-n0001+n0002` is `pair`,
    `link-server-n0001-...` is `link-server`), at least the first."""
    words = key.split("-")
    taken = [words[0]]
    for word in words[1:]:
        if any(c.isdigit() for c in word):
            break
        taken.append(word)
    return "-".join(taken)


def _kinds(runs: list[tuple[str, str, float, float]], wall: float) -> list[tuple[str, str, str, str, str]]:
    grouped: dict[str, list[tuple[str, str, float, float]]] = {}
    for run in runs:
        grouped.setdefault(kind(run[0]), []).append(run)
    rows = []
    for name, members in grouped.items():
        tools = sorted({tool for _k, tool, _s, _d in members})
        rows.append((f"{name} ({len(members)})", ", ".join(tools), f"{min(s for _k, _t, s, _d in members):.1f}",
                     f"{sum(d for _k, _t, _s, d in members):.1f}", _bar(wall, [(s, d) for _k, _t, s, d in members])))
    return rows


def _bar(wall: float, spans: list[tuple[float, float]]) -> str:
    """One time line: a rectangle for each stretch of pixels the spans (start, seconds) cover, at least 2 wide."""
    covered: list[list[int]] = []
    for start, seconds in sorted(spans):
        x = min(BAR_WIDTH - 2, round(BAR_WIDTH * start / wall))
        end = x + max(2, min(BAR_WIDTH - x, round(BAR_WIDTH * seconds / wall)))
        if covered and x <= covered[-1][1]:
            covered[-1][1] = max(covered[-1][1], end)
        else:
            covered.append([x, end])
    label = f"{spans[0][0]:.1f} s to {spans[0][0] + spans[0][1]:.1f} s" if len(spans) == 1 else f"{len(spans)} runs"
    rects = "".join(f'<rect x="{a}" y="2" width="{b - a}" height="8" fill="{PALETTE[0]}"/>' for a, b in covered)
    return f'<svg width="{BAR_WIDTH}" height="12" role="img" aria-label="{label}">{rects}</svg>'


def _no_checks(checks: Sequence[Check], lang: str) -> str:
    return ""  # drawn from the run's records (draw), not from its checks


REPORT = ReportPart(_no_checks, key="schedule", record=record, draw=draw)
MEASUREMENTS = (gpuaccept_nvbandwidth, gpuaccept_gpu_load, gpuaccept_utilisation_window)
