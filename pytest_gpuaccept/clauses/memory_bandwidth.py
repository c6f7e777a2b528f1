"""The `memory_bandwidth` section: each GPU's own memory, device-local copy, bytes read + written per second.

Measured by NVIDIA's nvbandwidth (`tool: nvbandwidth`, and the default wherever nvbandwidth is found) or
our PyTorch workload (`tool: torch`, and the default without nvbandwidth):

- nvbandwidth `-t device_local_copy`: one row, one column per GPU, each the rate of a copy between two
  buffers on that GPU, in bytes copied per second. Each byte is read once and written once, so the
  memory's traffic (what is judged) is twice the printed figure. A testcase it waives fails every GPU,
  quoting what it printed.
- PyTorch (`pytest_gpuaccept.workloads.membw`): a copy of `size` bytes within the GPU, warmed up, the
  median of `repeats`; a copy that ran on another device than `cuda:<i>` is not a GPU figure.

The threshold is `min_bandwidth`, or `min_fraction_of_peak` of the published figure of the GPU's model,
found by its PCI device ID (a model the table lacks: not measured). A figure above the published one by
more than MARGIN is no measurement of that memory, nor is a run that ended before the copies it reports
could have, nor one whose header (driver, CUDA version, GPU names and PCI addresses) is not what NVML reads
here (clauses/plausible.py): each fails, naming the figures or both sources. What of the header NVML confirmed,
and what the header lacks, is in each check's details (`header_confirmed`, `header_unconfirmed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import schema
from ..measurements import GpuModels
from ..models import TABLE_FILE, fraction_note
from ..probes import membw, nvbandwidth
from ..probes._run import Reading
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Bandwidth, Size, parse_size
from ..verdict import Check, Verdict
from . import plausible
from .base import Clause, PerGpu, Section

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes._run import ToolRunner
    from ..probes.membw import MemCopy
    from ..probes.nvbandwidth import NvBandwidth
    from ..probes.nvml import Gpu, Host
    from ..session import Session

TOOLS = ("nvbandwidth", "torch")
LOCAL_COPY = "device_local_copy"
MARGIN = 0.10  # a figure may read 10 % above the published one (rounding, GB/s against the datasheet's arithmetic)


@dataclass(frozen=True, slots=True)
class MemoryBandwidth:
    min_bandwidth: Bandwidth | None
    min_fraction_of_peak: float | None
    tool: str | None  # None: nvbandwidth where it is found, else PyTorch
    size: Size  # torch: bytes copied each time
    repeats: int  # torch: timed copies after a warm-up


def _exactly_one(section: MemoryBandwidth, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    if (section.min_bandwidth is None) == (section.min_fraction_of_peak is None):
        return [("memory_bandwidth", "expected exactly one of min_bandwidth and min_fraction_of_peak")]
    return []


SECTION = Section(
    "memory_bandwidth",
    {"min_bandwidth": Key(schema.bandwidth), "min_fraction_of_peak": Key(schema.number(0.0, 1.0, low_open=True)),
     "tool": Key(schema.one_of(*TOOLS)), "size": Key(schema.size, default=parse_size("4 GiB")),
     "repeats": Key(schema.whole(1, 1000), default=20)},
    MemoryBandwidth, "each GPU's own memory bandwidth (nvbandwidth device_local_copy, or PyTorch)",
    needs_gpu_count=True, cross_check=_exactly_one)


@dataclass(frozen=True, slots=True)
class LocalCopy:
    """One GPU's figure, or why its copy is no figure of that GPU."""

    gbyte_s: float | None  # bytes read + written per second
    how: str  # the message's account of the figure, or why there is none


@dataclass(frozen=True, slots=True)
class MemoryCopies:
    """What a tool measured, per GPU index; `failure` is why nothing can be judged at all (not measured),
    `waived` what the tool printed when it refused to copy (every GPU fails)."""

    tool: str
    evidence: tuple[str, ...]
    models: GpuModels
    failure: str | None = None
    waived: str | None = None
    copies: dict[int, LocalCopy] = field(default_factory=dict)
    too_fast: str | None = None  # the run ended before the copies it reports could, or printed another host's GPUs
    header: dict[str, list[str]] = field(default_factory=dict)  # what of nvbandwidth's header NVML confirmed, and not


