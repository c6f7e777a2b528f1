"""The `host_bandwidth` section: host <-> GPU copy bandwidth over PCIe, per GPU and direction (nvbandwidth).

nvbandwidth `host_to_device_memcpy_ce` and `device_to_host_memcpy_ce` print one row (the CPU) and a
column per GPU: cell [0][i] is GPU i's figure, `GPU<i>:h2d` and `GPU<i>:d2h`. Each is shown beside the
PCIe x16 figure of the GPU's generation (from its PCI device ID), as a fraction of it. A figure above what
the GPU's PCIe link carries fails, and a run shorter than its own timed copies, or one whose header (driver, CUDA
version, GPU names and PCI addresses) is not what NVML reads here, is not a measurement (plausible.py). What of the
header NVML confirmed, and what the header lacks, is in each check's details (`header_confirmed`,
`header_unconfirmed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import schema
from ..measurements import GpuModels
from ..models import PCIE_X16_GBYTE_S, fraction_note
from ..probes import nvbandwidth, torch_hostbw
from ..probes._run import Reading
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Bandwidth, Size, parse_size
from ..verdict import Check, fmt
from . import plausible
from .base import Clause, PerGpuAspect, Section

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes._run import ToolRunner
    from ..probes.nvbandwidth import NvBandwidth
    from ..probes.nvml import Host
    from ..probes.torch_hostbw import HostBw
    from ..session import Session

TESTCASES = {"h2d": "host_to_device_memcpy_ce", "d2h": "device_to_host_memcpy_ce"}


@dataclass(frozen=True, slots=True)
class HostBandwidth:
    min_bandwidth: Bandwidth
    tool: str
    size: Size
    repeats: int


SECTION = Section(
    "host_bandwidth",
    {"min_bandwidth": Key(schema.bandwidth, required=True),
     "tool": Key(schema.one_of("nvbandwidth", "torch"), default="nvbandwidth"),
     "size": Key(schema.size, default=parse_size("1 GiB")), "repeats": Key(schema.whole(1, 1000), default=10)},
    HostBandwidth, "host <-> GPU copy bandwidth (nvbandwidth or PyTorch)", needs_gpu_count=True)


@dataclass(frozen=True, slots=True)
class HostCopies:
    """GB/s per (GPU, direction) as nvbandwidth printed them; `failure` is why there are none."""

    evidence: tuple[str, ...]
    failure: str | None = None
    figures: dict[tuple[int, str], float] = field(default_factory=dict)
    columns: int = 0
    models: GpuModels | None = None
    tool: str = "nvbandwidth"
    cpus: dict[int, str] = field(default_factory=dict)  # torch: the CPUs each GPU's pinned buffer came from
    paths: plausible.Paths | None = None  # what each GPU's host link can carry (plausible.py)
    too_fast: str | None = None  # the run ended before the copies it reports could, or printed another host's GPUs
    waived: str | None = None  # nvbandwidth waived a testcase this clause needs: every GPU fails, quoting it
    header: dict[str, list[str]] = field(default_factory=dict)  # what of nvbandwidth's header NVML confirmed, and not


def from_nvbandwidth(reading: Reading[NvBandwidth], models: GpuModels, paths: plausible.Paths | None = None,
                     host: Host | None = None) -> HostCopies:
    """One row each for h2d and d2h; a run shorter than its copies, one listing another host's GPUs (the paths' NVML
    GPUs), or one whose header is not NVML's `host` (another driver or CUDA version: plausible.foreign_header) is not
    a measurement."""
    evidence = reading.evidence + models.evidence
    result = reading.value
    if result is None:
        return HostCopies(evidence, reading.failure, models=models)
    figures: dict[tuple[int, str], float] = {}
    columns = []
    for aspect, case in TESTCASES.items():
        matrix = result.matrix(case)
        if matrix is None or matrix.unit != "GB/s" or len(matrix.cells) != 1:
            if case in result.waived:
                said = result.waived_lines.get(case, case)
                return HostCopies(evidence, models=models, waived=f"nvbandwidth waived {case} (it printed {said!r})")
            return HostCopies(evidence, f"nvbandwidth {case}: not printed as one row in GB/s", models=models)
        columns.append(len(matrix.cells[0]))
        for index, value in enumerate(matrix.cells[0]):
            if value is not None:
                figures[(index, aspect)] = value
    foreign, header = plausible.foreign_header("nvbandwidth", plausible.nvbandwidth_said(result), host)
    too_fast = plausible.not_a_measurement(reading.run, plausible.nvbandwidth_work(result, reading.run.argv if reading.run else ()),
                                           paths.gpus if paths else ()) or foreign
    return HostCopies(evidence, None, figures, min(columns), models, paths=paths, too_fast=too_fast, header=header)


def from_torch(reading: Reading[HostBw], models: GpuModels, gpus: int, paths: plausible.Paths | None = None) -> HostCopies:
    evidence = reading.evidence + models.evidence
    result = reading.value
    if result is None:
        return HostCopies(evidence, reading.failure, models=models, tool="PyTorch")
    if result.device != "cuda":
        return HostCopies(evidence, f"the copies ran on the {result.device}, not to and from GPUs", models=models,
                          tool="PyTorch")
    too_fast = plausible.too_fast(reading.run, plausible.torch_work(reading.run.stdout if reading.run else ""))
    return HostCopies(evidence, None, dict(result.figures), gpus, models, "PyTorch", dict(result.cpus), paths, too_fast)


def judge(section: HostBandwidth, subject: Subject, m: HostCopies, contract: Contract) -> Check:
    assert subject.gpu is not None and subject.aspect is not None
    minimum = section.min_bandwidth.gbyte_s
    v = CLAUSE.verdict(subject, f">= {fmt(minimum)}", m.evidence, minimum)
    if m.failure:
        return v.not_measured(m.failure)
    if m.waived:
        return v.failed(None, m.waived)
    if m.too_fast:
        return v.failed(None, m.too_fast, dict(m.header))
    if subject.gpu >= m.columns:
        return v.failed(None, f"GPU{subject.gpu} not in {m.tool}'s matrix: it has {m.columns} GPUs")
    value = m.figures.get((subject.gpu, subject.aspect))
    if value is None:
        return v.failed(None, f"{m.tool} gave no figure for GPU{subject.gpu} {subject.aspect}")
    model = m.models.model(subject.gpu) if m.models else None
    published = PCIE_X16_GBYTE_S.get(model.pcie_gen) if model else None
    details, note = fraction_note(value, published, f"PCIe Gen{model.pcie_gen} x16, {model.name}" if model else "")
    direction = "host to GPU" if subject.aspect == "h2d" else "GPU to host"
    cap = plausible.host_cap(m.paths, subject.gpu) if m.paths else plausible.Cap(None, "the paths were not read")
    implausible = plausible.beyond(value, cap, f"{subject} {direction}")
    if implausible:
        return plausible.confirmed(plausible.with_paths(v, m.paths).failed(value, f"{implausible} ({m.tool})",
                                                                           {**cap.details, **m.header}), m.tool, cap)
    details.update(cap.details)
    details.update(m.header)
    where = f", host buffer on CPUs {m.cpus[subject.gpu]}" if m.cpus.get(subject.gpu) else ""
    if m.cpus.get(subject.gpu):
        details["host_cpus"] = m.cpus[subject.gpu]
    check = v.at_least(value, minimum, f"{subject} {direction}", details, suffix=f" ({m.tool}{where}{note}{plausible.unchecked(cap)})")
    return plausible.confirmed(check, m.tool, cap)


def nvbandwidth_cases(contract: Contract, runner: ToolRunner) -> tuple[str, ...]:
    """The testcases host_bandwidth asks of nvbandwidth, its default tool (clauses/together.py runs them in one
    process with the other sections'): host to device and device to host."""
    section = SECTION.get(contract)
    return tuple(TESTCASES.values()) if section is not None and section.tool == "nvbandwidth" else ()


def gpuaccept_host_copies(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_models: GpuModels,
                          gpuaccept_nvbandwidth: Reading[NvBandwidth] | None) -> HostCopies:
    """Host <-> GPU copy bandwidth per GPU and direction: nvbandwidth (the run every section shares,
    gpuaccept_nvbandwidth), or our PyTorch workload with each GPU's pinned buffer allocated on its own NUMA node (its
    local_cpulist in sysfs)."""
    state = gpuaccept_state
    section = SECTION.of(gpuaccept_contract)
    paths = plausible.read_paths(state, gpuaccept_models)  # each GPU's PCIe link: the most a host copy carries
    if section.tool == "torch":
        count = gpu_count(gpuaccept_contract)
        cpus = {gpu: local for gpu, local in state.local_cpus().items() if gpu < count}
        reading = torch_hostbw.run_torch_hostbw(state.runner, count, section.size.nbytes, section.repeats, cpus)
        return from_torch(reading, gpuaccept_models, count, paths)
    nvb = gpuaccept_nvbandwidth or nvbandwidth.run_nvbandwidth(  # an older bundle's own run, replayed
        state.runner, nvbandwidth_cases(gpuaccept_contract, state.runner), key="nvbandwidth_host")
    return from_nvbandwidth(nvb, gpuaccept_models, paths, state.host())


CLAUSE = Clause("host_bandwidth", SECTION, "test_host_bandwidth", PerGpuAspect(("h2d", "d2h"), "`GPU<i>:h2d`, `GPU<i>:d2h`"),
                gpuaccept_host_copies, judge, "pinned host memory <-> GPU copy bandwidth, each direction "
                "(nvbandwidth host_to_device / device_to_host_memcpy_ce)", "GB/s")
CLAUSES = (CLAUSE,)
MEASUREMENTS = (gpuaccept_host_copies,)
