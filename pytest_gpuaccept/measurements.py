"""What the measuring fixtures give the judges: named, typed values (never tuples), each with its evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from .models import not_in_table
from .models.pciids import describe

if TYPE_CHECKING:
    from .clauses.plausible import Paths
    from .cluster.engine import NodeState
    from .cluster.pairs import Blame
    from .models import Model
    from .probes._run import Reading, ToolRun
    from .probes.ethtool import LinkSettings
    from .probes.ib_write_bw import WriteBw
    from .probes.imex import ImexDomain
    from .probes.imex_channels import Channel as ImexChannel
    from .probes.iperf3 import Iperf3Runs
    from .probes.iproute import Route
    from .probes.kernel_log import KernelLog
    from .probes.nccl_tests import MnnvlSeen, NcclResult
    from .probes.nvidia_smi import LinkErrors
    from .probes.nvlink_counters import Traffic
    from .probes.nvml import GpuSeries, Host
    from .probes.sysfs import Function, IbPort


@dataclass(frozen=True, slots=True)
class HostReading:
    """The NVML reading of the host (driver, CUDA, GPUs) and the evidence file it was kept in."""

    host: Host
    evidence: tuple[str, ...]
    models: GpuModels | None = None  # where a clause also reads each GPU's PCI device ID

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GpuModels:
    """Each GPU's PCI device ID as sysfs gives it, and its model in the published-figures table."""

    device_ids: dict[int, str | None]  # 4 hex digits, lower case, no 0x (as the model table keys them)
    models: dict[int, Model | None]
    evidence: tuple[str, ...]
    sysfs_gpus: tuple[str, ...] | None = None  # bus IDs of every NVIDIA GPU function on the PCI bus; None: unread
    pci_ids: dict[str, Any] | None = None  # what the installed pci.ids names each device ID (models.pciids); None: unread

    def model(self, index: int) -> Model | None:
        return self.models.get(index)

    def missing(self, index: int) -> str:
        """Why GPU `index` has no published figure: its device ID (named) is not in the table, or was not read."""
        return f"GPU{index}'s {not_in_table(self.device_ids.get(index))}"

    def pci_name(self, index: int) -> str:
        """What pci.ids, the second source of a device's name, says of GPU `index`'s device ID."""
        device = self.device_ids.get(index)
        return describe(self.pci_ids, device) if device else "no PCI device ID to look up in pci.ids"


@dataclass(frozen=True, slots=True)
class AllReduceRuns:
    """Every all_reduce run the contract asks for (`repeats`), parsed; `tool` names what measured."""

    readings: tuple[Reading[NcclResult], ...]
    tool: str
    gpu_names: tuple[str, ...]  # as NVML names them: the model bounds what busbw is physically possible
    models: GpuModels | None = None  # for "x % of the published figure"
    host: Host | None = None  # NVML's GPUs: where each rank must have run
    paths: Paths | None = None  # what each GPU's links carry (clauses/plausible.py): the physical cap on busbw


@dataclass(frozen=True, slots=True)
class NvlinkErrorReadings:
    """NVLink error counters read before and after the all_reduce load."""

    before: Reading[LinkErrors]
    after: Reading[LinkErrors]


@dataclass(frozen=True, slots=True)
class NicLinks:
    """The interfaces the host lists, and `ethtool IFACE` for one of them (run once per interface)."""

    names: tuple[str, ...]
    read: Callable[[str], Reading[LinkSettings]]
    function: Callable[[str], tuple[Function, str]]  # name -> what sysfs says stands behind it, its evidence file
    speed: Callable[[str], tuple[dict[str, Any], str]] | None = None  # name -> the kernel's sysfs speed, its file


