"""The `p2p` section: GPU-to-GPU copy bandwidth for every ordered pair (and both ways at once).

Measured by NVIDIA's nvbandwidth (default), cuda-samples' p2pBandwidthLatencyTest or our PyTorch workload;
each is reduced here to one view: for each ordered pair i -> j, every figure a tool printed for data moving from GPU i
to GPU j, and the pairs without peer access. How each tool's cells map to subjects:

- nvbandwidth `device_to_device_memcpy_write_ce`: cell [row r][column c] is GPU r writing into GPU c,
  data r -> c; `device_to_device_memcpy_read_ce`: GPU r reading from GPU c, data c -> r (its header says
  `GPU(row) -> GPU(column)` nonetheless). Both are taken; a pair is judged on the lower of the two.
  `device_to_device_bidirectional_memcpy_read_ce_total` [r][c] is both ways at once (the lower of
  [r][c] and [c][r]). A Waived testcase means peer access is not possible: every pair fails.
- p2pBandwidthLatencyTest `Unidirectional P2P=Enabled (P2P Writes)` [i][j]: GPU i writes into GPU j;
  `Bidirectional P2P=Enabled` [i][j]: both ways. A pair it reports as `CANNOT Access Peer` (or 0 in the
  connectivity matrix) was copied through host memory by the tool's fallback: it fails, never passes.
- PyTorch (`pytest_gpuaccept.workloads.p2p`): one line per ordered pair and, both ways, per pair; a pair
  without peer access is never copied. A run between CPU tensors (the tests) is never a GPU figure.

Every figure is also held to what it could physically be (plausible.py): a pair's figure above what its
NVLinks or PCIe link carry fails, and a run that ended before the copies it prints could have is not a
measurement (every pair fails); so is one whose header (nvbandwidth's driver and CUDA version, either tool's GPU names
and PCI addresses) is not what NVML reads here. Header fields a tool does not print are listed unconfirmed in each
check's details (`header_unconfirmed`), those NVML confirmed under `header_confirmed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import schema
from ..measurements import GpuModels
from ..models import PCIE_X16_GBYTE_S, fraction_note
from ..probes import nvbandwidth, p2p_latency, torch_p2p
from ..probes._run import Reading
from ..schema import Key
from ..subjects import Subject, gpu_count
from ..units import Bandwidth, Size, parse_size
from ..verdict import Check, Verdict, fmt
from . import plausible
from .base import Clause, GpuPairsBothWays, OrderedGpuPairs, Section

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes._run import ToolRunner
    from ..probes.nvbandwidth import NvBandwidth
    from ..probes.nvidia_smi import Topology
    from ..probes.nvml import Gpu, Host
    from ..probes.p2p_latency import P2pLatency
    from ..probes.torch_p2p import TorchP2p
    from ..session import Session

TOOLS = ("nvbandwidth", "p2pBandwidthLatencyTest", "torch")
WRITE_CE, READ_CE = "device_to_device_memcpy_write_ce", "device_to_device_memcpy_read_ce"
BIDIR_CE = "device_to_device_bidirectional_memcpy_read_ce"


@dataclass(frozen=True, slots=True)
class P2p:
    min_bandwidth: Bandwidth
    min_bidirectional: Bandwidth | None
    tool: str
    size: Size  # torch: bytes copied each time
    repeats: int  # torch: timed copies after a warm-up


def _rules(p2p: P2p, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    count = getattr(sections.get("gpus"), "count", None)
    if count is not None and count < 2:
        return [("p2p", f"needs gpus.count of at least 2 to have GPU pairs, got {count}")]
    return []


SECTION = Section(
    "p2p",
    {"min_bandwidth": Key(schema.bandwidth, required=True), "min_bidirectional": Key(schema.bandwidth),
     "tool": Key(schema.one_of(*TOOLS), default="nvbandwidth"), "size": Key(schema.size, default=parse_size("1 GiB")),
     "repeats": Key(schema.whole(1, 1000), default=10)},
    P2p, "GPU-to-GPU copy bandwidth (nvbandwidth or p2pBandwidthLatencyTest)", needs_gpu_count=True,
    cross_check=_rules)


@dataclass(frozen=True, slots=True)
class P2pView:
    """What a tool measured, per ordered pair; `failure` is why nothing can be judged at all."""

    tool: str
    evidence: tuple[str, ...]
    failure: str | None = None
    one_way: dict[tuple[int, int], list[tuple[str, float]]] = field(default_factory=dict)  # (i, j): data i -> j
    both_ways: dict[tuple[int, int], float] = field(default_factory=dict)  # (i, j), i < j
    no_peer: dict[tuple[int, int], str] = field(default_factory=dict)  # (i, j): why i -> j has no peer access
    matrix_gpus: int = 0
    no_peer_anywhere: str | None = None  # the tool waived P2P altogether
    models: GpuModels | None = None  # for "x % of the published figure"
    paths: plausible.Paths | None = None  # what each pair's path can carry (plausible.py)
    too_fast: str | None = None  # the run ended before the copies it reports could, or printed another host's GPUs
    header: dict[str, list[str]] = field(default_factory=dict)  # what of the tool's header NVML confirmed, and not


def _offdiag(cells: tuple[tuple[float | None, ...], ...]) -> dict[tuple[int, int], float | None]:
    return {(r, c): value for r, row in enumerate(cells) for c, value in enumerate(row) if r != c}


def with_models(view: P2pView, models: GpuModels, paths: plausible.Paths | None = None) -> P2pView:
    """The view with the GPUs' models and paths (the paths' readings become evidence of the checks they fail)."""
    return replace(view, models=models, paths=paths, evidence=view.evidence + models.evidence)


def from_nvbandwidth(reading: Reading[NvBandwidth], bidirectional: bool, gpus: Sequence[Gpu] = (),
                     host: Host | None = None) -> P2pView:
    view = P2pView("nvbandwidth", reading.evidence, reading.failure)
    result = reading.value
    if result is None:
        return view
    wanted = (WRITE_CE, READ_CE) + ((BIDIR_CE,) if bidirectional else ())
    waived = [case for case in wanted if case in result.waived]
    if waived:
        return P2pView("nvbandwidth", reading.evidence,
                       no_peer_anywhere=f"nvbandwidth waived {', '.join(waived)}: peer access is not possible (it "
                                        f"printed {'; '.join(repr(result.waived_lines.get(c, c)) for c in waived)})")
    missing = [c for c in wanted if c not in result.waived and result.matrix(c if c != BIDIR_CE else c + "_total") is None]
    if missing:
        return P2pView("nvbandwidth", reading.evidence, f"nvbandwidth printed no {', '.join(missing)} matrix")
    sizes = []
    for case, flip in ((WRITE_CE, False), (READ_CE, True)):
        matrix = result.matrix(case)
        if matrix is None:
            continue
        if matrix.unit != "GB/s":
            return P2pView("nvbandwidth", reading.evidence, f"{case} is in {matrix.unit}, not GB/s")
        sizes.append(len(matrix.cells))
        for (r, c), value in _offdiag(matrix.cells).items():
            pair = (c, r) if flip else (r, c)
            if value is not None:
                view.one_way.setdefault(pair, []).append((case.removeprefix("device_to_device_memcpy_"), value))
    total = result.matrix(BIDIR_CE + "_total") if bidirectional else None
    if total is not None:
        cells = _offdiag(total.cells)
        for (r, c), value in cells.items():
            other = cells.get((c, r))
            if r < c and value is not None and other is not None:
                view.both_ways[(r, c)] = min(value, other)
    foreign, header = plausible.foreign_header("nvbandwidth", plausible.nvbandwidth_said(result), host)
    too_fast = plausible.not_a_measurement(reading.run, plausible.nvbandwidth_work(result, reading.run.argv if reading.run else ()),
                                           gpus) or foreign
    return replace(view, matrix_gpus=min(sizes, default=0), too_fast=too_fast, header=header)


def from_p2p_latency(reading: Reading[P2pLatency], bidirectional: bool, host: Host | None = None) -> P2pView:
    result = reading.value
    if result is None:
        return P2pView(TOOLS[1], reading.evidence, reading.failure)
    writes = result.matrices.get("unidirectional_p2p_enabled_writes") or result.matrices.get("unidirectional_p2p_enabled")
    if writes is None:
        return P2pView(TOOLS[1], reading.evidence, "no Unidirectional P2P=Enabled matrix in the output")
    foreign, header = plausible.foreign_header(TOOLS[1], plausible.p2p_latency_said(result), host)
    work = plausible.p2p_latency_work(result, reading.run.argv if reading.run else ())
    view = P2pView(TOOLS[1], reading.evidence, matrix_gpus=len(writes),
                   too_fast=plausible.too_fast(reading.run, work) or foreign, header=header)
    connectivity = result.matrices.get("connectivity")
    for (i, j), value in _offdiag(writes).items():
        if (i, j) in result.no_peer_access or (connectivity is not None and connectivity[i][j] == 0):
            view.no_peer[(i, j)] = "p2pBandwidthLatencyTest: CANNOT Access Peer (its figure went through host memory)"
        elif value is not None:
            view.one_way[(i, j)] = [("P2P writes", value)]
    both = result.matrices.get("bidirectional_p2p_enabled") if bidirectional else None
    if both is not None:
        for (i, j), value in _offdiag(both).items():
            if i < j and value is not None:
                view.both_ways[(i, j)] = min(value, both[j][i])
    return view


def published(m: P2pView, i: int, j: int, both: bool) -> tuple[float | None, str]:
    """The published GPU-to-GPU figure of the pair's model: half its NVLink bandwidth one way, all of it both
    ways; a model without NVLink, or a pair the topology shows joined by none, its PCIe x16 figure. (None, "")
    where the model is unknown."""
    models = [m.models.model(k) if m.models else None for k in (i, j)]
    if any(model is None for model in models):
        return None, ""
    model = min(models, key=lambda x: x.nvlink_gbyte_s or 0)  # type: ignore[union-attr]
    assert model is not None
    links = plausible.nvlinks_between(m.paths, i, j)[0] if m.paths is not None else None
    if model.nvlink_gbyte_s and links != 0:
        return (model.nvlink_gbyte_s if both else model.nvlink_gbyte_s / 2), f"{model.name} NVLink"
    pcie = PCIE_X16_GBYTE_S.get(model.pcie_gen)
    return ((pcie * 2 if both else pcie) if pcie else None), f"{model.name} PCIe Gen{model.pcie_gen} x16"


def from_torch(reading: Reading[TorchP2p], gpus: int) -> P2pView:
    result = reading.value
    if result is None:
        return P2pView("PyTorch", reading.evidence, reading.failure)
    if result.device != "cuda":
        return P2pView("PyTorch", reading.evidence, f"the copies ran on the {result.device}, not between GPUs")
    return P2pView("PyTorch", reading.evidence, None, {pair: [("copy", value)] for pair, value in result.one_way.items()},
                   dict(result.both_ways), {pair: "PyTorch: no peer access (torch.cuda.can_device_access_peer)"
                                            for pair in result.no_peer}, gpus,
                   too_fast=plausible.too_fast(reading.run, plausible.torch_work(reading.run.stdout if reading.run else "")))


def _pair(subject: Subject) -> tuple[int, int]:
    assert subject.gpu is not None and subject.peer is not None
    return subject.gpu, subject.peer


def _unmeasurable(v: Verdict, m: P2pView, pairs: list[tuple[int, int]]) -> Check | None:
    if m.failure:
        return v.not_measured(m.failure)
    if m.no_peer_anywhere:
        return v.failed(None, m.no_peer_anywhere)
    if m.too_fast:
        return v.failed(None, m.too_fast, dict(m.header))
    for i, j in pairs:
        if (i, j) in m.no_peer:
            return v.failed(None, f"GPU{i}->GPU{j}: {m.no_peer[(i, j)]}")
    if any(max(pair) >= m.matrix_gpus for pair in pairs):
        return v.failed(None, f"{v.subject} not in the {m.tool} matrix: it has {m.matrix_gpus} GPUs")
    return None


def judge_one_way(section: P2p, subject: Subject, m: P2pView, contract: Contract) -> Check:
    """Data from GPU i to GPU j, the lower of every figure the tool gave for that direction."""
    i, j = _pair(subject)
    minimum = section.min_bandwidth.gbyte_s
    v = ONE_WAY.verdict(subject, f">= {fmt(minimum)}", m.evidence, minimum)
    early = _unmeasurable(v, m, [(i, j)])
    if early:
        return early
    figures = m.one_way.get((i, j), [])
    if not figures:
        return v.failed(None, f"{m.tool} gave no figure for GPU{i}->GPU{j} (N/A off the diagonal)")
    label, lowest = min(figures, key=lambda f: f[1])
    shown = ", ".join(f"{name} {value:g}" for name, value in figures)
    cap = _cap(m, i, j)
    high_label, highest = max(figures, key=lambda f: f[1])
    implausible = plausible.beyond(highest, cap, f"p2p GPU{i}->GPU{j}")
    if implausible:
        return plausible.confirmed(plausible.with_paths(v, m.paths).failed(
            highest, f"{implausible} ({m.tool} {high_label})", {"figures": shown, "tool": m.tool, **cap.details, **m.header}),
        m.tool, cap)
    details, note = fraction_note(lowest, *published(m, i, j, both=False))
    check = v.at_least(lowest, minimum, f"GPU{i}->GPU{j}", {"figures": shown, "tool": m.tool, **details, **cap.details,
                                                           **m.header},
                       suffix=(f" ({m.tool}: {shown} GB/s" if len(figures) > 1 else f" ({m.tool} {label}") +
                       f"{note}{plausible.unchecked(cap)})")
    return plausible.confirmed(check, m.tool, cap)


def _cap(m: P2pView, i: int, j: int, both: bool = False) -> plausible.Cap:
    """What the pair's path carries one way (both: the two ways together)."""
    cap = plausible.pair_cap(m.paths, i, j) if m.paths else plausible.Cap(None, "the paths were not read")
    if both and cap.gbyte_s is not None:
        return plausible.Cap(2 * cap.gbyte_s, cap.path, cap.source)
    return cap


