"""A tool's rate beside its port's own counters: bytes the kernel counted over the time the plugin's clock gave the
run. The rule the host's `nics`, `rdma` and `iperf3` clauses and the cluster's rail links share (probes/counters.py
reads the counters and the clocks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .probes.counters import Counted, clock_problem
from .verdict import fmt

RATE_MARGIN = 0.10  # a tool's rate may be this much above its port's counters' over its transfer time, and no more
SHORT_SLACK_S = 0.05  # a run this much shorter than asked is the timer's grain; more is not the run asked for
START_UP_S = 1.0  # of a run longer than asked, this much is the tool's start-up (connect, a server's exit), not transfer


@dataclass(frozen=True, slots=True)
class Rated:
    """A tool's run as the plugin timed it: its name, the seconds it was asked to run, the seconds it took."""

    tool: str
    asked_s: float
    wall_s: float


@dataclass(frozen=True, slots=True)
class SecondSource:
    """What a source the vendor's tool does not print says of the tool's figure."""

    refuted: str | None  # why the figure is not believed: the check fails with this message
    measured: float | None  # what a refuted check is measured at (the second source's figure; None: none)
    details: dict[str, Any]  # `sources`: the sources that agree on the figure; `unconfirmed`: why only one
    shown: str  # beside a passing figure: the second source's own, or ` (sources: TOOL only)`


def short_run(run: Rated) -> str | None:
    """A run shorter than the time asked measured something else, or nothing: why, or None."""
    if run.wall_s + SHORT_SLACK_S < run.asked_s:
        return (f"not a measurement: {run.tool} was asked to run {run.asked_s:g} s and returned after "
                f"{run.wall_s:.2f} s (the plugin's clock)")
    return None


def transfer_seconds(run: Rated) -> float:
    """The time a run's bytes are divided by: the time the tool was asked to send for, or, where it ran more than
    START_UP_S longer, its wall time less START_UP_S. An honest run's start-up (iperf3's connect on a loaded
    machine, ib_write_bw's connect and its server's exit: 0.2-0.8 s) costs its figure nothing, and a run stretched
    to move at a lower rate the bytes its claim needs is divided by its own length: for a run asked 1 s or more,
    a figure 6x the rate the port moved fails however long the run is made, and one 2x fails once the run is more
    than START_UP_S + its time asked."""
    return max(run.asked_s, run.wall_s - START_UP_S)


def rate_check(claimed: float, run: Rated, counter: Counted, source: tuple[str, str]) -> SecondSource:
    """A rate is bytes over time: the run took at least the time asked (a shorter one measured something else, or
    nothing), the monotonic clock that timed it agrees with CLOCK_BOOTTIME, and the tool's figure (Gb/s) is at most
    RATE_MARGIN above the bytes the port's own counter moved divided by the run's transfer time (transfer_seconds).
    Where the counter cannot be read, the figure stands on the tool's word alone and says so; a counter that read
    0 before and after a physical port's run counted 0 bytes. `source`: (its name, how a message names it)."""
    details: dict[str, Any] = {"asked_s": run.asked_s, "wall_s": round(run.wall_s, 3)}
    short = short_run(run)
    if short is not None:
        return SecondSource(short, None, details, "")
    clock = clock_problem(counter, run.wall_s)
    if clock is not None and counter.monotonic_s is not None and counter.boottime_s is not None:
        return SecondSource(f"{run.tool}'s run time cannot be trusted: {clock}", None, details, "")
    if counter.backwards:
        return SecondSource(f"{source[1]}: {counter.unread}, so nothing confirms {run.tool}'s figure", None, details, "")
    if counter.counted_bytes is None or clock is not None:
        details.update(sources=[run.tool], unconfirmed=counter.unread or clock)
        return SecondSource(None, None, details, f" (sources: {run.tool} only)")
    seconds = transfer_seconds(run)
    rate = counter.counted_bytes * 8 / seconds / 1e9
    details.update(sources=[run.tool, source[0]], counted_bytes=counter.counted_bytes, counted_gbit_s=round(rate, 3),
                   transfer_s=round(seconds, 3))
    over = f"the {seconds:.2f} s it sent for" if seconds == run.asked_s else \
        f"its {seconds:.2f} s of transfer (the {run.wall_s:.2f} s it ran, less {START_UP_S:g} s of start-up)"
    if claimed > rate * (1 + RATE_MARGIN):
        return SecondSource(f"{run.tool} says {fmt(claimed)} Gb/s, but {source[1]} counted {counter.counted_bytes} "
                            f"bytes in {over}: {fmt(rate)} Gb/s; a figure more than "
                            f"{RATE_MARGIN:.0%} above what the port moved is not a measurement", round(rate, 3), details, "")
    return SecondSource(None, None, details, f" ({source[0]}: {fmt(rate)} Gb/s over {seconds:.2f} s)")