@dataclass(frozen=True, slots=True)
class RdmaDevices:
    """The RDMA devices the host lists, each device's ports from sysfs, and ib_write_bw through one port."""

    names: tuple[str, ...]
    ports: Callable[[str], tuple[list[IbPort], str]]  # device -> (ports, the evidence file of the sysfs reading)
    write_bw: Callable[[str, IbPort], Reading[WriteBw]]
    function: Callable[[str], tuple[Function, str]]
    # (device, port, "before" | "after") -> the port's data counters and the clocks, read once each; its file
    counters: Callable[[str, IbPort, str], tuple[dict[str, Any], str]] | None = None


@dataclass(frozen=True, slots=True)
class Iperf3Path:
    """The iperf3 clients' readings, the route to the server (`ip route get`), and the route's interface byte
    counters read before and after, with the clocks (probes/counters.py): two sources for whether the bytes
    went through a NIC, and at what rate."""

    runs: Iperf3Runs
    route: Reading[Route]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoadRun:
    """The utilisation load: the workload's run, every GPU's NVML series, and why either cannot be trusted."""

    run: ToolRun | None
    series: dict[int, GpuSeries]
    failure: str | None  # nothing could be sampled (no driver, no PyTorch, workload missing)
    workload_failure: str | None  # the workload crashed or ended early: not a load to judge
    evidence: tuple[str, ...]
    kernel: Reading[KernelLog] | None = None  # dmesg (or journalctl -k) after the load; None: no log applies
    window: tuple[float, float] | None = None  # the load, in seconds since boot (the kernel log's clock)
    buses: dict[int, str] = field(default_factory=dict)  # GPU index -> NVML bus ID, to match kernel lines
    models: GpuModels | None = None  # published TDP beside the power limits
    samples_file: str = ""  # the sealed evidence file of the NVML samples (the charts read it)

    def lost(self, index: int) -> str | None:
        """Why a GPU cannot be judged on its samples: it stopped answering NVML, or has far fewer than the rest."""
        series = self.series.get(index)
        if series is None:
            return None
        if series.lost:
            return (f"GPU{index} stopped answering NVML at t={series.lost.get('t_s', 0):.1f} s during the load "
                    f"({series.lost.get('error', 'no reason given')}): lost, not judged on what came before")
        most = max(len(s.samples) for s in self.series.values())
        if len(series.samples) * 2 < most:
            last = f", the last at t={series.samples[-1].t_s:.1f} s" if series.samples else ""
            return (f"GPU{index} has {len(series.samples)} samples where another GPU has {most}{last}: "
                    "it stopped answering NVML during the load")
        return None

    def of(self, index: int) -> tuple[GpuSeries | None, str | None]:
        """One GPU's series, and why it cannot be judged where it cannot."""
        missing = None if index in self.series or not self.series else \
            f"GPU{index} not sampled: the host has {len(self.series)} GPUs"
        return self.series.get(index), self.failure or missing


@dataclass(frozen=True, slots=True)
class WithModels(Generic[T]):
    """A tool's reading, and the GPUs' models to set its figures beside the published ones."""

    reading: Reading[T]
    models: GpuModels
    host: Host | None = None  # the NVML reading, where a clause sets the tool's word beside the driver's

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.reading.evidence


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    """One node of a cluster run: what the engine said of it, and what came back from its run."""

    state: NodeState
    folder: str  # its bundle in the evidence: nodes/<node>
    # Its results once its bundle verified, as the login node keeps them: their facts, each check as its outcome.
    results: dict[str, Any] | None
    problem: str | None  # why there are no results (not run, timed out, no bundle, bundle does not verify)
    evidence: tuple[str, ...] = ()


def gpu_uuids(results: dict[str, Any] | None) -> set[str]:
    """The GPU UUIDs a node's results name (`host.gpus[].uuid`)."""
    return {str(g.get("uuid")) for g in ((results or {}).get("host") or {}).get("gpus", []) if g.get("uuid")}


