"""The burn-in stream: NVML records as they come (docs/nvml-recording.md), and what a burn-in keeps of them.

A burn-in's samples are never held. Each record is read from the stream (or taken by `nvml.stream_gpus`), given to
`Watch.add`, written to the evidence, and dropped. Each GPU's `GpuWatch` keeps only what the judges need, in memory
that does not grow with the load's duration: when the GPU was first busy, its lowest utilisation and its lowest and
highest SM clock over sliding windows (and the lowest of the busy samples not held by power), the window with the
largest share of busy samples at an idle GPU's power (with their mean clock, power and limit), the lowest and highest
enforced power limit in the samples, its throttle spans (the first MAX_SPANS, their count, total and the longest),
when each temperature was first reached, each error counter's first reading and when it first grew, the first
MAX_XIDS Xid events, and a timeline of at most TIMELINE_ROWS rows (one per bucket) for the report's charts.

What it keeps is the same whatever the contract asks (the judges compare it with min_percent and max_throttle_s),
so that a replayed bundle is judged again from it against another contract.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator

from . import ParseError
from .nvml import BAD_THROTTLE, NVLINK_ERRORS, SAMPLE_FIELDS, STREAM_FORMAT

BUSY_PERCENT = 50.0  # a GPU this busy has started working (the start-up ends at its first such sample)
AT_POWER_LIMIT = 0.90  # a busy sample drawing this share of its enforced limit runs at the clock that power buys
# A busy sample NVML says the power cap or power brake is slowing is held by power though its 1 s power average reads
# under AT_POWER_LIMIT (an honest H200's ramp: 285-570 W of 700 at 1695-1845 MHz with sw_power_cap raised), but never
# at an idle GPU's power (under IDLE_POWER of the limit: the reason bit then explains nothing)
POWER_REASONS = 0x4 | 0x80  # sw_power_cap, hw_power_brake_slowdown (nvml.THROTTLE_REASONS)
IDLE_POWER = 0.25  # a busy sample drawing under this share of its enforced limit draws an idle GPU's power
WINDOW_S = 60.0  # the sliding window of the lowest utilisation and SM clock (half the load, where that is shorter)


def window_seconds(duration_s: float) -> float:
    """The sliding window of a load of `duration_s`: a minute, or half the load where that is shorter (the other half
    leaves room for the start-up)."""
    return min(WINDOW_S, duration_s / 2)
MAX_SPANS = 1000  # throttle spans kept, the first ones; more are counted (and the longest kept)
MAX_XIDS = 100  # Xid events kept per GPU, the first ones; more are counted
TIMELINE_ROWS = 480  # at most this many rows per GPU in the report's timeline: buckets of a minute or more
COUNTERS = ("ecc", "remapped_rows", "nvlink_errors")
COUNTER_PARTS = {"ecc": ("corrected", "uncorrected"),
                 "remapped_rows": ("correctable", "uncorrectable", "pending", "failure"),
                 "nvlink_errors": NVLINK_ERRORS}

Span = tuple[float, float, int]  # start (s), seconds, the bad clock event reasons seen in it (NVML's bits, or-ed)
Low = tuple[float, float]  # value, time (s)


def bucket_seconds(duration_s: float) -> float:
    """The timeline's bucket: a minute, or longer where a minute would make more than TIMELINE_ROWS rows."""
    return max(60.0, duration_s / TIMELINE_ROWS)


Idle = tuple[float, float, float, float, float]  # share of the window's samples, mean SM clock, power, limit; its end


@dataclass(slots=True)
class Row:
    """What one sample adds to a window: its utilisation, and its SM clock where it is busy; where busy and not held
    by power (under AT_POWER_LIMIT of its enforced limit), its clock again; where busy at an idle GPU's power (under
    IDLE_POWER of its limit), its clock, power and limit."""

    t_s: float
    util: float
    busy_clock: float | None = None
    free_clock: float | None = None
    idle: tuple[float, float, float] | None = None


