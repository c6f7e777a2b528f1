"""The `gpus` section: how many GPUs, which model, how much memory, which driver and CUDA (NVML)."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks


@pytest.mark.gpuaccept("gpus.count", subject="host")
def test_gpu_count(gpuaccept_contract, gpuaccept_host, gpuaccept_judge):
    host, evidence = gpuaccept_host
    gpuaccept_judge(checks.gpu_count(host, gpuaccept_contract.gpus.count, evidence))


@pytest.mark.gpuaccept("gpus.model")
def test_gpu_model(gpu_index, gpuaccept_contract, gpuaccept_host, gpuaccept_judge):
    host, evidence = gpuaccept_host
    gpuaccept_judge(checks.gpu_model(host, gpu_index, gpuaccept_contract.gpus.model, evidence))


@pytest.mark.gpuaccept("gpus.memory")
def test_gpu_memory(gpu_index, gpuaccept_contract, gpuaccept_host, gpuaccept_judge):
    host, evidence = gpuaccept_host
    gpuaccept_judge(checks.gpu_memory(host, gpu_index, gpuaccept_contract.gpus.memory.nbytes, evidence))


@pytest.mark.gpuaccept("gpus.driver", subject="host")
def test_driver_version(gpuaccept_contract, gpuaccept_host, gpuaccept_judge):
    host, evidence = gpuaccept_host
    gpuaccept_judge(checks.version("gpus.driver", host.driver, gpuaccept_contract.gpus.driver, host, evidence))


@pytest.mark.gpuaccept("gpus.cuda", subject="host")
def test_cuda_version(gpuaccept_contract, gpuaccept_host, gpuaccept_judge):
    host, evidence = gpuaccept_host
    gpuaccept_judge(checks.version("gpus.cuda", host.cuda, gpuaccept_contract.gpus.cuda, host, evidence))