@dataclass(frozen=True, slots=True)
class ClusterRun:
    """The inventory and every node's per-node run; `error` where the nodes could not even be listed."""

    engine: str
    nodes: dict[str, NodeOutcome]
    evidence: tuple[str, ...]
    error: str | None = None
    # GPU UUID -> the nodes whose results name it, made once from `nodes` (cluster.nodes asks it of every node: each
    # node compared with every other made a million sets at 1,000 nodes)
    gpu_owners: dict[str, list[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owners: dict[str, list[str]] = {}
        for node, outcome in self.nodes.items():
            for uuid in gpu_uuids(outcome.results):
                owners.setdefault(uuid, []).append(node)
        object.__setattr__(self, "gpu_owners", owners)

    @property
    def available(self) -> list[str]:
        """The nodes pairs, links and the whole-cluster job may use: schedulable, and their own run came back
        (a dead slurmd the scheduler has not noticed yet would only hang them until the timeout)."""
        return [n for n, o in self.nodes.items() if o.state.present and o.state.schedulable and o.results is not None]


@dataclass(frozen=True, slots=True)
class PairResult:
    """One pair's 2-node all_reduce: busbw at the largest size, or why there is none."""

    round: int
    busbw: float | None
    size: str
    problem: str | None
    evidence: tuple[str, ...] = ()
    wrong: str | None = None  # the checked all_reduce's wrong sums (#wrong > 0): where, at which sizes; a failure


@dataclass(frozen=True, slots=True)
class PairRuns:
    """Every pair of nodes, run in rounds of disjoint pairs; the blame the failures put on nodes and links."""

    results: dict[tuple[str, str], PairResult]
    blame: Blame
    error: str | None = None
    # Past the budget: each suspect with known-good nodes (pairs.second_pass), judged into the blame, not checks.
    second_pass: dict[tuple[str, str], PairResult] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterAllReduce:
    """cluster.allreduce: one job over every available node; `missing` the nodes that were not."""

    nodes: tuple[str, ...]
    missing: tuple[str, ...]
    ranks_per_node: int
    result: PairResult | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ImexView:
    """One tray's `nvidia-imex-ctl -N`: the IMEX domain as its daemon sees it, the tray's own IPv4 addresses (which
    entry of every view is this tray), or why there is no view; and the tray's IMEX channel devices."""

    domain: ImexDomain | None
    addresses: tuple[str, ...]
    problem: str | None
    evidence: tuple[str, ...] = ()
    # What the driver exposes beside the daemon's word (probes/imex_channels.py): the channel devices the tray's
    # `ls -ln /dev/nvidia-caps-imex-channels` lists, the major /proc/devices gives them, or why they were not read.
    channels: tuple[ImexChannel, ...] = ()
    channel_major: int | None = None
    channel_problem: str | None = "not read"
    channel_listing: str | None = None  # what `ls` said where it could not list the folder


@dataclass(frozen=True, slots=True)
class ImexViews:
    """cluster.nvlink_domain.imex: every available tray's view of the IMEX domain."""

    views: dict[str, ImexView]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DomainAllReduce:
    """cluster.nvlink_domain.min_busbw: one all_reduce over every GPU of every tray with NCCL's INFO lines, which
    say per tray whether its ranks reached the others over NVLink (MNNVL) or over the network; with the trays' own
    runs (`cluster`: their hostnames and NVML's cliques, which NCCL's lines are read against) and each tray's NVLink
    and NIC counters around it (`traffic`), which say it beside NCCL."""

    cluster: ClusterRun
    nodes: tuple[str, ...]
    missing: tuple[str, ...]
    ranks_per_node: int
    result: PairResult | None
    mnnvl: dict[str, MnnvlSeen] = field(default_factory=dict)
    error: str | None = None
    # Each tray's NVLink and NIC counters around the run (probes/nvlink_counters.py): which fabric carried it.
    traffic: dict[str, Traffic] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LinkResult:
    """One direction of one link: what its receiver counted, in Gb/s, or why there is nothing."""

    round: int
    gbit_s: float | None
    route: str
    problem: str | None
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LinkRuns:
    results: dict[str, LinkResult]  # by subject, `a:dev->b:dev`
    error: str | None = None
