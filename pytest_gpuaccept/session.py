"""What a measurement may ask of the session it runs in: the seam between the clauses (and the cluster's engines)
and the one session that implements it, state.State.

A clause's measurement asks for the contract, the runner of its tools, the host's reading (NVML or its recording)
and what follows from it (the GPU models, the GPUs' local CPUs), what the host lists (its interfaces and RDMA
devices, or a login node's nodes) and the sysfs readings behind them; it never asks how the session was made. The
evidence names below are the files those readings are kept as. Another vendor's host reading (AMD's) plugs in here,
as a session whose host() reads it; a judge-level test plugs in here, as a session built from recorded outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .contract import Contract
    from .measurements import GpuModels
    from .probes import nvml, sysfs
    from .probes._run import ToolRunner
    from .verdict import Check

NVML_HOST_FILE = "nvml-host.json"  # the host reading: NVML's, or the recording --gpuaccept-nvml names
NAMES_FILE = "host-names.json"  # what the host lists: its interfaces and RDMA devices
PCI_FILE = "sysfs-pci-gpus.json"  # each GPU's PCI function in sysfs


class Session(Protocol):
    """The session as a measurement sees it (state.State is the one that runs)."""

    @property
    def contract(self) -> Contract: ...

    @property
    def runner(self) -> ToolRunner: ...

    @property
    def sys_root(self) -> Path: ...

    @property
    def nvml_recording(self) -> Path | None:
        """The NVML recording this session reads instead of NVML (a simulated run), or None."""

    @property
    def started(self) -> str:
        """When the session started (ISO 8601, UTC): results of an earlier day are not this run's."""

    @property
    def is_controller(self) -> bool:
        """This process leads the session (not an xdist worker)."""

    @property
    def checks(self) -> dict[tuple[str, str], Check]:
        """The checks judged so far, by (clause, subject): a measurement that judges several at once records them."""

    def host_reading(self) -> dict[str, Any]: ...

    def host(self) -> nvml.Host: ...

    def recorded_samples(self) -> dict[str, Any]: ...

    def gpu_models(self) -> GpuModels: ...

    def local_cpus(self) -> dict[int, str]: ...

    def listings(self) -> dict[str, list[str]]: ...

    def function(self, kind: str, name: str) -> tuple[sysfs.Function, str]: ...

    def ib_device(self, device: str) -> tuple[dict[str, Any], str]: ...
