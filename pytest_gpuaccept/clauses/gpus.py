"""The `gpus` section: how many GPUs, which model, how much memory, which driver and CUDA (NVML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .. import schema
from ..measurements import GpuModels, HostReading
from ..models import names as names_model
from ..schema import Key
from ..subjects import Kind, Subject
from ..units import Size, bytes_to_gb
from ..verdict import NOT_MEASURED_PREFIX, Check, Outcome, Verdict, fmt
from .base import Clause, HostWide, PerGpu, Section

if TYPE_CHECKING:
    from ..contract import Contract


@dataclass(frozen=True)
class Gpus:
    count: int | None
    model: str | None
    memory: Size | None
    driver: SpecifierSet | None
    cuda: SpecifierSet | None
    form_factor: str | None  # sxm | pcie | nvl: judged from the PCI device ID, never from the name


SECTION = Section(
    "gpus",
    {"count": Key(schema.whole(1, 64)), "model": Key(schema.text), "memory": Key(schema.size),
     "driver": Key(schema.specifier), "cuda": Key(schema.specifier),
     "form_factor": Key(schema.one_of("sxm", "pcie", "nvl"))},
    Gpus, "the GPUs as NVML reports them")


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
    assert section.count is not None
    v = Verdict(COUNT.key, subject, f"== {section.count}", "GPUs", m.evidence)
    if m.host.error:
        return v.not_measured(m.host.error)
    found = len(m.host.gpus)
    return v.judged(found == section.count, found, f"{found} GPUs found, contract says {section.count}")


def judge_model(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """The contract's model is a case-insensitive substring of the GPU's name."""
    model = str(section.model)
    v = Verdict(MODEL.key, subject, f"name contains {model!r}", None, m.evidence)
    early = _per_gpu(v, m, subject)
    if early:
        return early
    if subject.kind is Kind.ALL_GPUS:
        gpus = m.host.gpus
        wrong = [g for g in gpus if model.lower() not in g.name.lower()]
        names = ", ".join(sorted({g.name for g in gpus}))
        message = (f"all {len(gpus)} GPUs are {names}" if not wrong else
                   "; ".join(f"GPU{g.index} is {g.name!r}, which does not contain {model!r}" for g in wrong))
        return v.judged(not wrong, names, message)
    assert subject.gpu is not None
    name = m.host.gpus[subject.gpu].name
    if model.lower() in name.lower():
        return v.passed(name, f"{subject} is {name!r}")
    # The marketing name of its PCI device ID counts too: "H100 SXM5" is an "NVIDIA H100 80GB HBM3" of 0x2330.
    known = m.models.model(subject.gpu) if m.models else None
    if known is not None and names_model(known, model):
        return v.passed(name, f"{subject} is {name!r}, PCI device 0x{known.device_id}: {known.name}")
    also = f" nor does its PCI device 0x{known.device_id} ({known.name})" if known else ""
    return v.failed(name, f"{subject} is {name!r}, which does not contain {model!r}" + (f",{also}" if also else ""))


def judge_memory(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    """Total memory as the driver reports it, in GB (10^9 bytes), at least the contract's."""
    assert section.memory is not None
    minimum = bytes_to_gb(section.memory.nbytes)
    v = Verdict(MEMORY.key, subject, f">= {fmt(minimum)}", "GB", m.evidence)
    early = _per_gpu(v, m, subject)
    if early:
        return early
    if subject.kind is Kind.ALL_GPUS:
        smallest = min(m.host.gpus, key=lambda g: g.memory_total_bytes)
        return v.at_least(bytes_to_gb(smallest.memory_total_bytes), minimum, f"smallest GPU memory (GPU{smallest.index})")
    assert subject.gpu is not None
    return v.at_least(bytes_to_gb(m.host.gpus[subject.gpu].memory_total_bytes), minimum, f"{subject} total memory")


def _version(v: Verdict, found: str | None, spec: SpecifierSet, m: HostReading) -> Check:
    """A driver or CUDA version against a PEP 440 specifier set."""
    if m.host.error or not found:
        return v.not_measured(m.host.error or "the version could not be read")
    try:
        ok = spec.contains(Version(found), prereleases=True)
    except InvalidVersion:
        return v.not_measured(f"version {found!r} is not a version number")
    what = v.clause.split(".")[-1]
    return v.judged(ok, found, f"{what} {found} {'satisfies' if ok else 'does not satisfy'} {v.required}")


