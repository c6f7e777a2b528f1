"""The shipped suites' tests, made from the registry: one test function per clause, in its section's suite.

Each test measures through the clause's fixture and judges through the clause's judge, both bound in
the clause record at import: a plugin that later replaces a module's judge function changes nothing.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import pytest

from .clauses.base import Clause
from .clauses.registry import CLAUSES
from .fixtures import judge_check
from .verdict import Check


def _test(clause: Clause) -> Callable[..., None]:
    # Bound here, at import: a plugin that later replaces a module's function changes nothing.
    judge, measurement, section, record = clause.judge, clause.measurement, clause.section, judge_check

    def test(**fixtures: Any) -> None:
        contract, subject = fixtures["gpuaccept_contract"], fixtures["gpuaccept_subject"]
        judged: Check = judge(section.of(contract), subject, fixtures[measurement], contract)
        record(fixtures["request"].node, judged)

    # The measurement is an argument, so that it is set up (and a crash in it is reported) before the call.
    # `request` rather than the gpuaccept_judge fixture: the same judge_check, without a function-scoped
    # fixture's setup and teardown for each of a run's hundred-odd tests.
    names = ("gpuaccept_subject", "gpuaccept_contract", measurement, "request")
    test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
    test.__name__ = test.__qualname__ = clause.test
    test.__doc__ = f"{clause.key}: {clause.doc}"
    marked: Callable[..., None] = pytest.mark.gpuaccept(clause.key)(test)
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
