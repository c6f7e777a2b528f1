"""The `utilisation` and `health` sections: every GPU busy under a real training load, and healthy through it."""

from __future__ import annotations

import importlib.util
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import yaml

from .. import schema
from ..measurements import GpuModels, LoadRun
from ..probes import kernel_log, nvml
from ..probes._run import Command, Reading
from ..probes.nvml import APPLICATION_CLOCKS, BAD_THROTTLE, GpuSeries, Sample, decode_reasons
from ..probes.nvml_stream import AT_POWER_LIMIT, IDLE_POWER
from ..probes.sysfs import link_gen, link_width, pci_address, pci_name, read_pci_links
from ..probes.train import parse_first_steps
from ..schema import Key
from ..session import NVML_HOST_FILE
from ..subjects import Subject, gpu_count
from ..units import Duration, parse_duration
from ..verdict import Check, Verdict, fmt
from .base import Clause, PerGpu, Section
from .shared import GET_TORCH
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..models import Model
    from ..probes.kernel_log import KernelLog, KernelXid
    from ..session import Session

TRAIN = "pytest_gpuaccept.workloads.train"
SAMPLES_FILE = "nvml-samples.json"
SAMPLE_INTERVAL_S = 0.15  # NVML utilisation is a rolling fraction; 100-200 ms sampling resolves dips
CLOCK_FRACTION = 0.85  # health.clocks: the SM clock under load at least this share of the model's boost clock
BUSY_PERCENT = 50.0  # a sample this busy is one whose clock and power say whether the GPU works
# AT_POWER_LIMIT (a sample drawing 90 % of its enforced limit is held by power) and IDLE_POWER ("busy" at under 25 % of
# the power limit, or TDP, ...) are the burn-in watch's too (probes/nvml_stream.py)
IDLE_CLOCK = 0.50  # ... and under this share of the boost clock is an idle GPU's power and clock: not busy
MAX_LOAD_S = 3600.0  # a longer load is a burn-in: this load keeps its samples, the burn-in streams them


@dataclass(frozen=True, slots=True)
class Utilisation:
    min_percent: float
    duration: Duration
    warmup: Duration
    workload: str | tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Health:
    ecc: bool
    row_remapping: bool
    throttle: bool
    pcie_gen: int | None
    pcie_width: int | None
    power_limit: str | None  # "default": the enforced limit is not below the GPU's default limit
    max_remapped_rows: int | None  # rows already remapped for uncorrectable errors (history), per GPU
    xid: bool  # no Xid error event on any GPU during the load (NVML events and the kernel log)
    clocks: bool  # the SM clock under load at least min_clock_fraction of the model's boost clock
    min_clock_fraction: float | None  # None: CLOCK_FRACTION (and health.clocks only with `clocks: true`)
    pcie_aer: PcieAer | None = None  # PCIe AER counters around the whole run (clauses/errors.py)


@dataclass(frozen=True, slots=True)
class PcieAer:
    max_correctable_per_hour: float  # correctable errors a part may gain an hour of the run (at least 10 in all)


