"""The `allreduce` section: out-of-place busbw at the contracted size (nccl-tests, or torch if the contract says)."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks


@pytest.mark.gpuaccept("allreduce", subject="all_reduce")
def test_allreduce_busbw(gpuaccept_contract, gpuaccept_allreduce, gpuaccept_host, gpuaccept_judge):
    readings, tool = gpuaccept_allreduce
    host, _evidence = gpuaccept_host
    clause = gpuaccept_contract.allreduce
    bound = checks.busbw_bound([gpu.name for gpu in host.gpus])
    gpuaccept_judge(checks.allreduce(readings, clause.min_busbw.gbyte_s, clause.max_bytes.nbytes,
                                     gpuaccept_contract.gpus.count, bound, tool))
