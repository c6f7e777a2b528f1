"""Public fixtures of pytest-gpuaccept: the run's state, the contract, the tool runner, and the judge.

They are what the shipped suites use, and a user's own acceptance tests may use them too
(`pytest --fixtures` lists them). The measurements (gpuaccept_host, gpuaccept_load, ...) are declared beside
the clauses that judge them (pytest_gpuaccept/clauses/) and made session fixtures from the registry
(suite.measurement_fixtures) when a contract is given: each runs once per session, whatever asks for it,
and returns a named, typed value (`pytest_gpuaccept.measurements`). This module is loaded in every pytest
run of the environment, so it imports nothing else at import.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import pytest

if TYPE_CHECKING:
    from .contract import Contract
    from .probes._run import ToolRunner
    from .state import State
    from .verdict import Check


NO_CONTRACT = "pytest-gpuaccept fixtures need --contract=PATH"


@pytest.fixture(scope="session")
def gpuaccept_state(pytestconfig: pytest.Config) -> State:
    """This run's state: the contract, the tool runner, the evidence folder, the checks judged so far."""
    from .state import STATE  # this module is loaded in every pytest run of the environment

    state = pytestconfig.stash.get(STATE, None)
    if state is None:
        pytest.fail(NO_CONTRACT, pytrace=False)
    return state


@pytest.fixture(scope="session")
def gpuaccept_contract(gpuaccept_state: State) -> Contract:
    """The validated contract of this run (frozen dataclasses, see docs/contract.md)."""
    return gpuaccept_state.contract


@pytest.fixture(scope="session")
def gpuaccept_runner(gpuaccept_state: State) -> ToolRunner:
    """The tool runner: argv lists, timeouts, exit codes, and evidence files for every run."""
    return gpuaccept_state.runner


def judge_check(node: pytest.Item, check: Check) -> None:
    """Record a Check on its test for the report and results, and fail the test unless it passed (one line,
    no traceback). The shipped suites' tests call it; user tests, through gpuaccept_judge."""
    from .report import junit_properties
    from .verdict import NOT_MEASURED_PREFIX, Outcome

    node.user_properties.extend(junit_properties(check))
    if check.outcome is not Outcome.PASSED:
        verdict = "" if check.message.startswith(NOT_MEASURED_PREFIX.rstrip(": ")) else "failed: "
        pytest.fail(f"{check.clause} {check.subject}: {verdict}{check.message}", pytrace=False)


@pytest.fixture
def gpuaccept_judge(request: pytest.FixtureRequest) -> Callable[[Check], None]:
    """Record a Check for the report and results, and fail the test unless it passed (one line, no traceback)."""
    return functools.partial(judge_check, request.node)
