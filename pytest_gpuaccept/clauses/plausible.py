"""Plausibility of copy-bandwidth figures, in one place: what the path can carry, and what the run's time held.

Two questions are asked of every figure the p2p and host_bandwidth clauses judge, before it may pass:

1. **Can the path carry it?** A GPU pair joined by n NVLinks carries at most n x the model's per-link rate
   each way (gpus.json: `nvlink.gbyte_s` both ways per GPU over `nvlink.links`; a bridged card pair, its
   `bridge_gbyte_s`). A pair without NVLink, and every host <-> GPU copy, goes over PCIe: at most the
   generation x width the slower GPU's own link can run at (sysfs `max_link_speed` and `max_link_width` of
   the GPU's function, else its current ones), else the model's own generation at x16. Not the current
   speed: an idle GPU trains its link down and `current_link_speed` then reads 2.5 GT/s. Not the upstream
   port: in a VM it is a virtual root port advertising whatever the hypervisor chose (QEMU: 2.5 or 16 GT/s)
   whatever the slot. A card in a slower slot is therefore capped at its own maximum (lenient, never a false
   rejection); the slot's trained link is judged by `health.pcie_gen` and `pcie_width`. The
   NVLinks of a pair are counted by `nvidia-smi topo -m` (NV#) and by NVML (active links whose far end is
   the peer or an NVSwitch, or whose far end NVML cannot name: in a VM the NVSwitches are not on the guest's PCI
   bus, and NCCL too takes such links for invisible NVSwitches, NVIDIA/nccl#1182); where both read, the lower count
   is the path. Every rate is the model's per-link one (gpus.json `nvlink.link_gbyte_s`), never PCIe's for a GPU
   whose NVLinks NVML counts active. Where a GPU's links lead into switches sysfs does not list as NVIDIA bridge
   functions (a VM's view), NVML's active links x that rate are the cap, and the cap says so. A figure above the cap by more
   than MARGIN fails, naming both numbers and the path. Where no cap can be computed (no model, no
   topology, no sysfs), the figure is taken on the tool's word, and the message says so.
2. **Did the run last as long as its own work?** The copies a tool reports took at least bytes / rate
   each; their sum is the least wall time the run can have had. A run that ended sooner (ToolRun.duration_s)
   did not measure what it prints. The copies per reported figure (probes/nvbandwidth.py `copies`): nvbandwidth's
   buffer (`-b` MiB, else 64 MiB to v0.6 and 512 MiB from v0.7, 64 MiB where no version is printed) x 16 copies
   (`--loopCount`) in each sample at or below the median printed, 2 of its 3 (`-i`; all of them with `-m`),
   counting one stream of a bidirectional testcase; p2pBandwidthLatencyTest (probes/p2p_latency.py `cell_bytes`)
   40,000,000 ints (`--numElems=N`) x 5 repeats = 800 MB per cell, twice that both ways, and a diagonal cell's
   figure counts its bytes twice; our PyTorch workloads print their own timings.
3. **Is it this host's output?** What a copy tool's header says of where it ran (nvbandwidth's driver and CUDA
   driver version, every tool's device names and PCI addresses) is set beside NVML's (`foreign_header`): another
   driver, another CUDA version, or a GPU NVML does not have there fails; a field the header lacks is listed as
   unconfirmed in the check's details, never failed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..models import TABLE_FILE
from ..probes.nvbandwidth import copies as nvbandwidth_copies
from ..probes.nvml import cuda_version
from ..probes.p2p_latency import cell_bytes as p2p_cell_bytes
from ..probes.sysfs import link_gen, link_width, pci_address, pci_name, read_hypervisor, read_nvidia_bridges, read_pci_links, sysfs_bus_id
from ..units import human_bytes
from ..verdict import fmt
from .sources import with_sources

if TYPE_CHECKING:
    from ..measurements import GpuModels
    from ..models import Model
    from ..probes._run import Reading, ToolRun
    from ..probes.nvbandwidth import NvBandwidth
    from ..probes.nvidia_smi import Topology
    from ..probes.nvml import Gpu, Host
    from ..probes.p2p_latency import P2pLatency
    from ..session import Session
    from ..verdict import Check, Verdict

MARGIN = 0.10  # a figure may read 10 % above the cap (rounding, clocks, GB/s as 1e9 against link arithmetic)
SLACK_S = 0.05  # and a run may end 5 % + 50 ms before its timed work (timer and process start granularity)
# One PCIe lane, one direction, after line encoding (8b/10b to Gen2, 128b/130b from Gen3), GB/s: x16 is
# 4, 8, 15.75, 31.5, 63, 126.
PCIE_LANE_GBYTE_S = {1: 0.25, 2: 0.5, 3: 15.75 / 16, 4: 31.5 / 16, 5: 63.0 / 16, 6: 126.0 / 16}
LINKS_FILE = "sysfs-pci-links.json"
SWITCHES_FILE = "sysfs-nvswitches.json"  # the NVIDIA bridge functions (NVSwitches) sysfs lists, bus ID -> device ID
VM_VIEW = "a VM's view: no NVSwitch in sysfs"  # NVLinks into switches the PCI bus does not show
def read_switches(sys_root: Path) -> dict[str, Any]:
    """`sysfs-nvswitches.json`: every NVIDIA bridge function (NVSwitch) the PCI bus lists, bus ID -> device ID, and
    what sysfs shows of a hypervisor (a guest sees no NVSwitch: its NVLinks lead into switches of the host's)."""
    return {**read_nvidia_bridges(sys_root), "hypervisor": read_hypervisor(sys_root)}
C2C_MODELS = ("GH200", "GB200", "GB300")  # the host link is NVLink-C2C, not PCIe: no PCIe cap applies


# ------------------------------------------------------------------ the PCIe links, from sysfs


@dataclass(frozen=True, slots=True)
class PcieLink:
    gen: int
    width: int
    source: str  # which files said so

    @property
    def gbyte_s(self) -> float:
        return PCIE_LANE_GBYTE_S[self.gen] * self.width

    @property
    def label(self) -> str:
        return f"PCIe Gen{self.gen} x{self.width}"


def parse_pci_link(entry: dict[str, Any]) -> PcieLink | None:
    """The most the GPU's own link can run at: its maximum generation and width (the current ones where no
    maximum reads)."""
    gen = link_gen(entry.get("max_link_speed")) or link_gen(entry.get("current_link_speed"))
    width = link_width(entry.get("max_link_width")) or link_width(entry.get("current_link_width"))
    if gen is None or width is None:
        return None
    return PcieLink(gen, width, f"sysfs {entry.get('bus_id')}")


# ------------------------------------------------------------------ what the paths can carry


@dataclass(frozen=True, slots=True)
class Paths:
    """What is known of each GPU's paths: models, `topo -m`, NVML's links and sysfs's PCIe links."""

    models: GpuModels | None
    topology: Topology | None = None  # None: not read
    gpus: tuple[Gpu, ...] = ()  # NVML's GPUs, with their NVLinks
    links: dict[int, PcieLink | None] | None = None  # None: sysfs not read
    evidence: tuple[str, ...] = ()
    switches: dict[str, str] | None = None  # NVIDIA bridge functions (NVSwitches) sysfs lists; None: not read
    hypervisor: str | None = None  # what sysfs shows of a hypervisor (a VM), in words; None: none shown


@dataclass(frozen=True, slots=True)
class Cap:
    """The most a path carries each way, GB/s, the path in words (gbyte_s None: unknown, and why), and where the
    path's figures came from (sysfs, `topo -m`, NVML, the model table): the cap's source."""

    gbyte_s: float | None
    path: str
    source: str = ""
    note: str = ""  # what the check's message adds of how the cap was reached (a VM's view)

    @property
    def details(self) -> dict[str, Any]:
        """The cap as every bandwidth check's details carry it: the figure (None: unknown) and its source."""
        return {"physical_cap": None if self.gbyte_s is None else round(self.gbyte_s, 3),
                "physical_cap_source": f"{self.path}; from {self.source}" if self.source else self.path,
                **({"physical_cap_note": self.note} if self.note else {})}


def read_paths(state: Session, models: GpuModels, topology: Reading[Topology] | None = None) -> Paths:
    """The session's paths: NVML's host reading, sysfs's PCIe links and NVSwitches (kept as evidence) and `topo -m` if
    read."""
    host = state.host()
    reading = state.runner.reading(LINKS_FILE, lambda: read_pci_links(
        state.sys_root, {g.index: g.pci_bus_id for g in host.gpus if g.pci_bus_id}))
    entries = reading.get("gpus")
    links = None if not isinstance(entries, dict) else {int(i): parse_pci_link(e) for i, e in entries.items()
                                                        if str(i).isdigit() and isinstance(e, dict)}
    switched = state.runner.reading(SWITCHES_FILE, lambda: read_switches(state.sys_root))
    bridges, vm = switched.get("bridges"), switched.get("hypervisor")
    switches = {str(k): str(v) for k, v in bridges.items()} if isinstance(bridges, dict) else None
    topo = topology.value if topology is not None else None
    evidence = (LINKS_FILE, SWITCHES_FILE, *(topology.evidence if topo is not None and topology is not None else ()))
    return Paths(models, topo, tuple(host.gpus) if not host.error else (), links, evidence, switches,
                 str(vm) if vm else None)


def _model(paths: Paths, index: int) -> Model | None:
    return paths.models.model(index) if paths.models else None


def _nvml_links(paths: Paths, i: int, j: int) -> int | None:
    """NVML's active NVLinks from GPU i that reach GPU j, directly or through an NVSwitch (a far end that is no GPU,
    or one NVML cannot name: a VM's invisible switch); None: not read."""
    by_index = {g.index: g for g in paths.gpus}
    if i not in by_index or j not in by_index:
        return None
    gpu = by_index[i]
    if gpu.nvlinks is None or gpu.nvlink_error:
        return None  # not read, or NVML would not say (NotSupported: a card without NVLink, or a vGPU guest)
    peer = sysfs_bus_id(by_index[j].pci_bus_id) if by_index[j].pci_bus_id else None
    other_gpus = {sysfs_bus_id(g.pci_bus_id) for g in paths.gpus if g.pci_bus_id and g.index != j}
    return sum(1 for link in gpu.nvlinks if link.active and (not link.remote_bus_id or (
        sysfs_bus_id(link.remote_bus_id) == peer or sysfs_bus_id(link.remote_bus_id) not in other_gpus)))


def nvlinks_between(paths: Paths, i: int, j: int) -> tuple[int | None, str]:
    """How many NVLinks join GPUs i and j, and who says so: the lower of `topo -m` and NVML where both read."""
    counts = []
    topo = paths.topology
    if topo is not None and max(i, j) < topo.gpu_count:
        counts.append((topo.nvlinks(i, j), f"nvidia-smi topo -m: {topo.labels[(min(i, j), max(i, j))]}"))
    ends = [_nvml_links(paths, i, j), _nvml_links(paths, j, i)]
    if all(end is not None for end in ends):
        counts.append((min(e for e in ends if e is not None), "NVML's active links"))
    if counts:
        return min(counts, key=lambda c: c[0])
    models = [_model(paths, k) for k in (i, j)]
    if all(m is not None and not m.has_nvlink for m in models):
        return 0, "the model has no NVLink"
    return None, "no topology read (neither `nvidia-smi topo -m` nor NVML's links)"


def _pcie(paths: Paths, index: int) -> tuple[float, str, str] | None:
    """The GPU's PCIe link one way: (GB/s, the link in words, where its generation and width came from)."""
    link = (paths.links or {}).get(index)
    if link is not None:
        return link.gbyte_s, link.label, f"{link.source} (max_link_speed, max_link_width)"
    model = _model(paths, index)
    lane = PCIE_LANE_GBYTE_S.get(model.pcie_gen) if model and model.pcie_gen else None
    if not lane or model is None:
        return None
    return lane * 16, f"PCIe Gen{model.pcie_gen} x16 (the {model.name}'s own)", f"the model table ({TABLE_FILE})"


def _per_link(model: Model, links: int) -> tuple[float, str] | None:
    """What `links` NVLinks of a model carry each way: links (at most the model's) x its per-link rate (gpus.json
    `nvlink.link_gbyte_s`); a bridged card pair, half its bridge's figure."""
    rate = model.per_link_gbyte_s
    if rate and model.nvlink_links:
        return min(links, model.nvlink_links) * rate, f"{rate:g} GB/s per link ({model.name})"
    if model.nvlink_bridge_gbyte_s:
        return model.nvlink_bridge_gbyte_s / 2, f"an NVLink bridge of {model.nvlink_bridge_gbyte_s:g} GB/s ({model.name})"
    return None


def pair_cap(paths: Paths, i: int, j: int) -> Cap:
    """The most GPU i -> GPU j can carry one way: its NVLinks, or the slower GPU's PCIe link."""
    links, who = nvlinks_between(paths, i, j)
    models = [_model(paths, k) for k in (i, j)]
    if links is None or links > 0:
        if any(m is None for m in models):
            return Cap(None, f"GPU{i} or GPU{j} is not in the model table: no per-link figure ({who})")
        carried = [c for m in models if m is not None and (c := _per_link(m, links or 10**6)) is not None]
        if len(carried) < 2:
            return Cap(None, f"{who}, but the model table gives no NVLink figure")
        value, rate = min(carried)
        counted = f"{links} NVLinks ({who}) x {rate}" if links else f"every NVLink of the model, {rate} ({who})"
        pcie = [p for k in (i, j) if (p := _pcie(paths, k))]
        if links is None and len(pcie) == 2 and min(pcie)[0] > value:  # unknown path: the wider of the two
            wider = min(pcie)
            return Cap(wider[0], f"{wider[1]} ({who})", wider[2])
        return Cap(value, counted, f"{_counted_by(who)} for the links, the model table ({TABLE_FILE}) for their rate")
    ends = [_pcie(paths, k) for k in (i, j)]
    if any(end is None for end in ends):
        return Cap(None, f"no NVLink ({who}) and no PCIe generation known (no sysfs link files, no model)")
    value, label, source = min(end for end in ends if end is not None)
    return Cap(value, f"{label} (no NVLink: {who})", f"{source}; {_counted_by(who)} for the absence of NVLink")


def _counted_by(who: str) -> str:
    """Who counted a pair's NVLinks, as a source: `nvidia-smi topo -m`, NVML, or the model table."""
    if who.startswith("nvidia-smi"):
        return "`nvidia-smi topo -m`"
    return "NVML" if who.startswith("NVML") else f"the model table ({TABLE_FILE})" if "model" in who else who


def host_cap(paths: Paths, index: int) -> Cap:
    """The most a host <-> GPU copy can carry one way: the GPU's PCIe link."""
    model = _model(paths, index)
    if model is not None and any(name in model.name.upper() for name in C2C_MODELS):
        return Cap(None, f"the {model.name}'s host link is NVLink-C2C, not PCIe")
    pcie = _pcie(paths, index)
    if pcie is None:
        return Cap(None, f"GPU{index}'s PCIe link is unknown (no sysfs link files, no model)")
    return Cap(*pcie)


def _gpu_links(paths: Paths, index: int, count: int) -> tuple[int | None, bool | None, bool]:
    """NVML's active NVLinks of GPU `index` that reach another of GPUs 0..count-1 or an NVSwitch (a far end that is
    no GPU, or one NVML cannot name), whether any leads into a switch, and whether those switches are unseen: sysfs
    lists no NVIDIA bridge function at any far end (a VM's view); (None, None, False) where NVML's per-link state was
    not read."""
    by_index = {g.index: g for g in paths.gpus}
    gpu = by_index.get(index)
    if gpu is None or gpu.nvlinks is None or gpu.nvlink_error:
        return None, None, False
    peers = {sysfs_bus_id(g.pci_bus_id) for g in paths.gpus if g.pci_bus_id and g.index < count and g.index != index}
    others = {sysfs_bus_id(g.pci_bus_id) for g in paths.gpus if g.pci_bus_id} | set(paths.models.sysfs_gpus or ()
                                                                                    if paths.models else ())
    ends = [sysfs_bus_id(n.remote_bus_id) if n.remote_bus_id else None for n in gpu.nvlinks if n.active]
    switched = [e for e in ends if e is None or e not in others]
    unseen = bool(switched) and paths.switches is not None and not any(e in paths.switches for e in switched if e)
    return sum(1 for e in ends if e in peers) + len(switched), bool(switched), unseen


def _reduce_in_switch(model: Model, switched: bool | None) -> bool:
    """Whether NVLink SHARP (NCCL's NVLS) may reduce in the switch: links into NVSwitches that do (the model table's
    `nvswitch.nvls`), or, where NVML did not say, a model the table knows no NVSwitch of (lenient: never a false
    rejection)."""
    if switched is False:
        return False
    return model.nvswitch_nvls or not model.nvswitch_ids


def allreduce_cap(paths: Paths, count: int) -> Cap:
    """The most all_reduce busbw GPUs 0..count-1 can reach: each GPU's links one way (a ring moves busbw over every
    GPU's link each way); with reduction in the NVSwitch (NVLS) each GPU sends and receives its buffer once, so busbw
    reaches 2(n-1)/n of it. The slowest GPU's links: its NVLinks (NVML's count, else the model's) x the model's
    per-link rate, a bridge's rate, or its PCIe link (sysfs, else the model's generation at x16)."""
    if count < 2:
        return Cap(None, "one GPU: busbw is no bus's")
    caps: list[Cap] = []
    for index in range(count):
        model = _model(paths, index)
        if model is None:
            return Cap(None, f"GPU{index} is not in the model table: no link figure")
        links, switched, unseen = _gpu_links(paths, index, count)
        carried = _per_link(model, model.nvlink_links if links is None else links) if (links or model.has_nvlink) else None
        if links and carried is None and model.has_nvlink:  # NVLinks with no rate to multiply: never PCIe's cap
            return Cap(None, f"GPU{index} has {links} active NVLinks (NVML), but the model table gives no per-link rate "
                             f"of a {model.name}")
        if links == 0 or carried is None:
            pcie = _pcie(paths, index)
            if pcie is None:
                return Cap(None, f"GPU{index} has no NVLink and its PCIe link is unknown")
            down = links == 0 and model.has_nvlink  # NVML read the links of an NVLink model: none active
            caps.append(Cap(pcie[0], f"GPU{index}'s {pcie[1]}" + (" (NVML: no NVLink active)" if down else ""),
                            pcie[2] + ("; NVML for the NVLinks, none active" if down else "")))
            continue
        value, rate = carried
        counted = "NVLinks (the model's count; NVML's links not read)" if links is None else \
            f"{links} NVLinks (NVML; {VM_VIEW})" if unseen else f"{links} NVLinks (NVML)"
        vm = f" ({paths.hypervisor})" if paths.hypervisor else ""
        note = f"{VM_VIEW}{vm}: the cap is NVML's {links} active NVLinks of GPU{index} x {rate}" if unseen else ""
        links_from = f"NVML for the links ({VM_VIEW})" if unseen else "NVML for the links"
        if model.nvlink_links and _reduce_in_switch(model, switched):
            factor = 2 * (count - 1) / count
            caps.append(Cap(value * factor, f"GPU{index}'s {counted} x {rate}, x {factor:g} for reduction in the NVSwitch",
                            f"{links_from}, the model table ({TABLE_FILE}) for their rate and switches", note))
        else:
            caps.append(Cap(value, f"GPU{index}'s {counted} x {rate}",
                            f"{links_from}, the model table ({TABLE_FILE}) for their rate", note))
    return min(caps, key=lambda c: c.gbyte_s if c.gbyte_s is not None else float("inf"))


def over_ceiling(v: Verdict, measured: float, minimum: float, ceiling: float | None, reason: str, what: str,
                 details: dict[str, Any], where: str = "", suffix: str = "") -> Check | None:
    """The sanity judged before a threshold (ReFrame keeps sanity apart from performance): a figure above the physical
    `ceiling` of what it measured is no measurement, whatever the contract asks, and fails saying why; None where it
    is within (then Verdict.at_least judges the threshold). The message reads as at_least's."""
    shown = round(measured, 3)
    if ceiling is None or shown <= ceiling:
        return None
    return v.but(required=f">= {fmt(minimum)}", threshold=minimum).failed(
        shown, f"{what} {fmt(shown)} {v.unit}{where} is implausible: above {fmt(ceiling)} {v.unit} ({reason}){suffix}", details)


def beyond(value: float, cap: Cap, what: str, per: str = "each way") -> str | None:
    """Why `value` cannot have crossed the path: above its cap by more than MARGIN; None where it can."""
    if cap.gbyte_s is None or value <= cap.gbyte_s * (1 + MARGIN):
        return None
    return f"{what} reads {value:g} GB/s but the path is {cap.path}, at most {cap.gbyte_s:g} GB/s {per}: physically impossible"


def with_paths(v: Verdict, paths: Paths | None) -> Verdict:
    """The verdict with the readings a cap came from as evidence: shown with the checks the cap fails."""
    return v.but(evidence=v.evidence + tuple(e for e in (paths.evidence if paths else ()) if e not in v.evidence))


def confirmed(check: Check, tool: str, cap: Cap) -> Check:
    """The check with its sources: the tool, and the path's cap where one is known (what the path can carry is
    the second word on the figure, from sysfs, `topo -m`, NVML and the model table); without a cap, the tool's
    word alone, said."""
    return with_sources(check, tool, f"the path's cap ({cap.source or cap.path})" if cap.gbyte_s is not None else "",
                        unconfirmed=f"no physical cap ({cap.path}): the figure is {tool}'s alone")


def unchecked(cap: Cap) -> str:
    """The note a figure gets where the path's cap is unknown, or where it says how the cap was reached (a VM's view)."""
    if cap.gbyte_s is not None:
        return f"; {cap.note}" if cap.note else ""
    return f"; no physical cap ({cap.path}): taken on the tool's word"


# ------------------------------------------------------------------ the run's time against its own work


@dataclass(frozen=True, slots=True)
class Work:
    """The copies a run reports: bytes moved and the least time they took at the rates printed."""

    nbytes: float
    seconds: float
    basis: str


def nvbandwidth_work(result: NvBandwidth, argv: tuple[str, ...] | list[str]) -> Work:
    """Every GB/s cell, one stream of each bidirectional testcase: the copies its figure bounds (probes/nvbandwidth.py
    `copies`: the buffer x loop count in each sample at or below the median) at its rate."""
    counted = nvbandwidth_copies(result, argv)
    per_cell = counted.per_figure
    nbytes = seconds = 0.0
    for key, matrix in result.matrices.items():
        if matrix.unit != "GB/s" or key.endswith(("_read2", "_write2", "_total")):
            continue
        for value in (c for row in matrix.cells for c in row if c):
            nbytes += per_cell
            seconds += per_cell / (value * 1e9)
    return Work(nbytes, seconds, counted.basis)


def p2p_latency_work(result: P2pLatency, argv: tuple[str, ...] | list[str] = ()) -> Work:
    """Every bandwidth cell: 800 MB of copies (`--numElems`; twice that both ways) at its rate, a diagonal cell's
    bytes counted twice as its figure counts them (read and written)."""
    per_cell = p2p_cell_bytes(argv)
    nbytes = seconds = 0.0
    for key, cells in result.matrices.items():
        if key.startswith(("latency", "connectivity")):
            continue
        for r, row in enumerate(cells):
            for c, value in enumerate(row):
                if value > 0:
                    counted = per_cell * (2 if key.startswith("bidirectional") else 1) * (2 if r == c else 1)
                    nbytes += counted
                    seconds += counted / (value * 1e9)
    return Work(nbytes, seconds, f"{per_cell // 20:,} ints x 5 repeats per figure")


def torch_work(text: str) -> Work:
    """Our PyTorch workloads' JSON lines: the timings they printed, and the bytes each timed copy moved."""
    nbytes = seconds = 0.0
    for line in text.splitlines():
        try:
            data = json.loads(line)
            timings = [float(s) for s in data.get("seconds", [])]
            moved = int(data["bytes"]) * (2 if "pair" in data else 1)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        nbytes += moved * len(timings)
        seconds += sum(timings)
    return Work(nbytes, seconds, "the timings it printed")


# nvbandwidth (v0.8 on) lists the GPUs it copies between: `Device 0: NVIDIA H20-3e (00000000:18:00)`
_DEVICE_LINE = re.compile(r"^Device (\d+): (.+?) \(([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\)$")


def foreign_devices(run: ToolRun | None, gpus: Sequence[Gpu]) -> str | None:
    """Why a copy tool's output is not of this host's GPUs: it lists a device at a PCI address where NVML lists no GPU
    here, or under another name than NVML gives the GPU there (a saved log of another host replayed). Only the lines
    that give an address are compared (older versions print names alone); None where every one is NVML's."""
    places = {where[:3]: gpu for gpu in gpus if (where := pci_address(gpu.pci_bus_id)) is not None}
    if run is None or not places:
        return None
    for line in run.stdout.splitlines():
        match = _DEVICE_LINE.match(line.strip().strip('"').strip())
        where = pci_address(match.group(3)) if match else None
        if match is None or where is None:
            continue
        gpu = places.get(where[:3])
        said = f"`{run.command}` lists Device {match.group(1)}: {match.group(2)} at PCI {match.group(3)}"
        if gpu is None:
            listed = ", ".join(f"GPU{g.index} {sysfs_bus_id(g.pci_bus_id)}" for g in places.values())
            return f"{said}, where NVML lists no GPU here (NVML: {listed}): not this host's output"
        if match.group(2).strip().lower() != gpu.name.strip().lower():
            return f"{said}, where NVML has GPU{gpu.index} {gpu.name!r}: not this host's output"
    return None


@dataclass(frozen=True, slots=True)
class Said:
    """What a tool's header says of where it ran (None: it does not say): the NVIDIA driver, CUDA's driver API version
    (cuDriverGetVersion, 12080 for 12.8), and each device as (CUDA ordinal, name, (domain, bus, device) or None)."""

    driver: str | None = None
    cuda_driver: int | None = None
    devices: tuple[tuple[int, str, tuple[int, int, int] | None], ...] = ()


def _place(bus_id: str | None) -> tuple[int, int, int] | None:
    address = pci_address(bus_id) if bus_id else None
    return None if address is None else address[:3]


def nvbandwidth_said(result: NvBandwidth) -> Said:
    """nvbandwidth's header: `Driver Version`, `CUDA Driver Version`, and its `Device N: NAME (BUS)` lines (the p2p
    clause's; memory_bandwidth and host_bandwidth judge the same run)."""
    return Said(result.driver, result.cuda_driver, tuple((d.ordinal, d.name, _place(d.bus_id)) for d in result.devices))


def p2p_latency_said(result: P2pLatency) -> Said:
    """p2pBandwidthLatencyTest's `Device: N, NAME, pciBusID: B, pciDeviceID: D, pciDomainID:M` lines (no driver)."""
    addresses = result.pci_addresses or (None,) * len(result.gpus)
    return Said(devices=tuple((n, name, where) for n, (name, where) in enumerate(zip(result.gpus, addresses))))


def _said_devices(tool: str, said: Said, host: Host) -> tuple[str | None, list[str], list[str]]:
    """Each device line against NVML's GPU at its PCI address, or (a line with the name alone) at its CUDA ordinal as
    CUDA's device list in this run's environment (CUDA_VISIBLE_DEVICES honoured) orders them."""
    places = {where[:3]: gpu for gpu in host.gpus if (where := pci_address(gpu.pci_bus_id)) is not None}
    cuda = host.cuda_devices
    ordered = list(cuda.bus_ids) if cuda is not None and cuda.error is None else None
    by_bus = {sysfs_bus_id(g.pci_bus_id): g for g in host.gpus if g.pci_bus_id}
    confirmed, unconfirmed = [], []
    for ordinal, name, address in said.devices:
        shown = f"{tool}'s device {ordinal} {name!r}"
        if address is not None:
            gpu = places.get(address)
            if gpu is None:
                listed = ", ".join(f"GPU{g.index} {sysfs_bus_id(g.pci_bus_id)}" for g in host.gpus if g.pci_bus_id)
                return f"{shown} is at PCI {pci_name(address)}, where NVML lists no GPU here (NVML: {listed})", [], []
            at = f"at PCI {pci_name(address)}"
        elif ordered is not None and ordinal < len(ordered) and ordered[ordinal] in by_bus:
            gpu, at = by_bus[ordered[ordinal]], f"CUDA device {ordinal} ({ordered[ordinal]})"
        else:
            unconfirmed.append(f"{shown}: no PCI address, and CUDA's device list was not read")
            continue
        if name.strip().lower() != gpu.name.strip().lower():
            return f"{shown} is {at}, where NVML has GPU{gpu.index} {gpu.name!r}", [], []
        confirmed.append(f"device {ordinal} {name} {at} (NVML GPU{gpu.index})")
    return None, confirmed, unconfirmed


def foreign_header(tool: str, said: Said, host: Host | None) -> tuple[str | None, dict[str, list[str]]]:
    """Why a tool's header is not this host's (another NVIDIA driver, CUDA version or GPU than NVML reads here: a
    saved output of another host replayed), or None; and the details every check of the run carries: which of
    its fields NVML confirmed, and which the header lacks (unconfirmed, never a failure)."""
    if host is None or host.error:
        return None, {"header_unconfirmed": [f"{tool}'s header: NVML was not read"]}
    confirmed: list[str] = []
    unconfirmed: list[str] = []
    for what, printed, nvml in (("driver", said.driver, host.driver),
                                ("CUDA", cuda_version(said.cuda_driver) if said.cuda_driver else None, host.cuda)):
        if printed is None or nvml is None:
            unconfirmed.append(f"{what}: {tool} does not print it" if printed is None else f"{what}: NVML did not say")
        elif printed.strip() != nvml.strip():
            return (f"{tool}'s header says {what} {printed}, but NVML here says {what} {nvml}: not this host's output",
                    {"header_confirmed": confirmed})
        else:
            confirmed.append(f"{what} {printed}")
    why, devices, unplaced = _said_devices(tool, said, host)
    if why is not None:
        return f"{why}: not this host's output", {"header_confirmed": confirmed}
    if not said.devices:
        unplaced.append(f"GPU names and PCI addresses: {tool} lists no device")
    return None, {"header_confirmed": confirmed + devices, "header_unconfirmed": unconfirmed + unplaced}


def not_a_measurement(run: ToolRun | None, work: Work, gpus: Sequence[Gpu]) -> str | None:
    """Why a copy tool's run measured nothing of this host: it ended before the copies it reports could have, or its
    output lists another host's GPUs."""
    return too_fast(run, work) or foreign_devices(run, gpus)


def too_fast(run: ToolRun | None, work: Work) -> str | None:
    """Why a run that ended before its own reported copies could is not a measurement; None where it could."""
    if run is None or work.seconds <= run.duration_s * (1 + SLACK_S) + SLACK_S:
        return None
    rate = work.nbytes / work.seconds / 1e9 if work.seconds else 0.0
    return (f"`{run.command}` ran {run.duration_s:.2f} s but reports moving {human_bytes(work.nbytes)} at "
            f"{rate:.3g} GB/s on average, {work.seconds:.2f} s of copies ({work.basis}): not a measurement")