def from_torch(reading: Reading[dict[int, MemCopy]], models: GpuModels) -> MemoryCopies:
    copies = {}
    for index, copy in (reading.value or {}).items():
        if copy.device != f"cuda:{index}":
            copies[index] = LocalCopy(None, f"the copy ran on {copy.device}, not on GPU{index}: not a GPU figure")
        else:
            copies[index] = LocalCopy(copy.gbyte_s, f"PyTorch, {copy.nbytes} bytes, median of {len(copy.seconds)}")
    too_fast = plausible.too_fast(reading.run, plausible.torch_work(reading.run.stdout if reading.run else ""))
    return MemoryCopies("PyTorch", reading.evidence + models.evidence, models, reading.failure, copies=copies,
                        too_fast=too_fast)


def from_nvbandwidth(reading: Reading[NvBandwidth], models: GpuModels, gpus: Sequence[Gpu] = (),
                     host: Host | None = None) -> MemoryCopies:
    """device_local_copy's one row: cell [0][i] is GPU i, bytes copied per second; judged as twice that. A run shorter
    than its copies, one listing GPUs NVML does not have here (`gpus`), or one whose header is not NVML's `host` (another
    driver or CUDA version: plausible.foreign_header) is not a measurement."""
    evidence = reading.evidence + models.evidence
    result = reading.value
    if result is None:
        return MemoryCopies("nvbandwidth", evidence, models, reading.failure)
    if LOCAL_COPY in result.waived:
        said = result.waived_lines.get(LOCAL_COPY, LOCAL_COPY)
        return MemoryCopies("nvbandwidth", evidence, models, waived=f"nvbandwidth waived {LOCAL_COPY} (it printed {said!r})")
    matrix = result.matrix(LOCAL_COPY)
    if matrix is None or matrix.unit != "GB/s" or len(matrix.cells) != 1:
        return MemoryCopies("nvbandwidth", evidence, models, f"nvbandwidth printed no {LOCAL_COPY} row in GB/s")
    copies = {index: LocalCopy(2 * value, f"nvbandwidth {LOCAL_COPY} {value:g} GB/s copied, x 2: read + written")
              for index, value in enumerate(matrix.cells[0]) if value is not None}
    foreign, header = plausible.foreign_header("nvbandwidth", plausible.nvbandwidth_said(result), host)
    too_fast = plausible.not_a_measurement(reading.run, plausible.nvbandwidth_work(result, reading.run.argv if reading.run else ()),
                                           gpus) or foreign
    return MemoryCopies("nvbandwidth", evidence, models, copies=copies, too_fast=too_fast, header=header)


def _minimum(section: MemoryBandwidth, m: MemoryCopies, index: int, v: Verdict) -> float | Check:
    if section.min_bandwidth is not None:
        return section.min_bandwidth.gbyte_s
    assert section.min_fraction_of_peak is not None
    model = m.models.model(index)
    if model is None:
        return v.not_measured(f"{m.models.missing(index)}: no published figure to take "
                              f"{section.min_fraction_of_peak:g} of")
    if model.memory_bandwidth_gbyte_s is None:
        return v.not_measured(f"a {model.name} (PCI device 0x{model.device_id}) has no published memory bandwidth "
                              f"to take {section.min_fraction_of_peak:g} of")
    return section.min_fraction_of_peak * model.memory_bandwidth_gbyte_s


