"""Clauses whose measurement is not built yet: each fails as not measured, never passes, never skips."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks

NOT_BUILT = "not implemented yet in this version of pytest-gpuaccept"


@pytest.mark.gpuaccept("utilisation")
def test_utilisation(gpu_index, gpuaccept_judge):
    gpuaccept_judge(checks.not_measured("utilisation", f"GPU{gpu_index}", "", NOT_BUILT, "%"))


@pytest.mark.parametrize("clause", [
    pytest.param(clause, marks=pytest.mark.gpuaccept(clause))
    for clause in ("health.ecc", "health.row_remapping", "health.throttle", "health.pcie")
])
def test_health(clause, gpu_index, gpuaccept_judge):
    gpuaccept_judge(checks.not_measured(clause, f"GPU{gpu_index}", "", NOT_BUILT))
