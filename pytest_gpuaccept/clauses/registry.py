"""The registry: every section and clause of the format, in report order, read from the clause modules.

Plan (which clauses a contract has, which checks it expects), parametrization and test ids, the
"not in contract" list, the docs tables and the completeness check are all derived from this table.
A clause exists once, in its section's module; this file only lists the modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..subjects import Subject
from . import (
    allreduce,
    burnin,
    cluster,
    cluster_utilisation,
    compute,
    dcgm,
    errors,
    gpus,
    host_bandwidth,
    memory_bandwidth,
    network,
    nvlink,
    nvlink_domain,
    p2p,
    sdc,
    shared,
    sources,
    together,
    utilisation,
)
from .base import Clause, HostNames, Measure, ReportPart, Section

if TYPE_CHECKING:
    from ..contract import Contract

# Modules in the order of the format; within each, its sections and clauses in report order.
_MODULES = (gpus, nvlink, p2p, memory_bandwidth, compute, host_bandwidth, allreduce, sdc, network, utilisation, burnin, dcgm,
            cluster, cluster_utilisation, nvlink_domain, errors)

CLAUSES: tuple[Clause, ...] = tuple(clause for module in _MODULES for clause in module.CLAUSES)
SECTIONS: tuple[Section[Any], ...] = tuple(dict.fromkeys(clause.section for clause in CLAUSES))
SECTION_NAMES: tuple[str, ...] = tuple(section.name for section in SECTIONS)
BY_KEY: dict[str, Clause] = {clause.key: clause for clause in CLAUSES}
BY_TEST: dict[str, Clause] = {clause.test: clause for clause in CLAUSES}
ALL_CLAUSES: tuple[str, ...] = tuple(BY_KEY)
# The measuring functions, each a session fixture of its own name (suite.measurement_fixtures makes them).
MEASUREMENTS: tuple[Measure, ...] = tuple(dict.fromkeys(
    measure for module in (shared, together, *_MODULES) for measure in module.MEASUREMENTS))
# Readings taken as the run's tests start, before any measurement (plugin.py), each given the session; and the clauses
# whose tests run after every other test (their measurement is the reading after the run's last measurement).
BEFORE_RUN: tuple[Callable[[Any], None], ...] = errors.BEFORE_RUN
AFTER_RUN: frozenset[str] = frozenset(errors.AFTER_RUN)
# The parts of the report a section or engine draws itself (base.ReportPart), in the page's order.
REPORT_PARTS: tuple[ReportPart, ...] = (sources.REPORT, cluster.REPORT, together.REPORT)


def clauses_of(section: str) -> tuple[Clause, ...]:
    return tuple(clause for clause in CLAUSES if clause.section.name == section)


def present_clauses(contract: Contract) -> list[Clause]:
    """The clauses this contract has, each of which must produce at least one check."""
    return [clause for clause in CLAUSES if clause.asked_by(contract)]


def not_in_contract(contract: Contract) -> list[str]:
    return [clause.key for clause in CLAUSES if not clause.in_contract(contract)]


def expected_checks(contract: Contract, names: Callable[[], HostNames]) -> list[tuple[str, Subject]]:
    """(clause, subject) of every check the contract asks for on a host with these names.

    A clause that enumerates no subject still expects one check (on the host): it can never pass unmeasured.
    """
    return [(clause.key, subject) for clause in present_clauses(contract)
            for subject in clause.subjects(contract, names) or [Subject.whole()]]


def docs_table() -> str:
    """The clause table of docs/contract.md, generated: a test keeps the page equal to it."""
    rows = ["| clause | section | subject | unit | test | checks |", "|---|---|---|---|---|---|"]
    for c in CLAUSES:
        rows.append(f"| `{c.key}` | `{c.section.name}` | {c.rule.describe} | {c.unit or '—'} | `{c.test}` | {c.doc} |")
    return "\n".join(rows)
