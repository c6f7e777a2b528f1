"""The dataclasses a clause module declares: its Section (schema) and its Clauses (subjects, measurement, judge).

Modelled on pytest-xdist's schedulers: a small Protocol (`SubjectRule`) with a few implementations, and
dataclasses that say which one each clause uses. Nothing here knows a particular clause.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

from ..subjects import Subject, gpu_count
from ..verdict import Check, Verdict

if TYPE_CHECKING:
    from ..contract import Contract
    from ..evidence import Evidence
    from ..schema import Key

S = TypeVar("S")  # a section's validated configuration
M = TypeVar("M")  # what a clause's measurement fixture gives

# A cross-check sees the section's value and every other section's (INVALID where that one did not
# validate) and returns (dotted key, message) problems, reported at the section's line.
CrossCheck = Callable[[Any, Mapping[str, Any]], "list[tuple[str, str]]"]
HostNames = Mapping[str, "list[str]"]  # what the host lists: {"net": [...], "infiniband": [...]}


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity: one record per section
class Section(Generic[S]):
    """A contract section: its keys (types, defaults), the dataclass they build, and its rules across keys."""

    name: str
    keys: dict[str, Key]
    build: type[S]  # the frozen dataclass of the section's keys
    doc: str
    needs_gpu_count: bool = False  # judged over gpus.count whole GPUs: invalid without it, and with gpus.mig
    cross_check: CrossCheck | None = None

    def get(self, contract: Contract) -> S | None:
        """This section of a contract, typed; None where the contract does not have it."""
        value = contract.by_section.get(self.name)
        return value if isinstance(value, self.build) else None

    def of(self, contract: Contract) -> S:
        """This section of a contract; only called for clauses the contract has."""
        value = self.get(contract)
        if value is None:
            raise LookupError(f"the contract has no {self.name} section")
        return value


class SubjectRule(Protocol):
    """How a clause's subjects are enumerated from the contract (and, for names, the host's listing)."""

    @property
    def describe(self) -> str: ...  # for the docs tables: "`GPU<i>`, one per GPU"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]: ...


@dataclass(frozen=True, slots=True)
class HostWide:
    """One subject for the host (or one thing of it: `label` of the section, e.g. the iperf3 server)."""

    label: Callable[[Any], str] | str = "host"
    describe: str = "`host`"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.whole(self.label if isinstance(self.label, str) else self.label(section))]



@dataclass(frozen=True, slots=True)
class PerGpu:
    """GPU0..GPU<count-1>; without gpus.count, one subject over every GPU found (GPUs)."""

    describe: str = "`GPU<i>`, one per GPU (`GPUs` without gpus.count)"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.of_gpu(i) for i in range(gpu_count(contract))] or [Subject.all_gpus()]


@dataclass(frozen=True, slots=True)
class GpuPairs:
    """Every unordered pair i < j of gpus.count GPUs."""

    describe: str = "`GPU<i>-GPU<j>`, one per pair i<j"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        count = gpu_count(contract)
        return [Subject.pair(i, j) for i in range(count) for j in range(i + 1, count)]


@dataclass(frozen=True, slots=True)
class PerGpuAspect:
    """GPU<i>:<aspect> for each GPU and each aspect (h2d, d2h): one check per GPU and direction."""

    aspects: tuple[str, ...]
    describe: str = "`GPU<i>:<aspect>`, one per GPU and aspect"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        return [Subject.of_gpu(i, aspect) for i in range(gpu_count(contract)) for aspect in self.aspects]


@dataclass(frozen=True, slots=True)
class OrderedGpuPairs:
    """Every ordered pair i != j of gpus.count GPUs: data moving from GPU i to GPU j."""

    describe: str = "`GPU<i>->GPU<j>`, one per ordered pair i != j"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        count = gpu_count(contract)
        return [Subject.ordered(i, j) for i in range(count) for j in range(count) if i != j]


@dataclass(frozen=True, slots=True)
class GpuPairsBothWays:
    """Every pair i < j, both directions at once."""

    describe: str = "`GPU<i><->GPU<j>`, one per pair i<j"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        count = gpu_count(contract)
        return [Subject.both_ways(i, j) for i in range(count) for j in range(i + 1, count)]


def match_names(patterns: tuple[str, ...], available: list[str]) -> list[tuple[str, str | None]]:
    """(pattern, name) for each name each pattern matches, in order; (pattern, None) where none does."""
    pairs: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for pattern in patterns:
        hits = [name for name in sorted(available) if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            pairs.append((pattern, None))
        for name in hits:
            if name not in seen:
                seen.add(name)
                pairs.append((pattern, name))
    return pairs


@dataclass(frozen=True, slots=True)
class Named:
    """One subject per name the host lists (`listing`) that the section's patterns match; a pattern that
    matches nothing is a subject of its own, and it fails."""

    listing: str  # "net" or "infiniband"
    patterns: Callable[[Any], tuple[str, ...]]
    describe: str = "each matching name (or the pattern that matched none)"

    def subjects(self, contract: Contract, section: Any, names: Callable[[], HostNames]) -> list[Subject]:
        available = list(names().get(self.listing, []))
        return [Subject.named(pattern, name) for pattern, name in match_names(self.patterns(section), available)]


# The rules by name, as pytest-xdist maps each --dist mode to its scheduler: docs and tests read this.
SUBJECT_RULES: dict[str, type] = {"host": HostWide, "gpu": PerGpu, "pair": GpuPairs, "ordered_pair": OrderedGpuPairs,
                                  "both_ways": GpuPairsBothWays, "name": Named}

Judge = Callable[[Any, Subject, Any, "Contract"], Check]
Measure = Callable[..., Any]  # a measuring function; its parameters are the fixtures it reads (gpuaccept_state, ...)


@dataclass(frozen=True, slots=True)
class ReportPart:
    """A section's (or engine's) own part of the report, besides a row per check, listed in the registry's
    REPORT_PARTS: `render` draws it from the run's checks (a heat map, a grid; "" when it has nothing to draw);
    `gather`, where checks stand for other runs (a cluster's nodes), merges those runs' checks in from the sealed
    evidence and gives the results' `hosts` (None where it gathered nothing). A part drawn from the run's own records
    rather than its checks (the schedule of its tool runs) has a `key`: `record` reads it from the sealed evidence as
    the run is judged, the results carry it under that key, and `draw` draws it from there. `render` and `draw` take
    the report's language (i18n) last and say their own words in it."""

    render: Callable[[Sequence[Check], str], str]
    gather: Callable[[Sequence[Check], Evidence], tuple[Sequence[Check], list[dict[str, Any]] | None]] | None = None
    key: str = ""
    record: Callable[[Evidence], Any] | None = None
    draw: Callable[[Any, str], str] | None = None

    def drawn(self, records: Mapping[str, Any], lang: str) -> str:
        """This part's drawing of what it recorded of the run ("" for a part drawn from checks alone)."""
        return self.draw(records.get(self.key), lang) if self.draw is not None else ""


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity: one record per clause
class Clause:
    """One clause, declared once: everything else (plan, parametrization, ids, docs, completeness) reads it."""

    key: str  # the results' `clause`, e.g. "nvlink.links"
    section: Section[Any]
    test: str  # the shipped suite's test function
    rule: SubjectRule
    # The measuring function, given to the judge: the registry makes it a session fixture of its own name
    # (gpuaccept_host), whose parameters name the fixtures it reads, as any pytest fixture's do.
    measure: Measure
    judge: Judge  # (section, subject, measurement, contract) -> Check
    doc: str  # what it checks, one line, for the docs tables
    unit: str | None = None  # the unit of every check of the clause (the judge's Verdict takes it from here)
    present: Callable[[Any], bool] = lambda _section: True  # which keys of the section ask for it
    # Its subjects are pairs, two ends joined by this ("->": from, to; any other joint: the two ends alike): each
    # pair is its own check, and the report shows the clause's passing pairs as one row with their heat map.
    pair_joint: str = ""

    def verdict(self, subject: Subject | str, required: str = "", evidence: tuple[str, ...] = (),
                threshold: float | None = None) -> Verdict:
        """What the judge knows before it looks, with this clause's key and unit."""
        return Verdict(self.key, subject, required, self.unit, evidence, threshold)

    def ends(self, local: str) -> tuple[str, str] | None:
        """A pair's two ends (`GPU0->GPU1`: GPU0, GPU1); None where this clause's subjects are not pairs, or this
        subject is not one (the `cluster` a clause without nodes judges)."""
        first, joint, second = local.partition(self.pair_joint) if self.pair_joint else ("", "", "")
        return (first, second) if joint and first and second else None

    def subjects(self, contract: Contract, names: Callable[[], HostNames]) -> list[Subject]:
        return self.rule.subjects(contract, self.section.of(contract), names)

    def in_contract(self, contract: Contract) -> bool:
        section = contract.by_section.get(self.section.name)
        return section is not None and self.present(section)

    def asked_by(self, contract: Contract) -> bool:
        """Whether this run judges the clause. With a `cluster` section the login node judges the cluster
        clauses and each node (contract.node set) the rest."""
        if not self.in_contract(contract):
            return False
        if "cluster" in contract.by_section:
            return (self.section.name == "cluster") == (contract.node is None)
        return True