def judge_both_ways(section: P2p, subject: Subject, m: P2pView, contract: Contract) -> Check:
    i, j = _pair(subject)
    assert section.min_bidirectional is not None
    v = BOTH_WAYS.verdict(subject, f">= {fmt(section.min_bidirectional.gbyte_s)}", m.evidence)
    early = _unmeasurable(v, m, [(i, j), (j, i)])
    if early:
        return early
    value = m.both_ways.get((i, j))
    if value is None:
        return v.failed(None, f"{m.tool} gave no bidirectional figure for GPU{i}<->GPU{j}")
    cap = _cap(m, i, j, both=True)
    implausible = plausible.beyond(value, cap, f"p2p GPU{i}<->GPU{j}", "both ways together")
    if implausible:
        return plausible.confirmed(plausible.with_paths(v, m.paths).failed(
            value, f"{implausible} ({m.tool})", {"tool": m.tool, **cap.details, **m.header}), m.tool, cap)
    details, note = fraction_note(value, *published(m, i, j, both=True))
    check = v.at_least(value, section.min_bidirectional.gbyte_s, f"GPU{i}<->GPU{j}",
                       {"tool": m.tool, **details, **cap.details, **m.header},
                       suffix=f" ({m.tool}, both directions at once{note}{plausible.unchecked(cap)})")
    return plausible.confirmed(check, m.tool, cap)