def _pcie_aer(value: Any, node: Any) -> PcieAer:
    """health.pcie_aer: a mapping, `{}` or `{max_correctable_per_hour: 100}` (default 0: the floor of 10 alone)."""
    data = schema.scalar(node) if isinstance(node, yaml.MappingNode) else value
    if not isinstance(data, dict) or any(key != "max_correctable_per_hour" for key in data):
        raise ValueError(f"expected a mapping such as {{max_correctable_per_hour: 100}}, got {schema.describe(node)}")
    rate = data.get("max_correctable_per_hour", 0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0 or rate != rate:
        raise ValueError(f"max_correctable_per_hour: expected a number of at least 0, got {schema.shown(rate)}")
    return PcieAer(float(rate))


def _load_duration(value: Any, node: Any) -> Duration:
    """utilisation.duration: at most MAX_LOAD_S. The load keeps every sample for its judges (a minute of 8 GPUs is
    3,200 rows); hours belong in the burn-in, whose watch keeps what its judges read in memory that does not grow."""
    duration: Duration = schema.duration(value, node)
    if duration.seconds > MAX_LOAD_S:
        raise ValueError(f"expected at most 1 h, got {duration}: a load of hours is a burn-in, which streams its "
                         f"samples (burnin: {{duration: \"{duration}\", min_percent: ...}})")
    return duration


def _utilisation_rules(util: Utilisation, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    if util.warmup.seconds >= util.duration.seconds:
        return [("utilisation.warmup", f"expected less than duration ({util.duration}), got {util.warmup}")]
    return []


def _health_rules(health: Health, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    around_load = [key for key in HEALTH.keys if key != "pcie_aer" and getattr(health, key) != HEALTH.keys[key].default]
    if "utilisation" not in sections and around_load:
        return [("health", "needs a utilisation section: the GPUs' health is read around its load (only pcie_aer, "
                           "read around the whole run, needs none)")]
    return []


UTILISATION = Section(
    "utilisation",
    {"min_percent": Key(schema.number(0.0, 100.0, low_open=True), required=True),
     "duration": Key(_load_duration, default=parse_duration("60 s")),
     "warmup": Key(schema.duration, default=parse_duration("10 s")), "workload": Key(schema.workload, default="builtin")},
    Utilisation, "GPU utilisation under a training load (NVML)", needs_gpu_count=True, cross_check=_utilisation_rules)
HEALTH = Section(
    "health",
    {"ecc": Key(schema.boolean, default=False), "row_remapping": Key(schema.boolean, default=False),
     "throttle": Key(schema.boolean, default=False), "pcie_gen": Key(schema.whole(1, 7)),
     "pcie_width": Key(schema.whole(1, 32)), "power_limit": Key(schema.one_of("default")),
     "max_remapped_rows": Key(schema.whole(0, 1000000)), "xid": Key(schema.boolean, default=False),
     "clocks": Key(schema.boolean, default=False), "min_clock_fraction": Key(schema.number(0.0, 1.0, low_open=True)),
     "pcie_aer": Key(_pcie_aer)},
    Health, "GPU health read around the utilisation load (NVML)", needs_gpu_count=True, cross_check=_health_rules)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def timeline_details(series: GpuSeries, min_percent: float | None, warmup_s: float, samples_file: str) -> dict[str, Any]:
    """Where the GPU's timeline is: its NVML samples, kept once, in the sealed samples file of the load (the
    report charts them from there). A copy in every check was every sample twice more in the results and in
    the JUnit file: 0.1 MB for a minute's 8-GPU load, a megabyte for ten minutes."""
    return {"timeline": {"samples": samples_file, "gpu": series.index, "threshold": min_percent,
                         "warmup_s": warmup_s}}


def timeline_rows(series: GpuSeries) -> list[list[Any]]:
    """The charted columns of each sample: t_s, util_percent, sm_clock_mhz, power_w, temp_c."""
    return [[s.t_s, s.util_percent, s.sm_clock_mhz, s.power_w, s.temp_c] for s in series.samples]


def _gpu(subject: Subject) -> int:
    assert subject.gpu is not None
    return subject.gpu


def judge_utilisation(section: Utilisation, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """The lowest GPU utilisation after its warm-up (mean and 5th percentile reported) against min_percent. The warm-up
    ends at the GPU's first sample at min_percent or more, and at `warmup` at the latest; details.startup keeps when
    the GPU was first busy, and when the builtin load says its first step was done."""
    index, minimum, warmup_s = _gpu(subject), section.min_percent, section.warmup.seconds
    series, failure = m.of(index)
    failure = failure or m.workload_failure
    v = UTIL.verdict(subject, f">= {fmt(minimum)}", m.evidence, minimum)
    lost = m.lost(index)
    if lost:
        return v.failed(None, lost)
    if series is None:
        return v.not_measured(failure or f"GPU{index} was not sampled")
    details = timeline_details(series, minimum, warmup_s, m.samples_file)
    # The warm-up is measured: it ends at the GPU's first sample at min_percent or more; `warmup` is the most it may take
    busy_t = next((s.t_s for s in series.samples if s.util_percent is not None and s.util_percent >= minimum), None)
    start_s = min(warmup_s, busy_t) if busy_t is not None else warmup_s
    steps = parse_first_steps(m.run.stdout) if m.run is not None else {}
    details["startup"] = {"first_busy_s": busy_t, **({"first_step_s": steps[index]} if index in steps else {})}
    steady = [(s.t_s, s.util_percent) for s in series.samples if s.t_s >= start_s and s.util_percent is not None]
    if not steady:
        return v.not_measured(failure or f"no utilisation sample after the {fmt(warmup_s)} s warmup", details)
    values = [float(u) for _t, u in steady]
    low_t, lowest = min(steady, key=lambda s: s[1])
    mean, p5 = sum(values) / len(values), _percentile(values, 0.05)
    since = (f"from t={start_s:.1f} s, its first sample at {fmt(minimum)} % or more (the warmup allows {fmt(warmup_s)} s)"
             if start_s < warmup_s else f"after the {fmt(warmup_s)} s warmup")
    stats = f"mean {mean:.1f} %, 5th percentile {p5:.1f} % over {len(values)} samples {since}"
    details["stats"] = {"min": lowest, "mean": round(mean, 2), "p5": round(p5, 2), "samples": len(values)}
    idle, sources, unconfirmed = _busy_at_idle(series, m, index, max(minimum, BUSY_PERCENT), start_s)
    if failure:
        return v.failed(lowest, f"the workload failed: {failure}", details)
    if idle:
        return with_sources(v.failed(0, f"{idle}: an idle GPU's power and clock, not busy; {stats}", details), *sources)
    if lowest < minimum:
        return with_sources(v.failed(lowest, f"GPU{index} dropped to {fmt(lowest)} % at t={low_t:.1f} s (below "
                                             f"{fmt(minimum)} %); {stats}", details), *sources, unconfirmed=unconfirmed)
    return with_sources(v.passed(lowest, f"GPU{index} lowest {fmt(lowest)} % >= {fmt(minimum)} %; {stats}", details),
                        *sources, unconfirmed=unconfirmed)


def _power_reference(series: GpuSeries, sample: Sample, model: Model | None) -> tuple[float | None, str]:
    """What a sample's power draw is set beside: its enforced limit, the load's, the default limit, else the TDP."""
    health = series.health
    for value, what in ((sample.power_limit_w, "enforced limit"), (health.get("power_limit_enforced_w"), "enforced limit"),
                        (health.get("power_limit_default_w"), "default limit"),
                        (model.tdp_w if model else None, f"published TDP ({model.name})" if model else "")):
        if value:
            return float(value), what
    return None, ""


def _busy_at_idle(series: GpuSeries, m: LoadRun, index: int, busy: float,
                  warmup_s: float) -> tuple[str | None, tuple[str, ...], str]:
    """(why a sample NVML calls busy is not: it drew an idle GPU's power at an idle GPU's clock, the sources that
    corroborated the utilisation, what could not be). Utilisation is set beside power draw and SM clock of the same
    sample: under IDLE_POWER of the power limit and under IDLE_CLOCK of the model's boost clock, both."""
    model = m.models.model(index) if m.models else None
    boost = model.boost_clock_mhz if model else None
    claims = [s for s in series.samples if s.t_s >= warmup_s and s.util_percent is not None and s.util_percent >= busy]
    powered = [s for s in claims if s.power_w is not None and _power_reference(series, s, model)[0]]
    clocked = [s for s in claims if s.sm_clock_mhz is not None]
    if not claims or not powered or not clocked or not boost:
        why = ("the model table has no boost clock of this GPU" if not boost else
               "NVML gave no power draw and SM clock beside it, or no power limit to set the draw beside")
        return None, ("NVML utilisation",), f"NVML's utilisation alone: {why}" if claims else ""
    for sample in powered:
        limit, what = _power_reference(series, sample, model)
        assert limit is not None and sample.power_w is not None
        if sample.sm_clock_mhz is not None and sample.power_w < IDLE_POWER * limit and sample.sm_clock_mhz < IDLE_CLOCK * boost:
            return (f"GPU{index} reports {fmt(float(sample.util_percent or 0))} % busy at t={sample.t_s:.1f} s while drawing "
                    f"{fmt(sample.power_w)} W ({sample.power_w / limit:.0%} of its {fmt(limit)} W {what}) at "
                    f"{fmt(sample.sm_clock_mhz)} MHz ({sample.sm_clock_mhz / boost:.0%} of the {fmt(boost)} MHz boost of a "
                    f"{model.name if model else 'GPU'})"), ("NVML utilisation", "NVML power draw", "NVML SM clock"), ""
    return None, ("NVML utilisation", "NVML power draw", "NVML SM clock"), ""


def _sampled(v: Verdict, m: LoadRun, subject: Subject, strict: bool = False) -> GpuSeries | Check:
    """The GPU's series, or the check saying why it cannot be judged: lost during the load (failed) or not
    sampled (not measured). `strict`: a workload that failed is no load to judge either."""
    index = _gpu(subject)
    series, failure = m.of(index)
    if strict:
        failure = failure or m.workload_failure
    lost = m.lost(index)
    if lost:
        return v.failed(None, lost)
    if series is None or (strict and failure):
        return v.not_measured(failure or "not sampled")
    return series


def _ecc_off(series: GpuSeries) -> str | None:
    """Why the ECC clauses cannot pass: NVML says ECC is disabled (counters read N/A then, never 0)."""
    if series.health.get("ecc_mode_current") != 0:
        return None
    pending = series.health.get("ecc_mode_pending")
    after = " (enabled after the next reboot)" if pending == 1 else ""
    return (f"ECC is disabled on GPU{series.index}{after}: memory errors are neither corrected, counted nor remapped, "
            "so none can be judged absent")


def judge_ecc(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """No volatile uncorrectable ECC error. ECC disabled fails (NVML's ECC mode 0): nothing was counted. An older
    recording without the ECC mode and no counters is not measured, as before."""
    v = ECC.verdict(subject, "== 0", m.evidence, 0.0)
    series = _sampled(v, m, subject)
    if isinstance(series, Check):
        return series
    off = _ecc_off(series)
    if off:
        return v.failed(None, off)
    count = series.health.get("ecc_volatile_uncorrected")
    if count is not None and "ecc_mode_current" in series.health and series.health["ecc_mode_current"] is None:
        return v.not_measured(f"NVML reads no ECC mode of GPU{series.index} (not supported: no ECC), yet its volatile "
                              f"uncorrectable ECC counter reads {count}: a GPU without ECC counts no memory error")
    if count is None:
        mode = series.health.get("ecc_mode_current")
        return v.not_measured("volatile ECC counters are not supported on this GPU" + (
            " (or ECC is off)" if mode is None else " although NVML says ECC is enabled"))
    return with_sources(v.judged(count == 0, count, f"{count} volatile uncorrectable ECC errors"), "NVML",
                        unconfirmed=_NVML_ALONE)


def judge_row_remapping(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """No pending or failed row remapping; retired pages pending where the GPU retires pages instead."""
    v = ROW_REMAPPING.verdict(subject, "no pending or failed remapping", m.evidence)
    series = _sampled(v, m, subject)
    if isinstance(series, Check):
        return series
    off = _ecc_off(series)
    if off:
        return v.failed(None, off)
    rows = series.health.get("remapped_rows")
    if rows is not None:
        corrected, uncorrected, pending, failed = rows
        return with_sources(v.judged(not pending and not failed, int(bool(pending)) + int(bool(failed)),
                                     f"remapped rows: {corrected} correctable, {uncorrected} uncorrectable, "
                                     f"pending {'yes' if pending else 'no'}, failure {'yes' if failed else 'no'}"), "NVML",
                            unconfirmed=_NVML_ALONE)
    retired = series.health.get("retired_pages_pending")
    if retired is None:
        return v.not_measured("neither row remapping nor page retirement is supported on this GPU")
    return with_sources(v.but(required="no retired pages pending").judged(
        not retired, int(retired), f"retired pages pending: {'yes' if retired else 'no'} "
        "(this GPU retires pages instead of remapping rows)"), "NVML", unconfirmed=_NVML_ALONE)


def clock_floor(contract: Contract, model: Model | None) -> float | None:
    """The lowest SM clock a busy GPU may run at: the contract's fraction (CLOCK_FRACTION by default) of the model's
    boost clock; None where the table has no boost clock of it."""
    section = HEALTH.get(contract)
    fraction = section.min_clock_fraction if section is not None and section.min_clock_fraction else CLOCK_FRACTION
    return fraction * model.boost_clock_mhz if model is not None and model.boost_clock_mhz else None


def _bad_mask(sample: Sample, floor: float | None) -> int:
    """The bad clock event reasons of a sample: HW slowdown, thermal, power brake; and an application-clock setting
    where it holds a busy GPU below the clock floor (an application clock at the boost clock holds nothing back)."""
    mask = sample.throttle_reasons or 0
    held = (mask & APPLICATION_CLOCKS and floor is not None and sample.sm_clock_mhz is not None
            and sample.sm_clock_mhz < floor and (sample.util_percent or 0) >= BUSY_PERCENT)
    return (mask & BAD_THROTTLE) | (APPLICATION_CLOCKS if held else 0)


def judge_throttle(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """No hardware slowdown, thermal slowdown or power brake at any moment of the load, nor application clocks that
    hold the busy GPU below the clock floor (health.clocks' fraction of the boost clock)."""
    # No unit until there are samples to count: a check not measured says none.
    v = THROTTLE.verdict(subject, "no HW slowdown / thermal / power brake / application-clock cap", m.evidence).but(unit=None)
    series = _sampled(v, m, subject, strict=True)
    if isinstance(series, Check):
        return series
    masks = [s.throttle_reasons for s in series.samples if s.throttle_reasons is not None]
    if not masks:
        return v.not_measured("clock event reasons are not supported on this GPU")
    seen = sorted({name for mask in set(masks) for name in decode_reasons(mask)})  # each distinct mask once
    floor = clock_floor(contract, m.models.model(_gpu(subject)) if m.models else None)
    bad = [(s.t_s, bad_mask, s.sm_clock_mhz) for s in series.samples if (bad_mask := _bad_mask(s, floor))]
    details: dict[str, Any] = {"throttle_reasons_seen": seen}
    v = v.but(unit=THROTTLE.unit)
    alone = "NVML's clock event reasons alone (no second reading of them)"
    if bad:
        first_t, first_mask, clock = bad[0]
        names = ", ".join(decode_reasons(first_mask))
        held = f" (SM clock {fmt(float(clock or 0))} MHz, under {fmt(floor or 0)})" if first_mask & APPLICATION_CLOCKS else ""
        return with_sources(v.failed(len(bad), f"{len(bad)} of {len(masks)} samples throttled, first at t={first_t:.1f} s: "
                                               f"{names}{held}; all reasons seen: {', '.join(seen)}", details), "NVML",
                            unconfirmed=alone)
    model = m.models.model(_gpu(subject)) if m.models else None
    if floor is None or model is None or not model.boost_clock_mhz:
        return with_sources(v.passed(0, f"no bad throttle reason in {len(masks)} samples; reasons seen: "
                                        f"{', '.join(seen) or 'none'}", details), "NVML", unconfirmed=alone)
    return _unexplained(v, series, UTILISATION.of(contract).warmup.seconds, floor, model, len(masks), seen, details)


EXPLAINING = 0xFFFF & ~0x1  # every clock event reason but gpu_idle explains a clock under the boost


def _unexplained(v: Verdict, series: GpuSeries, warmup_s: float, floor: float, model: Model, read: int, seen: list[str],
                 details: dict[str, Any]) -> Check:
    """No bad reason: the busy samples after the warmup not held by power set beside the model's boost clock. Where
    more than half of them run under the clock floor with no clock event reason raised, the reasons do not explain
    the clock (locked clocks raise none): failed, naming the model table's boost clock."""
    boost = float(model.boost_clock_mhz or 0)
    free = [s for s in series.samples if s.t_s >= warmup_s and s.sm_clock_mhz is not None and s.throttle_reasons is not None
            and (s.util_percent or 0) >= BUSY_PERCENT and not _at_power_limit(series, s)]
    quiet = [s for s in free if float(s.sm_clock_mhz or 0) < floor and not (s.throttle_reasons or 0) & EXPLAINING]
    sources = ("NVML clock event reasons", "NVML SM clock", f"the model table's boost clock ({model.name})")
    if free and len(quiet) * 2 > len(free):
        median = _percentile([float(s.sm_clock_mhz or 0) for s in quiet], 0.5)
        return with_sources(v.failed(len(quiet), f"{len(quiet)} of {len(free)} busy samples under the power limit run under "
                                                 f"{fmt(floor)} MHz with no clock event reason raised, first at "
                                                 f"t={quiet[0].t_s:.1f} s (median {fmt(median)} MHz, {median / boost:.0%} of "
                                                 f"the {fmt(boost)} MHz boost of a {model.name}): a clock held down that "
                                                 "NVML's reasons do not explain (locked clocks raise none)", details), *sources)
    shown = f"no bad throttle reason in {read} samples; reasons seen: {', '.join(seen) or 'none'}"
    if not free:
        return with_sources(v.passed(0, shown, details), "NVML", unconfirmed="NVML's clock event reasons alone (no busy "
                            "sample under the power limit to set beside the boost clock)")
    return with_sources(v.passed(0, f"{shown}; {len(free) - len(quiet)} of {len(free)} busy samples under the power limit at "
                                    f"{fmt(floor)} MHz or more, or with a reason", details), *sources)


def judge_clocks(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """The SM clock of the busy GPU after the warmup against the model's boost clock: the median over the samples
    not held by the power limit at least the contract's fraction of it (CLOCK_FRACTION); an application-clock setting
    that holds it below that fails, named. A sample drawing AT_POWER_LIMIT of its enforced limit runs at the clock
    its power buys: not counted (health.power_limit judges the limit)."""
    index = _gpu(subject)
    fraction = section.min_clock_fraction or CLOCK_FRACTION
    v = CLOCKS.verdict(subject, f">= {fraction:g} x the boost clock", m.evidence)
    series = _sampled(v, m, subject, strict=True)
    if isinstance(series, Check):
        return series
    model = m.models.model(index) if m.models else None
    floor = clock_floor(contract, model)
    if model is None or floor is None or not model.boost_clock_mhz:
        why = f"a {model.name} has no published boost clock" if model else m.models.missing(index) if m.models else "no model"
        return v.not_measured(f"{why}: no boost clock to take {fraction:g} of")
    boost = float(model.boost_clock_mhz)
    v = v.but(required=f">= {fmt(floor)} ({fraction:g} x the {fmt(boost)} MHz boost of a {model.name})", threshold=floor)
    warmup_s = UTILISATION.of(contract).warmup.seconds
    busy = [s for s in series.samples if s.t_s >= warmup_s and s.sm_clock_mhz is not None
            and (s.util_percent or 0) >= BUSY_PERCENT]
    if not busy:
        return v.not_measured(f"no sample after the {fmt(warmup_s)} s warmup with GPU{index} busy and its SM clock read")
    powered = [_at_power_limit(series, s) for s in busy]
    free = [s for s, held in zip(busy, powered) if not held]
    capped = [s for s in free if _bad_mask(s, floor) & APPLICATION_CLOCKS]
    sources = ("NVML SM clock", f"the model table's boost clock ({model.name})")
    lowered = _lowered_limit(series, [s for s, held in zip(busy, powered) if held])
    if lowered:
        median = _percentile([float(s.sm_clock_mhz or 0) for s in busy], 0.5)
        return with_sources(v.failed(median, f"GPU{index} median {fmt(median)} MHz under load, {lowered}"),
                            "NVML enforced power limit in the samples", "NVML default power limit", *sources)
    if capped:
        low = min(float(s.sm_clock_mhz or 0) for s in capped)
        return with_sources(v.failed(low, f"GPU{index} held at {fmt(low)} MHz by application clocks (clock event reason "
                                          f"applications_clocks_setting in {len(capped)} of {len(busy)} busy samples, first "
                                          f"at t={capped[0].t_s:.1f} s), {low / boost:.0%} of the {fmt(boost)} MHz boost of a "
                                          f"{model.name}"), *sources)
    if not free:
        median = _percentile([float(s.sm_clock_mhz or 0) for s in busy], 0.5)
        return with_sources(v.passed(median, f"GPU{index} at its power limit in every one of {len(busy)} busy samples after "
                                             f"the warmup: its clock (median {fmt(median)} MHz) is what that power buys"),
                            *sources)
    median = _percentile([float(s.sm_clock_mhz or 0) for s in free], 0.5)
    shown = (f"GPU{index} SM clock under load: median {fmt(median)} MHz over {len(free)} busy samples after the warmup "
             f"({median / boost:.0%} of the {fmt(boost)} MHz boost of a {model.name})"
             + (f"; {len(busy) - len(free)} more at the power limit, not counted" if len(free) < len(busy) else ""))
    return with_sources(v.judged(median >= floor, median, shown + ("" if median >= floor else f" < {fmt(floor)} MHz")),
                        *sources)


def _lowered_limit(series: GpuSeries, held: list[Sample]) -> str | None:
    """Why the samples held by power do not excuse their clock: the enforced limit they were held at (the sample's, else
    the load's) is under NVML's default limit of the GPU: a limit lowered for the load (and undone before it is read
    again) buys its clocks."""
    default = series.health.get("power_limit_default_w")
    if not held or not isinstance(default, (int, float)) or default <= 0:
        return None
    limits = [(float(lim), s.t_s) for s in held
              if isinstance(lim := s.power_limit_w or series.health.get("power_limit_enforced_w"), (int, float))]
    under = [(w, t) for w, t in limits if w + 1e-9 < default]
    if not under:
        return None
    low, at = min(under)
    return (f"held by a power limit of {fmt(low)} W (NVML's enforced limit, at t={at:.1f} s; {len(under)} of {len(held)} "
            f"samples at the power limit) under its {fmt(float(default))} W default limit ({low / default:.0%}): a limit "
            "lowered for the load buys its clock, it does not excuse it")


def _at_power_limit(series: GpuSeries, sample: Sample) -> bool:
    """Whether a sample drew AT_POWER_LIMIT of its enforced limit (the sample's, else the load's)."""
    limit = sample.power_limit_w or series.health.get("power_limit_enforced_w")
    return limit is not None and limit > 0 and sample.power_w is not None and sample.power_w >= AT_POWER_LIMIT * float(limit)


def _kernel_link(series: GpuSeries) -> tuple[int | None, int | None, int | None]:
    """The GPU's link as the kernel reads it from its PCIe registers (sysfs, as the sampling ended, under load):
    current generation and width, and the maximum generation; None where a file did not read."""
    entry = series.pcie_sysfs or {}
    return (link_gen(entry.get("current_link_speed")), link_width(entry.get("current_link_width")),
            link_gen(entry.get("max_link_speed")))


def judge_pcie(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """The PCIe link under load (after warmup: idle links downshift to save power) at least gen and width, as sysfs
    reads it (`current_link_speed`, `current_link_width`, as the sampling ends) with NVML's figure beside it: NVML
    claiming a faster or wider link than the kernel reads, or a generation above the link's maximum, fails."""
    gen, width = section.pcie_gen, section.pcie_width
    required = " ".join(x for x in (f"gen >= {gen}" if gen else "", f"x{width} or wider" if width else "") if x)
    v = PCIE.verdict(subject, required, m.evidence)
    series = _sampled(v, m, subject, strict=True)
    if isinstance(series, Check):
        return series
    warmup_s = UTILISATION.of(contract).warmup.seconds
    steady = [(s.pcie_gen, s.pcie_width) for s in series.samples
              if s.t_s >= warmup_s and s.pcie_gen is not None and s.pcie_width is not None]
    if not steady:
        return v.not_measured("no PCIe link reading under load")
    nvml_gen, nvml_width = min(g for g, _w in steady), min(w for _g, w in steady)
    last_gen, last_width = steady[-1]
    k_gen, k_width, k_max = _kernel_link(series)
    nvml = f"gen {nvml_gen} x{nvml_width} under load (lowest of {len(steady)} samples)"
    if k_gen is None or k_width is None:
        return with_sources(_pcie_judged(v, nvml_gen, nvml_width, gen, width, f"PCIe {nvml}"), "NVML",
                            unconfirmed="NVML's link alone: sysfs current_link_speed and current_link_width did not read")
    lies = []
    if last_gen > k_gen:
        lies.append(f"NVML says gen {last_gen}, sysfs current_link_speed says gen {k_gen}")
    if last_width > k_width:
        lies.append(f"NVML says x{last_width}, sysfs current_link_width says x{k_width}")
    top = max(g for g, _w in steady)
    if k_max is not None and top > k_max:
        lies.append(f"NVML says gen {top}, above the link's maximum gen {k_max} (sysfs max_link_speed)")
    low_gen, low_width = min(nvml_gen, k_gen), min(nvml_width, k_width)
    shown = f"PCIe gen {k_gen} x{k_width} in sysfs as the load ended; NVML: {nvml}"
    sources = ("sysfs current_link_speed/width", "NVML")
    if lies:
        return with_sources(v.failed(f"gen{low_gen} x{low_width}", f"{shown}: NVML and the kernel disagree: "
                                                                    + "; ".join(lies)), *sources)
    return with_sources(_pcie_judged(v, low_gen, low_width, gen, width, shown), *sources)


def _pcie_judged(v: Verdict, low_gen: int, low_width: int, gen: int | None, width: int | None, shown: str) -> Check:
    problems = []
    if gen and low_gen < gen:
        problems.append(f"gen {low_gen} < {gen}")
    if width and low_width < width:
        problems.append(f"x{low_width} < x{width}")
    return v.judged(not problems, f"gen{low_gen} x{low_width}", shown + (": " + ", ".join(problems) if problems else ""))


def judge_power_limit(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """The enforced power limit under load is not below the GPU's default: a rack capped to half shows here.

    Where NVML gives the card's limit constraints (min, max), the card is its own judge: enforced and default
    inside them, enforced not below default; a configurable-TDP card shipped below the table's figure passes.
    The published TDP only bounds the card's own maximum (a shim lowering everything fails). A recording
    without the constraints (made before they were read) is judged as before: 85 % of the published TDP."""
    v = POWER_LIMIT.verdict(subject, "", m.evidence)
    series = _sampled(v, m, subject)
    if isinstance(series, Check):
        return series
    health = series.health
    enforced, default = health.get("power_limit_enforced_w"), health.get("power_limit_default_w")
    per_sample = [(s.t_s, s.power_limit_w) for s in series.samples if s.power_limit_w is not None]
    if enforced is None and per_sample:
        enforced = min(w for _t, w in per_sample)
    if enforced is None or default is None:
        return v.not_measured("NVML gives no enforced or default power limit for this GPU")
    v = v.but(required=f">= {default:g} (the default limit)", threshold=float(default))
    assert subject.gpu is not None
    model = m.models.model(subject.gpu) if m.models else None
    sources = ("NVML", f"the published TDP ({model.name})" if model and model.tdp_w else "")
    lowest = min(per_sample, key=lambda p: p[1], default=None)
    if lowest is not None and lowest[1] + 1e-9 < min(enforced, default):  # lowered during the load, and raised again
        return with_sources(v.failed(lowest[1], f"enforced power limit {lowest[1]:g} W at t={lowest[0]:.1f} s of the load "
                                                f"(read at each of {len(per_sample)} samples), default {default:g} W: capped "
                                                f"to {lowest[1] / default:.0%} of the default"), *sources)
    shown = f"enforced power limit {enforced:g} W under load, default {default:g} W"
    if enforced + 1e-9 < default:
        return with_sources(v.failed(enforced, f"{shown}: capped to {enforced / default:.0%} of the default"), *sources)
    low, high = health.get("power_limit_min_w"), health.get("power_limit_max_w")
    if low is not None and high is not None:
        return with_sources(_within_constraints(v, enforced, default, float(low), float(high), model, shown), *sources)
    floor = _tdp_floor(model)
    if model is not None and floor and enforced < TDP_FRACTION * floor:
        # NVML's default is NVML's word; the published TDP of the card's PCI device ID is not.
        return with_sources(v.failed(enforced, f"{shown} (NVML), but a {model.name} (PCI device 0x{model.device_id}) is "
                                               f"published at {model.published_tdp}: {enforced / floor:.0%} of {_low_end(model)}",
                                     _OLD_RECORDING), *sources)
    published = f"; published {model.published_tdp} ({model.name})" if model and model.tdp_w else ""
    return with_sources(v.passed(enforced, shown + published, _OLD_RECORDING), *sources,
                        unconfirmed="NVML's limits alone: no published TDP of this GPU to set them beside")


def _within_constraints(v: Verdict, enforced: float, default: float, low: float, high: float, model: Model | None,
                        shown: str) -> Check:
    """The enforced and default limits inside NVML's own [min, max]; the card's max near the published TDP."""
    shown += f", NVML's limit constraints {low:g}-{high:g} W"
    outside = [f"the {what} limit {value:g} W is outside them" for what, value in (("default", default),
               ("enforced", enforced)) if not low - 1e-9 <= value <= high + 1e-9]
    if outside:
        return v.failed(enforced, f"{shown}: {'; '.join(outside)} (NVML contradicts itself)")
    floor = _tdp_floor(model)
    if model is not None and floor and high < TDP_FRACTION * floor:
        return v.failed(enforced, f"{shown}, but a {model.name} (PCI device 0x{model.device_id}) is published at "
                        f"{model.published_tdp}: this card cannot be set above {high / floor:.0%} of {_low_end(model)}")
    published = f"; published {model.published_tdp} ({model.name})" if model and model.tdp_w else ""
    return v.passed(enforced, shown + published)


def _low_end(model: Model) -> str:
    """How a message names the figure a limit is set beside: `it` (one TDP), or a configurable card's low end."""
    return f"{model.tdp_min_w:g} W" if model.tdp_min_w else "it"


def _tdp_floor(model: Model | None) -> float | None:
    """The published TDP a card's limits are set beside: a configurable-TDP card's lowest (H100 NVL: 350 W of its
    350-400 W), since a card shipped at the low end of its published range is as sold; else the one figure."""
    if model is None or not model.tdp_w:
        return None
    return model.tdp_min_w or model.tdp_w


_NVML_ALONE = "NVML's counters alone: nothing on the host reads them a second way"
_OLD_RECORDING = {"power_limit_constraints": "not in the recording (made before NVML's min/max were read): judged "
                                          "against the default and 85 % of the published TDP, as before"}
TDP_FRACTION = 0.85  # a card whose limit (or, with NVML's constraints, maximum) is under this share of the TDP is capped


def kernel_pci(bus: str) -> str:
    """NVML's `00000001:18:00.0` as the driver writes it in the kernel log: `0001:18:00` (the domain kept, no
    function)."""
    address = pci_address(bus)
    return pci_name(address[:3]) if address else ""


def kernel_source(kernel: Reading[KernelLog]) -> str:
    """`the kernel log`, naming journalctl where dmesg could not be read and the journal was."""
    argv = kernel.run.argv if kernel.run is not None else ()
    return "the kernel log (journalctl -k)" if argv and argv[0].endswith("journalctl") else "the kernel log"


def kernel_failure(v: Verdict, kernel: Reading[KernelLog], pci: str, window: tuple[float, float] | None) -> Check | None:
    """The failure the kernel log shows for the GPU at `pci` during the load, or None where it shows none.

    A line without a boot-clock time (printk.time=0, dmesg -T, the journal's wall clock) counts as inside the
    load; a GPU whose PCI address NVML does not give owns every line, and a lost-GPU message naming no GPU counts
    for every GPU; an NVRM Xid line that cannot be read fails every GPU, quoted."""
    assert kernel.value is not None
    log, source = kernel.value, kernel_source(kernel)
    if log.unreadable:
        shown = "; ".join(repr(line) for line in log.unreadable[:3])
        return v.failed(len(log.unreadable), f"NVML reported no Xid event, but {source} has {len(log.unreadable)} "
                        f"NVRM Xid line(s) that cannot be read (counted against every GPU): {shown}")
    start, end = window or (0.0, float("inf"))
    hits = [x for x in log.xids
            if (not pci or x.pci in (pci, "")) and (x.t_s is None or start - 1.0 <= x.t_s <= end + 1.0)]
    if not hits:
        return None
    shown = "; ".join(f"[{_when(x)}] {x.what}: {x.text[:80]}" for x in hits[:3])
    unplaced = " (a line without a boot-clock time counts as inside the load)" if any(x.t_s is None for x in hits) else ""
    unplaced += " (a message naming no GPU counts for every GPU)" if any(not x.pci for x in hits) else ""
    return v.failed(len(hits), f"NVML reported no Xid event, but {source} shows {len(hits)} for PCI {pci or '(unknown)'} "
                    f"during the load{unplaced}: {shown}")


def kernel_confirmed(v: Verdict, said: str, kernel: Reading[KernelLog] | None, bus: str,
                     window: tuple[float, float] | None) -> Check:
    """NVML reported no Xid event for the GPU at `bus` (`said`): the kernel log's word on it during the load. Beside an
    NVML recording (no kernel log: the one here is not the recorded host's) NVML's events alone, said so; a log that
    cannot be read leaves it not measured; an NVRM Xid line for the GPU fails it (kernel_failure)."""
    if kernel is None:
        return with_sources(v.passed(0, said), "NVML Xid events",
                            unconfirmed="NVML's events alone: the kernel log here is not the recorded host's")
    if kernel.value is None:
        return v.not_measured(f"NVML reported no Xid event, but the kernel log cannot be read: {kernel.failure}")
    pci = kernel_pci(bus)
    failed = kernel_failure(v, kernel, pci, window)
    if failed is not None:
        return with_sources(failed, "NVML Xid events", "the kernel log")
    return with_sources(v.passed(0, f"{said}; {kernel_source(kernel)} agrees (no NVRM Xid for PCI {pci or '(unknown)'} "
                                    f"during the load)"), "NVML Xid events", "the kernel log")


def _when(x: KernelXid) -> str:
    return f"{x.t_s:.1f}" if x.t_s is not None else (x.stamp or "no time stamp")


def judge_xid(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """No Xid error during the load: NVML's Xid events for the GPU, and the kernel log's NVRM Xid lines for its
    PCI address within the load's window. Beside a live load (or its replay) a kernel log that cannot be read
    (dmesg needs root; journalctl -k the systemd-journal group) leaves the check not measured: NVML alone is not
    the second source the clause promises. Beside an NVML recording there is no kernel log of that host."""
    v = XID.verdict(subject, "== 0", m.evidence, 0.0)
    series = _sampled(v, m, subject)
    if isinstance(series, Check):
        return series
    assert subject.gpu is not None
    if series.xid is None:
        return v.not_measured("the NVML samples carry no Xid reading (a recording made before Xid events were read)")
    if series.xid.get("error"):
        return v.not_measured(f"NVML cannot deliver Xid events for this GPU: {series.xid['error']}")
    events = [e for e in series.xid.get("events", []) if isinstance(e, dict)]
    if events:
        shown = ", ".join(f"Xid {e.get('xid')} at t={e.get('t_s')} s" for e in events[:5])
        return v.failed(len(events), f"NVML reported {len(events)} Xid event(s) during the load: {shown}")
    return kernel_confirmed(v, "no Xid event during the load (NVML events)", m.kernel, m.buses.get(subject.gpu, ""),
                            m.window)


def judge_remapped_rows(section: Health, subject: Subject, m: LoadRun, contract: Contract) -> Check:
    """Rows already remapped for uncorrectable errors (or pages retired for double-bit ECC): a worn card's history."""
    assert section.max_remapped_rows is not None
    v = REMAPPED_ROWS.verdict(subject, f"<= {section.max_remapped_rows}", m.evidence)
    series = _sampled(v, m, subject)
    if isinstance(series, Check):
        return series
    off = _ecc_off(series)
    if off:
        return v.failed(None, off)
    rows = series.health.get("remapped_rows")
    if rows is not None:
        count, source = int(rows[1]), "rows remapped for uncorrectable errors"
    elif series.health.get("retired_pages_double_bit") is not None:
        count, source = int(series.health["retired_pages_double_bit"]), "pages retired for double-bit ECC errors"
    else:
        return v.not_measured("neither row remapping nor page retirement is readable on this GPU")
    return with_sources(v.judged(count <= section.max_remapped_rows, count,
                                 f"{count} {source} (at most {section.max_remapped_rows})"), "NVML", unconfirmed=_NVML_ALONE)


def under_load(state: Session, command: Command, duration_s: float, count: int, samples_file: str,
               expected_s: float, models: GpuModels | None = None, beside: Callable[[], object] | None = None) -> LoadRun:
    """Run a workload while NVML samples every GPU (or the recording replays its samples); once per run. As the
    sampling ends, the load still on, each GPU's PCIe link files are read from sysfs beside its samples. `beside`:
    a measurement that holds nothing the load holds (schedule.py), made while the load runs (alongside)."""
    buses = {g.index: g.pci_bus_id for g in state.host().gpus}  # read before the load: the sampler takes no lock

    def sample(stop: threading.Event) -> dict[str, Any]:
        if state.nvml_recording is not None:  # recorded series replayed through the NVML adapter
            ends = time.monotonic() + duration_s
            samples = state.recorded_samples()
            stop.wait(max(0.0, ends - time.monotonic()))
            return with_links(samples, state.sys_root, buses)
        def told(elapsed: float, lowest: float | None) -> None:
            if state.runner.progress is not None:
                busy = f", lowest GPU {lowest:g} %" if lowest is not None else ""
                state.runner.progress(f"gpuaccept: {command.key or command.tool} {elapsed:.0f}/{expected_s:g} s{busy}")

        return with_links(nvml.sample_gpus(count, SAMPLE_INTERVAL_S, duration_s, stop, told), state.sys_root, buses)

    started = kernel_log.uptime()
    during = sample if beside is None else (lambda stop: alongside(lambda: sample(stop), beside))
    run = state.runner.run_during(command, duration_s, during, samples_file)
    ended = kernel_log.uptime()
    evidence = (*run.evidence, samples_file)
    if run.error:
        return LoadRun(run, {}, run.error, None, run.evidence, samples_file=samples_file)
    # The kernel log is this machine's: beside a live load (or its replay), never beside an NVML recording.
    kernel, window = None, None
    if state.nvml_recording is None:
        times = state.runner.reading("load-window.json", lambda: {"started_uptime_s": started, "ended_uptime_s": ended})
        if times.get("started_uptime_s") is not None and times.get("ended_uptime_s") is not None:
            window = (float(times["started_uptime_s"]), float(times["ended_uptime_s"]))
            kernel, tried = kernel_log.read_xids(state.runner)
            evidence = (*evidence, "load-window.json", *tried)
        else:  # no boot clock to place the kernel's lines on: the kernel log cannot be judged, never "no Xid"
            kernel = Reading(None, None, "the load's window on the boot clock (/proc/uptime) could not be read")
            evidence = (*evidence, "load-window.json")

    def load(series: dict[int, nvml.GpuSeries], failure: str | None, workload_failure: str | None) -> LoadRun:
        return LoadRun(run, series, failure, workload_failure, evidence, kernel, window, buses, models,
                       samples_file)
    recording = state.runner.reading(samples_file, lambda: {"error": "no NVML samples were recorded"})
    try:
        series = {s.index: s for s in nvml.parse_samples(recording)}
    except ValueError as exc:
        return load({}, str(exc), None)
    workload_failure = run.failure
    if workload_failure is None and run.stopped_after_s is None and run.duration_s < expected_s:
        workload_failure = f"`{run.command}` ended after {run.duration_s:g} s, before the {expected_s:g} s duration"
    if workload_failure:
        tail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        workload_failure += f"; its last output: {tail}" if tail else ""
    return load(series, None, workload_failure)


def alongside(main: Callable[[], dict[str, Any]], other: Callable[[], object]) -> dict[str, Any]:
    """`main` (the load's sampling) in a thread of its own while `other` runs in this one; main's result once both are
    done. Where `other` fails, its failure unwinds at once (the load is stopped, and the sampling with it)."""
    done: dict[str, Any] = {}

    def take() -> None:
        try:
            done["result"] = main()
        except BaseException as exc:  # raised again in the caller's thread
            done["error"] = exc

    sampler = threading.Thread(target=take, name="gpuaccept-sampler", daemon=True)
    sampler.start()
    other()
    sampler.join()
    if "error" in done:
        raise done["error"]
    result: dict[str, Any] = done["result"]
    return result


def with_links(samples: dict[str, Any], sys_root: Path, buses: dict[int, str]) -> dict[str, Any]:
    """The samples with each GPU's PCIe link files read from sysfs now (`pcie_sysfs`), where the samples have none:
    the kernel's reading of the link under load, the second source health.pcie sets beside NVML's."""
    gpus = samples.get("gpus")
    if not isinstance(gpus, list):
        return samples
    links = read_pci_links(sys_root, {i: b for i, b in buses.items() if b})["gpus"]
    return {**samples, "gpus": [{**g, "pcie_sysfs": links.get(str(g.get("index")))}
                                if isinstance(g, dict) and "pcie_sysfs" not in g else g for g in gpus]}


def gpuaccept_load(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_models: GpuModels,
                   gpuaccept_utilisation_window: LoadRun | None) -> LoadRun:
    """Run the contract's workload on every GPU while NVML samples them (once per run, exclusive); or read the one GPU
    load the GEMM shares, over the contract's window (gpuaccept_utilisation_window, clauses/together.py)."""
    if gpuaccept_utilisation_window is not None:
        return gpuaccept_utilisation_window
    state = gpuaccept_state
    section = UTILISATION.of(gpuaccept_contract)
    count = gpu_count(gpuaccept_contract)
    host = state.host()
    if host.error and state.runner.replay is None:
        return LoadRun(None, {}, host.error, None, (NVML_HOST_FILE,))
    if section.workload == "builtin":
        if state.runner.replay is None and importlib.util.find_spec("torch") is None:
            return LoadRun(None, {}, f"PyTorch is not installed for the builtin workload: {GET_TORCH}", None, ())
        command = Command("python", ("-m", TRAIN, "--gpus", str(count), "--duration", f"{section.duration.seconds + 60:g}"),
                          key="workload_builtin")
    else:
        command = Command(section.workload[0], tuple(section.workload[1:]), key="workload")
    return under_load(state, command, section.duration.seconds, count, SAMPLES_FILE, section.duration.seconds,
                      gpuaccept_models)


UTIL = Clause("utilisation", UTILISATION, "test_utilisation", PerGpu(), gpuaccept_load, judge_utilisation,
              "lowest utilisation after warmup, with mean and 5th percentile", "%")
ECC = Clause("health.ecc", HEALTH, "test_ecc", PerGpu(), gpuaccept_load, judge_ecc,
             "no volatile uncorrectable ECC error", "errors", lambda s: s.ecc)
ROW_REMAPPING = Clause("health.row_remapping", HEALTH, "test_row_remapping", PerGpu(), gpuaccept_load,
                       judge_row_remapping, "no pending or failed row remapping (or retired page)", None,
                       lambda s: s.row_remapping)
THROTTLE = Clause("health.throttle", HEALTH, "test_throttle", PerGpu(), gpuaccept_load, judge_throttle,
                  "no HW slowdown, thermal slowdown or power brake during the load, nor application clocks holding the "
                  "busy GPU below the clock floor, nor a clock below it that no reason explains", "samples",
                  lambda s: s.throttle)
CLOCKS = Clause("health.clocks", HEALTH, "test_sm_clock", PerGpu(), gpuaccept_load, judge_clocks,
                "with `clocks: true` (or `min_clock_fraction`): the median SM clock of the busy GPU after the warmup at "
                "least that fraction (default 0.85) of the model's boost clock; application clocks or a lowered power "
                "limit holding it lower fail",
                "MHz", lambda s: s.clocks or s.min_clock_fraction is not None)
PCIE = Clause("health.pcie", HEALTH, "test_pcie_link", PerGpu(), gpuaccept_load, judge_pcie,
              "PCIe generation and width under load", None, lambda s: s.pcie_gen is not None or s.pcie_width is not None)
POWER_LIMIT = Clause("health.power_limit", HEALTH, "test_power_limit", PerGpu(), gpuaccept_load, judge_power_limit,
                     "the enforced power limit under load is not below the GPU's default limit", "W",
                     lambda s: s.power_limit is not None)
REMAPPED_ROWS = Clause("health.remapped_rows", HEALTH, "test_remapped_rows", PerGpu(), gpuaccept_load,
                       judge_remapped_rows, "rows remapped for uncorrectable errors (or double-bit retired pages), "
                       "at most `max_remapped_rows`", "rows", lambda s: s.max_remapped_rows is not None)
XID = Clause("health.xid", HEALTH, "test_xid", PerGpu(), gpuaccept_load, judge_xid,
             "no Xid error event during the load (NVML events; the kernel log's NVRM Xid lines, unread: not measured)",
             "events", lambda s: s.xid)
CLAUSES = (UTIL, ECC, ROW_REMAPPING, THROTTLE, CLOCKS, PCIE, POWER_LIMIT, REMAPPED_ROWS, XID)
MEASUREMENTS = (gpuaccept_load,)