def judge(section: MemoryBandwidth, subject: Subject, m: MemoryCopies, contract: Contract) -> Check:
    assert subject.gpu is not None
    index = subject.gpu
    v = CLAUSE.verdict(subject, evidence=m.evidence)
    minimum = _minimum(section, m, index, v)
    if isinstance(minimum, Check):
        return minimum
    v = v.but(required=f">= {minimum:g}", threshold=minimum)
    if m.failure:
        return v.not_measured(m.failure)
    if m.waived:
        return v.failed(None, f"GPU{index}: {m.waived}")
    if m.too_fast:
        return v.failed(None, m.too_fast, dict(m.header))
    copy = m.copies.get(index)
    if copy is None:
        return v.failed(None, f"GPU{index} was not measured ({m.tool} measured GPUs {sorted(m.copies)})")
    if copy.gbyte_s is None:
        return v.not_measured(copy.how)
    model = m.models.model(index)
    published = model.memory_bandwidth_gbyte_s if model else None
    what = f"{model.name}, {published:g} GB/s" if model and published else ""
    details, note = fraction_note(copy.gbyte_s, published, what)
    cap = _cap(m, index)
    details.update(cap.details)
    details.update(m.header)
    # Sanity before the threshold (ReFrame's sanity apart from performance): a copy faster than the memory can be
    # is no measurement, whatever the contract asks.
    what, suffix = f"GPU{index} device-local copy", f" ({copy.how}{note}{plausible.unchecked(cap)})"
    check = plausible.over_ceiling(v, copy.gbyte_s, minimum, cap.gbyte_s * (1 + MARGIN) if cap.gbyte_s else None,
                                   f"physically impossible: the published {cap.gbyte_s or 0:g} GB/s of {cap.path} + "
                                   f"{MARGIN:.0%}, from {cap.source}", what, details, suffix=suffix) \
        or v.at_least(copy.gbyte_s, minimum, what, details, suffix=suffix)
    return plausible.confirmed(check, m.tool, cap)


def _cap(m: MemoryCopies, index: int) -> plausible.Cap:
    """What the GPU's memory can carry, read + written: the published HBM/GDDR bandwidth of the model of its PCI
    device ID (sysfs), from the model table."""
    model = m.models.model(index)
    if model is None or not model.memory_bandwidth_gbyte_s:
        why = m.models.missing(index) if model is None else f"the {model.name} has no published memory bandwidth"
        return plausible.Cap(None, why)
    return plausible.Cap(model.memory_bandwidth_gbyte_s, f"the {model.name}'s memory",
                         f"the model table ({TABLE_FILE}) for PCI device 0x{model.device_id} (sysfs)")


def nvbandwidth_cases(contract: Contract, runner: ToolRunner) -> tuple[str, ...]:
    """The testcase memory_bandwidth asks of nvbandwidth (`tool: nvbandwidth`, or no tool named and nvbandwidth found;
    clauses/together.py runs it in one process with the other sections'). Found means on the host measured: a replay
    asks the bundle whether nvbandwidth ran there, never the verifying machine's PATH (where an honest bundle's
    re-judge would otherwise look for a PyTorch run that never was, and fail to verify)."""
    section = SECTION.get(contract)
    if section is None or section.tool not in (None, "nvbandwidth"):
        return ()
    found = runner.replay.has(f"{nvbandwidth.KEY}.json") if runner.replay is not None else runner.which(nvbandwidth.TOOL)
    return (LOCAL_COPY,) if section.tool == "nvbandwidth" or found else ()


def gpuaccept_memory_copies(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_models: GpuModels,
                            gpuaccept_nvbandwidth: Reading[NvBandwidth] | None) -> MemoryCopies:
    """Each GPU's device-local copy bandwidth, once per run, with the GPUs' models: nvbandwidth's device_local_copy
    (`tool: nvbandwidth`, or no tool named and nvbandwidth found: the run every section shares, gpuaccept_nvbandwidth),
    else our PyTorch workload."""
    runner = gpuaccept_state.runner
    section = SECTION.of(gpuaccept_contract)
    cases = nvbandwidth_cases(gpuaccept_contract, runner)
    if cases:
        nvb = gpuaccept_nvbandwidth or nvbandwidth.run_nvbandwidth(runner, cases, key="nvbandwidth_local")  # older bundle
        host = gpuaccept_state.host()
        return from_nvbandwidth(nvb, gpuaccept_models, host.gpus, host)
    reading = membw.run_membw(runner, gpu_count(gpuaccept_contract), section.size.nbytes, section.repeats)
    return from_torch(reading, gpuaccept_models)


CLAUSE = Clause("memory_bandwidth", SECTION, "test_memory_bandwidth", PerGpu(), gpuaccept_memory_copies, judge,
                "device-local copy, bytes read + written per second (nvbandwidth device_local_copy x 2, or PyTorch); "
                "or a fraction of the model's figure", "GB/s")
CLAUSES = (CLAUSE,)
MEASUREMENTS = (gpuaccept_memory_copies,)
