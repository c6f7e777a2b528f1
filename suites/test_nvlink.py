"""The `nvlink` section: NVLinks between every GPU pair, read from one `nvidia-smi topo -m`."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks


@pytest.mark.gpuaccept("nvlink")
def test_nvlink_pair(gpu_pair, gpuaccept_contract, gpuaccept_topology, gpuaccept_judge):
    i, j = gpu_pair
    gpuaccept_judge(checks.nvlink_pair(gpuaccept_topology, i, j, gpuaccept_contract.nvlink.min_links))


@pytest.mark.gpuaccept("nvlink.links")
def test_nvlink_links_active(gpu_index, gpuaccept_contract, gpuaccept_nvlink_status, gpuaccept_judge):
    nvlink = gpuaccept_contract.nvlink
    speed = nvlink.link_speed.gbyte_s if nvlink.link_speed else None
    gpuaccept_judge(checks.nvlink_links(gpuaccept_nvlink_status, gpu_index, nvlink.links_per_gpu, speed))


@pytest.mark.gpuaccept("nvlink.errors")
def test_nvlink_errors_stable(gpu_index, gpuaccept_nvlink_errors, gpuaccept_judge):
    before, after = gpuaccept_nvlink_errors
    gpuaccept_judge(checks.nvlink_errors(before, after, gpu_index))