@dataclass(slots=True)
class Window:
    """Sliding means over `seconds` of one GPU's samples from its first busy one: the utilisation; the SM clock of the
    busy samples, and of the busy samples not held by power (each where at least half the window's samples are such);
    and the window with the most busy samples at an idle GPU's power, with their mean clock, power and limit. A window
    counts once it is whole."""

    seconds: float
    slack: float = 0.0  # a window is whole once it spans `seconds` less one sampling interval
    rows: deque[Row] = field(default_factory=deque)
    started: float | None = None
    util_sum: float = 0.0
    clock_sum: float = 0.0
    clocked: int = 0
    free_sum: float = 0.0
    freed: int = 0
    idle_sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # clock, power, limit
    idled: int = 0
    lowest_util: Low | None = None
    lowest_clock: Low | None = None
    highest_clock: Low | None = None
    lowest_free_clock: Low | None = None
    idlest: Idle | None = None

    def add(self, row: Row) -> None:
        t_s = row.t_s
        self.started = t_s if self.started is None else self.started
        self.rows.append(row)
        self._count(row, 1)
        while self.rows and self.rows[0].t_s <= t_s - self.seconds:
            self._count(self.rows.popleft(), -1)
        if t_s - self.started + self.slack + 1e-9 < self.seconds:
            return
        n = len(self.rows)
        mean = self.util_sum / n
        if self.lowest_util is None or mean < self.lowest_util[0]:
            self.lowest_util = (round(mean, 2), t_s)
        if self.clocked * 2 >= n:
            clock_mean = round(self.clock_sum / self.clocked, 1)
            if self.lowest_clock is None or clock_mean < self.lowest_clock[0]:
                self.lowest_clock = (clock_mean, t_s)
            if self.highest_clock is None or clock_mean > self.highest_clock[0]:
                self.highest_clock = (clock_mean, t_s)
        if self.freed * 2 >= n:
            free_mean = round(self.free_sum / self.freed, 1)
            if self.lowest_free_clock is None or free_mean < self.lowest_free_clock[0]:
                self.lowest_free_clock = (free_mean, t_s)
        if self.idled:
            clock, power, limit = (round(total / self.idled, 1) for total in self.idle_sums)
            idle = (round(self.idled / n, 3), clock, power, limit, t_s)
            if self.idlest is None or (idle[0], -idle[1]) > (self.idlest[0], -self.idlest[1]):
                self.idlest = idle

    def _count(self, row: Row, sign: int) -> None:
        self.util_sum += sign * row.util
        if row.busy_clock is not None:
            self.clock_sum, self.clocked = self.clock_sum + sign * row.busy_clock, self.clocked + sign
        if row.free_clock is not None:
            self.free_sum, self.freed = self.free_sum + sign * row.free_clock, self.freed + sign
        if row.idle is not None:
            self.idled += sign
            for n, value in enumerate(row.idle):
                self.idle_sums[n] += sign * value


@dataclass(slots=True)
class Counter:
    """One error counter group of a GPU: its first reading, its latest, and when any part first rose above the first."""

    first: list[int | None] | None = None
    last: list[int | None] | None = None
    grew: tuple[float, list[int | None]] | None = None  # (when, the reading that first showed growth)
    reads: int = 0

    def add(self, t_s: float, values: list[int | None] | None) -> None:
        if values is None:
            return
        self.reads += 1
        if self.first is None:
            self.first = list(values)
        elif self.grew is None and any(v is not None and f is not None and v > f for v, f in zip(values, self.first)):
            self.grew = (t_s, list(values))
        self.last = list(values)


