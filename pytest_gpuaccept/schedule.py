"""Which measurements may share a time, and how a run's tools actually shared it.

Each measurement declares the resources it holds while it runs (a Job): the GPUs, the NVLink fabric, a network port.
`plan` puts jobs that hold nothing in common side by side in one Slot, and keeps jobs that share a resource apart,
in the order they were declared: eight ib_write_bw runs, each through its own port, go at once (as training loads
every port at once); a GEMM and nvbandwidth, both holding the GPUs, go one after the other. This module decides
only; a clause module runs what one slot holds together (ToolRunner.run_together), and clauses/schedule.py joins the
measurements one run serves (one nvbandwidth process for all its testcases, one GPU load for GEMM, utilisation and
health).

`timeline` reads back how the tools ran (each run's start and duration, as its evidence record keeps them): the
schedule the report draws and the results carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

GPUS = "GPUs"
NVLINK = "NVLink fabric"


def port(name: str) -> str:
    """A network port as a resource: its physical port ID where sysfs gives one (two names of one port are one
    port), else `device/port`."""
    return f"port {name}"


@dataclass(frozen=True, slots=True)
class Job:
    """One measurement as the scheduler sees it: its name, the resources it holds while it runs, and how long it is
    expected to take (the plan's arithmetic; nothing waits on it)."""

    name: str
    holds: frozenset[str]
    seconds: float = 0.0

    def clashes(self, other: Job) -> bool:
        return bool(self.holds & other.holds)


@dataclass(frozen=True, slots=True)
class Slot:
    """Jobs that run at once: no two hold a resource in common."""

    jobs: tuple[Job, ...]

    @property
    def seconds(self) -> float:
        """As long as its longest job."""
        return max((job.seconds for job in self.jobs), default=0.0)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(job.name for job in self.jobs)


def plan(jobs: Sequence[Job], together: bool = True) -> tuple[Slot, ...]:
    """The jobs in slots, in order. A job joins the earliest slot after the last one holding a job it clashes with
    (so two jobs that share a resource keep their declared order); `together=False`: one job a slot, in order."""
    slots: list[list[Job]] = []
    for job in jobs:
        last = max((n for n, slot in enumerate(slots) if any(job.clashes(other) for other in slot)), default=-1)
        if together and last + 1 < len(slots):
            slots[last + 1].append(job)
        else:
            slots.append([job])
    return tuple(Slot(tuple(slot)) for slot in slots)


def planned_seconds(slots: Sequence[Slot]) -> float:
    """How long the plan takes: its slots one after the other, each as long as its longest job."""
    return sum(slot.seconds for slot in slots)


def one_run(cases: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """What one process of a tool runs for every measurement that uses it (nvbandwidth: p2p, memory and host copies),
    one CUDA start instead of one each: each measurement's testcases, in order, each once."""
    return tuple(dict.fromkeys(case for group in cases for case in group))


# The longest one GPU load serving GEMM, utilisation and health: the GEMM prints a line a second for each GPU, and a
# tool's output is kept up to 8 MiB (probes/_run.py), about two hours of 8 GPUs; a longer load is a burn-in's.
SHARED_LOAD_MAX_S = 3600.0


def shared_load_s(gemm_s: float, load_s: float, builtin: bool) -> float | None:
    """How long the one GPU load the GEMM, utilisation and health clauses read together runs: the longer of
    compute.duration and utilisation.duration (the GEMM's figure from its own timing over the whole run, utilisation
    and health from NVML over the contract's window of it). None where each needs a load of its own: the contract
    names its own workload (that program is what utilisation judges), or the load would run past SHARED_LOAD_MAX_S."""
    seconds = max(gemm_s, load_s)
    return seconds if builtin and seconds <= SHARED_LOAD_MAX_S else None


@dataclass(frozen=True, slots=True)
class Bar:
    """One tool run on the time line: its key (the evidence's name for it), the tool, when it started after the
    first run of the session started, and how long it took."""

    key: str
    tool: str
    start_s: float
    seconds: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.seconds


@dataclass(frozen=True, slots=True)
class Timeline:
    """How the tools ran: one bar per run, by start; `wall_s` from the first start to the last end; `tools_s` the
    runs' time added up (what they would have taken one after another)."""

    bars: tuple[Bar, ...]

    @property
    def wall_s(self) -> float:
        return max((b.end_s for b in self.bars), default=0.0)

    @property
    def tools_s(self) -> float:
        return sum(b.seconds for b in self.bars)

    @property
    def busy_s(self) -> float:
        """The time at least one tool ran: the bars' union (what waiting on tools cost the run)."""
        busy, reach = 0.0, 0.0
        for bar in sorted(self.bars, key=lambda b: b.start_s):
            if bar.end_s > reach:
                busy += bar.end_s - max(bar.start_s, reach)
                reach = bar.end_s
        return busy

    def to_json(self) -> dict[str, Any]:
        """The results' `schedule` (docs/results.md)."""
        return {"wall_s": round(self.wall_s, 3), "busy_s": round(self.busy_s, 3), "tools_s": round(self.tools_s, 3),
                "runs": [{"key": b.key, "tool": b.tool, "start_s": round(b.start_s, 3), "seconds": round(b.seconds, 3)}
                         for b in self.bars]}


def timeline(runs: Iterable[tuple[str, str, float | None, float]]) -> Timeline:
    """The time line of runs given as (key, tool, started on the monotonic clock or None, duration): the runs that
    started (a tool never started has no place on it), by start, from the first start."""
    started = [(key, tool, start, seconds) for key, tool, start, seconds in runs if start is not None]
    first = min((start for _k, _t, start, _s in started), default=0.0)
    bars = sorted((Bar(key, tool, start - first, max(0.0, seconds)) for key, tool, start, seconds in started),
                  key=lambda b: (b.start_s, b.key))
    return Timeline(tuple(bars))