def nvbandwidth_cases(contract: Contract, runner: ToolRunner) -> tuple[str, ...]:
    """The testcases p2p asks of nvbandwidth, its default tool (clauses/together.py runs them in one process with the
    other sections'): both one-way copies, and both ways at once where min_bidirectional asks."""
    section = SECTION.get(contract)
    if section is None or section.tool != "nvbandwidth":
        return ()
    return (WRITE_CE, READ_CE) + ((BIDIR_CE,) if section.min_bidirectional is not None else ())


def gpuaccept_p2p(gpuaccept_state: Session, gpuaccept_contract: Contract, gpuaccept_models: GpuModels,
                  gpuaccept_topology: Reading[Topology], gpuaccept_nvbandwidth: Reading[NvBandwidth] | None) -> P2pView:
    """GPU-to-GPU copy bandwidth, once per run, with the contract's tool (nvbandwidth by default: the run every section
    shares, gpuaccept_nvbandwidth), and what each pair's path can carry (`topo -m`, NVML's links, sysfs's PCIe links:
    clauses/plausible.py)."""
    runner = gpuaccept_state.runner
    section = SECTION.of(gpuaccept_contract)
    count = gpu_count(gpuaccept_contract)
    both = section.min_bidirectional is not None
    paths = plausible.read_paths(gpuaccept_state, gpuaccept_models, gpuaccept_topology)
    if section.tool == "torch":
        reading = torch_p2p.run_torch_p2p(runner, count, section.size.nbytes, section.repeats, both)
        return with_models(from_torch(reading, count), gpuaccept_models, paths)
    host = gpuaccept_state.host()
    if section.tool == "p2pBandwidthLatencyTest":
        return with_models(from_p2p_latency(p2p_latency.run_p2p_latency(runner), both, host), gpuaccept_models, paths)
    nvb = gpuaccept_nvbandwidth or nvbandwidth.run_nvbandwidth(runner, nvbandwidth_cases(gpuaccept_contract, runner),
                                                               key="nvbandwidth_p2p")  # an older bundle's, replayed
    return with_models(from_nvbandwidth(nvb, both, paths.gpus, host), gpuaccept_models, paths)


ONE_WAY = Clause("p2p", SECTION, "test_p2p_bandwidth", OrderedGpuPairs(), gpuaccept_p2p, judge_one_way,
                 "copy bandwidth from GPU i to GPU j over peer access (nvbandwidth read and write CE, or "
                 "p2pBandwidthLatencyTest P2P writes)", "GB/s", pair_joint="->")
BOTH_WAYS = Clause("p2p.bidirectional", SECTION, "test_p2p_bidirectional", GpuPairsBothWays(), gpuaccept_p2p,
                   judge_both_ways, "both directions at once, summed, with `min_bidirectional`", "GB/s",
                   lambda s: s.min_bidirectional is not None, pair_joint="<->")
CLAUSES = (ONE_WAY, BOTH_WAYS)
MEASUREMENTS = (gpuaccept_p2p,)

