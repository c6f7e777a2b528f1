"""The `nvlink` section: NVLinks between every GPU pair (`topo -m`), each GPU's links (`nvlink -s`), and
its error counters around the all_reduce load (`nvlink -e`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .. import schema
from ..measurements import GpuModels, HostReading, NvlinkErrorReadings, WithModels
from ..probes import nvidia_smi
from ..probes._run import Reading
from ..probes.nvidia_smi import LinkStatus, Topology
from ..probes.sysfs import sysfs_bus_id
from ..schema import Key
from ..subjects import Subject
from ..units import Bandwidth
from ..verdict import Check, fmt
from . import allreduce, plausible
from .base import Clause, GpuPairs, PerGpu, Section
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..measurements import AllReduceRuns
    from ..models import Model
    from ..probes.nvml import Host
    from ..session import Session


@dataclass(frozen=True, slots=True)
class NVLink:
    every_pair: bool
    min_links: int
    links_per_gpu: int | None
    link_speed: Bandwidth | None
    errors_stable: bool


def _cross_check(nvlink: NVLink, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems = []
    if not nvlink.every_pair:
        problems.append(("nvlink.every_pair", "expected true: 'false' checks nothing, remove the nvlink section instead"))
    count = getattr(sections.get("gpus"), "count", None)
    if count is not None and count < 2:
        problems.append(("nvlink", f"needs gpus.count of at least 2 to have GPU pairs, got {count}"))
    if nvlink.errors_stable and allreduce.SECTION.name not in sections:
        problems.append(("nvlink.errors_stable", "needs an allreduce section: the error counters are compared across its load"))
    return problems


SECTION = Section(
    "nvlink",
    {"every_pair": Key(schema.boolean, required=True), "min_links": Key(schema.whole(1, 64), default=1),
     "links_per_gpu": Key(schema.whole(1, 64)), "link_speed": Key(schema.bandwidth),
     "errors_stable": Key(schema.boolean, default=False)},
    NVLink, "NVLink between GPUs", needs_gpu_count=True, cross_check=_cross_check)


def nvml_disagrees(host: Host | None, model: Model | None, i: int, j: int, claimed: int) -> tuple[str | None, str | None]:
    """(why NVML's per-link state contradicts `claimed` NVLinks between GPU i and GPU j, why it cannot be
    compared). Direct links must match in number; links into an NVSwitch bound the pair by the links each
    GPU has active; a model with no NVLink has none, whatever a tool prints."""
    said = f"`topo -m` says NV{claimed} between GPU{i} and GPU{j}"
    if model is not None and not model.has_nvlink and claimed:
        return f"{said}, but PCI device 0x{model.device_id} ({model.name}) has no NVLink, not even a bridge", None
    if host is None or host.error:
        return None, host.error if host else "no NVML reading"
    if max(i, j) >= len(host.gpus):
        return None, f"NVML lists {len(host.gpus)} GPUs"
    gi, gj = host.gpus[i], host.gpus[j]
    if gi.nvlinks is None or gj.nvlinks is None:
        return None, "the NVML reading has no per-link NVLink state"
    if not claimed:
        return None, None
    active_i, active_j = [n for n in gi.nvlinks if n.active], [n for n in gj.nvlinks if n.active]
    if not active_i or not active_j:
        quiet = gi if not active_i else gj
        why = quiet.nvlink_error or f"0 of {len(quiet.nvlinks or ())} links active"
        return f"{said}, NVML says GPU{quiet.index} has no active NVLink ({why})", None
    buses = {sysfs_bus_id(g.pci_bus_id) for g in host.gpus if g.pci_bus_id}
    peer = sysfs_bus_id(gj.pci_bus_id) if gj.pci_bus_id else ""
    direct = sum(1 for n in active_i if n.remote_bus_id and sysfs_bus_id(n.remote_bus_id) == peer)
    switched = sum(1 for n in active_i if not n.remote_bus_id or sysfs_bus_id(n.remote_bus_id) not in buses)
    if not switched and direct != claimed:
        return f"{said}, NVML counts {direct} active links from GPU{i} to GPU{j}", None
    if switched and claimed > min(len(active_i), len(active_j)):
        return (f"{said}, NVML says GPU{i} has {len(active_i)} and GPU{j} {len(active_j)} active links "
                "(into an NVSwitch)"), None
    return None, None


@dataclass(frozen=True, slots=True)
class NvlinkTopology:
    """`topo -m`, the GPUs' models, NVML's per-link state, and the NVIDIA bridge functions (NVSwitches) sysfs lists
    (bus ID -> device ID; None: not read): each pair's NVLinks from two sources, the switches they lead into from a
    third."""

    reading: Reading[Topology]
    models: GpuModels
    host: Host | None = None
    bridges: dict[str, str] | None = None
    bridges_file: str = ""
    hypervisor: str | None = None  # what sysfs shows of a hypervisor (probes/sysfs.py read_hypervisor); None: none

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.reading.evidence


def _switches_named(host: Host, models: GpuModels) -> dict[str, list[str]]:
    """The PCI functions NVML's active NVLinks lead to that are neither a GPU NVML lists nor a GPU function sysfs
    lists (a slice's neighbours): the NVSwitches, by bus ID, with the GPUs whose links lead there."""
    gpus = {sysfs_bus_id(g.pci_bus_id) for g in host.gpus if g.pci_bus_id} | set(models.sysfs_gpus or ())
    named: dict[str, list[str]] = {}
    for gpu in host.gpus:
        for link in gpu.nvlinks or ():
            far = sysfs_bus_id(link.remote_bus_id) if link.active and link.remote_bus_id else None
            if far and far not in gpus and f"GPU{gpu.index}" not in named.get(far, []):
                named.setdefault(far, []).append(f"GPU{gpu.index}")
    return named


BASEBOARD_GPUS = 8  # the GPUs of one HGX/DGX baseboard: gpus.json's `nvswitch.count` is one baseboard's


def baseboards(gpus: int) -> int:
    """How many baseboards `gpus` GPUs of an NVSwitch system sit on: 8 a board (16 GPUs, as a DGX-2 or a 16-GPU HGX
    A100, are two boards, their NVSwitches twice one board's)."""
    return max(1, -(-gpus // BASEBOARD_GPUS))


def _unnamed_links(host: Host) -> int:
    """Active NVLinks whose far end NVML cannot name (no remote PCI address): in a VM, the NVSwitches the guest's PCI
    bus does not show (NCCL takes them for invisible NVSwitches, NVIDIA/nccl#1182)."""
    return sum(1 for gpu in host.gpus for link in gpu.nvlinks or () if link.active and not link.remote_bus_id)


def phantom_switches(m: NvlinkTopology | WithModels[Topology], model: Model | None) -> tuple[str | None, str]:
    """(why the NVSwitches NVML's links lead into are not in sysfs as the model's NVSwitches, what could not be
    confirmed of them). Each must be an NVIDIA bridge function sysfs lists at that address, with a device ID of the
    model's NVSwitch, and NVML must name as many as the model's baseboards have (gpus.json `nvswitch`, per board of 8
    GPUs), no GPU's links reaching more than one board's. Links whose far end NVML cannot name, on a PCI bus that shows
    no NVSwitch, are a VM's view: the switches are unconfirmed, and the check says so."""
    host = m.host
    if host is None or host.error:
        return None, ""
    named = _switches_named(host, m.models)
    bridges = m.bridges if isinstance(m, NvlinkTopology) else None
    vm = m.hypervisor if isinstance(m, NvlinkTopology) else None
    if not named:
        unnamed = _unnamed_links(host)
        if not unnamed:
            return None, ""  # direct links (or none): no switch to confirm
        where = (plausible.VM_VIEW + (f"; {vm}" if vm else "")) if bridges == {} else "sysfs not read" \
            if bridges is None else f"sysfs lists NVIDIA bridge functions at {', '.join(sorted(bridges)[:6])}"
        return None, (f"NVML names no far end of {unnamed} active NVLinks ({where}): the NVSwitches they lead into "
                      "are unconfirmed")
    if vm and bridges == {}:  # a guest: the host's switches, at the host's addresses, are not on the guest's bus
        return None, (f"NVML says the NVLinks lead into NVSwitches at {', '.join(sorted(named)[:6])}, which the guest's "
                      f"PCI bus does not show ({plausible.VM_VIEW}; {vm}): unconfirmed")
    if model is None or not model.nvswitch_ids:
        what = model.name if model else "this GPU's device ID"
        return None, f"NVML's links lead into {len(named)} NVSwitch(es); the model table gives no NVSwitch of a {what} to compare"
    if bridges is None:
        return None, "NVML's links lead into NVSwitches, but the PCI bus in sysfs was not read"
    shown = ", ".join(sorted(named)[:6]) + (" ..." if len(named) > 6 else "")
    absent = sorted(far for far in named if far not in bridges)
    if absent:
        return (f"NVML says the NVLinks of {', '.join(named[absent[0]][:4])} lead into NVSwitches at {shown}, but sysfs "
                f"has no NVIDIA bridge function (an NVSwitch) at {', '.join(absent[:6])}"), ""
    alien = sorted(far for far in named if bridges[far] not in model.nvswitch_ids)
    if alien:
        ids = " or ".join(f"0x{i}" for i in model.nvswitch_ids)
        return (f"sysfs has device 0x{bridges[alien[0]]} at {alien[0]}, where NVML's links lead, but the NVSwitches of a "
                f"{model.name} baseboard are {ids}"), ""
    return _miscounted(named, model, len(host.gpus), shown), ""


def _miscounted(named: dict[str, list[str]], model: Model, gpus: int, shown: str) -> str | None:
    """Why the NVSwitches NVML names are not the model's baseboards' (gpus.json `nvswitch.count` per board of 8 GPUs:
    16 GPUs, 2 boards, twice the switches), or why a GPU's links reach beyond its own board's; None where they are."""
    if model.nvswitch_count is None:
        return None
    boards = baseboards(gpus)
    if len(named) != model.nvswitch_count * boards:
        on = "" if boards == 1 else f"; {gpus} GPUs are {boards} baseboards, {model.nvswitch_count * boards} NVSwitches"
        return (f"NVML's links lead into {len(named)} NVSwitches ({shown}); a {model.name} baseboard has "
                f"{model.nvswitch_count}{on}")
    reach: dict[str, int] = {}
    for ends in named.values():
        for gpu in ends:
            reach[gpu] = reach.get(gpu, 0) + 1
    wide = sorted((gpu for gpu, n in reach.items() if n > model.nvswitch_count), key=lambda g: int(g[3:]))
    if wide:
        return (f"NVML says the NVLinks of {wide[0]} lead into {reach[wide[0]]} NVSwitches; a GPU of a {model.name} "
                f"baseboard reaches its own board's {model.nvswitch_count}")
    return None


def judge_pair(section: NVLink, subject: Subject, measured: NvlinkTopology | WithModels[Topology],
               contract: Contract) -> Check:
    """NVLinks between GPU i and GPU j from the topo matrix, corroborated by NVML (and NVML's NVSwitches by sysfs
    and the model table); PCIe paths count 0."""
    assert subject.gpu is not None and subject.peer is not None
    i, j = subject.gpu, subject.peer
    m = measured.reading
    evidence = m.evidence + ((measured.bridges_file,) if isinstance(measured, NvlinkTopology) and measured.bridges_file else ())
    v = PAIRS.verdict(subject, f">= {section.min_links}", evidence, float(section.min_links))
    if m.value is None:
        return v.not_measured(m.failure or "no topology")
    topo = m.value
    if j >= topo.gpu_count:
        return v.failed(0, f"GPU{j} not present: found {topo.gpu_count}")
    links, label = topo.nvlinks(i, j), topo.labels[(i, j)]
    model = measured.models.model(i)
    contradiction, unread = nvml_disagrees(measured.host, model, i, j, links)
    phantom, unconfirmed = phantom_switches(measured, model) if links and not contradiction else (None, "")
    sources = ("`nvidia-smi topo -m`", "NVML's links", "" if unconfirmed or not links else "sysfs NVSwitches")
    if contradiction or phantom:
        return with_sources(v.failed(links, contradiction or str(phantom)), *sources)
    if unread:
        return v.not_measured(f"{label} between GPU{i} and GPU{j} in `topo -m` cannot be checked against NVML: {unread}")
    ok = links >= section.min_links
    suffix = "" if ok else f", {links} < {section.min_links} links"
    details: dict[str, Any] = {"nvswitches": unconfirmed} if unconfirmed else {}
    if model is not None and model.nvlink_links:
        details.update({"fraction_of_published": round(links / model.nvlink_links, 4),
                        "published": f"{model.nvlink_links} NVLinks per GPU ({model.name})"})
        suffix += f" ({links / model.nvlink_links:.0%} of the {model.nvlink_links} NVLinks of a {model.name})"
    return with_sources(v.judged(ok, links, f"{label} between GPU{i} and GPU{j}{suffix}", details), *sources)


def judge_links(section: NVLink, subject: Subject, measured: WithModels[LinkStatus], contract: Contract) -> Check:
    """Every NVLink of a GPU active, at least `links_per_gpu` of them, each at least `link_speed` (nvlink -s)."""
    assert subject.gpu is not None
    m = measured.reading
    index, per_gpu = subject.gpu, section.links_per_gpu
    speed = section.link_speed.gbyte_s if section.link_speed else None
    wants = [f">= {per_gpu} active" if per_gpu else "", f"each >= {fmt(speed)} GB/s" if speed else ""]
    v = LINKS.verdict(subject, ", ".join(w for w in wants if w), m.evidence)
    if m.value is None:
        return v.not_measured(m.failure or "no link status")
    links = m.value.links.get(index)
    if links is None:
        return v.failed(0, f"GPU{index} not in `nvidia-smi nvlink -s` output (found GPUs {sorted(m.value.links)})")
    active = {n: s for n, s in links.items() if s is not None}
    problems = []
    nvml = measured.host.gpus[index] if measured.host and index < len(measured.host.gpus) else None
    if nvml is None or nvml.nvlinks is None:
        return v.not_measured(f"`nvlink -s` cannot be checked against NVML: the NVML reading has no per-link state "
                              f"for GPU{index}")
    nvml_active = sorted(n.link for n in nvml.nvlinks if n.active)
    if nvml_active != sorted(active):
        return with_sources(v.failed(len(active), f"`nvidia-smi nvlink -s` shows links {sorted(active)} active on GPU{index}, "
                        f"NVML shows {nvml_active or 'none'}" + (f" ({nvml.nvlink_error})" if nvml.nvlink_error else "")),
                            "`nvidia-smi nvlink -s`", "NVML's links")
    if per_gpu is not None and len(active) < per_gpu:
        down = sorted(n for n, s in links.items() if s is None)
        problems.append(f"{len(active)} of {per_gpu} links active" + (f" (inactive: {down})" if down else ""))
    slow = sorted(n for n, s in active.items() if speed is not None and s + 1e-9 < speed)
    if slow and speed is not None:
        problems.append(f"links {slow} below {fmt(speed)} GB/s ({', '.join(f'{active[n]:g}' for n in slow)} GB/s)")
    speeds = sorted(set(active.values()))
    shown = f"{len(active)} links active at {', '.join(f'{s:g}' for s in speeds)} GB/s" if active else "no link active"
    model = measured.models.model(index)
    details: dict[str, Any] = {}
    per_link = model.per_link_gbyte_s if model is not None else None  # one direction of one link (gpus.json)
    if model is not None and model.nvlink_links and per_link and active:
        details = {"fraction_of_published": round(min(active.values()) / per_link, 4),
                   "published": f"{model.nvlink_links} links of {per_link:g} GB/s each way ({model.name})"}
    return with_sources(v.judged(not problems, len(active), shown + ("; " + "; ".join(problems) if problems else ""), details),
                        "`nvidia-smi nvlink -s`", "NVML's links")


def judge_errors(section: NVLink, subject: Subject, m: NvlinkErrorReadings, contract: Contract) -> Check:
    """NVLink error counters of a GPU must not increase across the load (nvlink -e before and after)."""
    assert subject.gpu is not None
    index = subject.gpu
    v = ERRORS.verdict(subject, "== 0 new", m.before.evidence + m.after.evidence)
    before, after = m.before.value, m.after.value
    if before is None or after is None:
        return v.not_measured(m.before.failure or m.after.failure or "no error counters")
    if index not in before.counters or index not in after.counters:
        return v.failed(None, f"GPU{index} not in `nvidia-smi nvlink -e` output")
    old_links, new_links = before.counters[index], after.counters[index]
    # A link or counter that vanished, or a counter that went down (a reset), hides what happened: never "stable".
    lost = [f"link {link} was in `nvlink -e` before the load and is missing after it"
            for link in sorted(set(old_links) - set(new_links))]
    lost += [f"link {link} {name} was read before the load and is missing after it"
             for link in sorted(set(old_links) & set(new_links)) for name in sorted(set(old_links[link]) - set(new_links[link]))]
    grown, reset = [], []
    for link, counters in sorted(new_links.items()):
        for name, value in counters.items():
            old = old_links.get(link, {}).get(name, 0)
            if value > old:
                grown.append(f"link {link} {name} {old} -> {value}")
            elif value < old:
                reset.append(f"link {link} {name} went down {old} -> {value} (counters reset during the load)")
    if lost or reset:
        return v.failed(None, "the error counters cannot be compared across the load: " + "; ".join((lost + reset)[:6]))
    alone = "the counters as `nvidia-smi nvlink -e` prints them, no second reading of them"
    if grown:
        increase = after.total(index) - before.total(index)
        return with_sources(v.failed(increase, "error counters increased during the load: " + "; ".join(grown[:6])),
                            "`nvidia-smi nvlink -e`", unconfirmed=alone)
    return with_sources(v.passed(0, f"no NVLink error counter increased ({after.total(index)} in total, as before the load)"),
                        "`nvidia-smi nvlink -e`", unconfirmed=alone)


def gpuaccept_nvlink_status(gpuaccept_state: Session) -> Reading[LinkStatus]:
    """`nvidia-smi nvlink -s`: the state and speed of every NVLink of every GPU, once per run."""
    return nvidia_smi.read_nvlink_status(gpuaccept_state.runner)


SWITCHES_FILE = plausible.SWITCHES_FILE


def gpuaccept_nvlink_topology(gpuaccept_state: Session, gpuaccept_topology: Reading[Topology], gpuaccept_models: GpuModels,
                              gpuaccept_host: HostReading) -> NvlinkTopology:
    """`topo -m`, with the GPUs' models, NVML's per-link state and the NVSwitches sysfs lists: each pair's NVLinks
    from two sources, the switches they lead into from a third."""
    state = gpuaccept_state
    reading = state.runner.reading(SWITCHES_FILE, lambda: plausible.read_switches(state.sys_root))
    bridges, vm = reading.get("bridges"), reading.get("hypervisor")
    return NvlinkTopology(gpuaccept_topology, gpuaccept_models, gpuaccept_host.host,
                          {str(k): str(v) for k, v in bridges.items()} if isinstance(bridges, dict) else None, SWITCHES_FILE,
                          str(vm) if vm else None)


def gpuaccept_nvlink_links(gpuaccept_nvlink_status: Reading[LinkStatus], gpuaccept_models: GpuModels,
                           gpuaccept_host: HostReading) -> WithModels[LinkStatus]:
    """`nvlink -s`, with the GPUs' models and NVML's per-link state: each link's speed beside the published one."""
    return WithModels(gpuaccept_nvlink_status, gpuaccept_models, gpuaccept_host.host)


def gpuaccept_nvlink_counters_before(gpuaccept_state: Session, gpuaccept_contract: Contract) -> bool:
    """The NVLink error counters right before the all_reduce load, where nvlink.errors_stable asks: the all_reduce
    measurement reads this first, and the counters `after` as its last run ends. Whether they were read."""
    section = SECTION.get(gpuaccept_contract)
    if section is None or not section.errors_stable:
        return False
    nvidia_smi.run_nvlink_errors(gpuaccept_state.runner, "before")
    return True


def gpuaccept_nvlink_errors(gpuaccept_state: Session, gpuaccept_allreduce: AllReduceRuns) -> NvlinkErrorReadings:
    """NVLink error counters read right before and right after the all_reduce load (which runs once per run)."""
    runner = gpuaccept_state.runner  # both read by the all_reduce measurement, around its runs: recalled here
    return NvlinkErrorReadings(nvidia_smi.read_nvlink_errors(runner, "before"),
                               nvidia_smi.read_nvlink_errors(runner, "after"))


PAIRS = Clause("nvlink", SECTION, "test_nvlink_pair", GpuPairs(), gpuaccept_nvlink_topology, judge_pair,
               "NVLinks between each GPU pair i<j, from `nvidia-smi topo -m` (NV# -> #, PCIe paths -> 0)", "links",
               pair_joint="-")
LINKS = Clause("nvlink.links", SECTION, "test_nvlink_links_active", PerGpu(), gpuaccept_nvlink_links, judge_links,
               "every NVLink of each GPU active and at speed, from `nvidia-smi nvlink -s`", "links",
               lambda s: s.links_per_gpu is not None or s.link_speed is not None)
ERRORS = Clause("nvlink.errors", SECTION, "test_nvlink_errors_stable", PerGpu(), gpuaccept_nvlink_errors,
                judge_errors, "no NVLink error counter grows across the all_reduce load (`nvidia-smi nvlink -e`)",
                "errors", lambda s: s.errors_stable)
CLAUSES = (PAIRS, LINKS, ERRORS)
MEASUREMENTS = (gpuaccept_nvlink_status, gpuaccept_nvlink_topology, gpuaccept_nvlink_links,
                gpuaccept_nvlink_counters_before, gpuaccept_nvlink_errors)