@dataclass(frozen=True, slots=True)
class GpuResult:
    """What a burn-in kept of one GPU (GpuWatch.result), as plain data the judges read and the evidence keeps."""

    index: int
    samples: int
    first_t_s: float | None
    last_t_s: float | None
    busy_t_s: float | None  # the first sample at least BUSY_PERCENT busy: where the start-up ended
    utilisation_read: int  # samples with a utilisation reading
    lowest_sample: Low | None  # the lowest single utilisation sample from busy_t_s on
    lowest_util: Low | None  # the lowest sliding-window mean utilisation, with the window's end
    lowest_clock: Low | None  # the lowest and highest sliding-window mean SM clock of the busy samples
    highest_clock: Low | None
    reasons_read: int  # samples with clock event reasons
    spans: tuple[Span, ...]  # the first MAX_SPANS throttle spans
    span_count: int
    span_total_s: float
    longest_span: Span | None
    temps: dict[int, float]  # each whole temperature (C) reached, and when it was first reached
    slowdown_temp_c: float | None  # NVML's slowdown threshold of the GPU, read as the burn-in started
    counters: dict[str, dict[str, Any]]  # name -> {"first", "last", "grew": [t, values] | None, "reads"}
    xids: tuple[tuple[float, int], ...]  # (when, Xid) of the first MAX_XIDS events
    xid_count: int
    xid_error: str | None  # why NVML could not deliver Xid events for this GPU
    lost_t_s: float | None = None  # when the GPU stopped answering NVML, and why
    lost_error: str = ""
    nvlinks: tuple[int, ...] = ()  # the active NVLinks whose error counters were read
    # Beside the utilisation and the clock (summaries made before these were kept read them as not kept):
    lowest_free_clock: Low | None = None  # the lowest window mean SM clock of busy samples not held by power
    busy_samples: int = 0  # samples at least BUSY_PERCENT busy; of them, those whose power and enforced limit read:
    held_samples: int = 0  # ... at AT_POWER_LIMIT of the limit or more (held by power)
    free_samples: int = 0  # ... under it
    idlest: Idle | None = None  # the window with the largest share of busy samples at an idle GPU's power
    power_limit_low: Low | None = None  # the lowest and highest enforced power limit in the samples (W), and when
    power_limit_high: Low | None = None

    def first_at_or_above(self, temp_c: float) -> tuple[float, int] | None:
        """(when, temperature) of the first sample at or above `temp_c`; None if none reached it."""
        hits = [(t, temp) for temp, t in self.temps.items() if temp >= temp_c]
        return min(hits) if hits else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["temps"] = {str(k): v for k, v in self.temps.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuResult:
        """A GPU's result as the summary file keeps it; a malformed one raises ParseError."""
        try:
            low = _low
            return cls(int(data["index"]), int(data["samples"]), data["first_t_s"], data["last_t_s"], data["busy_t_s"],
                       int(data["utilisation_read"]), low(data["lowest_sample"]), low(data["lowest_util"]),
                       low(data["lowest_clock"]), low(data["highest_clock"]), int(data["reasons_read"]),
                       tuple(_span(s) for s in data["spans"]), int(data["span_count"]), float(data["span_total_s"]),
                       _span(data["longest_span"]) if data["longest_span"] else None,
                       {int(k): float(v) for k, v in data["temps"].items()}, data["slowdown_temp_c"],
                       {str(k): dict(v) for k, v in data["counters"].items()},
                       tuple((float(t), int(x)) for t, x in data["xids"]), int(data["xid_count"]), data["xid_error"],
                       data.get("lost_t_s"), str(data.get("lost_error") or ""), tuple(int(n) for n in data.get("nvlinks", ())),
                       low(data.get("lowest_free_clock")), int(data.get("busy_samples", 0)),
                       int(data.get("held_samples", 0)), int(data.get("free_samples", 0)), _idle(data.get("idlest")),
                       low(data.get("power_limit_low")), low(data.get("power_limit_high")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ParseError("nvml", f"burn-in summary malformed: {exc!r}") from None


def _low(value: Any) -> Low | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _idle(value: Any) -> Idle | None:
    return None if value is None else (float(value[0]), float(value[1]), float(value[2]), float(value[3]), float(value[4]))


def _span(value: Any) -> Span:
    return float(value[0]), float(value[1]), int(value[2])


class GpuWatch:
    """One GPU's running judgement: each sample and reading added as it comes, nothing kept that grows with time."""

    def __init__(self, index: int, window_s: float, bucket_s: float, interval_s: float) -> None:
        self.index, self.bucket_s, self.interval_s = index, bucket_s, interval_s
        self.window = Window(window_s)
        self.samples = self.util_read = self.reasons_read = self.span_count = self.xid_count = 0
        self.busy = self.held = self.free = 0
        self.limit_low: Low | None = None
        self.limit_high: Low | None = None
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.busy_t: float | None = None
        self.lowest_sample: Low | None = None
        self.spans: list[Span] = []
        self.span_total = 0.0
        self.longest: Span | None = None
        self._open: tuple[float, int] | None = None  # the throttle span going on: its start and reasons so far
        self.temps: dict[int, float] = {}
        self.slowdown_temp_c: float | None = None
        self.nvlinks: tuple[int, ...] = ()
        self.counters = {name: Counter() for name in COUNTERS}
        self.xids: list[tuple[float, int]] = []
        self.xid_error: str | None = None
        self.lost: tuple[float, str] | None = None
        self.timeline: deque[list[Any]] = deque(maxlen=TIMELINE_ROWS + 2)

    def sample(self, row: list[Any]) -> None:
        """One row of SAMPLE_FIELDS (t_s first)."""
        t_s, util, clock, power, temp, reasons = float(row[0]), row[1], row[2], row[3], row[4], row[5]
        limit = row[8] if len(row) > 8 else None
        self.samples += 1
        self.first_t = t_s if self.first_t is None else self.first_t
        self.last_t = t_s
        if limit is not None:
            self.limit_low = (float(limit), t_s) if self.limit_low is None or limit < self.limit_low[0] else self.limit_low
            self.limit_high = (float(limit), t_s) if self.limit_high is None or limit > self.limit_high[0] else self.limit_high
        if util is not None:
            self.util_read += 1
            if self.busy_t is None and util >= BUSY_PERCENT:
                self.busy_t = t_s
            if self.busy_t is not None:
                self.window.add(self._row(t_s, float(util), clock, power, limit, reasons))
                if self.lowest_sample is None or util < self.lowest_sample[0]:
                    self.lowest_sample = (float(util), t_s)
        if reasons is not None:
            self.reasons_read += 1
            self._throttle(t_s, int(reasons) & BAD_THROTTLE)
        if temp is not None and int(temp) not in self.temps:
            self.temps[int(temp)] = t_s
        self._bucket(row)

    def _row(self, t_s: float, util: float, clock: Any, power: Any, limit: Any, reasons: Any = None) -> Row:
        """The sample as a window row: busy or not, held by power or not, at an idle GPU's power or not."""
        if util < BUSY_PERCENT:
            return Row(t_s, util)
        self.busy += 1
        busy_clock = None if clock is None else float(clock)
        if power is None or not limit or limit <= 0:
            return Row(t_s, util, busy_clock)
        share = float(power) / float(limit)
        capped = reasons is not None and int(reasons) & POWER_REASONS and share >= IDLE_POWER  # never at idle power
        if share >= AT_POWER_LIMIT or capped:
            self.held += 1
            return Row(t_s, util, busy_clock)
        self.free += 1
        idle = (busy_clock, float(power), float(limit)) if busy_clock is not None and share < IDLE_POWER else None
        return Row(t_s, util, busy_clock, busy_clock, idle)

    def _throttle(self, t_s: float, bad: int) -> None:
        if bad and self._open is None:
            self._open = (t_s, bad)
        elif bad and self._open is not None:
            self._open = (self._open[0], self._open[1] | bad)
        elif not bad and self._open is not None:
            self._close(t_s)

    def _close(self, end_s: float) -> None:
        assert self._open is not None
        span = (self._open[0], round(end_s - self._open[0], 3), self._open[1])
        self._open = None
        self.span_count += 1
        self.span_total += span[1]
        if len(self.spans) < MAX_SPANS:
            self.spans.append(span)
        if self.longest is None or span[1] > self.longest[1]:
            self.longest = span

    def _bucket(self, row: list[Any]) -> None:
        """The timeline: per bucket the lowest utilisation and SM clock, the highest power and temperature, and the
        clock event reasons seen (or-ed); the PCIe link and power limit of the bucket's first sample."""
        t_s = float(row[0])
        start = t_s - t_s % self.bucket_s
        last = self.timeline[-1] if self.timeline else None
        if last is None or last[0] != start:
            self.timeline.append([start, *row[1:]])
            return
        _t, util, clock, power, temp, reasons = row[:6]
        if util is not None and (last[1] is None or util < last[1]):
            last[1] = util
        if clock is not None and (last[2] is None or clock < last[2]):
            last[2] = clock
        if power is not None and (last[3] is None or power > last[3]):
            last[3] = power
        if temp is not None and (last[4] is None or temp > last[4]):
            last[4] = temp
        if reasons is not None:
            last[5] = (last[5] or 0) | int(reasons)

    def result(self) -> GpuResult:
        """What this GPU showed so far; a throttle span still going on counts up to the last sample's end."""
        spans, count, total, longest = list(self.spans), self.span_count, self.span_total, self.longest
        if self._open is not None and self.last_t is not None:
            open_span = (self._open[0], round(self.last_t + self.interval_s - self._open[0], 3), self._open[1])
            count, total = count + 1, total + open_span[1]
            spans += [open_span] if len(spans) < MAX_SPANS else []
            longest = open_span if longest is None or open_span[1] > longest[1] else longest
        counters = {name: {"first": c.first, "last": c.last, "grew": None if c.grew is None else [c.grew[0], c.grew[1]],
                           "reads": c.reads} for name, c in self.counters.items()}
        return GpuResult(self.index, self.samples, self.first_t, self.last_t, self.busy_t, self.util_read,
                         self.lowest_sample, self.window.lowest_util, self.window.lowest_clock, self.window.highest_clock,
                         self.reasons_read, tuple(spans), count, round(total, 3), longest, dict(self.temps),
                         self.slowdown_temp_c, counters, tuple(self.xids), self.xid_count, self.xid_error,
                         None if self.lost is None else self.lost[0], "" if self.lost is None else self.lost[1],
                         self.nvlinks, self.window.lowest_free_clock, self.busy, self.held, self.free, self.window.idlest,
                         self.limit_low, self.limit_high)


class Watch:
    """Every GPU's running judgement over one stream: `add` each record as it comes, `summary` at any time."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.window_s = window_seconds(duration_s)
        self.bucket_s = bucket_seconds(duration_s)
        self.interval_s = 0.0
        self.gpus: dict[int, GpuWatch] = {}
        self.records = 0
        self.header = False
        self.ended: float | None = None  # the sampling's own end, where the stream got that far
        self.error: str | None = None
        self.last_t = 0.0

    def gpu(self, index: int) -> GpuWatch:
        if index not in self.gpus:
            self.gpus[index] = GpuWatch(index, self.window_s, self.bucket_s, self.interval_s)
        return self.gpus[index]

    def add(self, record: Any) -> None:
        """One record of the stream: a sample row `[gpu, *SAMPLE_FIELDS]`, or a header, counters, Xid, lost, end or
        error object. A record this version cannot read raises ParseError naming it."""
        self.records += 1
        try:
            if isinstance(record, list):
                self.gpu(int(record[0])).sample(record[1:])
                self.last_t = max(self.last_t, float(record[1]))
            elif isinstance(record, dict):
                self._event(record)
            else:
                raise TypeError(f"a {type(record).__name__}")
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ParseError("nvml", f"burn-in stream record {self.records} unreadable ({exc}): {str(record)[:200]}") from None

    def _event(self, record: dict[str, Any]) -> None:
        if "stream" in record:
            self._header(record)
        elif "error" in record:
            self.error = str(record["error"])
        elif "end" in record:
            self.ended = float(record["t_s"])
        elif "xid" in record:
            gpu = self.gpu(int(record["gpu"]) if isinstance(record.get("gpu"), int) else 0)
            gpu.xid_count += 1
            if len(gpu.xids) < MAX_XIDS:
                gpu.xids.append((float(record["t_s"]), int(record["xid"])))
        elif "lost" in record:
            self.gpu(int(record["gpu"])).lost = (float(record["t_s"]), str(record["lost"]))
        elif any(name in record for name in COUNTERS):
            gpu = self.gpu(int(record["gpu"]))
            for name in COUNTERS:
                gpu.counters[name].add(float(record["t_s"]), record.get(name))
        else:
            raise ValueError("no record of this kind")

    def _header(self, record: dict[str, Any]) -> None:
        if record["stream"] != STREAM_FORMAT or list(record["fields"]) != list(SAMPLE_FIELDS):
            raise ValueError(f"expected a {STREAM_FORMAT} stream with fields {list(SAMPLE_FIELDS)}")
        self.header = True
        self.interval_s = float(record["interval_s"])
        for entry in record["gpus"]:
            gpu = self.gpu(int(entry["index"]))
            gpu.interval_s = gpu.window.slack = self.interval_s
            gpu.slowdown_temp_c = None if entry.get("slowdown_temp_c") is None else float(entry["slowdown_temp_c"])
            gpu.nvlinks = tuple(int(n) for n in entry.get("nvlinks") or ())
            gpu.xid_error = entry.get("xid_error")

    def lowest_busy(self) -> tuple[int, float] | None:
        """(GPU, utilisation) of the GPU whose last window is the least busy: the progress line's figure."""
        means = [(g.window.util_sum / len(g.window.rows), i) for i, g in self.gpus.items() if g.window.rows]
        return (min(means)[1], round(min(means)[0], 1)) if means else None

    def summary(self, stopped: str | None = None, stream: str = "") -> dict[str, Any]:
        """What the burn-in kept, as the summary file (the samples format of the report's timelines, with each GPU's
        `burnin` result): plain data, the same whatever the contract asks."""
        results = {i: g.result() for i, g in sorted(self.gpus.items())}
        return {"format": STREAM_FORMAT, "interval_s": self.interval_s, "fields": list(SAMPLE_FIELDS),
                "duration_s": self.duration_s, "window_s": self.window_s, "bucket_s": self.bucket_s,
                "elapsed_s": self.ended if self.ended is not None else self.last_t, "ended": self.ended is not None,
                "header": self.header, "records": self.records, "stream": stream, "stopped": stopped, "error": self.error,
                "gpus": [{"index": i, "samples": list(self.gpus[i].timeline), "health": {},
                          "xid": {"error": r.xid_error} if r.xid_error else {"events": [{"t_s": t, "xid": x} for t, x in r.xids]},
                          **({"lost": {"t_s": r.lost_t_s, "error": r.lost_error}} if r.lost_t_s is not None else {}),
                          "burnin": r.to_dict()} for i, r in results.items()]}


def results_of(summary: dict[str, Any]) -> dict[int, GpuResult]:
    """Each GPU's result in a summary (Watch.summary's, or the one a bundle keeps)."""
    try:
        return {int(g["index"]): GpuResult.from_dict(g["burnin"]) for g in summary.get("gpus", [])}
    except (KeyError, TypeError) as exc:
        raise ParseError("nvml", f"burn-in summary malformed: {exc!r}") from None


def record_of(line: bytes | str, number: int) -> Any:
    """The record one line of a stream holds (JSON lines); a line that is not JSON raises ParseError naming it."""
    try:
        return json.loads(line)
    except ValueError as exc:
        raise ParseError("nvml", f"burn-in stream line {number} is not JSON ({exc}): {line[:200]!r}") from None


def records(lines: Iterable[bytes]) -> Iterator[tuple[bytes, Any]]:
    """Each non-blank line of a stream, with the record it holds."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield line, record_of(line, number)
