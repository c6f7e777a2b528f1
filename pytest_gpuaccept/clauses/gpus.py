"""The `gpus` section: how many GPUs, which model, how much memory, which driver and CUDA (NVML)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .. import schema
from ..measurements import GpuModels, HostReading
from ..models import answers_to, not_in_table, vgpu_of
from ..models import names as names_model
from ..probes.sysfs import sysfs_bus_id
from ..schema import Key
from ..subjects import Kind, Subject
from ..units import Size, bytes_to_gb
from ..verdict import NOT_MEASURED_PREFIX, Check, Outcome, Verdict, fmt
from .base import Clause, HostWide, PerGpu, Section
from .shared import gpuaccept_host, gpuaccept_models
from .sources import with_sources

if TYPE_CHECKING:
    from ..contract import Contract
    from ..probes.nvml import CudaDevices, Gpu, Host, MigDevice

# A MIG profile as NVIDIA names it: [compute slices "c." of a shared GPU instance] GPU slices "g." memory "gb",
# and an option ("+me": media extensions); e.g. 1g.10gb, 3g.40gb, 1c.3g.40gb, 1g.10gb+me (the MIG user guide).
MIG_PROFILE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:\+[a-z.]+)?")
MIG_SLICES = 7  # a MIG-capable GPU has at most 7 GPU slices (A100, H100, H200, B200: the MIG user guide)
MIG_MEMORY_FRACTION = 0.9  # a MIG device's memory is at least this share of its profile's GB (1g.10gb: 9984 MiB)
@dataclass(frozen=True, slots=True)
class Mig:
    profile: str  # as NVML names the MIG device after "MIG ": 1g.10gb
    count: int  # at least this many MIG devices of the profile on the host's GPUs

    @property
    def gpu_slices(self) -> int:
        return gpu_slices(self.profile)

    @property
    def memory_gb(self) -> float:
        match = MIG_PROFILE.fullmatch(self.profile)
        return float(match.group(3)) if match else 0.0


def gpu_slices(profile: str) -> int:
    """The GPU slices of a profile (3 for 3g.40gb and 1c.3g.40gb); 0 for a name that is no profile."""
    match = MIG_PROFILE.fullmatch(profile)
    return int(match.group(2)) if match else 0


def mig(value: Any, node: yaml.Node) -> Mig:
    """`gpus.mig: {profile: '1g.10gb', count: 7}`."""
    example = "{profile: '1g.10gb', count: 7}"
    if not isinstance(value, yaml.MappingNode):
        raise ValueError(f"expected a mapping such as {example}, got {value!r}")
    entries = {k.value: v for k, v in value.value if isinstance(k, yaml.ScalarNode)}
    unknown = sorted(set(entries) - {"profile", "count"})
    if unknown or len(entries) != len(value.value) or set(entries) != {"profile", "count"}:
        raise ValueError(f"expected exactly the keys profile and count, such as {example}"
                         + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    profile, count = schema.scalar(entries["profile"]), schema.scalar(entries["count"])
    if not isinstance(profile, str) or not MIG_PROFILE.fullmatch(profile) or not 1 <= gpu_slices(profile) <= MIG_SLICES:
        raise ValueError(f"profile: expected a MIG profile as NVIDIA names it, such as '1g.10gb' or '3g.40gb', got {profile!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64 * MIG_SLICES:
        raise ValueError(f"count: expected a whole number of MIG devices from 1 to {64 * MIG_SLICES}, got {count!r}")
    return Mig(profile, count)


@dataclass(frozen=True, slots=True)
class Gpus:
    count: int | None
    model: str | None
    memory: Size | None
    driver: SpecifierSet | None
    cuda: SpecifierSet | None
    form_factor: str | None  # sxm | pcie | nvl | superchip: judged from the PCI device ID, never from the name
    persistence_mode: bool  # true: NVML's persistence mode on for every GPU
    mig: Mig | None = None  # MIG slices sold as such: gpus.mig judges them, gpus.identity wants MIG on
    modified_memory: Size | None = None  # a board declared modified: its memory above the model's published figure


def _gpus_rules(gpus: Gpus, sections: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems = []
    if gpus.mig is not None:
        if gpus.memory is not None:
            problems.append(("gpus.memory", "with gpus.mig the memory sold is each MIG device's (its profile's, "
                             "judged by gpus.mig), not the whole GPU's: remove gpus.memory"))
    if gpus.modified_memory is not None and gpus.mig is not None:
        problems.append(("gpus.modified_memory", "a board declared modified is not judged as MIG slices"))
    return problems


SECTION = Section(
    "gpus",
    {"count": Key(schema.whole(1, 64)), "model": Key(schema.text), "memory": Key(schema.size),
     "driver": Key(schema.specifier), "cuda": Key(schema.specifier),
     "form_factor": Key(schema.one_of("sxm", "pcie", "nvl", "superchip")),
     "persistence_mode": Key(schema.boolean, default=False), "mig": Key(mig), "modified_memory": Key(schema.size)},
    Gpus, "the GPUs as NVML reports them", cross_check=_gpus_rules)


def _per_gpu(v: Verdict, m: HostReading, subject: Subject) -> Check | None:
    """A check that needs no judging: NVML unreadable, the GPU absent, or (without count) no GPU at all."""
    host = m.host
    if host.error:
        return v.not_measured(host.error)
    if subject.kind is Kind.ALL_GPUS:
        return None if host.gpus else v.failed(None, "no GPU found")
    assert subject.gpu is not None
    if subject.gpu >= len(host.gpus):
        return v.failed(None, f"GPU{subject.gpu} not present: found {len(host.gpus)}")
    return None


def judge_count(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """The GPUs this run can use: NVML's list, and CUDA's count where it was read (the two must agree). NVIDIA
    GPU functions sysfs lists beyond NVML's (a container or VM given 4 of a node's 8) are information only."""
    assert section.count is not None
    v = COUNT.verdict(subject, f"== {section.count}", m.evidence + (m.models.evidence if m.models else ()))
    if m.host.error:
        return v.not_measured(m.host.error)
    found = len(m.host.gpus)
    cuda = m.host.cuda_devices
    seen = f"{found} GPUs found, contract says {section.count}"
    if cuda is not None and cuda.error is None and cuda.count is not None and cuda.count != found and section.mig is None:
        visible = "" if cuda.visible_devices is None else f" (CUDA_VISIBLE_DEVICES={cuda.visible_devices!r})"
        return v.failed(found, f"{seen}; but NVML lists {found} and CUDA in this run sees {cuda.count}{visible}")
    others = _beyond_nvml(m)
    sources = ("NVML", "CUDA" if cuda is not None and cuda.error is None and cuda.count is not None else "",
               "sysfs PCI bus" if m.models is not None and m.models.sysfs_gpus is not None else "")
    return with_sources(v.judged(found == section.count, found, seen + (f"; {others}" if others else ""),
                                 {"sysfs_gpus_not_in_nvml": others} if others else None), *sources,
                        unconfirmed="NVML's count alone: CUDA's device list and the PCI bus in sysfs were not read")


def _beyond_nvml(m: HostReading) -> str:
    """The NVIDIA GPU functions the PCI bus in sysfs lists that NVML does not: a slice's neighbours, said, not judged."""
    listed = m.models.sysfs_gpus if m.models else None
    if not listed:
        return ""
    ours = {sysfs_bus_id(g.pci_bus_id) for g in m.host.gpus if g.pci_bus_id}
    others = [bus for bus in listed if bus not in ours]
    if not others:
        return ""
    shown = ", ".join(others[:16]) + (f" and {len(others) - 16} more" if len(others) > 16 else "")
    return (f"the PCI bus in sysfs also lists {len(others)} NVIDIA GPU function(s) NVML does not ({shown}): "
            f"GPUs of this machine given to others (a slice), information, not judged")


