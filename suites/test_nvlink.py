"""The `nvlink` section: NVLinks between every GPU pair, read from one `nvidia-smi topo -m`."""

from __future__ import annotations

import pytest

from pytest_gpuaccept import checks


@pytest.mark.gpuaccept("nvlink")
def test_nvlink_pair(gpu_pair, gpuaccept_contract, gpuaccept_topology, gpuaccept_judge):
    i, j = gpu_pair
    gpuaccept_judge(checks.nvlink_pair(gpuaccept_topology, i, j, gpuaccept_contract.nvlink.min_links))
