"""The `memory_bandwidth` section: each GPU's own memory, device-local copy, bytes read + written per second.

Measured with PyTorch (`pytest_gpuaccept.workloads.membw`): a copy of `size` bytes within the GPU,
warmed up, the median of `repeats`. The threshold is `min_bandwidth`, or `min_fraction_of_peak` of the
published figure of the GPU's model, found by its PCI device ID (a model the table lacks: not measured).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from .. import schema
from ..measurements import GpuModels
from ..models import fraction_note
from ..probes._run import Reading
from ..records import record
from ..schema import Key
from ..subjects import Subject
from ..units import Bandwidth, Size, parse_size
from ..verdict import Check, Verdict
from .base import Clause, PerGpu, Section

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.membw import MemCopy


@record
class MemoryBandwidth:
    min_bandwidth: Bandwidth | None
    min_fraction_of_peak: float | None
    tool: str
    size: Size
    repeats: int


def _exactly_one(section: MemoryBandwidth, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    if (section.min_bandwidth is None) == (section.min_fraction_of_peak is None):
        return [("memory_bandwidth", "expected exactly one of min_bandwidth and min_fraction_of_peak")]
    return []


SECTION = Section(
    "memory_bandwidth",
    {"min_bandwidth": Key(schema.bandwidth), "min_fraction_of_peak": Key(schema.number(0.0, 1.0, low_open=True)),
     "tool": Key(schema.one_of("torch"), default="torch"), "size": Key(schema.size, default=parse_size("4 GiB")),
     "repeats": Key(schema.whole(1, 1000), default=20)},
    MemoryBandwidth, "each GPU's own memory bandwidth (PyTorch device-local copy)", needs_gpu_count=True,
    cross_check=_exactly_one)


@record
class MemoryCopies:
    reading: Reading[dict[int, MemCopy]]
    models: GpuModels

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.reading.evidence + self.models.evidence


def judge(section: MemoryBandwidth, subject: Subject, m: MemoryCopies, contract: Contract) -> Check:
    assert subject.gpu is not None
    index = subject.gpu
    model = m.models.model(index)
    v = Verdict(CLAUSE.key, subject, unit="GB/s", evidence=m.evidence)
    if section.min_bandwidth is not None:
        minimum = section.min_bandwidth.gbyte_s
    else:
        assert section.min_fraction_of_peak is not None
        if model is None:
            return v.not_measured(f"{m.models.missing(index)}: no published figure to take "
                                  f"{section.min_fraction_of_peak:g} of")
        if model.memory_bandwidth_gbyte_s is None:
            return v.not_measured(f"a {model.name} (PCI device 0x{model.device_id}) has no published memory bandwidth "
                                  f"to take {section.min_fraction_of_peak:g} of")
        minimum = section.min_fraction_of_peak * model.memory_bandwidth_gbyte_s
    v = v.but(required=f">= {minimum:g}", threshold=minimum)
    if m.reading.value is None:
        return v.not_measured(m.reading.failure or "no measurement")
    copy = m.reading.value.get(index)
    if copy is None:
        return v.failed(None, f"GPU{index} was not measured (the workload measured GPUs {sorted(m.reading.value)})")
    if copy.device != f"cuda:{index}":
        return v.not_measured(f"the copy ran on {copy.device}, not on GPU{index}: not a GPU figure")
    published = model.memory_bandwidth_gbyte_s if model else None
    what = f"{model.name}, {published:g} GB/s" if model and published else ""
    details, note = fraction_note(copy.gbyte_s, published, what)
    return v.at_least(copy.gbyte_s, minimum, f"GPU{index} device-local copy", details,
                      suffix=f" (PyTorch, {copy.nbytes} bytes, median of {len(copy.seconds)}{note})")


CLAUSE = Clause("memory_bandwidth", SECTION, "test_memory_bandwidth", PerGpu(), "gpuaccept_memory_copies", judge,
                "device-local copy, bytes read + written per second (PyTorch); or a fraction of the model's figure",
                "GB/s")
CLAUSES = (CLAUSE,)