def _renamed(m: HostReading, index: int, name: str) -> str | None:
    """Why NVML's name is not its GPU's: the name the model table gives the PCI device ID sysfs reads (or one of
    its aliases) must be NVML's name, equal but for case, spaces, dashes and a leading NVIDIA, or a vGPU profile of
    that board. Containment is no match in either direction: "NVIDIA H100 80GB HBM3 H100 PCIe" is no name of
    0x2330. None where it is, or where the table does not know the device ID (said by `sources`)."""
    known = m.models.model(index) if m.models else None
    if known is None or answers_to(known, name) or vgpu_of(known, name):
        return None
    given = ", ".join(repr(n) for n in dict.fromkeys((known.nvml_name, *known.nvml_names)) if n) or repr(known.name)
    return (f"GPU{index} is {name!r}, which is not the name of its PCI device 0x{known.device_id} in sysfs "
            f"({known.name}: {given})")


def _name_sources(m: HostReading, index: int) -> tuple[tuple[str, ...], str]:
    """Who said who GPU `index` is: NVML's name, and sysfs's device ID looked up in the model table where known."""
    known = m.models.model(index) if m.models else None
    if known is None:
        why = not_in_table(m.models.device_ids.get(index)) if m.models else "the PCI devices in sysfs were not read"
        return ("NVML",), f"NVML's name alone: {why}"
    return ("NVML", f"sysfs PCI device 0x{known.device_id} in the model table"), ""


