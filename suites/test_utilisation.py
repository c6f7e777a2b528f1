"""The `utilisation` and `health` sections: every GPU busy under a real training load, and healthy through it."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks


def _series(load, index):
    return load.series.get(index), load.failure or (None if index in load.series or not load.series else
                                                     f"GPU{index} not sampled: the host has {len(load.series)} GPUs")


@pytest.mark.gpuaccept("utilisation")
def test_utilisation(gpu_index, gpuaccept_contract, gpuaccept_load, gpuaccept_judge):
    clause = gpuaccept_contract.utilisation
    series, failure = _series(gpuaccept_load, gpu_index)
    gpuaccept_judge(checks.utilisation(series, gpu_index, clause.min_percent, clause.warmup.seconds,
                                       failure or gpuaccept_load.workload_failure, gpuaccept_load.evidence))


@pytest.mark.gpuaccept("health.ecc")
def test_ecc(gpu_index, gpuaccept_load, gpuaccept_judge):
    series, failure = _series(gpuaccept_load, gpu_index)
    gpuaccept_judge(checks.health_ecc(series, gpu_index, failure, gpuaccept_load.evidence))


@pytest.mark.gpuaccept("health.row_remapping")
def test_row_remapping(gpu_index, gpuaccept_load, gpuaccept_judge):
    series, failure = _series(gpuaccept_load, gpu_index)
    gpuaccept_judge(checks.health_row_remapping(series, gpu_index, failure, gpuaccept_load.evidence))


@pytest.mark.gpuaccept("health.throttle")
def test_throttle(gpu_index, gpuaccept_load, gpuaccept_judge):
    series, failure = _series(gpuaccept_load, gpu_index)
    gpuaccept_judge(checks.health_throttle(series, gpu_index, failure or gpuaccept_load.workload_failure,
                                           gpuaccept_load.evidence))


@pytest.mark.gpuaccept("health.pcie")
def test_pcie_link(gpu_index, gpuaccept_contract, gpuaccept_load, gpuaccept_judge):
    health, clause = gpuaccept_contract.health, gpuaccept_contract.utilisation
    series, failure = _series(gpuaccept_load, gpu_index)
    gpuaccept_judge(checks.health_pcie(series, gpu_index, health.pcie_gen, health.pcie_width, clause.warmup.seconds,
                                       failure or gpuaccept_load.workload_failure, gpuaccept_load.evidence))
