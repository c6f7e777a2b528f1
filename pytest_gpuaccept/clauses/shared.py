"""Measurements the clauses of several sections read: NVML's reading of the host, each GPU's model, `topo -m`.

A measuring function, here or in a clause module, is what a clause's judge is given. The registry lists them and
makes each a session fixture of its own name (run once per run, whatever asks); its parameters name the
fixtures it reads, as a pytest fixture's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..measurements import GpuModels, HostReading
from ..probes import nvidia_smi
from ..session import NVML_HOST_FILE

# How to get PyTorch, where a clause's workload needs it: PyTorch's own package (a CUDA build), never a name on an index
# this project does not own (`pytest-gpuaccept[torch]` is on none; anyone could register it). doctor says more.
GET_TORCH = "pip install 'torch>=2.1' (a CUDA build: https://pytorch.org/get-started/locally/)"

if TYPE_CHECKING:
    from ..probes._run import Reading
    from ..probes.nvidia_smi import Topology
    from ..session import Session


def gpuaccept_host(gpuaccept_state: Session) -> HostReading:
    """The NVML reading of the host (driver, CUDA, GPUs), taken once per run, and its evidence file."""
    return HostReading(gpuaccept_state.host(), (NVML_HOST_FILE,))


def gpuaccept_models(gpuaccept_state: Session) -> GpuModels:
    """Each GPU's PCI device ID from sysfs and its model in the published-figures table (None: unknown)."""
    return gpuaccept_state.gpu_models()


def gpuaccept_topology(gpuaccept_state: Session) -> Reading[Topology]:
    """`nvidia-smi topo -m`, run once per run and parsed into a Topology (or the reason it could not be)."""
    runner = gpuaccept_state.runner
    return nvidia_smi.read_topo(runner, timeout_s=min(runner.default_timeout_s, 120.0))


MEASUREMENTS = (gpuaccept_host, gpuaccept_models, gpuaccept_topology)