def judge_model(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """The contract's model is a case-insensitive substring of the GPU's name, or names the model of its PCI device
    ID; and NVML's name is the name of that device ID (never a name stuffed with another's)."""
    model = str(section.model)
    v = MODEL.verdict(subject, f"name contains {model!r}", m.evidence)
    early = _per_gpu(v, m, subject)
    if early:
        return early
    if subject.kind is Kind.ALL_GPUS:
        each = [judge_model(section, Subject.of_gpu(g.index), m, contract) for g in m.host.gpus]
        if all(c.passed for c in each):
            names = ", ".join(sorted({g.name for g in m.host.gpus}))
            return with_sources(v.passed(names, f"all {len(each)} GPUs are {names}"),
                                *(s for c in each for s in c.details.get("sources", [])))
        return _every_gpu(v, each)
    assert subject.gpu is not None
    index, name = subject.gpu, m.host.gpus[subject.gpu].name
    sources, unconfirmed = _name_sources(m, index)
    renamed = _renamed(m, index, name)
    if renamed:
        return with_sources(v.failed(name, renamed), *sources)
    if model.lower() in name.lower():
        return with_sources(v.passed(name, f"{subject} is {name!r}"), *sources, unconfirmed=unconfirmed)
    # The marketing name of its PCI device ID counts too: "H100 SXM5" is an "NVIDIA H100 80GB HBM3" of 0x2330.
    known = m.models.model(index) if m.models else None
    if known is not None and names_model(known, model):
        return with_sources(v.passed(name, f"{subject} is {name!r}, PCI device 0x{known.device_id}: {known.name}"), *sources)
    also = f" nor does its PCI device 0x{known.device_id} ({known.name})" if known else ""
    return with_sources(v.failed(name, f"{subject} is {name!r}, which does not contain {model!r}" + (f",{also}" if also else "")),
                        *sources, unconfirmed=unconfirmed)


MEMORY_MARGIN = 0.02  # NVML's total may exceed the published GB, read as GiB, by 2 % (80 GB cards report 79.6 GiB)


def _memory_of(v: Verdict, m: HostReading, gpu: Gpu, minimum: float, what: str, modified: Size | None = None) -> Check:
    """One GPU's memory: NVML's total at least the contract's, and no more than its PCI device ID's model has, or
    than the contract's `modified_memory` where it declares the board modified."""
    total = bytes_to_gb(gpu.memory_total_bytes)
    known = m.models.model(gpu.index) if m.models else None
    if known is None:
        why = not_in_table(m.models.device_ids.get(gpu.index)) if m.models else "the PCI devices in sysfs were not read"
        return with_sources(v.at_least(total, minimum, what), "NVML",
                            unconfirmed=f"NVML's total not compared with a published capacity: {why}")
    top = max(known.memory_gb)
    ceiling = bytes_to_gb(int(top * 2**30 * (1 + MEMORY_MARGIN)))
    details: dict[str, Any] = {"published_gb": list(known.memory_gb), "ceiling_gb": ceiling}
    # A declared size reads as the published ones do: its GB as GiB, + 2 % (a "48 GB" board reports 49140 MiB)
    declared = bytes_to_gb(int(modified.nbytes / 1e9 * 2**30 * (1 + MEMORY_MARGIN))) if modified is not None else None
    if total > ceiling and declared is not None and total <= declared:
        details.update(modified_memory_gb=bytes_to_gb(modified.nbytes) if modified else None, ceiling_gb=declared)
        sizes = " or ".join(f"{g:g} GB" for g in known.memory_gb)
        return with_sources(v.at_least(total, minimum, what, details, suffix=(
            f" (a modified board, as the contract declares: {modified}; a {known.name} is published with {sizes})")),
            "NVML", f"sysfs PCI device 0x{known.device_id} in the model table", "the contract's modified_memory")
    if declared is not None and total > declared:
        return with_sources(v.but(required=f">= {fmt(minimum)}", threshold=minimum).failed(
            total, f"{what} {fmt(total)} GB (NVML), more than the {modified} the contract declares this modified "
                   f"{known.name} to have (at most {fmt(declared)} GB)", details), "NVML",
            "the contract's modified_memory")
    if total > ceiling:
        sizes = " or ".join(f"{g:g} GB" for g in known.memory_gb)
        return with_sources(v.but(required=f">= {fmt(minimum)}", threshold=minimum).failed(
            total, f"{what} {fmt(total)} GB (NVML), but sysfs says GPU{gpu.index} is PCI device 0x{known.device_id}, "
                   f"a {known.name}, published with {sizes}: more than the card has (at most {fmt(ceiling)} GB)",
            details), "NVML", f"sysfs PCI device 0x{known.device_id} in the model table")
    return with_sources(v.at_least(total, minimum, what, details), "NVML",
                        f"sysfs PCI device 0x{known.device_id} in the model table")


def judge_memory(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """Total memory as the driver reports it, in GB (10^9 bytes), at least the contract's; and no more than the
    published capacity of the GPU's PCI device ID (a 40 GB card's device ID reporting 80 GB fails)."""
    assert section.memory is not None
    minimum = bytes_to_gb(section.memory.nbytes)
    v = MEMORY.verdict(subject, f">= {fmt(minimum)}", m.evidence + (m.models.evidence if m.models else ()))
    early = _per_gpu(v, m, subject)
    if early:
        return early
    if subject.kind is Kind.ALL_GPUS:
        each = [_memory_of(v, m, g, minimum, f"GPU{g.index} total memory", section.modified_memory) for g in m.host.gpus]
        wrong = [c for c in each if not c.passed]
        if wrong:
            return wrong[0]
        smallest = min(m.host.gpus, key=lambda g: g.memory_total_bytes)
        return _memory_of(v, m, smallest, minimum, f"smallest GPU memory (GPU{smallest.index})", section.modified_memory)
    assert subject.gpu is not None
    return _memory_of(v, m, m.host.gpus[subject.gpu], minimum, f"{subject} total memory", section.modified_memory)


def _version(v: Verdict, found: str | None, spec: SpecifierSet, m: HostReading) -> Check:
    """A driver or CUDA version against a PEP 440 specifier set."""
    if m.host.error or not found:
        return v.not_measured(m.host.error or "the version could not be read")
    try:
        ok = spec.contains(Version(found), prereleases=True)
    except InvalidVersion:
        return v.not_measured(f"version {found!r} is not a version number")
    what = v.clause.split(".")[-1]
    return with_sources(v.judged(ok, found, f"{what} {found} {'satisfies' if ok else 'does not satisfy'} {v.required}"),
                        "NVML", unconfirmed=f"NVML's {what} version alone (no second reading of it is compared)")


def judge_driver(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    assert section.driver is not None
    return _version(DRIVER.verdict(subject, str(section.driver), m.evidence), m.host.driver, section.driver, m)


def judge_cuda(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    assert section.cuda is not None
    return _version(CUDA.verdict(subject, str(section.cuda), m.evidence), m.host.cuda, section.cuda, m)


def _every_gpu(v: Verdict, each: list[Check]) -> Check:
    """Without gpus.count the subject is every GPU NVML lists, judged at once: the worst of the per-GPU checks."""
    if not each:
        return v.failed(None, "no GPU found")
    wrong = [c for c in each if c.outcome is Outcome.FAILED]
    unmeasured = [c for c in each if c.outcome is Outcome.NOT_MEASURED]
    if unmeasured and not wrong:
        return v.not_measured(unmeasured[0].message.removeprefix(NOT_MEASURED_PREFIX))
    found = ", ".join(sorted({str(c.measured) for c in each}))
    return v.judged(not wrong, found, "; ".join(c.message for c in wrong) or f"all {len(each)} GPUs: {found}")


def judge_form_factor(section: Gpus, subject: Subject, m: GpuModels, contract: Contract) -> Check:
    """The form factor of the GPU's PCI device ID in the model table: an H100 PCIe and an SXM5 share a name."""
    assert section.form_factor is not None
    v = FORM_FACTOR.verdict(subject, f"== {section.form_factor}", m.evidence)
    if subject.kind is Kind.ALL_GPUS:
        return _every_gpu(v, [judge_form_factor(section, Subject.of_gpu(i), m, contract) for i in sorted(m.device_ids)])
    assert subject.gpu is not None
    index = subject.gpu
    if index not in m.device_ids:
        return v.failed(None, f"GPU{index} not present: NVML lists {len(m.device_ids)} GPUs")
    device = m.device_ids[index]
    model = m.models.get(index)
    if device is None:
        return v.not_measured(f"GPU{index}'s PCI function in sysfs is not an NVIDIA display controller, or unreadable")
    if model is None:
        return v.not_measured(m.missing(index))
    ok = model.form_factor == section.form_factor
    return with_sources(v.judged(ok, model.form_factor, f"GPU{index} is PCI device 0x{model.device_id}, a {model.name} "
                                 f"({model.form_factor})" + ("" if ok else f", not {section.form_factor} as contracted")),
                        f"sysfs PCI device 0x{model.device_id}", "the model table")


def judge_identity(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """Who a GPU is, from two sources: NVML's name and device ID against the PCI function sysfs lists at the
    bus ID NVML gives; unique UUID, serial and bus ID; as many GPUs as NVIDIA GPU functions on the PCI bus;
    visible to CUDA in this run; MIG off. Measured: the PCI device ID. A device ID the model table lacks is judged
    all the same (only the name's check against the table is left out, said); pci.ids' name is reported beside."""
    v = IDENTITY.verdict(subject, "NVML, sysfs and CUDA agree; MIG " + ("on" if section.mig else "off"), m.evidence +
                (m.models.evidence if m.models else ()))
    host, models = m.host, m.models
    if subject.kind is Kind.ALL_GPUS:
        return _every_gpu(v, [judge_identity(section, Subject.of_gpu(g.index), m, contract) for g in host.gpus]) \
            if not host.error else v.not_measured(host.error)
    early = _per_gpu(v, m, subject)
    if early:
        return early
    assert subject.gpu is not None and models is not None
    gpu = host.gpus[subject.gpu]
    device, model = models.device_ids.get(gpu.index), models.model(gpu.index)
    bus = sysfs_bus_id(gpu.pci_bus_id) if gpu.pci_bus_id else "(no bus ID)"
    problems: list[str] = []
    if device is None:
        problems.append(f"NVML puts {subject} ({gpu.name!r}) at PCI {bus}, where sysfs has no NVIDIA GPU function")
    elif gpu.pci_device_id and gpu.pci_device_id != device:
        problems.append(f"NVML says {subject} is PCI device 0x{gpu.pci_device_id}, sysfs says 0x{device} at {bus}")
    elif model is not None and not answers_to(model, gpu.name) and not vgpu_of(model, gpu.name):
        problems.append(f"NVML names {subject} {gpu.name!r}, but sysfs says PCI device 0x{device} at {bus}, "
                        f"a {model.name} (NVML name {model.nvml_name!r})")
    problems += _twins(subject, gpu, host)
    if models.sysfs_gpus is not None and len(models.sysfs_gpus) < len(host.gpus):  # more in sysfs: a slice (gpus.count)
        problems.append(f"NVML lists {len(host.gpus)} GPUs, the PCI bus in sysfs has {len(models.sysfs_gpus)} NVIDIA "
                        f"GPU functions ({', '.join(models.sysfs_gpus[:16]) or 'none'})")
    cuda = host.cuda_devices
    problems += _unusable_by_cuda(subject, bus, cuda)
    if gpu.mig_mode and section.mig is None:
        problems.append(f"MIG mode is on for {subject}: it is partitioned into instances, not one whole GPU")
    if section.mig is not None and gpu.mig_mode != 1:
        problems.append(f"MIG mode is {'off' if gpu.mig_mode == 0 else 'not supported'} for {subject}: the contract "
                        f"sells it as MIG slices ({section.mig.profile})")
    measured = f"0x{device}" if device else None
    second = {"pci_ids": models.pci_name(gpu.index)}  # the second source of the device's name, reported only
    sources = ("NVML", "sysfs PCI functions" if models.sysfs_gpus is not None else "",
               "CUDA" if cuda is not None else "", "the model table" if model is not None else "")
    if problems:
        return with_sources(v.failed(measured, "; ".join(problems), second), *sources)
    unread = [what for what, missing in (("the PCI bus listing in sysfs", models.sysfs_gpus is None),
                                         ("CUDA's device list", cuda is None)) if missing]
    if unread:
        return v.not_measured(f"{subject}: {' and '.join(unread)} could not be read, so NVML's word stands alone")
    # A device ID the table lacks: who the GPU is stands on NVML, sysfs and CUDA agreeing; only the name's
    # check against the table's is left out, said, with pci.ids' name for a person to compare.
    known = (model.name + (f", in a vGPU guest as profile {gpu.name!r}" if vgpu_of(model, gpu.name) else "")
             if model is not None else (f"{second['pci_ids']}; {models.missing(gpu.index)}, so NVML's "
                                                  "name is not checked against it"))
    mig_said = "on, as the contract's gpus.mig sells it" if gpu.mig_mode == 1 else \
        "off" if gpu.mig_mode == 0 else "not supported"
    return with_sources(v.passed(measured, f"{subject}: NVML {gpu.name!r} at {bus}, sysfs PCI device 0x{device} ({known}), "
                                 f"visible to CUDA, MIG {mig_said}", second), *sources)


_FIELD = {"UUID": "uuid", "serial": "serial", "PCI bus ID": "pci_bus_id"}


def _twins(subject: Subject, gpu: Gpu, host: Host) -> list[str]:
    """The GPUs NVML gives the same UUID, serial or PCI bus ID as this one."""
    problems = []
    for what, value in (("UUID", gpu.uuid), ("serial", gpu.serial), ("PCI bus ID", gpu.pci_bus_id)):
        twins = [g.index for g in host.gpus if value and g.index != gpu.index and getattr(g, _FIELD[what]) == value]
        if twins:
            problems.append(f"NVML gives {subject} the same {what} {value!r} as " + ", ".join(f"GPU{t}" for t in twins))
    return problems


def _unusable_by_cuda(subject: Subject, bus: str, cuda: CudaDevices | None) -> list[str]:
    """Why CUDA in this run cannot use the GPU at `bus` (nothing where CUDA's list was not read)."""
    if cuda is None:
        return []
    visible = "" if cuda.visible_devices is None else f", CUDA_VISIBLE_DEVICES={cuda.visible_devices!r}"
    if cuda.error:
        return [f"CUDA in this run cannot use {subject}: {cuda.error}{visible}"]
    if bus not in cuda.bus_ids:
        return [f"{subject} ({bus}) is listed by NVML but not visible to CUDA in this run: CUDA sees "
                f"{cuda.count} device(s){' at ' + ', '.join(cuda.bus_ids) if cuda.bus_ids else ''}{visible}"]
    return []


def judge_persistence_mode(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """NVML's persistence mode (nvmlDeviceGetPersistenceMode) on: the driver keeps the GPU initialised while no
    process holds it, so a job does not start by waiting for it nor find its state torn down between jobs."""
    v = PERSISTENCE_MODE.verdict(subject, "on", m.evidence)
    if subject.kind is Kind.ALL_GPUS and not m.host.error:
        return _every_gpu(v, [judge_persistence_mode(section, Subject.of_gpu(g.index), m, contract) for g in m.host.gpus])
    early = _per_gpu(v, m, subject)
    if early:
        return early
    assert subject.gpu is not None
    mode = m.host.gpus[subject.gpu].persistence_mode
    if mode is None:
        return v.not_measured(f"{subject}'s persistence mode is not in this NVML reading (a recording made before "
                              "it was read, or NVML does not support it here)")
    if mode != 1:
        return with_sources(v.failed("off", f"{subject} persistence mode is off: the driver tears the GPU down whenever no process "
                               "holds it (nvidia-smi -pm 1, or run nvidia-persistenced)"), "NVML")
    return with_sources(v.passed("on", f"{subject} persistence mode is on"), "NVML",
                        unconfirmed="NVML's persistence mode alone (no second reading of it)")


def _mig_profile(gpu: Gpu, device: MigDevice) -> str | None:
    """The profile a MIG device's NVML name gives after its GPU's name and " MIG ", or None where it gives none."""
    prefix = f"{gpu.name} MIG "
    return device.name[len(prefix):] if device.name.startswith(prefix) else None


def _mig_gpu(gpu: Gpu, section: Mig, m: HostReading) -> tuple[list[MigDevice], list[str]]:
    """A GPU's MIG devices of the contracted profile, and what is wrong with its MIG devices: a name that is not
    its GPU's with a profile, a UUID that is not a MIG device's, more GPU slices than a GPU has, more memory than its
    GPU, a profile's memory that the device does not have or that the model's published memory cannot hold."""
    devices = gpu.mig_devices or ()
    problems: list[str] = []
    matched: list[MigDevice] = []
    instances: dict[int | str, tuple[int, int]] = {}  # GPU instance -> (slices, memory): compute instances share one
    for d in devices:
        profile = _mig_profile(gpu, d)
        if profile is None or not MIG_PROFILE.fullmatch(profile):
            problems.append(f"GPU{gpu.index} MIG device {d.index} is named {d.name!r}: not {gpu.name!r} with a MIG profile")
            continue
        if not d.uuid.startswith("MIG-"):
            problems.append(f"GPU{gpu.index} MIG device {d.index} has UUID {d.uuid!r}: a MIG device's begins MIG-")
        instances[d.gpu_instance_id if d.gpu_instance_id is not None else f"device {d.index}"] = (
            gpu_slices(profile), d.memory_total_bytes)
        if profile == section.profile:
            matched.append(d)
            if d.memory_total_bytes < MIG_MEMORY_FRACTION * section.memory_gb * 1e9:
                problems.append(f"GPU{gpu.index} MIG device {d.index} ({section.profile}) has "
                                f"{fmt(bytes_to_gb(d.memory_total_bytes))} GB (NVML): a {section.profile} has "
                                f"{fmt(section.memory_gb)} GB")
    slices = sum(n for n, _b in instances.values())
    if slices > MIG_SLICES:
        problems.append(f"GPU{gpu.index}'s MIG devices add up to {slices} GPU slices: a GPU has {MIG_SLICES}")
    memory = sum(b for _n, b in instances.values())
    if memory > gpu.memory_total_bytes:
        problems.append(f"GPU{gpu.index}'s MIG devices add up to {fmt(bytes_to_gb(memory))} GB, more than the "
                        f"{fmt(bytes_to_gb(gpu.memory_total_bytes))} GB NVML gives the GPU")
    model = m.models.model(gpu.index) if m.models else None
    if model is not None and section.memory_gb > max(model.memory_gb) * 1.08:  # GB of a profile, GiB published
        problems.append(f"a {section.profile} holds {fmt(section.memory_gb)} GB, more than a {model.name} has "
                        f"({fmt(max(model.memory_gb))} GB published; sysfs PCI device 0x{model.device_id})")
    return matched, problems


def judge_mig(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """MIG slices sold as such: at least `count` MIG devices NVML names with the contract's profile, each of its
    profile's memory, on GPUs in MIG mode, as the GPU's slices and memory can hold and its model's memory can."""
    assert section.mig is not None
    sold = section.mig
    v = MIG.verdict(subject, f">= {sold.count} x {sold.profile}", m.evidence + (m.models.evidence if m.models else ()))
    if m.host.error:
        return v.not_measured(m.host.error)
    if not m.host.gpus:
        return v.failed(0, "no GPU found")
    unread = [f"GPU{g.index}" for g in m.host.gpus if g.mig_mode == 1 and g.mig_devices is None]
    if unread:
        return v.not_measured(f"{', '.join(unread)} in MIG mode, but the NVML reading has no MIG devices of "
                              "theirs (a recording made before they were read)")
    problems = [f"GPU{g.index}'s MIG mode is {'off' if g.mig_mode == 0 else 'not supported'}"
                for g in m.host.gpus if g.mig_mode != 1]
    matched: list[tuple[Gpu, MigDevice]] = []
    for gpu in m.host.gpus:
        found, wrong = _mig_gpu(gpu, sold, m)
        matched += [(gpu, d) for d in found]
        problems += wrong
    uuids = [d.uuid for g in m.host.gpus for d in g.mig_devices or ()]
    problems += [f"MIG UUID {u!r} is given to more than one MIG device" for u in sorted({u for u in uuids if uuids.count(u) > 1})]
    every = [f"GPU{g.index}: {_mig_profile(g, d) or d.name} ({fmt(bytes_to_gb(d.memory_total_bytes))} GB)"
             for g in m.host.gpus for d in g.mig_devices or ()]
    details: dict[str, Any] = {"mig_devices": every, "profile": sold.profile, "profile_memory_gb": sold.memory_gb}
    shown = f"{len(matched)} MIG devices of profile {sold.profile}, at least {sold.count} sold"
    known = [m.models.model(g.index) for g in m.host.gpus] if m.models else []
    sources = ("NVML MIG devices", "the profile's slices and memory",
               "the model table" if known and all(known) else "")
    unconfirmed = "" if known and all(known) else "the GPUs' published memory was not looked up (model table)"
    if problems:
        return with_sources(v.failed(len(matched), f"{shown}; but " + "; ".join(problems), details), *sources)
    return with_sources(v.judged(len(matched) >= sold.count, len(matched), shown + (
        f" ({', '.join(sorted({f'GPU{g.index}' for g, _d in matched}))})" if matched else ""), details), *sources,
        unconfirmed=unconfirmed)


def gpuaccept_host_identity(gpuaccept_host: HostReading, gpuaccept_models: GpuModels) -> HostReading:
    """The NVML reading with each GPU's PCI device ID and model from sysfs: two sources for who a GPU is."""
    return HostReading(gpuaccept_host.host, gpuaccept_host.evidence, gpuaccept_models)


COUNT = Clause("gpus.count", SECTION, "test_gpu_count", HostWide(), gpuaccept_host_identity, judge_count,
               "exactly `count` GPUs (NVML and CUDA; more in sysfs: a slice, said)", "GPUs",
               lambda s: s.count is not None)
MODEL = Clause("gpus.model", SECTION, "test_gpu_model", PerGpu(), gpuaccept_host_identity, judge_model,
               "case-insensitive substring of each GPU's name, or the marketing name of its PCI device ID; NVML's name "
               "is the one the model table gives that device ID (or an alias), never merely contains it", None,
               lambda s: s.model is not None)
MEMORY = Clause("gpus.memory", SECTION, "test_gpu_memory", PerGpu(), gpuaccept_host_identity, judge_memory,
                "total memory as the driver reports it, at least this, and no more than the published capacity of the "
                "GPU's PCI device ID", "GB", lambda s: s.memory is not None)
DRIVER = Clause("gpus.driver", SECTION, "test_driver_version", HostWide(), gpuaccept_host, judge_driver,
                "the driver version satisfies the specifier set", None, lambda s: s.driver is not None)
CUDA = Clause("gpus.cuda", SECTION, "test_cuda_version", HostWide(), gpuaccept_host, judge_cuda,
              "the CUDA version the driver supports satisfies the specifier set", None, lambda s: s.cuda is not None)
FORM_FACTOR = Clause("gpus.form_factor", SECTION, "test_gpu_form_factor", PerGpu(), gpuaccept_models,
                     judge_form_factor, "the form factor of each GPU's PCI device ID (sxm, pcie, nvl, superchip), "
                     "not its name",
                     None, lambda s: s.form_factor is not None)
IDENTITY = Clause("gpus.identity", SECTION, "test_gpu_identity", PerGpu(), gpuaccept_host_identity, judge_identity,
                  "always: NVML's name and device ID agree with the PCI function in sysfs, UUID, serial and bus ID "
                  "unique, as many GPUs as the PCI bus has, each visible to CUDA in this run, MIG off")
PERSISTENCE_MODE = Clause("gpus.persistence_mode", SECTION, "test_persistence_mode", PerGpu(), gpuaccept_host,
                          judge_persistence_mode, "with `persistence_mode: true`: NVML's persistence mode on for "
                          "each GPU", None, lambda s: s.persistence_mode)
MIG = Clause("gpus.mig", SECTION, "test_gpu_mig", HostWide(), gpuaccept_host_identity, judge_mig,
              "with `mig: {profile, count}`: at least `count` MIG devices of the profile (NVML), each with its "
              "profile's memory, on GPUs in MIG mode whose slices and memory hold them", "MIG devices",
              lambda s: s.mig is not None)
CLAUSES = (COUNT, MODEL, MEMORY, FORM_FACTOR, IDENTITY, DRIVER, CUDA, PERSISTENCE_MODE, MIG)
MEASUREMENTS = (gpuaccept_host_identity,)
