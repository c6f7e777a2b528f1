"""The shipped suites' tests and the measurement fixtures, made from the registry.

One test function per clause, in its section's suite: it takes the subject and the contract, and its
clause's measurement is set up before it (usefixtures); it judges with the clause's judge and records
the check (fixtures.judge_check). Judge and section are bound in the test at import: a plugin that
later replaces a module's judge function changes nothing.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Callable

import pytest

from .clauses.base import Clause
from .clauses.registry import CLAUSES, MEASUREMENTS
from .contract import Contract
from .fixtures import judge_check
from .subjects import Subject


def measurement_fixtures() -> types.ModuleType:
    """Every measuring function of the registry as a session fixture of its own name (gpuaccept_host, ...),
    in a plugin module that pytest_configure registers with a contract: each measures once per run."""
    plugin = types.ModuleType(f"{__name__}.measurements")
    for measure in MEASUREMENTS:
        setattr(plugin, measure.__name__, pytest.fixture(scope="session", name=measure.__name__)(measure))
    return plugin


def _test(clause: Clause) -> Callable[..., None]:
    judge, section, measured_by = clause.judge, clause.section, clause.measure.__name__

    def test(request: pytest.FixtureRequest, gpuaccept_subject: Subject, gpuaccept_contract: Contract) -> None:
        measured = request.getfixturevalue(measured_by)  # set up before the test (usefixtures below)
        judge_check(request.node, judge(section.of(gpuaccept_contract), gpuaccept_subject, measured, gpuaccept_contract))

    test.__name__ = test.__qualname__ = clause.test
    test.__doc__ = f"{clause.key}: {clause.doc}"
    # The measurement is set up before the call, so that a crash in it is reported as its setup's.
    marked: Callable[..., None] = pytest.mark.usefixtures(measured_by)(pytest.mark.gpuaccept(clause.key)(test))
    return marked


def clauses_module(suite_file: str | Path) -> str:
    """The clause module whose clauses `suites/test_<module>.py` tests."""
    return "pytest_gpuaccept.clauses." + Path(suite_file).stem.removeprefix("test_")


def clause_tests(suite_file: str) -> dict[str, Callable[..., None]]:
    """The tests of `suites/test_<module>.py`: one per clause declared in `clauses/<module>.py`."""
    module = clauses_module(suite_file)
    tests = {clause.test: _test(clause) for clause in CLAUSES if clause.judge.__module__ == module}
    if not tests:
        raise LookupError(f"{suite_file}: no clause module {module} in the registry")
    return tests
