"""Clauses whose measurement is not built yet: each fails as not measured, never passes, never skips."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks


@pytest.mark.parametrize("clause, subject", [
    pytest.param("allreduce", "all_reduce", marks=pytest.mark.gpuaccept("allreduce", subject="all_reduce")),
])
def test_not_implemented(clause, subject, gpuaccept_judge):
    gpuaccept_judge(checks.not_measured(clause, subject, "", "not implemented yet in this version of pytest-gpuaccept"))
