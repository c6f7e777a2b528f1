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
from .fixtures import CLAUSE_TEST_ARGUMENTS, judge_check
from .verdict import Check


def _test(clause: Clause) -> Callable[..., Check]:
    # Bound here, at import: a plugin that later replaces a module's function changes nothing.
    judge, section, measurement = clause.judge, clause.section, clause.measurement

    def test(**fixtures: Any) -> Check:
        contract = fixtures["gpuaccept_contract"]
        judged: Check = judge(section.of(contract), fixtures["gpuaccept_subject"], fixtures[measurement], contract)
        return judged

    # The measurement is an argument, so that it is set up (and a crash in it is reported) before the call.
    # The test returns its check, and plugin.pytest_pyfunc_call records it on the test's own item: no
    # `request` (pytest makes a new fixture definition, with an inspect.signature, each time one is asked for).
    names = ("gpuaccept_subject", "gpuaccept_contract", measurement)
    test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
    setattr(test, CLAUSE_TEST_ARGUMENTS, names)
    test.__name__ = test.__qualname__ = clause.test
    test.__doc__ = f"{clause.key}: {clause.doc}"
    marked: Callable[..., Check] = pytest.mark.gpuaccept(clause.key)(test)
    return marked


def call(item: pytest.Function, arguments: tuple[str, ...]) -> None:
    """Run a clause test with its fixtures and record the check it returns on its item."""
    funcargs = item.funcargs
    judge_check(item, item.obj(**{name: funcargs[name] for name in arguments}))


def clauses_module(suite_file: str | Path) -> str:
    """The clause module whose clauses `suites/test_<module>.py` tests."""
    return "pytest_gpuaccept.clauses." + Path(suite_file).stem.removeprefix("test_")


def clause_tests(suite_file: str) -> dict[str, Callable[..., Check]]:
    """The tests of `suites/test_<module>.py`: one per clause declared in `clauses/<module>.py`."""
    module = clauses_module(suite_file)
    tests = {clause.test: _test(clause) for clause in CLAUSES if clause.judge.__module__ == module}
    if not tests:
        raise LookupError(f"{suite_file}: no clause module {module} in the registry")
    return tests