def judge_driver(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    assert section.driver is not None
    return _version(Verdict(DRIVER.key, subject, str(section.driver), None, m.evidence), m.host.driver, section.driver, m)


def judge_cuda(section: Gpus, subject: Subject, m: HostReading, contract: Contract) -> Check:
    assert section.cuda is not None
    return _version(Verdict(CUDA.key, subject, str(section.cuda), None, m.evidence), m.host.cuda, section.cuda, m)


def judge_form_factor(section: Gpus, subject: Subject, m: GpuModels, contract: Contract) -> Check:
    """The form factor of the GPU's PCI device ID in the model table: an H100 PCIe and an SXM5 share a name."""
    assert section.form_factor is not None
    v = Verdict(FORM_FACTOR.key, subject, f"== {section.form_factor}", None, m.evidence)
    if subject.kind is Kind.ALL_GPUS:  # without gpus.count: every GPU NVML lists, judged at once
        each = [judge_form_factor(section, Subject.of_gpu(i), m, contract) for i in sorted(m.device_ids)]
        if not each:
            return v.failed(None, "no GPU found")
        unmeasured = [c for c in each if c.outcome is Outcome.NOT_MEASURED]
        if unmeasured:
            return v.not_measured(unmeasured[0].message.removeprefix(NOT_MEASURED_PREFIX))
        wrong = [c for c in each if not c.passed]
        factors = ", ".join(sorted({str(c.measured) for c in each}))
        return v.judged(not wrong, factors, "; ".join(c.message for c in wrong) or f"all {len(each)} GPUs are {factors}")
    assert subject.gpu is not None
    index = subject.gpu
    if index not in m.device_ids:
        return v.failed(None, f"GPU{index} not present: NVML lists {len(m.device_ids)} GPUs")
    device = m.device_ids[index]
    model = m.models.get(index)
    if device is None:
        return v.not_measured(f"GPU{index}'s PCI function in sysfs is not an NVIDIA display controller, or unreadable")
    if model is None:
        return v.not_measured(f"GPU{index}'s PCI device ID 0x{device.removeprefix('0x')} is not in the model table")
    ok = model.form_factor == section.form_factor
    return v.judged(ok, model.form_factor, f"GPU{index} is PCI device 0x{model.device_id}, a {model.name} "
                    f"({model.form_factor})" + ("" if ok else f", not {section.form_factor} as contracted"))


COUNT = Clause("gpus.count", SECTION, "test_gpu_count", HostWide(), "gpuaccept_host", judge_count,
               "exactly `count` GPUs (NVML)", "GPUs", lambda s: s.count is not None)
MODEL = Clause("gpus.model", SECTION, "test_gpu_model", PerGpu(), "gpuaccept_host_identity", judge_model,
               "case-insensitive substring of each GPU's name, or the marketing name of its PCI device ID", None,
               lambda s: s.model is not None)
MEMORY = Clause("gpus.memory", SECTION, "test_gpu_memory", PerGpu(), "gpuaccept_host", judge_memory,
                "total memory as the driver reports it, at least this", "GB", lambda s: s.memory is not None)
DRIVER = Clause("gpus.driver", SECTION, "test_driver_version", HostWide(), "gpuaccept_host", judge_driver,
                "the driver version satisfies the specifier set", None, lambda s: s.driver is not None)
CUDA = Clause("gpus.cuda", SECTION, "test_cuda_version", HostWide(), "gpuaccept_host", judge_cuda,
              "the CUDA version the driver supports satisfies the specifier set", None, lambda s: s.cuda is not None)
FORM_FACTOR = Clause("gpus.form_factor", SECTION, "test_gpu_form_factor", PerGpu(), "gpuaccept_models",
                     judge_form_factor, "the form factor of each GPU's PCI device ID (sxm, pcie, nvl), not its name",
                     None, lambda s: s.form_factor is not None)
CLAUSES = (COUNT, MODEL, MEMORY, FORM_FACTOR, DRIVER, CUDA)
